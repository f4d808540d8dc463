"""Session 72: calibrate and evaluate a pipeline with one pel_linker per KB. ``calibrate --e2e --linker`` fits on its
linker's found spans and gold mentions only (bug02); ``evaluate --e2e`` scores the named linker's labels only and
spells each mention's ids by the KB of its label's linker (bug03); ``calibrate --linker`` counts its own mentions and
refuses a linker with none (bug04); each linker's calibration record is kept and names its linker (bug07)."""
import json

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli.calibrate import app as calibrate_app
from spacy_pel.cli.evaluate import app as evaluate_app
from spacy_pel.corpora import read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.evaluation.nil import calibrate, e2e_evidence
from spacy_pel.files import InputError
from spacy_pel.retrieval.build import build_kb
from tests.conftest import KB_LINES
from tests.test_linker_labels import SPANS, TEXT, doc_with, kbs, two_linkers  # noqa: F401 (kbs: a fixture)

ALIASES = {"@misc": "spacy_pel.rules.alias_table.v1"}  # each mention linked by its KB name, whatever the encoder


def gold(nlp, tmp_path, ids, name="gold"):
    """The corpus of TEXT with SPANS' mentions given ``ids`` (``-1``: NIL)."""
    ents = doc_with(nlp).ents
    lines = [f"1|t|{TEXT}", "1|a|"] + [f"1\t{e.start_char}\t{e.end_char}\t{e.text}\t{e.label_}\t{i}" for e, i in zip(ents, ids)]
    (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n\n", encoding="utf8")
    convert_corpora([tmp_path / f"{name}.txt"], tmp_path / f"{name}.spacy")
    return tmp_path / f"{name}.spacy"


def ruler_linkers(folders, linkers=("Chemical", "Disease")):
    """An entity_ruler finding SPANS' mentions in raw text (the 'NER'), then one pel_linker per KB."""
    nlp = spacy.blank("en")
    doc = nlp.make_doc(TEXT)
    nlp.add_pipe("entity_ruler").add_patterns([{"label": label, "pattern": [{"LOWER": t.lower_} for t in doc[a:b]]}
                                               for a, b, label in SPANS])
    for kind in linkers:
        nlp.add_pipe("pel_linker", name=f"{kind.lower()}_linker", config={
            "kb": str(folders[kind]), "top_k": 2, "rules": {"aliases": ALIASES},
            "mentions": {"@misc": "spacy_pel.mentions.ents.v1", "labels": [kind]}})
    return nlp


def run(app, *args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result, fragment):
    assert result.exit_code != 0 and fragment in result.stderr, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]  # a linker without threshold
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr


# ---------------------------------------------------------------- bug02: calibrate --e2e --linker
@pytest.mark.parametrize("nil", ["top_score", "classifier"])
def test_calibrate_e2e_of_one_linker_fits_on_its_found_spans_and_gold_only(kbs, tmp_path, nil):  # noqa: F811
    """2 of the 4 gold mentions and 2 of the 4 found spans are Disease ones: the disease linker's curve counts
    those (it counted every linker's: gold 4, 4 spans kept without a threshold)."""
    nlp = ruler_linkers(kbs)
    nlp.to_disk(tmp_path / "ruler")
    corpus = gold(nlp, tmp_path, ["D1", "D4", "D3", "D2"])
    summary = calibrate(tmp_path / "ruler", corpus, tmp_path / "out", e2e=True, nil=nil, linker_name="disease_linker")
    assert summary["gold"] == 2 and summary["without_threshold"]["kept"] == 2
    assert summary["without_threshold"]["r"] == 1.0  # both disease mentions found and linked by name
    linker = nlp.get_pipe("disease_linker")
    linker.ensure_loaded()
    evidence = e2e_evidence(nlp, "disease_linker", linker, read_docbin(nlp, corpus))
    assert int(evidence.gold.sum()) == 2 and evidence.correct.tolist() == [True, True]


