"""The UMLS reader (``--format umls``: MRCONSO.RRF, MRSTY.RRF and MRDEF.RRF of a release's META folder)
and ``convert --strip-id-prefix`` (MedMentions writes ``UMLS:C…``, a UMLS KB has bare CUIs).

No UMLS release can be shipped (licensed): the lines below follow the Rich Release Format's field
layouts (UMLS Reference Manual), one atom of each kind the reader must keep or leave out."""
import json
import shutil
from pathlib import Path

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli.build_kb import app as build_kb_app
from spacy_pel.cli.convert import app as convert_app
from spacy_pel.corpora import gold_ids, gold_spans, read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.files import BadLines
from spacy_pel.kb import KBFormatError, kb_files, read_kb
from spacy_pel.retrieval.index import EntityIndex

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MEDMENTIONS = SHARED / "medmentions-sample" / "med_mentions.txt"


def conso(cui, lat, ts, stt, ispref, string, suppress="N", sab="MSH", aui="A0000001"):
    """An MRCONSO line: CUI|LAT|TS|LUI|STT|SUI|ISPREF|AUI|SAUI|SCUI|SDUI|SAB|TTY|CODE|STR|SRL|SUPPRESS|CVF|"""
    return f"{cui}|{lat}|{ts}|L0000001|{stt}|S0000001|{ispref}|{aui}||M0001||{sab}|PT|D000001|{string}|0|{suppress}|256|\n"


MRCONSO = "".join([
    conso("C0027051", "ENG", "S", "PF", "N", "Heart attack", sab="MEDLINEPLUS"),
    conso("C0027051", "ENG", "P", "PF", "Y", "Myocardial Infarction"),
    conso("C0027051", "ENG", "S", "VC", "N", "HEART ATTACK", sab="CHV"),  # a case variant: one name
    conso("C0027051", "ENG", "S", "PF", "N", "MI - Myocardial infarction", suppress="O"),  # obsolete
    conso("C0027051", "FRE", "P", "PF", "Y", "Infarctus du myocarde", sab="MSHFRE"),  # not English
    conso("C0011849", "ENG", "S", "PF", "N", "Diabetes NOS", suppress="Y"),  # suppressed by its source
    conso("C0011849", "ENG", "P", "PF", "Y", "Diabetes Mellitus"),
    conso("C0011849", "ENG", "S", "PF", "N", "DM", sab="CHV"),
    conso("C9999999", "GER", "P", "PF", "Y", "Nur Deutsch", sab="MSHGER"),  # no English atom: not in the KB
])
MRSTY = ("C0027051|T047|B2.2.1.2.1|Disease or Syndrome|AT17683839|256|\n"
         "C0011849|T047|B2.2.1.2.1|Disease or Syndrome|AT17611542|256|\n"
         "C0011849|T033|A2.2|Finding|AT17611543|256|\n"
         "C9999999|T033|A2.2|Finding|AT1|256|\n")
MRDEF = ("C0027051|A0000001|AT1||MSH|An old definition.|Y|256|\n"
         "C0027051|A0000002|AT2||MSH|NECROSIS of the MYOCARDIUM caused by an obstruction of the blood supply.|N|256|\n")


def release(tmp_path: Path, sty: bool = True, definitions: bool = True) -> Path:
    meta = tmp_path / "META"
    meta.mkdir()
    (meta / "MRCONSO.RRF").write_text(MRCONSO, encoding="utf8")
    if sty:
        (meta / "MRSTY.RRF").write_text(MRSTY, encoding="utf8")
    if definitions:
        (meta / "MRDEF.RRF").write_text(MRDEF, encoding="utf8")
    return meta


