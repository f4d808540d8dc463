"""The ``pel_discovery`` pipeline component: clustering inference after ``pel_linker``."""
from __future__ import annotations

from typing import Optional

from spacy.language import Language
from spacy.tokens import Doc
from spacy.util import minibatch

from .cluster import LINKING, MENTION_MARGIN, discover


@Language.factory(
    "pel_discovery",
    default_config={"linker": "pel_linker", "k": 10, "threshold": None, "mention_margin": MENTION_MARGIN, "batch_size": 1000,
                    "linking": "auto"},
    assigns=["doc.ents", "token.ent_kb_id"],
    requires=["doc.ents"],
)
def make_discovery(
    nlp: Language, name: str, linker: str, k: int, threshold: Optional[float], mention_margin: float, batch_size: int,
    linking: str = "auto",
):
    """Clustering inference as a pipeline step after ``pel_linker``: ``nlp.pipe`` clusters the
    mentions of each batch of ``batch_size`` docs together (the batch is the corpus). ``linking`` as in
    :func:`~.cluster.discover`: ``auto`` keeps a calibrated linker's own NIL decisions and clusters only
    its NIL mentions; ``mention_margin`` 0.3 is β tuned on BC5CDR dev (0 = arboEL's, which lets mentions
    merge before they reach their entities; ``benchmarks/discovery.md``)."""
    if linking not in LINKING:
        raise ValueError(f"pel_discovery: linking must be one of {', '.join(LINKING)}, not {linking!r}")
    return Discovery(nlp, name, linker, k, threshold, batch_size, mention_margin, linking)


class Discovery:
    def __init__(self, nlp: Language, name: str, linker: str, k: int, threshold: Optional[float], batch_size: int,
                 mention_margin: float = MENTION_MARGIN, linking: str = "auto"):
        self.nlp, self.name, self.linker_name = nlp, name, linker
        self.k, self.threshold, self.batch_size, self.mention_margin = k, threshold, batch_size, mention_margin
        self.linking = linking

    def __call__(self, doc: Doc) -> Doc:
        discover(self.nlp.get_pipe(self.linker_name), [doc], self.k, threshold=self.threshold, mention_margin=self.mention_margin,
                 linking=self.linking)
        return doc

    def pipe(self, stream, batch_size: Optional[int] = None):
        for docs in minibatch(stream, size=self.batch_size):
            discover(self.nlp.get_pipe(self.linker_name), docs, self.k, threshold=self.threshold,
                     mention_margin=self.mention_margin, linking=self.linking)
            yield from docs
