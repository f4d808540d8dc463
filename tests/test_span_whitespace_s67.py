"""Whitespace between words (a newline, a double space, NBSP: spaCy tokens without word pieces, zero
vectors) changes neither which spans the span finder finds nor their probabilities or labels, for both
kinds of span model; and a BIO model does not learn the tags of such tokens."""
import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Span

from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.models.doc_encoder import encode_docs, enumerate_doc_spans, span_means
from spacy_pel.models.span_scorer import IGNORED_TAG, SpanScorer, bio_tags, bio_targets
from spacy_pel.training.joint import train_e2e
from tests.test_train_e2e import CONFIG_DEFAULT

TEXTS = [
    ("Lithium carbonate toxicity caused tricuspid regurgitation .", [(0, 2, "D1", "Chemical"), (4, 6, "D2", "Disease")]),
    ("Atrial flutter followed lithium carbonate use .", [(0, 2, "D3", "Disease"), (3, 5, "D1", "Chemical")]),
    ("Aspirin and warfarin were given .", [(0, 1, "D4", "Chemical"), (2, 3, "D5", "Chemical")]),
]
SPACES = [" ", "\n", "  ", "\xa0", " \n "]
PROBED = ["Aspirin {}and warfarin were given .", "Lithium{}carbonate toxicity caused tricuspid {}regurgitation ."]


def words(doc):
    """Token index → word index (whitespace tokens: None)."""
    out, k = [], 0
    for t in doc:
        out.append(None if t.is_space else k)
        k += not t.is_space
    return out


def test_whitespace_tokens_are_not_enumerated_nor_counted():
    nlp = spacy.blank("en")
    plain, spaced = nlp.make_doc("a b c d ."), nlp.make_doc("a\nb  c\xa0d .")
    assert len(spaced) == 8 and [t.is_space for t in spaced].count(True) == 3
    where = words(spaced)
    for max_len in (1, 2, 4):
        st, en = enumerate_doc_spans(spaced, max_len)
        mapped = [(where[a], where[b - 1] + 1) for a, b in zip(st, en)]
        assert mapped == list(zip(*map(np.ndarray.tolist, enumerate_doc_spans(plain, max_len))))
    assert (2, 8) not in set(zip(*enumerate_doc_spans(spaced, 3, skip_punct=False))) and \
        (2, 8) in set(zip(*enumerate_doc_spans(spaced, 4, skip_punct=False)))  # "b  c\xa0d ." is 4 words


@pytest.mark.parametrize("kind", ["bio", "span"])
def test_zero_vector_tokens_change_no_span_probability_or_label(kind):
    torch.manual_seed(0)
    scorer = SpanScorer(8, ["A", "B", "C"], kind=kind)
    torch.nn.init.normal_(scorer.w_tag.bias if kind == "bio" else scorer.w_s.bias, std=3.0)
    H = torch.randn(5, 8)
    spaced = torch.cat([H[:1], torch.zeros(2, 8), H[1:3], torch.zeros(1, 8), H[3:]])  # rows 1, 2, 5 blank
    at = [0, 3, 4, 6, 7]  # each word's row in `spaced`
    starts, ends = [0, 0, 1, 2, 0, 4, 3], [1, 2, 3, 5, 5, 5, 4]
    s2, e2 = [at[a] for a in starts], [at[b - 1] + 1 for b in ends]
    assert scorer.probs(spaced, s2, e2).detach() == pytest.approx(scorer.probs(H, starts, ends).detach(), rel=1e-5)
    assert torch.allclose(scorer.label_logits(spaced, s2, e2), scorer.label_logits(H, starts, ends), atol=1e-5)
    assert torch.allclose(span_means(spaced, s2, e2), span_means(H, starts, ends), atol=1e-6)


def test_bio_targets_ignore_tokens_without_word_pieces():
    H = torch.randn(5, 4)
    H[2] = 0
    tags = bio_tags(5, [(1, 4)])
    assert tags.tolist() == [0, 1, 2, 2, 0]
    assert bio_targets(tags, H).tolist() == [0, 1, IGNORED_TAG, 2, 0]
    logits = torch.randn(5, 3)
    loss = torch.nn.functional.cross_entropy(logits, bio_targets(tags, H))
    kept = [0, 1, 3, 4]
    assert float(loss) == pytest.approx(float(torch.nn.functional.cross_entropy(logits[kept], torch.from_numpy(tags[kept]))))


@pytest.fixture(scope="module")
def span_models(tiny_encoder_dir, tmp_path_factory):
    """A tiny BIO span model and a tiny span-logit one, trained as train_e2e trains them (their own
    transformer), with a KB for the linker."""
    from spacy_pel.retrieval.build import build_kb
    from tests.conftest import KB_LINES

    tmp = tmp_path_factory.mktemp("ws")
    (tmp / "kb.jsonl").write_text("\n".join(KB_LINES) + "\n", encoding="utf8")
    build_kb(tmp / "kb.jsonl", tmp / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    nlp = spacy.blank("en")
    docs = []
    for text, spans in TEXTS * 4:
        doc = nlp.make_doc(text)
        doc.spans[GOLD_KEY] = [Span(doc, a, b, label=label, kb_id=k) for a, b, k, label in spans]
        doc.ents = list(doc.spans[GOLD_KEY])
        docs.append(doc)
    write_docbin(docs, tmp / "train.spacy")
    out = {}
    for kind in ("bio", "span"):
        ov = {"paths.train": str(tmp / "train.spacy"), "paths.dev": str(tmp / "train.spacy"), "paths.kb": str(tmp / "kb"),
              "encoder.base": str(tiny_encoder_dir), "training.batch_docs": 2, "training.lr": 0.003,
              "training.eval_every": 6, "training.eval_docs": 0, "training.device": "cpu", "spans.max_len": 4,
              "negatives.count": 3, "training.select": "span", "training.max_steps": 18, "spans.kind": kind}
        train_e2e(CONFIG_DEFAULT, tmp / kind, ov, progress=False)
        out[kind] = tmp / kind / "best"
    return out, tmp / "kb"


@pytest.mark.parametrize("kind", ["bio", "span"])
def test_span_finder_finds_the_same_spans_whatever_whitespace_is_between_words(span_models, kind):
    models, kb = span_models
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb), "mentions": {"@misc": "spacy_pel.mentions.span_finder.v1",
                                                                   "model": str(models[kind]), "max_span_len": 4}})
    nlp("x")
    finder = nlp.get_pipe("pel_linker").mentions
    for template in PROBED:
        docs = [nlp.make_doc(template.format(*[space] * template.count("{}"))) for space in SPACES]
        H = encode_docs(finder.encoder, docs, pooling=finder.scorer.pooling)
        every = []  # per variant: {(first word, end word): probability} of every enumerated span
        for doc, h in zip(docs, H):
            st, en = enumerate_doc_spans(doc, 4)
            where = words(doc)
            probs = finder.scorer.probs(h, st, en).detach().numpy()
            every.append({(where[a], where[b - 1] + 1): p for a, b, p in zip(st.tolist(), en.tolist(), probs)})
        assert all(set(e) == set(every[0]) for e in every)
        for e in every[1:]:
            assert np.allclose([e[k] for k in every[0]], list(every[0].values()), atol=1e-4)
        # γ between the probabilities: something is found, and the same in each variant
        probs = sorted(every[0].values())
        finder.configured_threshold = float(np.mean(probs[-3:-1]))
        found = [[(words(d)[e.start], e.text.split()[-1], e.label_) for e in nlp(d.text).ents] for d in docs]
        assert found[0] and all(f == found[0] for f in found), found
