"""spacy_pel: entity linking for spaCy with a trained bi-encoder.

Importing the package registers the ``pel_linker`` factory; after ``pip install`` spaCy also finds it
through the ``spacy_factories`` entry point, with no import needed.
"""
from .linker import PELLinker, make_pel_linker  # noqa: F401  (registers the factory)

__version__ = "0.1.0"
