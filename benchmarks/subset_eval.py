"""A retriever evaluation cheap enough to run once per trained encoder on a CPU: BC5CDR dev gold mentions
(those whose entity is in MeSH) against an entity table of the dev gold entities plus ``SAMPLE`` other MeSH
records drawn at random (seed 0: the same table for every encoder), the table encoded by the encoder's own
entity tower. All of MeSH would cost a 12-minute encode per encoder (benchmarks/both_towers.md), so
figures from here compare encoders with each other, not with the all-MeSH figures of other reports.

``SubsetEval(context=False)`` gives each mention its own text only (``[CLS] [M_s] mention [M_e] [SEP]``,
the input ``adapt`` trains on) instead of its place in the document.
"""
from __future__ import annotations

import random
import time
from typing import List

import numpy as np
import spacy

from _common import ROOT, SHARED
from spacy_pel.corpora import corpus_ids, gold_ids, gold_spans, read_docbin
from spacy_pel.kb import read_kb
from spacy_pel.models.encoder import BiEncoder, Mention

SAMPLE = 50_000
__all__ = ["SAMPLE", "SubsetEval"]


class SubsetEval:
    """BC5CDR dev in-KB gold mentions and the fixed entity table; :meth:`evaluate` scores one encoder."""

    def __init__(self, context: bool = True, sample: int = SAMPLE):
        nlp = spacy.blank("en")
        entities = read_kb(SHARED / "mesh", "mesh")
        row = {e.id: i for i, e in enumerate(entities)}
        seen = corpus_ids(read_docbin(nlp, ROOT / "corpus" / "bc5cdr_train.spacy"))
        self.mentions: List[Mention] = []
        self.gold: List[List[int]] = []
        self.unseen: List[bool] = []
        for doc in read_docbin(nlp, ROOT / "corpus" / "bc5cdr_dev.spacy"):
            for span in gold_spans(doc):
                ids = [i for i in gold_ids(span.kb_id_) if i in row]
                if ids:
                    mention = Mention(doc.text, span.start_char, span.end_char)
                    self.mentions.append(mention if context else Mention(span.text, 0, len(span.text)))
                    self.gold.append([row[i] for i in ids])
                    self.unseen.append(not any(i in seen for i in ids))
        gold_rows = {r for g in self.gold for r in g}
        rest = [i for i in range(len(entities)) if i not in gold_rows]
        table = sorted(gold_rows) + random.Random(0).sample(rest, sample)
        self.entities = [entities[i] for i in table]
        position = {r: p for p, r in enumerate(table)}
        self.gold = [[position[r] for r in g] for g in self.gold]

    def evaluate(self, encoder_dir) -> dict:
        encoder = BiEncoder.from_pretrained(encoder_dir)
        t0 = time.perf_counter()
        e = encoder.encode_entities(self.entities, progress=True)
        m = encoder.encode_mentions(self.mentions, progress=True)
        rank = np.empty(len(m), dtype=np.int64)
        for a in range(0, len(m), 1024):  # [1024, table] scores at a time
            scores = m[a : a + 1024] @ e.T
            gold = np.array([scores[i, g].max() for i, g in enumerate(self.gold[a : a + 1024])])
            rank[a : a + 1024] = (scores > gold[:, None]).sum(1) + 1
        unseen = np.array(self.unseen)
        return {"R@1": round(float((rank <= 1).mean()), 4), "R@64": round(float((rank <= 64).mean()), 4),
                "unseen": round(float((rank[unseen] <= 1).mean()), 4), "seen": round(float((rank[~unseen] <= 1).mean()), 4),
                "mentions": len(self.mentions), "unseen_mentions": int(unseen.sum()), "table": len(self.entities),
                "eval_minutes": round((time.perf_counter() - t0) / 60, 1)}
