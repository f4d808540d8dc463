"""``python -m spacy_pel.calibrate``: kept for old scripts; the same as ``python -m spacy_pel calibrate``."""
from .cli import run
from .cli.calibrate import app

if __name__ == "__main__":
    run(app)
