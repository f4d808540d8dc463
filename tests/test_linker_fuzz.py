"""Property-based tests of ``pel_linker`` (hypothesis): random documents — empty, whitespace, emoji, CJK,
right-to-left scripts, control characters, texts of more than 512 word pieces — and random span sets
(document edges, overlaps through a span group) through the per-mention, collective, span-group and
span-finder modes. Properties: no exception; every linked span is a valid span of its doc with a KB id
or NIL and candidates from the KB; ``pipe`` equals ``__call__``; a to_disk/from_disk round trip links
identically. Bounded (few examples, tiny random BERT) so the quick suite stays quick."""
import pytest
import spacy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spacy.tokens import Doc, Span
from spacy.util import filter_spans

from spacy_pel.models.span_scorer import SpanScorer, save_span_scorer
from spacy_pel.retrieval.build import build_kb

from .conftest import KB_LINES

KB_IDS = {line.split('"')[3] for line in KB_LINES}
ALPHABET = st.sampled_from(
    list("abc xyz ") + ["aspirin", "warfarin", " ", "\t", "\n", "\u200b", "\x00", "\x07", "\r", "🙂", "🧬", "心脏", "病",
                        "مرض", "שלום", "(", ")", "-", ".", "Li2CO3", "é", "\ufeff"]
)
TEXTS = st.one_of(
    st.lists(ALPHABET, max_size=40).map(" ".join),
    st.just(""),
    st.just("   \n\t "),
    st.integers(min_value=260, max_value=400).map(lambda n: " ".join(["tricuspid regurgitation"] * n)),  # > 512 pieces
)
MODES = ("per_mention", "collective", "span_group", "span_finder")
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory, tiny_encoder_dir):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "kb.jsonl").write_text("\n".join(KB_LINES) + "\n", encoding="utf8")
    build_kb(root / "kb.jsonl", root / "kb", encoder=str(tiny_encoder_dir), progress=False)
    scorer = root / "spans" / "span_scorer.safetensors"
    save_span_scorer(SpanScorer(32), scorer)
    out = {}
    for mode in MODES:
        config = {"kb": str(root / "kb"), "top_k": 3, "precision": "fp32"}
        if mode == "collective":
            config["vectors"] = {"@misc": "spacy_pel.vectors.collective.v1"}
        if mode == "span_group":
            config["mentions"] = {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "sc"}
        if mode == "span_finder":
            config["mentions"] = {"@misc": "spacy_pel.mentions.span_finder.v1", "scorer": str(scorer), "threshold": 0.5}
            config["vectors"] = {"@misc": "spacy_pel.vectors.collective.v1"}
        nlp = spacy.blank("en")
        nlp.add_pipe("pel_linker", config=config)
        nlp.initialize()
        nlp.to_disk(root / mode)
        out[mode] = (nlp, spacy.load(root / mode))
    return out


def make_docs(nlp, texts, picks, mode):
    docs = []
    for text, pick in zip(texts, picks):
        doc = nlp.make_doc(text)
        n = len(doc)
        spans = [Span(doc, a % n, a % n + 1 + b % max(1, min(4, n - a % n)), label="E") for a, b in pick] if n else []
        if n:
            spans += [Span(doc, 0, 1, label="E"), Span(doc, n - 1, n, label="E")]  # the document's edges
        if mode == "span_group":
            doc.spans["sc"] = spans  # overlaps allowed
        elif mode != "span_finder":
            doc.ents = filter_spans(spans)
        docs.append(doc)
    return docs


def linked(doc: Doc, mode: str):
    spans = doc.spans["sc"] if mode == "span_group" else doc.ents
    return [(s.start, s.end, s.label_, s.kb_id_, s._.pel_candidates) for s in spans]


@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(texts=st.lists(TEXTS, min_size=1, max_size=3), picks=st.lists(st.lists(st.tuples(st.integers(0, 999), st.integers(0, 9)), max_size=4), min_size=3, max_size=3))
def test_random_documents_and_spans(pipelines, mode, texts, picks):
    nlp, loaded = pipelines[mode]
    one_by_one = [nlp(d) for d in make_docs(nlp, texts, picks, mode)]
    piped = list(nlp.pipe(make_docs(nlp, texts, picks, mode), batch_size=2))
    reloaded = list(loaded.pipe(make_docs(loaded, texts, picks, mode)))
    for a, b, c in zip(one_by_one, piped, reloaded):
        assert linked(a, mode) == linked(b, mode) == linked(c, mode)
        for start, end, _, kb_id, cands in linked(a, mode):
            assert 0 <= start < end <= len(a)
            assert kb_id == "NIL" or kb_id in KB_IDS
            assert cands is not None and all(c[0] in KB_IDS for c in cands)
            if not any(ch.isalnum() for ch in a[start:end].text):
                assert kb_id == "NIL" and cands == []
