"""``python -m spacy_pel.train_e2e``: kept for old scripts; the same as ``python -m spacy_pel train-e2e``."""
from .cli import run
from .cli.train_e2e import app

if __name__ == "__main__":
    run(app)
