import pytest

from spacy_pel.kb import KBFormatError, read_jsonl, read_kb, write_jsonl

from .conftest import shared


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf8")
    return path


def test_jsonl_roundtrip(kb_file, tmp_path):
    entities = read_jsonl(kb_file)
    assert [e.id for e in entities] == ["D1", "D2", "D3", "D4", "D5"]
    assert entities[0].aliases == ["Li2CO3"] and entities[1].description == "valve leak"
    out = tmp_path / "again.jsonl"
    write_jsonl(entities, out)
    assert read_jsonl(out) == entities


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ('{"id": "A", "name": "x"}\n{"id": "B", "name": \n', "invalid JSON"),
        ('{"id": "A", "name": "x"}\n{"id": "A", "name": "y"}\n', "duplicate entity id 'A'"),
        ('{"id": "A", "name": "x"}\n{"name": "no id"}\n', "string \"id\""),
        ('{"id": "A", "name": "x"}\n{"id": "B", "name": "y", "aliases": "z"}\n', '"aliases" must be a list'),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, bad, fragment):
    path = write(tmp_path, "bad.jsonl", bad)
    with pytest.raises(KBFormatError) as err:
        read_jsonl(path)
    assert f"{path}:2:" in str(err.value) and fragment in str(err.value)


def test_mesh_reader_on_real_files(tmp_path):
    desc = shared("mesh", "mesh_id_label_mappings.tsv").read_text(encoding="utf8").splitlines()[:300]
    read = {line.split("\t")[0] for line in desc}
    # supplementary records chosen so that each inheritance case occurs: all their descriptors read,
    # none read, some read (these map to several descriptors)
    all_in, none_in, some_in = [], [], []
    for line in shared("mesh", "mesh_supp_id_label_mappings.tsv").read_text(encoding="utf8").splitlines():
        mapped = [m.strip().lstrip("*") for m in line.split("\t")[-1].split(",") if m.strip()]
        group = all_in if all(m in read for m in mapped) else some_in if any(m in read for m in mapped) else none_in
        group.append(line)
    supp = all_in[:150] + none_in[:100] + some_in[:50]
    assert len(supp) == 300
    folder = tmp_path / "mesh"
    folder.mkdir()
    (folder / "mesh_id_label_mappings.tsv").write_text("\n".join(desc) + "\n", encoding="utf8")
    (folder / "mesh_supp_id_label_mappings.tsv").write_text("\n".join(supp) + "\n", encoding="utf8")
    entities = {e.id: e for e in read_kb(folder, "mesh")}
    assert len(entities) == 600
    temefos = entities["D000002"]
    assert temefos.name == "Temefos" and temefos.aliases == ["Temephos"]
    assert temefos.types == ["Chemicals and Drugs"]
    assert temefos.extra["tree_numbers"][0] == "D02.705.400.625.800"
    # supplementary records inherit the branches of the descriptors they map to, when those are read
    supplementary = [e for e in entities.values() if e.id.startswith("C")]
    assert len(supplementary) == 300
    inherited = 0
    for e in supplementary:
        expected = []
        for d in e.extra["mapped_to"]:
            expected += [t for t in entities[d].types if t not in expected] if d in entities else []
        assert e.types == expected, e.id
        inherited += bool(expected)
    assert inherited == 200  # the all-read and some-read groups inherit; the none-read ones have no type
    assert sum(len(e.extra["mapped_to"]) > 1 and bool(e.types) for e in supplementary) == 50


def test_mesh_errors(tmp_path):
    path = write(tmp_path, "m.tsv", "D000002\tTemefos\tTemephos\tD02\t\nD000003\tno columns\n")
    with pytest.raises(KBFormatError, match=r"m\.tsv:2:"):
        read_kb(path, "mesh")
    path = write(tmp_path, "d.tsv", "D000002\tTemefos\t\tD02\t\nD000002\tAgain\t\tD02\t\n")
    with pytest.raises(KBFormatError, match=r"d\.tsv:2: duplicate entity id 'D000002' \(first seen at .*d\.tsv:1\)"):
        read_kb(path, "mesh")


