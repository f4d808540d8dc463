"""KB self-alignment (adapt, synonym pre-alignment): a synonym several entities share is gold for each of
them, as a composite mention is, never a negative of one of them."""
import numpy as np

from spacy_pel.kb import Entity
from spacy_pel.models.encoder import BiEncoder
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
    golds = sorted(sorted(g) for g in train.gold)
    assert golds == [[0], [0, 2, 3], [0, 2, 3], [1]]  # convulsion; fit and Fit of D11, D13 (and D14's name); ASA
