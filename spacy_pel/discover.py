"""``python -m spacy_pel.discover``: entity discovery by clustering (see :mod:`spacy_pel.discovery`)."""
from .discovery import app

if __name__ == "__main__":
    app()
