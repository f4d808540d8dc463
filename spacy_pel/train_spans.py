"""``python -m spacy_pel.train_spans``: kept for old scripts; the same as ``python -m spacy_pel train-spans``."""
from .cli import run
from .cli.train_spans import app

if __name__ == "__main__":
    run(app)
