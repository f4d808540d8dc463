"""``python -m spacy_pel.visualize``: link a corpus and write displaCy HTML whose entities link to the KB.

Each linked mention shows its id (a link to the KB) and its NIL confidence beside it; hovering it
opens its top candidates with their scores, each linked to the KB (``page.html#m3`` opens mention 3's).
"""
from __future__ import annotations

import re
from html import escape
from string import Formatter
from typing import Iterable, List, Tuple
from urllib.parse import quote

from spacy import displacy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.util import filter_spans

from ..corpora import NIL, NO_ID, raw_doc
from ..files import InputError
from ..pipeline.given_mentions import GivenMentions, reads_given
from ..pipeline.span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR

MESH_URL = "https://meshb.nlm.nih.gov/record/ui?ui={}"
AUTO_URL = "auto"  # a link for the ids of KBs known by their id's form, none for the rest
KNOWN_URLS = (  # (id form, the id part that goes into the URL) → URL template
    (re.compile(r"(?:MESH:)?([CD]\d{6,9})"), MESH_URL),
    (re.compile(r"OMIM:(\d+)"), "https://omim.org/entry/{}"),
    (re.compile(r"(HP:\d{7})"), "https://hpo.jax.org/browse/term/{}"),
)
SHOWN = 5  # candidates listed per mention
NOT_DRAWN = (" {} linked mention(s) overlapping a longer one are not drawn (displaCy draws no overlaps): "
             "<code>python -m spacy_pel link</code> writes them all.")
# displaCy's entity markup with an id, the NIL confidence beside the KB link and a candidate list
TEMPLATE = (
    '<mark class="entity" id="{mid}" style="background: {bg}; padding: 0.45em 0.6em; margin: 0 0.25em; '
    'line-height: 1; border-radius: 0.35em;">{text}<span style="font-size: 0.8em; font-weight: bold; '
    'line-height: 1; border-radius: 0.35em; vertical-align: middle; margin-left: 0.5rem">{label}{kb_link}'
    '{confidence}</span>{candidates}</mark>'
)
STYLE = """<style>
mark.entity { position: relative; }
.pel-conf { font-weight: normal; opacity: 0.7; margin-left: 0.3em; }
.pel-cands { display: none; position: absolute; left: 0; top: 1.6em; z-index: 10; background: #fff;
  border: 1px solid #999; border-radius: 0.3em; padding: 0.4em 0.6em; font-size: 0.75em; line-height: 1.5;
  white-space: nowrap; box-shadow: 0 2px 6px rgba(0,0,0,0.25); text-align: left; }
mark.entity:hover .pel-cands, mark.entity:target .pel-cands { display: block; }
.pel-cands a { color: #225; }
.pel-legend { color: #555; font-size: 0.85em; margin-bottom: 1em; }
</style>
"""
LEGEND = ('<p class="pel-legend">Each mention: its label, its KB id (a link) and its NIL confidence (NIL below '
          'the pipeline\'s threshold). Hover a mention for its top candidates with their scores.</p>')


def check_url_template(url_template: str) -> None:
    """Refuse a KB link template other than :data:`AUTO_URL` that is not one ``{}`` (where the id goes)
    with any other brace doubled (``{{``, ``}}``): ``{fmt}`` or a second ``{}`` would fail only when the
    first mention is rendered, after all the linking."""
    if url_template == AUTO_URL:
        return
    need = f"--url-template needs {{}} once, where the id goes (any other brace doubled: {{{{ }}}}): {url_template!r}"
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in Formatter().parse(url_template)
                  if name is not None]
    except ValueError as err:  # a lone brace
        raise InputError(f"{need} ({err})") from None
    if fields != [("", "", None)]:
        raise InputError(need)


def entity_data(doc: Doc, url_template: str = AUTO_URL) -> dict:
    """displaCy's manual entity data of ``doc`` with every value that reaches the HTML escaped: KB ids
    and labels come from third-party files, and displaCy writes them into the page as they are (the
    text itself displaCy escapes); the id is also URL-quoted inside the link."""
    ents = [{"start": e.start_char, "end": e.end_char, "label": escape(e.label_), "kb_id": escape(e.kb_id_),
             "kb_url": _url(url_template, e.kb_id_) if _in_kb(e) else "#", "params": _linking(e, url_template)}
            for e in doc.ents]
    return {"text": doc.text, "ents": ents, "title": None}


