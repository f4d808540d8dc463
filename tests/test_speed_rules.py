"""The speed rules of pel_linker: ``spacy_pel.rules.repeats.v1`` encodes a repeated mention once."""
import spacy
from spacy.tokens import Span

from spacy_pel.models.encoder import BiEncoder

# "flutter" is repeated in the first doc (twice more with the first one's label, once as a Chemical);
# the second doc repeats the first doc's text: repeats are only looked for within a document
TEXT = "flutter here , then Flutter again and flutter once more , flutter as a drug"
SPANS = ((0, 1, "Disease"), (4, 5, "Disease"), (7, 8, "Disease"), (11, 12, "Chemical"))
REPEATS = {"@misc": "spacy_pel.rules.repeats.v1"}


def _docs(nlp, n=2):
    docs = []
    for _ in range(n):
        doc = nlp.make_doc(TEXT)
        doc.ents = [Span(doc, a, b, label=l) for a, b, l in SPANS]
        docs.append(doc)
    return docs


def _linker(kb_dir, rules):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "rules": rules})
    return nlp


def _counting(monkeypatch):
    encoded = []
    original = BiEncoder.encode_mentions

    def counting(self, mentions, **kw):
        encoded.extend((m.text, m.start) for m in mentions)
        return original(self, mentions, **kw)

    monkeypatch.setattr(BiEncoder, "encode_mentions", counting)
    return encoded


def test_repeats_are_encoded_once_per_document_and_label(kb_dir, monkeypatch):
    encoded = _counting(monkeypatch)
    nlp = _linker(kb_dir, {"repeats": REPEATS})
    docs = list(nlp.pipe(_docs(nlp)))
    # per doc: the first Disease "flutter" and the Chemical one; the other two take the first's result
    chemical = TEXT.index("flutter as")
    assert sorted(start for _, start in encoded) == [0, 0, chemical, chemical]
    for doc in docs:
        ents = list(doc.ents)
        first = (ents[0].kb_id_, ents[0]._.pel_candidates)
        assert (ents[1].kb_id_, ents[1]._.pel_candidates) == first
        assert (ents[2].kb_id_, ents[2]._.pel_candidates) == first


def test_repeats_keep_the_decisions_of_the_rules_before_them(kb_dir, monkeypatch):
    """Mentions decided by the alias table are never tied and never encoded; kb_ids are those of the
    alias-table pipeline without the rule wherever a mention is decided."""
    encoded = _counting(monkeypatch)
    rules = {"aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}}
    plain = [[e.kb_id_ for e in d.ents] for d in _linker(kb_dir, rules).pipe(_docs(spacy.blank("en")))]
    encoded.clear()
    nlp = _linker(kb_dir, {**rules, "repeats": REPEATS})
    fast = [[e.kb_id_ for e in d.ents] for d in nlp.pipe(_docs(nlp))]
    assert encoded == []  # "flutter" is a KB synonym of D3: every mention is decided
    assert fast == plain == [["D3"] * 4] * 2


def test_repeats_rule_in_a_saved_pipeline(kb_dir, tmp_path):
    nlp = _linker(kb_dir, {"repeats": REPEATS})
    before = [[e.kb_id_ for e in d.ents] for d in nlp.pipe(_docs(nlp))]
    nlp.to_disk(tmp_path / "p")
    again = spacy.load(tmp_path / "p")
    assert again.config["components"]["pel_linker"]["rules"] == {"repeats": REPEATS}
    assert list(again.get_pipe("pel_linker").rules) == ["repeats"]
    assert [[e.kb_id_ for e in d.ents] for d in again.pipe(_docs(again))] == before
