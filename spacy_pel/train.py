"""``python -m spacy_pel.train``: kept for old scripts; the same as ``python -m spacy_pel train``."""
from .cli import run
from .cli.train import app

if __name__ == "__main__":
    run(app)
