"""``python -m spacy_pel.discovery``: kept for old scripts; the same as ``python -m spacy_pel discover``."""
from ..cli.discover import app

app()
