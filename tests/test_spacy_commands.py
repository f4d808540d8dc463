"""pel_linker under spaCy's own commands (issue #16): ``nlp.evaluate`` / ``spacy evaluate`` score a
linker-only pipeline on gold mentions, and ``nlp.update`` / ``spacy train`` train its mention tower
with the project's objective."""
import io

import numpy as np
import pytest
import spacy
import torch
from spacy.scorer import Scorer
from spacy.tokens import Doc, DocBin, Span
from spacy.training import Example
from spacy.training.initialize import init_nlp
from spacy.training.loop import train as spacy_train
from spacy.util import load_config_from_str
from thinc.api import Adam

from spacy_pel.corpora import GOLD_KEY
from spacy_pel.evaluation.linking import evaluate
from spacy_pel.models.linking import LinkingLoss
from spacy_pel.models.losses import make_loss
from spacy_pel.models.negatives import HardNegativeMiner
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.pipeline.updating import batch_by_mentions, make_objective

TEXTS = [
    ("Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn",
     [(0, 2, "Chemical", "D1"), (4, 6, "Disease", "D2"), (7, 9, "Disease", "D3")]),
    ("Aspirin and warfarin were given ; flutter and a novel syndrome persisted",
     [(0, 1, "Chemical", "D4"), (2, 3, "Chemical", "D5"), (6, 7, "Disease", "D3"), (9, 11, "Disease", "NIL"),
      (10, 11, "Disease", "D999")]),
]


def gold_doc(vocab, text, spans) -> Doc:
    doc = Doc(vocab, words=text.split())
    group = [Span(doc, a, b, label=label, kb_id=kb) for a, b, label, kb in spans]
    doc.spans[GOLD_KEY] = group  # overlapping gold mentions, as corpora.py writes them
    doc.ents = spacy.util.filter_spans(group)
    return doc


def examples(nlp):
    return [Example(Doc(nlp.vocab, words=text.split()), gold_doc(nlp.vocab, text, spans)) for text, spans in TEXTS]


@pytest.fixture
def nlp(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "device": "cpu"})
    return nlp


def mention_vectors(linker, egs):
    mentions, _ = linker.updater.mentions(linker, egs)
    return linker.encoder.embed_mentions(linker.encoder.mention_inputs(mentions))


# ------------------------------------------------------------------ evaluation on gold mentions
def test_linker_only_pipeline_scores_gold_mentions_as_the_project_evaluator(nlp):
    egs = examples(nlp)
    scores = nlp.evaluate(egs)
    linker = nlp.get_pipe("pel_linker")
    # the same figures by hand: the reference docs linked by the pipeline, then spaCy's own scorer
    linked = [Example(nlp(gold_doc(nlp.vocab, t, s)), gold_doc(nlp.vocab, t, s)) for t, s in TEXTS]
    expected = Scorer.score_links(linked, negative_labels=["NIL"])
    for key in ("nel_micro_p", "nel_micro_r", "nel_micro_f"):
        assert scores[key] == pytest.approx(expected[key])
    assert expected["nel_micro_r"] > 0  # something was linked and scored
    report = evaluate(linker, [eg.reference for eg in egs])  # python -m spacy_pel evaluate
    assert scores["pel_mentions"] == report["mentions"] == 8  # the overlapping gold mention included
    assert (scores["pel_in_kb"], scores["pel_absent"], scores["pel_nil"]) == (6, 1, 1)
    for k in (1, 2, 4, 8, 64):  # gold mentions get the 64 candidates of spacy_pel evaluate (pipeline: top_k 3)
        assert scores[f"pel_r{k}"] == report["recall_in_kb"][f"R@{k}"]
    assert scores["pel_accuracy_with_nil"] == report["accuracy_with_nil"]
    # what `spacy evaluate --spans-key nel` prints: NEL over in-KB mentions, recall = spacy_pel evaluate's R@1
    assert scores["spans_nel_r"] == scores["pel_nel_r"] == pytest.approx(report["recall_in_kb"]["R@1"], abs=1e-4)
    assert scores["spans_nel_p"] == scores["pel_nel_p"] == pytest.approx(report["recall_in_kb"]["R@1"], abs=1e-4)
    assert [eg.predicted.ents for eg in egs] == [(), ()]  # the caller's examples are left as they were


