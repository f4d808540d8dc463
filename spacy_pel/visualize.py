"""``python -m spacy_pel.visualize``: kept for old scripts; the same as ``python -m spacy_pel visualize``."""
from .cli import run
from .cli.visualize import app

if __name__ == "__main__":
    run(app)