def test_one_entity_per_concept_with_its_english_unsuppressed_names_types_and_definition(tmp_path):
    meta = release(tmp_path)
    heart, diabetes = read_kb(meta, "umls")  # C9999999 has no English atom
    assert (heart.id, heart.name, heart.aliases) == ("C0027051", "Myocardial Infarction", ["Heart attack"])
    assert heart.types == ["Disease or Syndrome"]
    assert heart.description.startswith("NECROSIS of the MYOCARDIUM")  # the suppressed definition is not used
    # the preferred atom names the concept though it is not the first; the suppressed atom is left out
    assert (diabetes.id, diabetes.name, diabetes.aliases) == ("C0011849", "Diabetes Mellitus", ["DM"])
    assert diabetes.types == ["Disease or Syndrome", "Finding"] and diabetes.description == ""


def test_mrconso_path_reads_the_files_beside_it_and_they_are_the_kbs_files(tmp_path):
    meta = release(tmp_path)
    assert [e.to_dict() for e in read_kb(meta / "MRCONSO.RRF", "umls")] == [e.to_dict() for e in read_kb(meta, "umls")]
    # what a KB build stamps as its input: a new MRSTY or MRDEF is a new KB
    assert [f.name for f in kb_files(meta, "umls")] == ["MRCONSO.RRF", "MRSTY.RRF", "MRDEF.RRF"]


def test_without_mrsty_and_mrdef_the_concepts_have_no_types_and_keep_their_synonyms(tmp_path):
    meta = release(tmp_path, sty=False, definitions=False)
    heart, _ = read_kb(meta, "umls")
    assert heart.types == [] and heart.description == "" and heart.aliases == ["Heart attack"]
    assert [f.name for f in kb_files(meta, "umls")] == ["MRCONSO.RRF"]


def test_a_folder_without_mrconso_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="UMLS folder lacks .*MRCONSO.RRF"):
        read_kb(tmp_path, "umls")


@pytest.mark.parametrize("name, line, fragment", [
    ("MRCONSO.RRF", "C0000001|ENG|P|L1|PF|S1|Y|A1||||MSH|PT|D1|too few fields|\n", "expected an MRCONSO line: 18"),
    ("MRCONSO.RRF", conso("X0000001", "ENG", "P", "PF", "Y", "not a CUI"), "a CUI (C + 7 digits) first"),
    ("MRCONSO.RRF", conso("C0000001", "ENG", "P", "PF", "Y", " "), "the string (STR) 15th"),
    ("MRSTY.RRF", "C0027051|T047|Disease or Syndrome|\n", "expected a MRSTY.RRF line: 6"),
    ("MRDEF.RRF", "C0027051|A1|AT1|MSH|no SATUI|N|256|\n", "expected a MRDEF.RRF line: 8"),
])
def test_a_malformed_line_names_its_file_and_line_or_is_skipped_and_counted(tmp_path, name, line, fragment):
    meta = release(tmp_path)
    path = meta / name
    before = path.read_text(encoding="utf8")
    path.write_text(before + line, encoding="utf8")
    lineno = before.count("\n") + 1
    with pytest.raises(KBFormatError) as err:
        read_kb(meta, "umls")
    assert str(err.value).startswith(f"{path}:{lineno}: ") and fragment in str(err.value), str(err.value)
    bad = BadLines()
    assert [e.id for e in read_kb(meta, "umls", bad)] == ["C0027051", "C0011849"]
    assert bad.count == 1 and f"{name}:{lineno}:" in bad.examples[0]


def test_a_nul_in_a_string_is_refused_naming_the_concepts_first_line(tmp_path):
    meta = release(tmp_path)
    (meta / "MRCONSO.RRF").write_text(MRCONSO + conso("C0000002", "ENG", "P", "PF", "Y", "bad\x00name"), encoding="utf8")
    with pytest.raises(KBFormatError, match=r"MRCONSO\.RRF:10: .*NUL"):
        read_kb(meta, "umls")


