"""Bulk linking on Ray Data: a corpus of JSONL / Parquet / PubTator shards → Parquet mention rows.

:func:`.run.link_corpus` is the entry point (``python -m spacy_pel bulk``); :mod:`.shards` reads the
input, :mod:`.worker` is the actor that links, :mod:`.output` writes one resumable set of files per
shard. Ray (``pip install spacy_pel[ray]``) is imported only when a run starts.
"""