def _in_kb(span) -> bool:
    """Whether the span's id is an entry of the KB: not NIL (the ``nil_label``, whatever its name, is none of
    the span's candidates; a span without candidates: not ``NIL``, ``-1``, ``-`` or empty)."""
    candidates = span._.get(CANDIDATES_ATTR)
    if candidates:
        return span.kb_id_ in {str(c[0]) for c in candidates}
    return span.kb_id_ not in (NIL, "", *NO_ID)


def _url(url_template: str, kb_id: str) -> str:
    """The escaped link of ``kb_id``; with :data:`AUTO_URL`, MeSH, OMIM and HPO ids link to their browsers
    and other ids (a user's own KB, a composite mention) to nothing (``#``)."""
    if url_template == AUTO_URL:
        found = next(((m, url) for pattern, url in KNOWN_URLS if (m := pattern.fullmatch(kb_id))), None)
        return escape(found[1].format(quote(found[0].group(1), safe=":")), quote=True) if found else "#"
    return escape(url_template.format(quote(kb_id, safe=":")), quote=True)


def _linking(span, url_template: str) -> dict:
    """The escaped markup of a span's NIL confidence and top candidates (empty when not linked)."""
    candidates = span._.get(CANDIDATES_ATTR) or []
    confidence = span._.get(CONFIDENCE_ATTR)
    rows = "".join(
        f'<br>{escape(f"{score:.3f}")} <a href="{_url(url_template, str(kb_id))}">{escape(str(kb_id))}</a> {escape(str(name))}'
        for kb_id, name, score in candidates[:SHOWN]
    )
    shown = escape(f"{confidence:.3f}") if confidence is not None else ""
    head = f"NIL confidence {shown}; candidates:" if confidence is not None else "candidates:"
    return {
        "confidence": f'<span class="pel-conf" title="NIL confidence">{shown}</span>' if confidence is not None else "",
        "candidates": f'<span class="pel-cands">{head}{rows}</span>' if candidates else "",
    }


def render(docs: Iterable[Doc], url_template: str = AUTO_URL, not_drawn: int = 0) -> str:
    """displaCy entity HTML; each entity shows its kb id linked through ``url_template``, its NIL
    confidence beside it and, on hover, its top candidates with scores (mentions numbered ``m0``, ``m1`` …);
    the legend says how many linked mentions are ``not_drawn`` (:func:`link_docs`)."""
    check_url_template(url_template)
    data = [entity_data(d, url_template) for d in docs]
    for n, ent in enumerate(e for d in data for e in d["ents"]):
        ent["params"]["mid"] = f"m{n}"
    html = displacy.render(data, style="ent", page=True, manual=True, options={"template": TEMPLATE})
    html = html.replace("</head>", STYLE + "</head>", 1)
    return _with_legend(html, not_drawn)


def _with_legend(html: str, not_drawn: int = 0) -> str:
    """The legend first inside ``<body …>``."""
    start = html.index("<body")
    end = html.index(">", start) + 1
    legend = LEGEND if not not_drawn else LEGEND.replace("</p>", NOT_DRAWN.format(not_drawn) + "</p>")
    return html[:end] + legend + html[end:]


def link_docs(nlp: Language, docs: Iterable[Doc]) -> Tuple[List[Doc], int]:
    """Link the mentions the docs carry (a corpus's gold mentions) as ``link`` and ``evaluate`` do
    (:class:`~spacy_pel.pipeline.given_mentions.GivenMentions`: every one, overlapping ones too, the
    pipeline's own NER left out; a ``pel_discovery`` after the linkers clusters them all; a pipeline whose
    linkers all find their own spans, a span finder, links the raw text, as ``link`` does: the given spans cut
    no token), and set each doc's entities to the linked spans displaCy can draw: all but those overlapping a
    longer one. Returns the docs and how many linked mentions are not drawn."""
    given = GivenMentions(nlp, discovery_on_given=True)
    if not reads_given(given.sources):
        docs = [raw_doc(nlp, doc) for doc in docs]
    linked_docs, not_drawn = given.pipe(docs), 0
    for doc in linked_docs:
        linked = given.linked_spans(doc)
        doc.ents = filter_spans(linked)
        not_drawn += len(linked) - len(doc.ents)
    return linked_docs, not_drawn
