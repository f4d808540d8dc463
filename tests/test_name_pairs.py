"""[augment] name_pairs: mention texts and gold names through the entity tower, beside mention training."""
import numpy as np
import pytest
import torch

from spacy_pel.kb import read_kb
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.pieces import Mention
from spacy_pel.retrieval.names import name_inputs
from spacy_pel.training.config import ConfigError
from spacy_pel.training.name_pairs import NamePairLoss
from spacy_pel.training.retriever import train
from spacy_pel.training.stages import Examples

from .test_train import CONFIG, corpus, overrides  # noqa: F401 (fixture)

TEXTS = [("Then flutter began.", "flutter", {2}), ("Li2CO3 toxicity was seen.", "Li2CO3", {0}),
         ("We gave acetylsalicylic acid.", "acetylsalicylic acid", {3}), ("Warfarin then.", "Warfarin", {4}),
         ("A valve leak and flutter.", "valve leak and flutter", {1, 2})]


def batch(encoder):
    mentions = [Mention(t, t.index(m), t.index(m) + len(m)) for t, m, _ in TEXTS]
    return Examples(encoder.mention_inputs(mentions), [g for *_, g in TEXTS])


def one_name(encoder, text):
    return name_inputs(encoder, [text], [""], "name", 24)[0]


def test_pairs_are_the_mention_text_and_a_name_of_its_gold_entity(kb_file, tiny_encoder_dir):
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    entities = read_kb(kb_file, "jsonl")
    loss = NamePairLoss(encoder, entities, 1.0, seed=3)
    seqs, labels = loss.pairs(batch(encoder), step=7)
    assert labels == [2, 2, 0, 0, 3, 3, 4, 4]  # the composite mention takes no part
    for n, (_, text, gold) in enumerate(TEXTS[:4]):
        assert seqs[2 * n] == one_name(encoder, text)  # the text as a name, not its context
        row = next(iter(gold))
        names = [entities[row].name, *entities[row].aliases]
        assert seqs[2 * n + 1] in [one_name(encoder, x) for x in names]
    assert loss.pairs(batch(encoder), step=7) == (seqs, labels)  # resumed: the same draws
    draws = {tuple(map(tuple, loss.pairs(batch(encoder), step=s)[0])) for s in range(12)}
    assert len(draws) > 1  # entities with synonyms get other names on other steps


def test_name_pairs_pull_a_mention_text_to_its_own_entity(kb_file, tiny_encoder_dir):
    """A few steps of the loss alone: each mention text comes nearer its gold entity's name than the
    other entities' names (positives paired with the wrong entity fail this); only the entity tower moves."""
    torch.manual_seed(0)
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    entities = read_kb(kb_file, "jsonl")
    loss = NamePairLoss(encoder, entities, 1.0)
    examples = batch(encoder)
    names = [one_name(encoder, e.name) for e in entities]
    texts = [one_name(encoder, m) for _, m, _ in TEXTS[:4]]
    gold = [next(iter(g)) for *_, g in TEXTS[:4]]

    def margins():
        with torch.no_grad():
            t = torch.nn.functional.normalize(encoder.embed_entities(texts), dim=-1)
            e = torch.nn.functional.normalize(encoder.embed_entities(names), dim=-1)
        s = (t @ e.T).numpy()
        return np.array([s[i, g] - np.delete(s[i], g).max() for i, g in enumerate(gold)])

    before = margins()
    mention_start = [p.detach().clone() for p in encoder.mention_model.parameters()]
    encoder.train()
    opt = torch.optim.AdamW(encoder.parameters(), lr=3e-3)
    first = None
    for step in range(40):
        value = loss(examples, step)
        first = float(value.detach()) if first is None else first
        opt.zero_grad()
        value.backward()
        opt.step()
    encoder.eval()
    assert float(loss(examples, 0)) < 0.5 * first
    after = margins()
    assert (after > 0).all() and after.mean() > before.mean()
    assert all(torch.equal(p, q) for p, q in zip(encoder.mention_model.parameters(), mention_start))


def test_name_pairs_in_retriever_training_need_a_trained_entity_tower(corpus, kb_file, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"augment.name_pairs": 0.5})
    with pytest.raises(ConfigError, match="name_pairs"):
        train(CONFIG, tmp_path / "frozen", ov, progress=False)
    ov.update({"paths.kb": str(kb_file), "paths.kb_format": "jsonl", "training.max_steps": 3,
               "training.train_entity_encoder": True, "training.eval_kb_sample": 2, "negatives.kind": "shared",
               "negatives.count": 2, "negatives.hard_fraction": 0.0, "loss.name": "ce_cosine"})
    runs = {}
    for weight in (0.0, 0.5):
        ov["augment.name_pairs"] = weight
        state = train(CONFIG, tmp_path / f"run{weight}", ov, progress=False)
        assert state["step"] == 3 and np.isfinite(state["history"][-1]["loss"])
        runs[weight] = state["history"][-1]["loss"]
    assert runs[0.5] != runs[0.0]  # the term is added to the loss
