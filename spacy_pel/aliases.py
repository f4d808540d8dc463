"""``python -m spacy_pel.aliases``: kept for old scripts; the same as ``python -m spacy_pel aliases``."""
from .cli import run
from .cli.aliases import app

if __name__ == "__main__":
    run(app)
