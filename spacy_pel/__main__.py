"""``python -m spacy_pel <command>``: every command of the package (see ``--help``)."""
from .cli import app, run

run(app)