def test_without_gold_ents_the_predicted_entities_are_scored(nlp):
    nlp.get_pipe("pel_linker").cfg = nlp.get_pipe("pel_linker").cfg.replace(use_gold_ents=False)
    scores = nlp.evaluate(examples(nlp))  # no NER: nothing predicted, nothing scored
    assert scores["nel_micro_f"] == 0.0 and scores["pel_mentions"] == 0


def test_use_gold_ents_is_validated():
    with pytest.raises(ValueError, match="use_gold_ents"):
        spacy.blank("en").add_pipe("pel_linker", config={"use_gold_ents": "yes"})


# ------------------------------------------------------------------ training
def test_update_lowers_the_loss_and_keeps_the_kb_valid(nlp):
    linker = nlp.get_pipe("pel_linker")
    linker.ensure_loaded()
    egs = examples(nlp)
    fingerprint = linker.encoder.fingerprint()
    before = linker.get_loss(egs, mention_vectors(linker, egs))[0]
    optimizer = Adam(0.001)
    for _ in range(15):
        losses = nlp.update(egs, sgd=optimizer)
    after = linker.get_loss(egs, mention_vectors(linker, egs))[0]
    assert after < 0.5 * before and losses["pel_linker"] > 0
    assert linker.updater.counts == {"updates": 15, "steps": 15, "mentions": 15 * 6}  # NIL and absent ids left out
    assert linker.encoder.fingerprint() == fingerprint  # the entity tower is frozen: the KB stays valid
    linker.index.check_encoder(linker.encoder)


def test_get_loss_is_the_shared_linking_loss(nlp):
    linker = nlp.get_pipe("pel_linker")
    linker.updater = type(linker.updater).for_objective(make_objective("ce_cosine", {"scale": 10.0}, negatives="kb"))
    linker.ensure_loaded()
    egs = examples(nlp)
    vectors = mention_vectors(linker, egs)
    loss, grad = linker.get_loss(egs, vectors)
    _, gold = linker.updater.mentions(linker, egs)
    table = torch.from_numpy(np.asarray(linker.index.embeddings, dtype=np.float32))
    same = LinkingLoss(make_loss("ce_cosine", scale=10.0), "kb", HardNegativeMiner(32, 0.0, n_entities=len(table)), table)
    assert loss == pytest.approx(float(same(vectors.detach(), gold)), rel=1e-5)
    assert grad.shape == vectors.shape


def test_the_torch_optimizer_follows_spacys(nlp):
    linker = nlp.get_pipe("pel_linker")
    linker.updater = type(linker.updater).for_objective(make_objective(lr_scale=0.5))
    sgd = Adam(0.001, L2=0.02, grad_clip=0.0, beta1=0.8)
    nlp.update(examples(nlp), sgd=sgd)
    group = linker.updater._optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"][0]) == (0.0005, 0.02, 0.8)
    assert all(p.grad is None for p in group["params"])  # stepped and cleared
    assert not any(p.requires_grad for p in linker.encoder.entity_model.parameters())


def test_an_update_may_train_on_a_random_subset_of_the_batch(nlp):
    linker = nlp.get_pipe("pel_linker")
    linker.updater = type(linker.updater).for_objective(make_objective(max_mentions=4))
    for _ in range(3):
        nlp.update(examples(nlp), sgd=Adam(0.001))
    assert linker.updater.counts["mentions"] == 3 * 4  # of 6 linkable ones each time
    egs = examples(nlp)
    assert len(linker.updater.mentions(linker, egs)[0]) == 6  # get_loss and friends see them all


def test_objective_settings_are_checked():
    with pytest.raises(ValueError, match="negatives"):
        make_objective(negatives="hard")
    with pytest.raises(ValueError, match="no loss has"):
        make_objective("proxy", {"temperature": 3.0})
    assert make_objective("proxy", {"alpha": 16.0, "scale": 3.0}).loss.settings == {"alpha": 16.0, "delta": 0.0}
    with pytest.raises(ValueError, match="max_mentions"):
        make_objective(max_mentions=-1)
    with pytest.raises(ValueError, match="lr_scale"):
        make_objective(lr_scale=0.0)
    with pytest.raises(ValueError, match="objective"):
        spacy.blank("en").add_pipe("pel_linker", config={"objective": {"@misc": "spacy_pel.vectors.per_mention.v1"}})


def test_batches_of_about_n_mentions(nlp):
    egs = examples(nlp)  # 3 and 5 gold mentions (overlapping ones count)
    sizes = [[len(eg.reference.spans[GOLD_KEY]) for eg in b] for b in batch_by_mentions(4)(egs * 2)]
    assert sizes == [[3], [5], [3], [5]]
    assert [len(b) for b in batch_by_mentions(8)(egs * 2)] == [2, 2]
    with pytest.raises(ValueError):
        batch_by_mentions(0)


