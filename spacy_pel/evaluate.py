"""``python -m spacy_pel.evaluate``: kept for old scripts; the same as ``python -m spacy_pel evaluate``."""
from .cli import run
from .cli.evaluate import app

if __name__ == "__main__":
    run(app)
