"""A span label finds its entry in a label-keyed map under the names other NERs and corpora give it."""
import pytest

from spacy_pel.pipeline.label_names import LabelMap, find_label

KEYS = ["Chemical", "Disease"]


@pytest.mark.parametrize("label,key", [
    ("Chemical", "Chemical"), ("DISEASE", "Disease"), ("chemical", "Chemical"),         # exact, case aside
    ("ChemicalEntity", "Chemical"), ("DiseaseOrPhenotypicFeature", "Disease"),          # BioRED
    ("SpecificDisease", "Disease"), ("DiseaseClass", "Disease"),                        # NCBI disease
    ("Modifier", None), ("", None), ("GeneOrGeneProduct", None),                        # no key named
    ("ChemicalInducedDisease", None),                                                   # two keys: none
])
def test_find_label(label, key):
    assert find_label(label, KEYS) == key


def test_an_exact_key_wins_over_a_case_variant_and_a_short_label_finds_the_key_containing_it():
    assert find_label("disease", ["Disease", "disease"]) == "disease"
    assert find_label("DISEASE", ["Disease", "disease"]) is None  # two keys equal it case aside
    assert find_label("Dis", ["Chem", "Disease"]) == "Disease"
    assert find_label("Chemical", ["C", "D"]) is None and find_label("C", ["Chemical"]) is None  # too short to be a part


def test_label_map_is_a_dict_that_also_finds_other_names():
    types = LabelMap({"Chemical": {"Chemicals and Drugs"}, "Disease": {"Diseases"}})
    assert types == {"Chemical": {"Chemicals and Drugs"}, "Disease": {"Diseases"}}
    assert types.for_label("CHEMICAL") == {"Chemicals and Drugs"} and types.key_for("SpecificDisease") == "Disease"
    assert types.for_label("Species") is None and types.get("CHEMICAL") is None  # dict lookups stay exact