def test_medic_reader(tmp_path):
    path = write(
        tmp_path,
        "medic.txt",
        "C565588||Epidermolysis Bullosa With Diaphragmatic Hernia\n"
        "270400|D019082||Smith-Lemli-Opitz Syndrome|SLOS|SLOS\n"
        "145250||HYPERPIGMENTATION, FAMILIAL|FPH\n",
    )
    entities = read_kb(path, "medic")
    assert [e.id for e in entities] == ["C565588", "D019082", "OMIM:145250"]
    assert entities[1].extra["alt_ids"] == ["OMIM:270400"] and entities[1].aliases == ["SLOS"]
    bad = write(tmp_path, "bad.txt", "C565588||A disease\nno separator here\n")
    with pytest.raises(KBFormatError, match=r"bad\.txt:2:"):
        read_kb(bad, "medic")


def test_medic_names_are_text_and_omim_titles_are_split(tmp_path):
    # CTD writes HTML entities and joins OMIM's alternative titles with ';' (the INCLUDED mark kept)
    path = write(
        tmp_path,
        "medic.txt",
        "D012859||Sjogren&apos;s Syndrome|Sicca Syndrome\n"
        "160800||MYOTONIA CONGENITA, AUTOSOMAL DOMINANT|THOMSEN DISEASE;THD|MYOTONIA LEVIOR, INCLUDED\n",
    )
    sjogren, thomsen = read_kb(path, "medic")
    assert sjogren.name == "Sjogren's Syndrome" and sjogren.aliases == ["Sicca Syndrome"]
    assert thomsen.aliases == ["THOMSEN DISEASE", "THD", "MYOTONIA LEVIOR"]


def test_medic_real_file():
    entities = read_kb(shared("ncbi-disease", "medic_06Jul2012.txt"), "medic")
    assert len(entities) == 11915
    names = [n for e in entities for n in (e.name, *e.aliases)]
    assert not [n for n in names if "&apos;" in n or ";" in n or n.endswith(", INCLUDED")]
    assert "Sjogren's Syndrome" in names and len(names) > 76000


OBO = """format-version: 1.2
ontology: test

[Term]
id: DOID:0001
name: disease
def: "A \\"generic\\" disease." [url:x]
synonym: "illness" EXACT []
namespace: disease_ontology

[Term]
id: DOID:0002
name: old thing
is_obsolete: true

[Typedef]
id: part_of
name: part of
"""


def test_obo_reader(tmp_path):
    entities = read_kb(write(tmp_path, "t.obo", OBO), "obo")
    assert len(entities) == 1
    e = entities[0]
    assert (e.id, e.name, e.aliases, e.description, e.types) == (
        "DOID:0001", "disease", ["illness"], 'A "generic" disease.', ["disease_ontology"]
    )
    bad = write(tmp_path, "bad.obo", "[Term]\nid: X:1\nname: x\nsynonym: not quoted\n")
    with pytest.raises(KBFormatError, match=r"bad\.obo:4:"):
        read_kb(bad, "obo")


def test_obo_terms_without_a_namespace_take_the_default_namespace(tmp_path):
    """HPO's terms carry no namespace line: the header's default-namespace is theirs (OBO 1.4 spec)."""
    text = ("format-version: 1.2\ndefault-namespace: human_phenotype\n\n[Term]\nid: HP:0000256\nname: Macrocephaly\n"
            'synonym: "Big head" EXACT layperson []\n\n[Term]\nid: X:1\nname: other\nnamespace: own\n')
    entities = read_kb(write(tmp_path, "hp.obo", text), "obo")
    assert [(e.id, e.types, e.aliases) for e in entities] == [("HP:0000256", ["human_phenotype"], ["Big head"]),
                                                              ("X:1", ["own"], [])]
    no_default = read_kb(write(tmp_path, "plain.obo", "[Term]\nid: X:2\nname: plain\n"), "obo")
    assert no_default[0].types == []


def test_unknown_format(kb_file):
    with pytest.raises(ValueError, match="unknown KB format"):
        read_kb(kb_file, "xlsx")


def test_an_id_holding_a_bar_from_a_reader_of_another_package_is_refused(tmp_path):
    """A reader that makes its entities without the Collector: read_kb refuses its ``A|B`` id (a corpus would
    read it back as two ids) in one line naming the file."""
    import catalogue

    from spacy_pel.files import InputError
    from spacy_pel.kb import Entity, register_kb_reader

    register_kb_reader("test_bar")(lambda path, bad_lines=None: [Entity("A", "alpha"), Entity("B|C", "beta")])
    try:
        path = write(tmp_path, "kb.txt", "anything\n")
        with pytest.raises(InputError, match=r"kb\.txt: entity id 'B\|C' \(read as test_bar\) holds '\|'"):
            read_kb(path, "test_bar")
    finally:
        catalogue._remove(("spacy_pel", "kb_readers", "test_bar"))
