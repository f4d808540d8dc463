"""An entity's broader entities by name (``extra["parents"]``) and the encoder setting that puts them in
the entity tower's input (``entity_parents``)."""
import pytest

from spacy_pel.kb import PARENTS, Entity, read_kb
from spacy_pel.models.encoder import BiEncoder, EncoderMismatchError
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex

DESCRIPTORS = "\n".join([
    "D000001\tKidney Diseases\tNephropathy\tC12.777\t",
    "D000002\tRenal Insufficiency\tKidney Failure\tC12.777.419|C99.100.200\t",
    "D000003\tUrologic Diseases\t\tC12\t",
    "D000004\tHeart Valve Diseases\t\tC99.100\t",
]) + "\n"
SUPPLEMENTARY = "C000001\tamrubicin\tSM-5887\tD000003,*D000001\n"


def test_mesh_parents_are_tree_parents_and_mapped_descriptors(tmp_path):
    (tmp_path / "mesh_id_label_mappings.tsv").write_text(DESCRIPTORS, encoding="utf8")
    (tmp_path / "mesh_supp_id_label_mappings.tsv").write_text(SUPPLEMENTARY, encoding="utf8")
    kb = {e.id: e for e in read_kb(tmp_path, "mesh")}
    assert kb["D000002"].extra[PARENTS] == ["Kidney Diseases", "Heart Valve Diseases"]  # one per tree number, in order
    assert kb["D000001"].extra[PARENTS] == ["Urologic Diseases"]
    assert PARENTS not in kb["D000003"].extra  # a top-level tree number: its parent is a category, not a descriptor
    assert kb["C000001"].extra[PARENTS] == ["Urologic Diseases", "Kidney Diseases"]  # mapped to, "*" stripped


def test_obo_parents_are_is_a(tmp_path):
    obo = tmp_path / "onto.obo"
    obo.write_text("format-version: 1.2\n\n"
                   "[Term]\nid: HP:1\nname: Abnormality of the kidney\n\n"
                   "[Term]\nid: HP:2\nname: Renal cyst\nis_a: HP:1 ! Abnormality of the kidney\nis_a: HP:9 ! not in the file\n\n"
                   "[Term]\nid: HP:3\nname: Multiple renal cysts\nis_a: HP:2\n", encoding="utf8")
    kb = {e.id: e for e in read_kb(obo, "obo")}
    assert kb["HP:2"].extra[PARENTS] == ["Abnormality of the kidney"]  # an id the file lacks is left out
    assert kb["HP:3"].extra[PARENTS] == ["Renal cyst"]
    assert PARENTS not in kb["HP:1"].extra


def test_entity_input_carries_parents_only_when_asked(tiny_encoder_dir):
    entity = Entity("D000002", "renal insufficiency", ["kidney failure"], ["Diseases"],
                    extra={PARENTS: ["kidney diseases", "heart valve diseases"]})
    plain = BiEncoder.from_pretrained(tiny_encoder_dir)
    one = BiEncoder.from_pretrained(tiny_encoder_dir, entity_parents=1)
    assert plain.entity_text_fields(entity)[1] == "Diseases"
    assert one.entity_text_fields(entity)[1] == "Diseases ; kidney diseases"
    two = BiEncoder.from_pretrained(tiny_encoder_dir, entity_parents=5)
    assert two.entity_text_fields(entity)[1] == "Diseases ; kidney diseases ; heart valve diseases"
    assert one.entity_inputs([entity]) != plain.entity_inputs([entity])
    with pytest.raises(ValueError, match="entity_parents"):
        BiEncoder.from_pretrained(tiny_encoder_dir, entity_parents=-1)


def test_parents_setting_is_part_of_the_kb_fingerprint(tmp_path, kb_file, tiny_encoder_dir):
    plain = BiEncoder.from_pretrained(tiny_encoder_dir)
    # the default is not recorded: encoders and KBs from before the setting keep their fingerprints
    assert "entity_parents" not in plain.entity_settings()
    build_kb(kb_file, tmp_path / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    index = EntityIndex.from_disk(tmp_path / "kb")
    index.check_encoder(plain)
    with pytest.raises(EncoderMismatchError, match=r"its entity_parents is 2, the KB's 0"):
        index.check_encoder(BiEncoder.from_pretrained(tiny_encoder_dir, entity_parents=2))
