"""``python -m spacy_pel.visualize``: link a corpus and write displaCy HTML whose entities link to the KB."""
from __future__ import annotations

from html import escape
from typing import Iterable
from urllib.parse import quote

from spacy import displacy
from spacy.language import Language
from spacy.tokens import Doc

MESH_URL = "https://meshb.nlm.nih.gov/record/ui?ui={}"


def entity_data(doc: Doc, url_template: str = MESH_URL) -> dict:
    """displaCy's manual entity data of ``doc`` with every value that reaches the HTML escaped: KB ids
    and labels come from third-party files, and displaCy writes them into the page as they are (the
    text itself displaCy escapes); the id is also URL-quoted inside the link."""
    ents = [{"start": e.start_char, "end": e.end_char, "label": escape(e.label_), "kb_id": escape(e.kb_id_),
             "kb_url": escape(url_template.format(quote(e.kb_id_, safe=":")), quote=True)} for e in doc.ents]
    return {"text": doc.text, "ents": ents, "title": None}


def render(docs: Iterable[Doc], url_template: str = MESH_URL) -> str:
    """displaCy entity HTML; each entity shows its kb id linked through ``url_template``."""
    return displacy.render([entity_data(d, url_template) for d in docs], style="ent", page=True, manual=True)


def link_docs(nlp: Language, docs: Iterable[Doc]) -> list:
    """Run the pipeline's components over docs that already carry entities (e.g. gold spans)."""
    docs = list(docs)
    for _, proc in nlp.pipeline:
        docs = list(proc.pipe(docs))
    return docs
