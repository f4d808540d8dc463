"""spacy_pel: entity linking for spaCy with a trained bi-encoder.

Importing the package registers the ``pel_linker`` and ``pel_discovery`` factories; after ``pip install``
spaCy also finds them through the ``spacy_factories`` entry points, with no import needed.
"""
from .discovery.component import Discovery, make_discovery  # noqa: F401  (registers the factory)
from .pipeline.linker import PELLinker, make_pel_linker  # noqa: F401  (registers the factory)

__version__ = "0.1.0"
