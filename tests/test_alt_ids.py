"""Alternative ids (MEDIC's AltDiseaseIDs, OBO alt_id): a corpus id that is an entity's alternative id
is that entity — in the KB, in evaluation, in training data and in the alias table."""
import spacy

from spacy_pel.evaluation.linking import evaluate
from spacy_pel.kb import read_kb
from spacy_pel.pipeline.aliases import AliasTable
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex

from .conftest import KB_LINES
from .test_evaluate import gold_doc

OBO = """format-version: 1.2

[Term]
id: DOID:1
name: atrial flutter
alt_id: DOID:100
alt_id: DOID:101

[Term]
id: DOID:2
name: tricuspid regurgitation
"""


def test_obo_alt_ids_are_read(tmp_path):
    path = tmp_path / "x.obo"
    path.write_text(OBO)
    first, second = read_kb(path, format="obo")
    assert first.extra["alt_ids"] == ["DOID:100", "DOID:101"] and second.extra == {}


OBSOLETE = OBO + """
[Term]
id: DOID:3
name: old flutter
is_obsolete: true
replaced_by: DOID:4
alt_id: DOID:300

[Term]
id: DOID:4
name: older flutter
replaced_by: DOID:1
is_obsolete: true

[Term]
id: DOID:5
name: ambiguous
is_obsolete: true
consider: DOID:1
consider: DOID:2

[Term]
id: DOID:6
name: gone
is_obsolete: true
replaced_by: DOID:999

[Term]
id: DOID:7
name: loop a
is_obsolete: true
replaced_by: DOID:8

[Term]
id: DOID:8
name: loop b
is_obsolete: true
replaced_by: DOID:7

[Term]
id: DOID:9
name: wrongly listing a current term
is_obsolete: true
alt_id: DOID:2
replaced_by: DOID:1

[Term]
id: DOID:10
name: replaced by a current term
is_obsolete: true
replaced_by: DOID:2
"""


def test_obo_obsolete_ids_resolve_to_their_replacement(tmp_path):
    path = tmp_path / "x.obo"
    path.write_text(OBSOLETE)
    entities = read_kb(path, format="obo")
    assert [e.id for e in entities] == ["DOID:1", "DOID:2"]  # obsolete terms are no entities
    # DOID:3 → DOID:4 → DOID:1 (a chain, and the obsolete term's own alt_id with it); consider-only,
    # a replacement the file lacks and a loop resolve to nothing; a current term stays itself, and a chain
    # stops at it even where an obsolete term lists its id
    assert entities[0].extra["alt_ids"] == ["DOID:100", "DOID:101", "DOID:3", "DOID:300", "DOID:4", "DOID:9"]
    assert entities[1].extra == {"alt_ids": ["DOID:10"]}


def alt_kb(tmp_path, tiny_encoder_dir):
    lines = [line.replace('"id": "D2",', '"id": "D2", "extra": {"alt_ids": ["OMIM:555", "D2OLD"]},') for line in KB_LINES]
    (tmp_path / "kb.jsonl").write_text("\n".join(lines) + "\n")
    build_kb(tmp_path / "kb.jsonl", tmp_path / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return tmp_path / "kb"


def test_index_resolves_alternative_ids_after_a_round_trip(tmp_path, tiny_encoder_dir):
    index = EntityIndex.from_disk(alt_kb(tmp_path, tiny_encoder_dir))
    assert index.resolve("OMIM:555") == index.resolve("D2") == 1 and index.resolve("nope") is None
    assert index.canonical("D2OLD") == "D2" and index.canonical("GONE") == "GONE"
    assert "OMIM:555" not in index.row and index.lookup["OMIM:555"] == 1  # row keeps primary ids only


def test_evaluation_counts_an_alternative_id_as_its_entity(tmp_path, tiny_encoder_dir):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(alt_kb(tmp_path, tiny_encoder_dir))})
    docs = [gold_doc(nlp, [(0, 2, "D1"), (4, 6, "OMIM:555"), (11, 12, "GONE")])]
    report = evaluate(linker, docs, train_ids={"D2OLD"}, threshold=-1.0)
    # OMIM:555 is D2: in the KB (not "absent") and, via the training id D2OLD, a seen entity
    assert report["counts"] == {"in_kb": 2, "absent": 1, "nil": 0, "seen": 1, "unseen": 1}
    doc = nlp(gold_doc(nlp, [(4, 6, "OMIM:555")]))
    assert doc.ents[0].kb_id_ in {"D1", "D2", "D3", "D4", "D5"}  # the linker answers with primary ids


def test_alias_counts_given_by_alternative_id_join_the_entity(tmp_path, tiny_encoder_dir):
    index = EntityIndex.from_disk(alt_kb(tmp_path, tiny_encoder_dir))
    table = AliasTable(index, {"tr": {"OMIM:555": 2, "D2": 1, "D3": 2}})
    assert table.candidates("TR") == [1]  # D2 has 3 (2 through its alternative id), D3 2
