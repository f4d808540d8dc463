"""``python -m spacy_pel.convert``: kept for old scripts; the same as ``python -m spacy_pel convert``."""
from .cli import run
from .cli.convert import app

if __name__ == "__main__":
    run(app)