# ---------------------------------------------------------------- bug03: evaluate --e2e --linker
def test_evaluate_e2e_scores_the_named_linkers_labels_and_each_id_by_its_labels_kb(kbs, tmp_path, tiny_encoder_dir):  # noqa: F811
    """The disease KB files OMIM:100 under D3 (atrial flutter), as the gold corpus spells it. Without --linker the
    pipeline's output is scored, each mention's ids resolved by the KB of its label's linker: 4/4 (was 3/4, every
    id resolved by the first, chemical, KB); --linker scores that linker's 2 mentions (was all 4 for either)."""
    lines = [line.replace('"id": "D3",', '"id": "D3", "extra": {"alt_ids": ["OMIM:100"]},') for line in KB_LINES]
    (tmp_path / "dis_alt.jsonl").write_text("\n".join(line for line in lines if "Disease" in line) + "\n", encoding="utf8")
    build_kb(tmp_path / "dis_alt.jsonl", tmp_path / "dis_alt", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    nlp = ruler_linkers({**kbs, "Disease": tmp_path / "dis_alt", "Gene": kbs["Chemical"]}, ("Chemical", "Disease", "Gene"))
    nlp.to_disk(tmp_path / "ruler")
    corpus = gold(nlp, tmp_path, ["D1", "D4", "OMIM:100", "D2"])
    reports = {}
    for name in (None, "chemical_linker", "disease_linker"):
        result = run(evaluate_app, corpus, "--pipeline", tmp_path / "ruler", "--e2e", "--output", tmp_path / "r.json",
                     *(["--linker", name] if name else []))
        assert result.exit_code == 0, result.output
        reports[name] = json.loads((tmp_path / "r.json").read_text())
    assert (reports[None]["gold"], reports[None]["predicted"], reports[None]["strict"]["r"]) == (4, 4, 1.0)
    for name in ("chemical_linker", "disease_linker"):
        assert (reports[name]["gold"], reports[name]["predicted"], reports[name]["strict"]["f"]) == (2, 2, 1.0), name
        assert reports[name]["span"] == {"p": 1.0, "r": 1.0, "f": 1.0} and reports[name]["linker"] == name
    one_line_error(run(evaluate_app, corpus, "--pipeline", tmp_path / "ruler", "--e2e", "--linker", "gene_linker"),
                   "none of its gold mentions has a label the linker gene_linker links")


# ---------------------------------------------------------------- bug04: calibrate --linker, its own mentions
def test_calibrate_of_one_linker_counts_its_own_mentions_and_refuses_a_linker_with_none(kbs, tmp_path):  # noqa: F811
    """The chemicals hold a NIL mention, the diseases none: the disease linker is left uncalibrated, its 2 mentions
    counted (was 4) and its labels named (was "the corpus has no gold NIL mentions"). A linker of a label the corpus
    lacks is refused in one line, as evaluate refuses it (was calibrated silently, exit 0)."""
    nlp = two_linkers(kbs)
    nlp.add_pipe("pel_linker", name="gene_linker", config={
        "kb": str(kbs["Chemical"]), "mentions": {"@misc": "spacy_pel.mentions.ents.v1", "labels": ["Gene"]}})
    nlp.to_disk(tmp_path / "three")
    corpus = gold(nlp, tmp_path, ["D1", "-1", "D3", "D2"])
    summary = calibrate(tmp_path / "three", corpus, tmp_path / "out", linker_name="disease_linker")
    assert summary["calibrated"] is False and (summary["mentions"], summary["nil_mentions"]) == (2, 0)
    assert "no gold NIL mentions of the labels disease_linker links (Disease)" in summary["reason"]
    for e2e in (False, True):
        with pytest.raises(InputError, match="none of its gold mentions has a label the linker gene_linker links"):
            calibrate(tmp_path / "three", corpus, tmp_path / "out2", linker_name="gene_linker", e2e=e2e)
    one_line_error(run(calibrate_app, tmp_path / "three", corpus, "-o", tmp_path / "out3", "--linker", "gene_linker"),
                   "none of its gold mentions has a label the linker gene_linker links")
    assert not (tmp_path / "out2").exists() and not (tmp_path / "out3").exists()


# ---------------------------------------------------------------- bug07: one calibration record per linker
def test_each_linkers_calibration_record_is_kept_and_names_its_linker(kbs, tmp_path, kb_dir):  # noqa: F811
    """Calibrating the chemicals, then the result's diseases (docs/configuration.md's two steps), keeps both records,
    each naming its linker (was one nil_calibration.json, the last linker's, naming none); calibrating one again in
    place keeps the other's. A pipeline of one linker keeps its nil_calibration.json, which names it too."""
    nlp = two_linkers(kbs)
    nlp.to_disk(tmp_path / "two")
    corpus = gold(nlp, tmp_path, ["D1", "-1", "D3", "-1"])
    for source, output, name in (("two", "a", "chemical_linker"), ("a", "b", "disease_linker"), ("b", "b", "chemical_linker")):
        result = run(calibrate_app, tmp_path / source, corpus, "-o", tmp_path / output, "--linker", name)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["linker"] == name
    records = {p.name: json.loads(p.read_text()) for p in (tmp_path / "b").glob("nil_calibration*.json")}
    assert sorted(records) == ["nil_calibration.chemical_linker.json", "nil_calibration.disease_linker.json"]
    config = spacy.util.load_config(tmp_path / "b" / "config.cfg")
    for name in ("chemical_linker", "disease_linker"):
        record = records[f"nil_calibration.{name}.json"]
        assert record["linker"] == name and record["mentions"] == 2 and record["nil_mentions"] == 1
        assert config["components"][name]["threshold"] == pytest.approx(record["threshold"])
    one = spacy.blank("en")
    one.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    one.to_disk(tmp_path / "one")
    summary = calibrate(tmp_path / "one", corpus, tmp_path / "one_cal")
    assert [p.name for p in (tmp_path / "one_cal").glob("nil_calibration*.json")] == ["nil_calibration.json"]
    assert json.loads((tmp_path / "one_cal" / "nil_calibration.json").read_text())["linker"] == "pel_linker" == summary["linker"]


def test_an_unnamed_record_of_another_linker_is_carried_over_under_its_name(kbs, tmp_path):  # noqa: F811
    """A pipeline calibrated while it had one linker (its nil_calibration.json names it), given a second linker and
    calibrated for that one: the first linker's record was dropped (session 72 left this alone)."""
    nlp = two_linkers(kbs)
    nlp.to_disk(tmp_path / "two")
    old = {"linker": "chemical_linker", "threshold": 0.5, "calibrated": True}
    (tmp_path / "two" / "nil_calibration.json").write_text(json.dumps(old), encoding="utf8")
    corpus = gold(nlp, tmp_path, ["D1", "-1", "D3", "-1"])
    result = run(calibrate_app, tmp_path / "two", corpus, "-o", tmp_path / "b", "--linker", "disease_linker")
    assert result.exit_code == 0, result.output
    records = sorted(p.name for p in (tmp_path / "b").glob("nil_calibration*.json"))
    assert records == ["nil_calibration.chemical_linker.json", "nil_calibration.disease_linker.json"]
    assert json.loads((tmp_path / "b" / "nil_calibration.chemical_linker.json").read_text()) == old
