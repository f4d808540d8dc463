"""Moved to :mod:`.rules.name_rows` (one module per rule); this name stays only for
``benchmarks/accuracy.py``'s import until that script follows. Import from ``pipeline.rules.name_rows``."""
from .rules.name_rows import NAME, NAMES_FOLDER  # noqa: F401
