"""spacy_pel: entity linking for spaCy with a trained bi-encoder.

Importing the package registers the ``pel_linker`` and ``pel_discovery`` factories (and the linker's
scorer, ``spacy_pel.linker_scorer.v1``); after ``pip install``
spaCy also finds them through the ``spacy_factories`` entry points, with no import needed.
"""
from .discovery.component import Discovery, make_discovery  # noqa: F401  (registers the factory)
from .evaluation.scorer import make_linker_scorer  # noqa: F401  (registers spacy_pel.linker_scorer.v1)
from .pipeline.linker import PELLinker, make_pel_linker  # noqa: F401  (registers the factory)

__version__ = "0.1.0"
