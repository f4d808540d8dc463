"""One-pass document encoding, span enumeration and span scoring (spacy_pel.spans)."""
import numpy as np
import pytest
import spacy
import torch

from spacy_pel.models.doc_encoder import (
    align_wordpieces,
    bracket_balanced,
    chunk_windows,
    encode_docs,
    enumerate_doc_spans,
    enumerate_spans,
    span_link_vectors,
    span_means,
)
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.span_scorer import (
    SpanScorer,
    greedy_non_overlapping,
    load_span_scorer,
    save_span_scorer,
)

TEXT = "Lithium carbonate-induced atrial flutter was treated with aspirin and warfarin daily. "


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


@pytest.fixture(scope="module")
def encoder(tiny_bert) -> BiEncoder:
    return BiEncoder.from_pretrained(str(tiny_bert))


@pytest.fixture(scope="module")
def context_free(tiny_bert) -> BiEncoder:
    """A tiny BERT whose piece states depend on the piece alone (no positions, no attention mixing):
    any correct chunking must then give exactly the single-pass vectors."""
    enc = BiEncoder.from_pretrained(str(tiny_bert))
    with torch.no_grad():
        enc.mention_model.embeddings.position_embeddings.weight.zero_()
        for layer in enc.mention_model.encoder.layer:
            layer.attention.output.dense.weight.zero_()
    return enc