@pytest.mark.skipif(not MEDMENTIONS.exists(), reason="needs ../shared/data (the MedMentions sample)")
def test_strip_id_prefix_makes_medmentions_ids_a_umls_kbs_and_the_id_map_sees_them_stripped(tmp_path):
    plain = convert_corpora([MEDMENTIONS], tmp_path / "plain.spacy")
    assert plain["prefix_stripped"] == {} and plain["mentions"] == 115
    id_map = {"C0010674": "C0000001"}  # an id map names the KB's ids, without the corpus's prefix
    stats = convert_corpora([MEDMENTIONS], tmp_path / "mm.spacy", strip_id_prefixes=["MESH:", "UMLS:"], id_map=id_map)
    assert stats["prefix_stripped"] == {"UMLS:": 115}
    assert stats["remapped"] == {"C0010674": stats["remapped"]["C0010674"]} and stats["remapped"]["C0010674"] > 0
    nlp = spacy.blank("en")
    before = [s.kb_id_ for d in read_docbin(nlp, tmp_path / "plain.spacy") for s in gold_spans(d)]
    after = [s.kb_id_ for d in read_docbin(nlp, tmp_path / "mm.spacy") for s in gold_spans(d)]
    assert all(b.startswith("UMLS:C") for b in before)
    assert after == [id_map.get(b[len("UMLS:"):], b[len("UMLS:"):]) for b in before]
    # a .spacy input is rewritten the same way
    again = convert_corpora([tmp_path / "plain.spacy"], tmp_path / "again.spacy", strip_id_prefixes=["UMLS:"])
    assert again["prefix_stripped"] == {"UMLS:": 115}
    assert [s.kb_id_ for d in read_docbin(nlp, tmp_path / "again.spacy") for s in gold_spans(d)] == \
        [b[len("UMLS:"):] for b in before]


def test_strip_id_prefix_leaves_other_ids_nil_and_a_bare_prefix_alone(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("1|t|Fever and gout and pain and ache.\n1|a|\n"
                      "1\t0\t5\tFever\tDisease\tMESH:D005334\n1\t10\t14\tgout\tDisease\tD006073|MESH:D001\n"
                      "1\t19\t23\tpain\tDisease\t-1\n1\t28\t32\tache\tDisease\tMESH:\n\n", encoding="utf8")
    stats = convert_corpora([corpus], tmp_path / "c.spacy", strip_id_prefixes=["MESH:"])
    assert stats["prefix_stripped"] == {"MESH:": 2}
    (doc,) = read_docbin(spacy.blank("en"), tmp_path / "c.spacy")
    assert [gold_ids(s.kb_id_) for s in gold_spans(doc)] == [["D005334"], ["D006073", "D001"], ["NIL"], ["MESH:"]]


def test_convert_cli_strips_and_says_so(tmp_path):
    if not MEDMENTIONS.exists():
        pytest.skip("needs ../shared/data (the MedMentions sample)")
    shutil.copy(MEDMENTIONS, tmp_path / "mm.txt")
    result = CliRunner().invoke(convert_app, [str(tmp_path / "mm.txt"), str(tmp_path / "mm.spacy"),
                                             "--strip-id-prefix", "UMLS:"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["prefix_stripped"] == {"UMLS:": 115}
    assert "gold ids with a prefix removed: 115 UMLS:" in result.stderr


def test_build_kb_from_a_umls_folder_and_a_changed_mrsty_is_another_kb(tmp_path, tiny_encoder_dir):
    meta = release(tmp_path)
    out = tmp_path / "kb"
    args = ["--kb", str(meta), "--format", "umls", "--output", str(out), "--encoder", str(tiny_encoder_dir)]
    result = CliRunner().invoke(build_kb_app, args)
    assert result.exit_code == 0, result.output
    index = EntityIndex.from_disk(out)
    assert list(index.entities.ids) == ["C0027051", "C0011849"] and index.embeddings.shape[0] == 2
    assert index.search(index.embeddings.astype("float32"), 1)[1][:, 0].tolist() == [0, 1]
    (meta / "MRSTY.RRF").write_text(MRSTY.replace("Finding", "Sign or Symptom"), encoding="utf8")
    result = CliRunner().invoke(build_kb_app, args)  # the KB's input changed: replacing it needs --force
    assert result.exit_code == 2 and "built from other input" in result.stderr, result.output
