"""``python -m spacy_pel.discovery``: kept for old scripts; the same as ``python -m spacy_pel discover``."""
from ..cli import run
from ..cli.discover import app

run(app)
