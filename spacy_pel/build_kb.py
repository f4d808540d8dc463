"""``python -m spacy_pel.build_kb``: kept for old scripts; the same as ``python -m spacy_pel build-kb``."""
from .cli import run
from .cli.build_kb import app

if __name__ == "__main__":
    run(app)
