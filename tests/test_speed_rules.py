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


# ---------------------------------------------------------------- spelling variants
VARIANT_KB = [
    '{"id": "V1", "name": "anemia", "types": ["Disease"]}',
    '{"id": "V2", "name": "edema", "aliases": ["dropsy"], "types": ["Disease"]}',
    '{"id": "V3", "name": "hemorrhage", "types": ["Disease"]}',
    '{"id": "V4", "name": "haemorrhage", "types": ["Disease"]}',  # folds onto V3's name: ambiguous
]
VARIANT_TEXT = "anaemia and oedema , then anemia and haemorrhage"
VARIANT_SPANS = ((0, 1, "D"), (2, 3, "D"), (5, 6, "D"), (7, 8, "D"))
VARIANTS = {"@misc": "spacy_pel.rules.spelling_variants.v1"}


def _variant_kb(tmp_path, tiny_encoder_dir):
    from spacy_pel.retrieval.build import build_kb

    (tmp_path / "v.jsonl").write_text("\n".join(VARIANT_KB) + "\n", encoding="utf8")
    build_kb(tmp_path / "v.jsonl", tmp_path / "vkb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return tmp_path / "vkb"


def _variant_docs(nlp, text=VARIANT_TEXT):
    doc = nlp.make_doc(text)
    doc.ents = [Span(doc, a, b, label=l) for a, b, l in VARIANT_SPANS]
    return [doc]


def test_variant_keys_and_ambiguous_names():
    from spacy_pel.pipeline.rules.spelling_variants import VariantTable, variant_key

    assert variant_key("Anaemia") == variant_key("anemia") == "anemia"
    assert variant_key("Oedema, Pulmonary") == "edema pulmonary"
    table = VariantTable.from_names([("anemia", [0]), ("anaemia", [0]), ("hemorrhage", [2]), ("haemorrhage", [3])])
    assert table.row("ANAEMIA") == table.row("anemia") == 0 and table.row("haemorrhage") is None
    assert table.row("hemorrhage") is None and table.row("oedema") is None  # two entities; no name


def test_variants_decide_only_unambiguous_non_names_with_the_american_spelling_s_ids(tmp_path, tiny_encoder_dir, monkeypatch):
    kb = _variant_kb(tmp_path, tiny_encoder_dir)
    encoded = _counting(monkeypatch)
    nlp = _linker(kb, {"spelling_variants": VARIANTS})
    ids = [e.kb_id_ for e in list(nlp.pipe(_variant_docs(nlp)))[0].ents]
    # anaemia, oedema: decided; anemia is a KB name (left to the alias table / encoder); haemorrhage is
    # a KB name too (and its key is ambiguous)
    assert ids[:2] == ["V1", "V2"]
    assert sorted(VARIANT_TEXT[start : start + 6] for _, start in encoded) == ["anemia", "haemor"]
    # the same ids as the alias table gives the American spellings, which are KB names of one entity
    american = _linker(kb, {"aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}})
    text = VARIANT_TEXT.replace("anaemia", "anemia").replace("oedema", "edema")
    assert [e.kb_id_ for e in list(american.pipe(_variant_docs(american, text)))[0].ents][:2] == ids[:2]


def test_variant_rule_in_a_saved_pipeline(tmp_path, tiny_encoder_dir):
    kb = _variant_kb(tmp_path, tiny_encoder_dir)
    rules = {"spelling_variants": VARIANTS, "repeats": REPEATS}
    nlp = _linker(kb, rules)
    before = [[e.kb_id_ for e in d.ents] for d in nlp.pipe(_variant_docs(nlp))]
    nlp.to_disk(tmp_path / "p")
    assert not (tmp_path / "p" / "pel_linker" / "spelling_variants").exists()  # rebuilt from the KB on load
    again = spacy.load(tmp_path / "p")
    assert again.config["components"]["pel_linker"]["rules"] == rules
    assert [[e.kb_id_ for e in d.ents] for d in again.pipe(_variant_docs(again))] == before
