"""``python -m spacy_pel.visualize``: link a corpus and write displaCy HTML whose entities link to the KB."""
from __future__ import annotations

from typing import Iterable

from spacy import displacy
from spacy.language import Language
from spacy.tokens import Doc

MESH_URL = "https://meshb.nlm.nih.gov/record/ui?ui={}"


def render(docs: Iterable[Doc], url_template: str = MESH_URL) -> str:
    """displaCy entity HTML; each entity shows its kb id linked through ``url_template``."""
    return displacy.render(list(docs), style="ent", page=True, options={"kb_url_template": url_template})


def link_docs(nlp: Language, docs: Iterable[Doc]) -> list:
    """Run the pipeline's components over docs that already carry entities (e.g. gold spans)."""
    docs = list(docs)
    for _, proc in nlp.pipeline:
        docs = list(proc.pipe(docs))
    return docs
