"""Entity swaps (``[augment] entity_swaps``): training mentions copied with another entity's name in their place."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_pel.corpora import NIL
from spacy_pel.kb.entity import Entity
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.entity_swaps import EntitySwapper, entity_swaps, running_text_names

from .test_train import batch_loss, corpus, make_task, overrides  # noqa: F401 (corpus: a fixture)

ENTITIES = [
    Entity("D1", "Neoplasms, Lobular", ["lobular neoplasm", "Lobular Neoplasms"], ["Diseases"]),
    Entity("D2", "atrial flutter", [], ["Diseases"]),
    Entity("D3", "Flutter, Ventricular", [], ["Diseases"]),  # no running-text name: never swapped in
    Entity("C1", "aspirin", ["acetylsalicylic acid"], ["Chemicals and Drugs"]),
    Entity("C2", "warfarin", [], ["Chemicals and Drugs"]),
    Entity("P1", "anxiety", [], ["Diseases", "Psychiatry and Psychology"]),
]
TEXT = "After warfarin the patient had atrial flutter and anxiety."
ITEMS = [(TEXT, 6, 14, "C2"), (TEXT, 31, 45, "D2"), (TEXT, 50, 57, "P1"), (TEXT, 6, 14, NIL), (TEXT, 6, 14, "X9")]


@pytest.fixture(scope="module")
def index():
    return EntityIndex(ENTITIES, np.eye(len(ENTITIES), dtype=np.float32), metric="cosine", fingerprint="")


def test_running_text_names_leave_out_inverted_headings():
    assert running_text_names(["Neoplasms, Lobular", "lobular neoplasm", " "]) == ["lobular neoplasm"]
    assert running_text_names(["Flutter, Ventricular"]) == []


def test_a_swap_puts_a_name_of_an_entity_with_the_gold_types_in_the_same_context(index):
    swapper = EntitySwapper(index, seed=3)
    seen = set()
    for _ in range(200):
        for item in ITEMS[:3]:
            text, start, end, kb_id = swapper.swap(item)
            _, s0, e0, gold = item
            row, gold_row = index.resolve(kb_id), index.resolve(gold)
            assert index.entities.types[row] == index.entities.types[gold_row]
            assert text[start:end] in running_text_names([index.entities[row].name, *index.entities[row].aliases])
            assert text[:start] == TEXT[:s0] and text[end:] == TEXT[e0:]
            seen.add(kb_id)
    # every entity with a running-text name is drawn for its type; D3 (inverted name only) never
    assert seen == {"C1", "C2", "D1", "D2", "P1"}


def test_nil_and_unknown_gold_ids_get_no_swap(index):
    swapper = EntitySwapper(index)
    assert swapper.swap(ITEMS[3]) is None and swapper.swap(ITEMS[4]) is None


@settings(max_examples=30, deadline=None)
@given(share=st.floats(0.0, 2.5), seed=st.integers(0, 100))
def test_share_sets_how_many_copies_and_the_seed_fixes_them(index, share, seed):
    items = ITEMS[:3] * 4
    swaps = entity_swaps(items, index, share, seed)
    assert len(swaps) == int(share) * len(items) + int(round((share % 1.0) * len(items)))
    assert swaps == entity_swaps(items, index, share, seed)


def test_training_with_swaps_trains_on_the_copies(corpus, kb_dir, tiny_encoder_dir):  # noqa: F811
    plain = make_task(overrides(corpus, kb_dir, tiny_encoder_dir))
    task = make_task(overrides(corpus, kb_dir, tiny_encoder_dir, **{"augment.entity_swaps": 1.0}))
    before, after = plain.stages[-1].examples, task.stages[-1].examples
    assert len(after) == 2 * len(before)  # one copy of each linkable mention (the NIL one has none)
    swapped_gold = after.gold[len(before):]
    assert all(len(g) == 1 for g in swapped_gold)
    assert np.isfinite(batch_loss(task))
