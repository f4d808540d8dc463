"""The cross-encoder re-ranker: save/load, the rule never drops a candidate, decided mentions stay
as they are, and training lowers the loss (tiny random BERTs)."""
import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.files import InputError
from spacy_pel.models.cross_encoder import CrossEncoder
from spacy_pel.models.encoder import BiEncoder, Mention
from spacy_pel.pipeline.rules.batch import DECIDED_SCORE, CandidateBatch
from spacy_pel.pipeline.rules.rerank import RerankRule
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.config import LoopSettings
from spacy_pel.training.loop import TrainingLoop
from spacy_pel.training.reranker import Mined, RerankerConfig, RerankerTask, listwise_loss, mined_pairs

TEXT = "Lithium carbonate toxicity in a newborn with tricuspid regurgitation and an atrial flutter ."
SPANS = ((0, 2, "Chemical"), (7, 9, "Disease"), (11, 13, "Disease"))


@pytest.fixture(scope="module")
def ce_dir(tiny_bert, tmp_path_factory):
    out = tmp_path_factory.mktemp("ce") / "reranker"
    CrossEncoder.from_pretrained(str(tiny_bert), mention_max_length=24, entity_max_length=16).save(out)
    return out


def _doc(nlp):
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label) for a, b, label in SPANS]
    return doc


def _nlp(kb_dir, encoder_dir, ce_dir, **rule):
    nlp = spacy.blank("en")
    rules = {"rerank": {"@misc": "spacy_pel.rules.rerank.v1", "model": str(ce_dir), "candidates": 4, **rule}}
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(encoder_dir), "top_k": 5, "threshold": None,
                                       "rules": rules})
    return nlp


def _candidates(nlp):
    return [ent._.pel_candidates for ent in nlp(_doc(nlp)).ents]


def test_cross_encoder_round_trip_and_int8(ce_dir, kb_dir):
    index = EntityIndex.from_disk(kb_dir)
    ce = CrossEncoder.from_pretrained(ce_dir)
    mention = [Mention(TEXT, 0, 17)]
    cands = [[index.entities[i] for i in range(len(index))]]
    (a,) = ce.score_candidates(mention, cands)
    (b,) = CrossEncoder.from_pretrained(ce_dir).score_candidates(mention, cands)
    assert np.allclose(a, b, atol=1e-6) and len(a) == len(index) and np.ptp(a) > 0
    ce.config.precision = "int8"
    (c,) = ce.score_candidates(mention, cands)
    assert "int8" in ce._int8 and np.allclose(a, c, atol=0.1)  # a quantised copy ran, close to fp32
    copy = ce._int8["int8"][1]
    ce.score_candidates(mention, cands)
    assert ce._int8["int8"][1] is copy  # made once while the weights stay
    with torch.no_grad():  # a training step: the next inference quantises the new weights
        ce.head.weight.mul_(-1.0)
    (d,) = ce.score_candidates(mention, cands)
    assert ce._int8["int8"][1] is not copy and not np.allclose(c, d, atol=1e-3)
    # the mention side is marked as the bi-encoder marks it; the entity side is in segment 1
    (side,) = ce.mention_sides(mention)
    assert ce.marker_ids[0] in side and ce.marker_ids[1] in side
    (pair,) = ce.pair_inputs(side, ce.entity_sides(cands[0][:1]))
    _, _, types = ce._collate([pair])
    assert types[0, : len(side)].sum() == 0 and types[0, len(side) :].all()


def test_pipeline_save_load_gives_identical_scores(kb_dir, tiny_encoder_dir, ce_dir, tmp_path):
    nlp = _nlp(kb_dir, tiny_encoder_dir, ce_dir)
    before = _candidates(nlp)
    nlp.to_disk(tmp_path / "p")
    assert (tmp_path / "p" / "pel_linker" / "reranker" / "head.safetensors").exists()
    loaded = spacy.load(tmp_path / "p")
    assert loaded.get_pipe("pel_linker").rules["rerank"].model is not None
    assert _candidates(loaded) == before


def test_rule_only_reorders_and_leaves_later_candidates(kb_dir, tiny_encoder_dir, ce_dir):
    plain = spacy.blank("en")
    plain.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "top_k": 5, "threshold": None})
    base = _candidates(plain)
    nlp = _nlp(kb_dir, tiny_encoder_dir, ce_dir, skip_matched=False)
    rule = nlp.get_pipe("pel_linker").rules["rerank"]
    nlp.get_pipe("pel_linker").ensure_loaded()
    # a model that scores the candidates in reverse retrieval order: the first 4 must come out reversed
    rule.model.score_candidates = lambda mentions, cands, batch_size: [np.arange(len(c), dtype=np.float32) for c in cands]
    after = _candidates(nlp)
    assert rule.stats["mentions"] == len(SPANS) and rule.stats["pairs"] == 4 * len(SPANS)
    for b, a in zip(base, after):
        assert sorted(x[0] for x in a) == sorted(x[0] for x in b)  # nothing dropped, nothing added
        assert [x[0] for x in a[:4]] == [x[0] for x in b[:4]][::-1] and a[4:] == b[4:]
        assert [x[2] for x in a[:4]] == [x[2] for x in b[:4]][::-1]  # each keeps its own retriever score