def n_pieces(encoder: BiEncoder, text: str) -> int:
    return len(encoder.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


# ---------------------------------------------------------------------------- (a) enumeration
@pytest.mark.parametrize("n,L", [(1, 10), (7, 3), (10, 10), (25, 10), (4, 1)])
def test_enumerate_spans_count_and_bounds(n, L):
    starts, ends = enumerate_spans(n, L)
    assert starts.dtype == np.int64 and ends.dtype == np.int64
    assert len(starts) == sum(n - l + 1 for l in range(1, min(L, n) + 1))
    lengths = ends - starts
    assert lengths.min() >= 1 and lengths.max() <= L
    assert starts.min() >= 0 and ends.max() <= n
    # every span exactly once, ordered by start then length
    pairs = list(zip(starts.tolist(), ends.tolist()))
    assert pairs == sorted(set(pairs))
    assert set(pairs) == {(i, j) for i in range(n) for j in range(i + 1, min(i + L, n) + 1)}


def test_enumerate_spans_on_doc(nlp):
    doc = nlp("Aspirin reduces the risk of atrial flutter in elderly patients with heart failure .")
    starts, ends = enumerate_spans(len(doc))
    n = len(doc)
    assert n == 14 and len(starts) == sum(n - l + 1 for l in range(1, 11))
    spans = {doc[s:e].text for s, e in zip(starts, ends)}
    assert "atrial flutter" in spans and "heart failure" in spans
    assert enumerate_spans(0)[0].shape == (0,)
    with pytest.raises(ValueError):
        enumerate_spans(5, 0)


def test_enumerate_doc_spans_skips_space_and_punct(nlp):
    doc = nlp("Aspirin ,  warfarin.")  # tokens: Aspirin , ' ' warfarin .
    starts, ends = enumerate_doc_spans(doc, 10)
    texts = {doc[s:e].text for s, e in zip(starts, ends)}
    assert texts == {"Aspirin", "warfarin", "Aspirin ,  warfarin"}
    starts, ends = enumerate_doc_spans(doc, 10, skip_punct=False)
    assert {doc[s:e].text for s, e in zip(starts, ends)} >= {",", "warfarin.", "Aspirin ,"}


def test_bracket_balanced_keeps_spans_that_cut_through_no_bracket_pair(nlp):
    from spacy.tokens import Doc

    words = "hepatitis B virus ( HBV ) infection and Na(+ ) [ in rats ] Ca ( 2+ ) -induced".split()
    doc = Doc(nlp.vocab, words=words)
    starts, ends = enumerate_doc_spans(doc, 10)
    keep = bracket_balanced(doc, starts, ends)
    kept = {doc[s:e].text for s, e in zip(starts[keep], ends[keep])}
    dropped = {doc[s:e].text for s, e in zip(starts[~keep], ends[~keep])}
    assert {"hepatitis B virus ( HBV ) infection", "HBV", "in rats", "Ca ( 2+ ) -induced", "2+"} <= kept
    assert {"HBV ) infection", "virus ( HBV", "Na(+", "infection and Na(+", "rats ] Ca", "Ca ( 2+"} <= dropped
    assert all(t.count("(") == t.count(")") and t.count("[") == t.count("]") for t in kept)
    assert bracket_balanced(doc, starts[:0], ends[:0]).shape == (0,)


# ---------------------------------------------------------------------------- (b) chunking
@pytest.mark.parametrize(
    "n,max_pieces,stride",
    [(1500, 510, None), (100, 16, 8), (37, 10, 3), (20, 20, None), (5, 510, None), (11, 10, 10)],
)
def test_chunk_windows_cover_and_owner_maximises_context(n, max_pieces, stride):
    windows, owner = chunk_windows(n, max_pieces, stride)
    assert owner.shape == (n,)
    assert all(0 <= s < e <= n and e - s <= max_pieces for s, e in windows)
    if n <= max_pieces:
        assert windows == [(0, n)]
    covered = np.zeros(n, dtype=int)
    for s, e in windows:
        covered[s:e] += 1
    assert covered.min() >= 1
    # each piece is owned by exactly one window that contains it, and it has the most context there
    for p in range(n):
        s, e = windows[owner[p]]
        assert s <= p < e
        best = max(min(p - a, b - 1 - p) for a, b in windows if a <= p < b)
        assert min(p - s, e - 1 - p) == best
    assert np.bincount(owner, minlength=len(windows)).sum() == n


def test_chunk_windows_edge_cases():
    assert chunk_windows(0)[0] == [] and chunk_windows(0)[1].shape == (0,)
    with pytest.raises(ValueError):
        chunk_windows(10, 4, 5)  # stride larger than a window would leave gaps


def test_chunked_matches_single_pass_when_context_free(context_free, nlp):
    doc = nlp(TEXT * 6)
    assert n_pieces(context_free, doc.text) > 64
    single = encode_docs(context_free, [doc])[0]
    for max_pieces, stride in [(16, 8), (10, 3), (32, None)]:
        chunked = encode_docs(context_free, [doc], max_pieces=max_pieces, stride=stride)[0]
        assert chunked.shape == single.shape == (len(doc), 32)
        assert torch.allclose(chunked, single, atol=1e-5)


def test_token_vectors_are_their_pieces_mean(context_free, nlp):
    """With a context-free model a token's vector is computable from its pieces alone."""
    doc = nlp("Anti-inflammatory  drugs")
    H = encode_docs(context_free, [doc], max_pieces=2, stride=1)[0]
    ids, ranges = align_wordpieces(context_free.tokenizer, doc)
    tok = context_free.tokenizer
    with torch.inference_mode():
        for t, (a, b) in enumerate(ranges):
            if a == b:
                assert torch.all(H[t] == 0)
                continue
            seqs = torch.tensor([[tok.cls_token_id, ids[p], tok.sep_token_id] for p in range(a, b)])
            out = context_free.mention_model(input_ids=seqs).last_hidden_state[:, 1]
            assert torch.allclose(H[t], out.mean(0), atol=1e-5)


def test_a_windows_padding_does_not_depend_on_what_it_is_batched_with(encoder, nlp, monkeypatch):
    """At bf16 the padded width moves the rounding, so a document's vectors (and its found spans, its
    links) changed with the documents linked beside it. Every window is padded to its own length rounded
    up to WIDTH_STEP (at most the model's window), alone or batched with a longer document."""
    from spacy_pel.models import doc_encoder

    assert doc_encoder.padded_widths([3, 64, 65, 200, 512], cap=512).tolist() == [64, 64, 128, 256, 512]
    assert doc_encoder.padded_widths([100], cap=40).tolist() == [40]
    widths = []
    forward = type(encoder.mention_model).forward

    def recorded(self, input_ids=None, **kwargs):
        widths.append(tuple(input_ids.shape))
        return forward(self, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(type(encoder.mention_model), "forward", recorded)
    short, long = nlp("Aspirin and warfarin ."), nlp(TEXT * 12)
    alone = encode_docs(encoder, [short])[0]
    assert widths == [(1, doc_encoder.WIDTH_STEP)]
    widths.clear()
    together = encode_docs(encoder, [long, short])[1]
    assert (1, doc_encoder.WIDTH_STEP) in widths and len(widths) == 2  # the short one in a batch of its own width
    assert torch.allclose(alone, together, atol=1e-6)


def test_chunked_matches_manual_window_passes(encoder, nlp):
    """A real (context-using) model: batched, padded, stitched output equals running each window
    alone and taking every piece from its owner window."""
    doc = nlp(TEXT * 3)
    ids, ranges = align_wordpieces(encoder.tokenizer, doc)
    windows, owner = chunk_windows(len(ids), 24, 10)
    assert len(windows) > 3
    tok = encoder.tokenizer
    pieces = torch.zeros(len(ids), 32)
    with torch.inference_mode():
        for w, (s, e) in enumerate(windows):
            seq = torch.tensor([[tok.cls_token_id, *ids[s:e], tok.sep_token_id]])
            out = encoder.mention_model(input_ids=seq).last_hidden_state[0, 1:-1]
            for p in range(s, e):
                if owner[p] == w:
                    pieces[p] = out[p - s]
    expected = torch.stack([pieces[a:b].mean(0) if b > a else torch.zeros(32) for a, b in ranges])
    other = nlp("A short one.")  # in the same batch: forces padding
    got = encode_docs(encoder, [other, doc, nlp("")], batch_size=3, max_pieces=24, stride=10)
    assert torch.allclose(got[1], expected, atol=1e-5)
    alone = encode_docs(encoder, [other], batch_size=1)[0]
    assert torch.allclose(got[0], alone, atol=1e-5)
    assert got[2].shape == (0, 32)


def test_long_document_runs(encoder, nlp):
    doc = nlp(TEXT * 80)  # about 1,500 word pieces: four 510-piece windows
    assert n_pieces(encoder, doc.text) > 1500
    H = encode_docs(encoder, [doc, nlp("   "), nlp("")])
    assert H[0].shape == (len(doc), 32) and torch.isfinite(H[0]).all()
    assert H[1].shape == (1, 32) and torch.all(H[1] == 0)
    assert H[2].shape == (0, 32)
    assert not H[0].is_inference()  # usable as frozen input to a trained span scorer
    with pytest.raises(ValueError):
        encode_docs(encoder, [doc], max_pieces=511)


def test_encode_docs_grad_keeps_graph(encoder, nlp):
    H = encode_docs(encoder, [nlp("Aspirin and warfarin.")], grad=True)[0]
    assert H.requires_grad
    H.sum().backward()
    assert encoder.mention_model.embeddings.word_embeddings.weight.grad is not None
    encoder.mention_model.zero_grad(set_to_none=True)


# ---------------------------------------------------------------------------- (c) span scorer
def test_span_scorer_matches_formula():
    torch.manual_seed(0)
    n, h = 9, 4
    H = torch.randn(n, h)
    scorer = SpanScorer(h)
    ws, we, wm = torch.randn(h), torch.randn(h), torch.randn(h)
    with torch.no_grad():
        scorer.w_s.weight.copy_(ws[None])
        scorer.w_s.bias.fill_(0.25)
        scorer.w_e.weight.copy_(we[None])
        scorer.w_m.weight.copy_(wm[None])
    assert scorer.w_e.bias is None and scorer.w_m.bias is None
    starts, ends = enumerate_spans(n, 4)
    logits = scorer(H, starts, ends).detach()
    assert logits.shape == (len(starts),)
    for k, (i, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        j = end - 1
        direct = float(ws @ H[i]) + float(we @ H[j]) + sum(float(wm @ H[q]) for q in range(i, j + 1)) + 0.25
        assert abs(float(logits[k]) - direct) < 1e-4
    assert torch.allclose(scorer.probs(H, starts, ends), torch.sigmoid(logits))
    with pytest.raises(ValueError):
        scorer(H, [3], [3])
    with pytest.raises(ValueError):
        scorer(H, [0], [n + 1])


def test_span_scorer_trains():
    """A few Adam steps on one document: the loss falls and the gold spans end up above every other."""
    torch.manual_seed(0)
    H = torch.randn(8, 4)
    scorer = SpanScorer(4)
    starts, ends = enumerate_spans(8, 3)
    gold_pairs = {(1, 3), (5, 6)}
    gold = torch.tensor([(s, e) in gold_pairs for s, e in zip(starts.tolist(), ends.tolist())], dtype=torch.float32)
    assert int(gold.sum()) == 2
    is_gold = gold.bool()
    with torch.no_grad():
        before = scorer.probs(H, starts, ends)
    assert before[is_gold].min() < before[~is_gold].max()  # untrained: not separated
    optimizer = torch.optim.Adam(scorer.parameters(), lr=0.05)
    losses = []
    for _ in range(300):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(scorer(H, starts, ends), gold)
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in scorer.parameters())
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]
    assert all(b <= a + 1e-6 for a, b in zip(losses[::50], losses[50::50]))  # falling, not merely ending low
    with torch.no_grad():
        probs = scorer.probs(H, starts, ends)
    assert probs[is_gold].min() > 0.5 > probs[~is_gold].max()
    assert probs[is_gold].min() > probs[~is_gold].max() + 0.3  # separated, with a margin
    assert {(int(starts[k]), int(ends[k])) for k in np.flatnonzero(probs.numpy() > 0.5)} == gold_pairs


# ---------------------------------------------------------------------------- (d) span means
def test_span_means_vs_loop():
    torch.manual_seed(1)
    H = torch.randn(12, 5)
    starts, ends = enumerate_spans(12, 10)
    got = span_means(H, starts, ends)
    expected = torch.stack([H[s:e].mean(0) for s, e in zip(starts.tolist(), ends.tolist())])
    assert got.shape == (len(starts), 5)
    assert torch.allclose(got, expected, atol=1e-6)
    assert span_means(H, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).shape == (0, 5)


def test_span_link_vectors_normalised(encoder):
    H = torch.randn(5, 32)
    v = span_link_vectors(encoder, H, [0, 2], [2, 5])
    assert encoder.config.similarity == "cosine"
    assert torch.allclose(v.norm(dim=-1), torch.ones(2), atol=1e-5)


# ---------------------------------------------------------------------------- (e) greedy
def test_greedy_non_overlapping():
    #           0       1       2       3       4       5
    starts = [0, 0, 1, 3, 3, 5]
    ends = [1, 3, 2, 5, 4, 6]
    scores = [0.5, 0.9, 0.95, 0.7, 0.8, 0.1]
    # 2 (1,2) first; 1 (0,3) overlaps it; 4 (3,4); 3 (3,5) overlaps 4; 0 (0,1); 5 (5,6)
    assert greedy_non_overlapping(starts, ends, scores) == [0, 2, 4, 5]
    assert greedy_non_overlapping(starts, ends, torch.tensor(scores)) == [0, 2, 4, 5]
    assert greedy_non_overlapping([], [], []) == []
    assert greedy_non_overlapping([0, 0], [2, 2], [1.0, 1.0]) == [0]  # ties: earlier index


# ---------------------------------------------------------------------------- (f) alignment
def test_align_wordpieces_hyphen_and_spaces(encoder, nlp):
    doc = nlp("Anti-inflammatory  drugs,\n  e.g. aspirin")
    tok = encoder.tokenizer
    ids, ranges = align_wordpieces(tok, doc)
    assert ranges.shape == (len(doc), 2) and ranges.dtype == np.int64
    assert len(ids) == n_pieces(encoder, doc.text)
    pieces = tok.convert_ids_to_tokens(ids)
    by_token = {t.text: pieces[a:b] for t, (a, b) in zip(doc, ranges)}
    assert by_token["Anti"] == ["anti"]
    assert by_token["-"] == ["-"]
    assert by_token["inflammatory"] == ["inflammatory"]
    assert by_token["drugs"] == ["drugs"]
    assert "".join(p.lstrip("#") for p in by_token["aspirin"]) == "aspirin"
    spaces = [k for k, t in enumerate(doc) if t.is_space]
    assert len(spaces) == 2
    for k in spaces:  # empty, placed right before the next token's pieces
        a, b = ranges[k]
        assert a == b == ranges[k + 1][0]
    assert np.all(ranges[1:, 0] >= ranges[:-1, 0])  # monotone
    ids, ranges = align_wordpieces(tok, nlp(""))
    assert ids == [] and ranges.shape == (0, 2)


# ---------------------------------------------------------------------------- (g) saving
def test_span_scorer_save_load(tmp_path):
    torch.manual_seed(2)
    scorer = SpanScorer(8)
    path = tmp_path / "scorer" / "span_scorer.safetensors"
    save_span_scorer(scorer, path)
    assert path.exists() and path.with_suffix(".json").exists()
    loaded = load_span_scorer(path)
    assert loaded.hidden_size == 8
    H = torch.randn(5, 8)
    starts, ends = enumerate_spans(5, 3)
    assert torch.equal(loaded(H, starts, ends), scorer(H, starts, ends))
    path.with_suffix(".json").write_text('{"format": "spacy_pel.SpanScorer", "hidden_size": 4}')
    with pytest.raises(ValueError, match="hidden size 4"):
        load_span_scorer(path)
    with pytest.raises(FileNotFoundError):
        load_span_scorer(tmp_path / "missing.safetensors")
