"""``python -m spacy_pel.okb``: kept for old scripts; the same as ``python -m spacy_pel okb``."""
from .cli import run
from .cli.okb import app

if __name__ == "__main__":
    run(app)