def test_decided_tied_and_single_candidate_mentions_are_untouched(kb_dir, tiny_encoder_dir, ce_dir):
    index = EntityIndex.from_disk(kb_dir)
    nlp = spacy.blank("en")
    doc = _doc(nlp)
    rows = np.array([[2, -1, -1], [0, 1, 3], [4, -1, -1]], dtype=np.int64)
    scores = np.array([[DECIDED_SCORE, 0, 0], [0.5, 0.4, 0.3], [0.9, 0, 0]], dtype=np.float32)
    batch = CandidateBatch([doc], [list(SPANS)], [doc[a:b].text for a, b, _ in SPANS], None, scores.copy(), rows.copy(),
                           index, decided={0: 2})
    rule = RerankRule(str(ce_dir), candidates=3, score="probability")
    rule.model, rule.index = CrossEncoder.from_pretrained(ce_dir), index
    rule(batch)
    assert rule.targets(batch) == [1] and rule.stats["mentions"] == 1
    assert (batch.rows[0] == rows[0]).all() and (batch.scores[0] == scores[0]).all()  # decided
    assert (batch.rows[2] == rows[2]).all() and (batch.scores[2] == scores[2]).all()  # one candidate
    assert sorted(batch.rows[1]) == sorted(rows[1])
    assert batch.scores[1].sum() == pytest.approx(1.0) and (np.diff(batch.scores[1]) <= 0).all()  # probabilities, best first
    batch.same_as[1] = 0
    assert rule.targets(batch) == []  # a tied mention takes the other one's list


def test_bad_settings_are_refused():
    for bad in ({"candidates": 1}, {"precision": "bf16"}, {"score": "max"}, {"retriever_weight": float("nan")}):
        with pytest.raises(ValueError, match="rerank"):
            RerankRule(None, **bad)


def test_training_lowers_the_listwise_loss(tiny_bert, kb_dir, tmp_path):
    index = EntityIndex.from_disk(kb_dir)
    texts = [TEXT, "Aspirin and warfarin were given ."]
    words = [(0, "Lithium carbonate"), (0, "tricuspid regurgitation"), (0, "atrial flutter"), (1, "Aspirin"), (1, "warfarin")]
    mentions = [(d, texts[d].index(w), texts[d].index(w) + len(w)) for d, w in words]
    gold_rows = [index.lookup[i] for i in ("D1", "D2", "D3", "D4", "D5")]
    rows = np.array([np.roll(np.arange(len(index)), -g) for g in gold_rows], dtype=np.int64)[:, ::-1].copy()
    gold = rows == np.array(gold_rows)[:, None]  # gold last: the retriever is always wrong here
    mined = Mined(texts, mentions, rows, np.zeros(rows.shape, np.float32), gold)
    cfg = RerankerConfig(base=str(tiny_bert), candidates=len(index), mention_max_length=24, entity_max_length=16,
                         lr=5e-3, batch_mentions=5, max_steps=60, warmup=0.0, held_out_docs=0, eval_every=0)
    task = RerankerTask(cfg, index, mined)

    def loss() -> float:
        with torch.no_grad():
            scores = task.ce.score(mined_pairs(task.ce, index, mined, range(len(mentions)))).view(len(mentions), -1)
            return float(listwise_loss(scores, torch.from_numpy(gold)))

    task.ce.eval()
    before = loss()
    TrainingLoop(task, LoopSettings(warmup=0.0, eval_every=0), tmp_path / "out").run(progress=False)
    task.ce.eval()
    after = loss()
    assert after < 0.75 * before, (before, after)  # untrained: ln 5 ≈ 1.6
    assert (tmp_path / "out" / "best" / "head.safetensors").exists() and (tmp_path / "out" / "last" / "state.json").exists()


def test_too_few_training_mentions_are_refused_not_looped_on(tiny_bert, kb_dir, tmp_path):
    """A corpus with fewer training mentions than one batch (or none: ids of another KB) used to spin in
    the batch loop forever; it is refused in one line, the corpus named, before any training."""
    index = EntityIndex.from_disk(kb_dir)
    texts = [TEXT]
    mentions = [(0, TEXT.index("atrial flutter"), TEXT.index("atrial flutter") + len("atrial flutter"))]
    rows = np.arange(len(index), dtype=np.int64)[None, :]
    mined = Mined(texts, mentions, rows, np.zeros(rows.shape, np.float32), rows == index.lookup["D3"])
    cfg = RerankerConfig(base=str(tiny_bert), candidates=len(index), batch_mentions=4, held_out_docs=0)
    with pytest.raises(InputError, match="1 training mentions with an in-KB id"):
        RerankerTask(cfg, index, mined)

    nlp = spacy.blank("en")
    doc = _doc(nlp)
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label=label, kb_id=f"OTHER:{a}") for a, b, label in SPANS]
    write_docbin([doc], tmp_path / "foreign.spacy")
    encoder = tmp_path / "encoder"
    BiEncoder.from_pretrained(str(tiny_bert)).save(encoder)
    result = CliRunner().invoke(app, ["train-reranker", "-o", str(tmp_path / "rr"), "--encoder", str(encoder), "--kb",
                                      str(kb_dir), "--train", str(tmp_path / "foreign.spacy"), "--base", str(tiny_bert)])
    assert result.exit_code == 2 and "foreign.spacy: none of its gold mentions has an id in the KB" in result.output
