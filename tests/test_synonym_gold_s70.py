"""KB self-alignment (adapt, synonym pre-alignment): a synonym several entities share is gold for each of
them, as a composite mention is, never a negative of one of them."""
import numpy as np
import torch

from spacy_pel.kb import Entity
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.linking import LinkingLoss
from spacy_pel.models.losses import make_loss
from spacy_pel.models.negatives import HardNegativeMiner
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.retriever import synonym_examples

ENTITIES = [Entity("D11", "seizure", aliases=("fit", "convulsion")),
            Entity("D12", "aspirin", aliases=("ASA",)),
            Entity("D13", "physical fitness", aliases=("Fit",)),  # "fit" in another case: the same name
            Entity("D14", "fit")]  # and as a primary name


def test_a_shared_synonym_is_gold_for_every_entity_that_has_it(tiny_encoder_dir):
    """Defect: "fit" became two examples with one input and gold {D11} and {D13}: each entity was the
    other example's negative, so a step pulled the text to each entity and pushed it away from it."""
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    index = EntityIndex(ENTITIES, np.zeros((4, 2), np.float32), metric="cosine", fingerprint="", kind="flat")
    train, _ = synonym_examples(index, encoder, limit=0, seed=0)
    assert len(train) == 4  # fit, convulsion, ASA of D11, D12; Fit of D13 (D14 has no synonym)
    golds = sorted(tuple(g) if isinstance(g, tuple) else tuple(sorted(g)) for g in train.gold)
    # convulsion; fit and Fit, each its own entity's positive, the others that have the name masked; ASA
    assert golds == [(0,), (0, 2, 3), (1,), (2, 0, 3)]


def test_a_gold_tuple_trains_toward_its_first_row_and_masks_the_others():
    """A shared synonym's example trains toward its own entity (the tuple's first row), not the smallest row
    of those that have the name; the others are no negatives."""
    table = torch.nn.functional.normalize(torch.randn(6, 8, generator=torch.Generator().manual_seed(0)), dim=-1)
    loss = LinkingLoss(make_loss("ce_cosine", scale=10.0), "kb", HardNegativeMiner(4, 0.0, n_entities=6), table)
    m = table[[2]].clone()
    toward_own = float(loss(m, [(2, 0)]))  # the mention is row 2's vector: its own positive, row 0 masked
    assert toward_own < float(loss(m, [{0, 2}]))  # a set's positive is its smallest row, 0
    alone = LinkingLoss(make_loss("ce_cosine", scale=10.0), "kb", HardNegativeMiner(4, 0.0, n_entities=6), table)
    assert toward_own < float(alone(m, [(2,)]) + 1e-6)  # row 0 masked: one negative fewer, a lower loss
