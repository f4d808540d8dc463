"""``python -m spacy_pel.discover``: kept for old scripts; the same as ``python -m spacy_pel discover``."""
from .cli import run
from .cli.discover import app

if __name__ == "__main__":
    run(app)