CONFIG = """
[paths]
train = null
dev = null
kb = null
encoder = null

[nlp]
lang = "en"
pipeline = ["tok2vec", "ner", "pel_linker"]

[components]

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.HashEmbedCNN.v2"
width = 16
depth = 1
embed_size = 200
window_size = 1
maxout_pieces = 2
subword_features = false
pretrained_vectors = null

[components.ner]
factory = "ner"

[components.ner.model]
@architectures = "spacy.TransitionBasedParser.v2"
state_type = "ner"
hidden_width = 16
maxout_pieces = 2
use_upper = true
nO = null

[components.ner.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 16
upstream = "tok2vec"

[components.pel_linker]
factory = "pel_linker"
top_k = 3
device = "cpu"
use_gold_ents = true

[corpora]

[corpora.train]
@readers = "spacy.Corpus.v1"
path = ${paths.train}

[corpora.dev]
@readers = "spacy.Corpus.v1"
path = ${paths.dev}

[training]
seed = 0
gpu_allocator = null
max_steps = 4
eval_frequency = 2
patience = 0
max_epochs = 0

[training.batcher]
@batchers = "spacy_pel.batch_by_mentions.v1"
size = 8

[training.optimizer]
@optimizers = "Adam.v1"
learn_rate = 0.001

[training.logger]
@loggers = "spacy.ConsoleLogger.v1"
progress_bar = false

[initialize]

[initialize.components]

[initialize.components.pel_linker]
kb_path = ${paths.kb}
encoder = ${paths.encoder}
"""


def test_spacy_train_with_an_ner_and_the_linker_round_trips(tmp_path, kb_dir, tiny_encoder_dir):
    vocab = spacy.blank("en").vocab
    corpus = tmp_path / "corpus.spacy"
    DocBin(docs=[gold_doc(vocab, t, s) for t, s in TEXTS] * 3, store_user_data=True).to_disk(corpus)
    overrides = {"paths.train": str(corpus), "paths.dev": str(corpus), "paths.kb": str(kb_dir),
                 "paths.encoder": str(tiny_encoder_dir)}
    config = load_config_from_str(CONFIG, overrides=overrides, interpolate=False)
    nlp = init_nlp(config, use_gpu=-1)
    linker = find_linker(nlp)[1]
    start = {k: v.clone() for k, v in linker.encoder.mention_model.state_dict().items()}
    (tmp_path / "out").mkdir()
    spacy_train(nlp, tmp_path / "out", use_gpu=-1, stdout=io.StringIO())
    assert linker.updater.counts["steps"] == 5  # spaCy runs steps 0 … max_steps
    trained = linker.encoder.mention_model.state_dict()
    assert any(not torch.equal(start[k], trained[k]) for k in start)
    loaded = spacy.load(tmp_path / "out" / "model-last")
    assert loaded.pipe_names == ["tok2vec", "ner", "pel_linker"]
    again = find_linker(loaded)[1]
    assert all(torch.equal(v, again.encoder.mention_model.state_dict()[k]) for k, v in trained.items())
    doc = loaded(TEXTS[0][0])
    assert all(e.kb_id_ and e._.pel_candidates for e in doc.ents)  # whatever the tiny NER found is linked
    scores = loaded.evaluate(examples(loaded))
    assert {"ents_f", "nel_micro_f", "pel_r1"} <= set(scores)


def test_nel_figures_count_a_composite_mention_linked_to_one_of_its_ids():
    from spacy_pel.evaluation.scorer import linked_prf

    rows = [(["A", "B"], ["B", "C"], np.array([0.9, 0.1])),  # composite, linked to B: right
            (["C"], ["D"], np.array([0.8, 0.1])),  # wrong
            (["E"], ["E"], np.array([0.2, 0.1])),  # right, but below the threshold: NIL, no prediction
            (["GONE"], ["A"], np.array([0.9, 0.1])),  # gold id not in the KB: not counted
            (["NIL"], ["A"], np.array([0.9, 0.1]))]
    kb = {"A", "B", "C", "D", "E"}
    assert linked_prf(rows, kb) == pytest.approx({"p": 2 / 3, "r": 2 / 3, "f": 2 / 3})
    assert linked_prf(rows, kb, threshold=0.5) == pytest.approx({"p": 1 / 2, "r": 1 / 3, "f": 0.4})
