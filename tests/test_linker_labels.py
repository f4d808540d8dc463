"""Several KBs in one pipeline: ``spacy_pel.mentions.ents.v1`` / ``span_group.v1`` with ``labels`` link the
spans of those labels only and leave the others as they are, so one linker per KB (chemicals against one KB,
diseases against another) each sets its own spans' ids, candidates and confidence."""
import json

import pytest
import spacy
from spacy.tokens import Span
from spacy.training import Example
from typer.testing import CliRunner

from spacy_pel.bulk.local import link_file
from spacy_pel.cli.calibrate import app as calibrate_app
from spacy_pel.cli.evaluate import app as evaluate_app
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.retrieval.build import build_kb
from tests.conftest import KB_LINES

TEXT = "Lithium carbonate and aspirin caused atrial flutter and tricuspid regurgitation."
SPANS = [(0, 2, "Chemical"), (3, 4, "Chemical"), (5, 7, "Disease"), (8, 10, "Disease")]


@pytest.fixture
def kbs(tmp_path, tiny_encoder_dir):
    """A KB of the chemicals and a KB of the diseases of the shared tiny KB."""
    out = {}
    for kind in ("Chemical", "Disease"):
        path = tmp_path / f"{kind}.jsonl"
        path.write_text("\n".join(line for line in KB_LINES if kind in json.loads(line)["types"]) + "\n", encoding="utf8")
        build_kb(path, tmp_path / kind, format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
        out[kind] = tmp_path / kind
    return out


def two_linkers(kbs, mentions: str = "spacy_pel.mentions.ents.v1", **extra):
    nlp = spacy.blank("en")
    for kind in ("Chemical", "Disease"):
        nlp.add_pipe("pel_linker", name=f"{kind.lower()}_linker", config={
            "kb": str(kbs[kind]), "top_k": 2, "mentions": {"@misc": mentions, "labels": [kind], **extra}})
    return nlp


def doc_with(nlp, key=None):
    doc = nlp.make_doc(TEXT)
    spans = [Span(doc, a, b, label) for a, b, label in SPANS]
    if key is None:
        doc.ents = spans
    else:
        doc.spans[key] = spans
    return doc


def ids_of(kbs, kind):
    return {json.loads(line)["id"] for line in KB_LINES if kind in json.loads(line)["types"]}


def test_each_linker_links_its_labels_against_its_kb_and_keeps_the_others(kbs, tmp_path):
    nlp = two_linkers(kbs)
    doc = nlp(doc_with(nlp))
    assert [(e.start, e.end, e.label_) for e in doc.ents] == SPANS
    for ent in doc.ents:
        assert ent.kb_id_ in ids_of(kbs, ent.label_), (ent.text, ent.kb_id_)  # not overwritten by the other linker
        assert {c[0] for c in ent._.pel_candidates} <= ids_of(kbs, ent.label_) and ent._.pel_confidence is not None
    # the first linker alone links the chemicals and leaves the diseases without an id
    alone = spacy.blank("en")
    alone.add_pipe("pel_linker", config={"kb": str(kbs["Chemical"]), "mentions": {"@misc": "spacy_pel.mentions.ents.v1",
                                                                                  "labels": ["Chemical"]}})
    half = alone(doc_with(alone))
    assert [bool(e.kb_id_) for e in half.ents] == [True, True, False, False]
    # the setting is the config's: saved and loaded with the pipeline
    nlp.to_disk(tmp_path / "two")
    again = spacy.load(tmp_path / "two")
    assert again.config["components"]["disease_linker"]["mentions"]["labels"] == ["Disease"]
    assert [e.kb_id_ for e in again(doc_with(again)).ents] == [e.kb_id_ for e in doc.ents]


def test_a_span_group_keeps_its_order_and_the_other_labels_spans(kbs):
    nlp = two_linkers(kbs, "spacy_pel.mentions.span_group.v1", spans_key="sc")
    doc = nlp.make_doc(TEXT)
    order = [SPANS[2], SPANS[0], SPANS[3], SPANS[1], (0, 10, "Other")]  # unsorted, overlapping, one unlinked label
    doc.spans["sc"] = [Span(doc, a, b, label) for a, b, label in order]
    doc = nlp(doc)
    assert [(s.start, s.end, s.label_) for s in doc.spans["sc"]] == order
    group = list(doc.spans["sc"])
    assert [s.kb_id_ in ids_of(kbs, s.label_) for s in group[:4]] == [True] * 4 and group[4].kb_id_ == ""


def test_training_a_linker_of_some_labels_learns_from_their_mentions_only(kbs):
    nlp = two_linkers(kbs)
    reference = doc_with(nlp)
    # a disease span with a chemical's id (the chemical KB has it): a chemical linker must not learn from it
    reference.ents = [Span(reference, a, b, label, kb_id=i) for (a, b, label), i in zip(SPANS, ["D1", "D4", "D5", "D3"])]
    example = Example(nlp.make_doc(TEXT), reference)
    for name, expected in (("chemical_linker", ["D1", "D4"]), ("disease_linker", ["D3"])):
        linker = nlp.get_pipe(name)
        linker.ensure_loaded()
        mentions, gold = linker.updater.mentions(linker, [example])
        ids = linker.index.entities.ids
        assert [ids[next(iter(g))] for g in gold] == expected and len(mentions) == len(expected)


def test_nlp_evaluate_scores_a_linker_of_some_labels_on_their_mentions_only(kbs):
    """nlp.evaluate (spacy evaluate, spacy train) of a chemicals-only linker: the two chemical mentions
    are scored; the diseases, which it never links in nlp(doc), are not counted as its mentions."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kbs["Chemical"]), "top_k": 2,
                                       "mentions": {"@misc": "spacy_pel.mentions.ents.v1", "labels": ["Chemical"]}})
    reference = doc_with(nlp)
    reference.ents = [Span(reference, a, b, label, kb_id=i) for (a, b, label), i in zip(SPANS, ["D1", "D4", "D3", "D2"])]
    scores = nlp.evaluate([Example(nlp.make_doc(TEXT), reference)])
    assert scores["pel_mentions"] == 2 and set(scores["nel_f_per_type"]) == {"Chemical"}


def test_link_writes_every_linkers_mentions(kbs, tmp_path):
    nlp = two_linkers(kbs)
    nlp.to_disk(tmp_path / "two")
    pubtator = [f"1|t|{TEXT}", "1|a|"] + [f"1\t{s.start_char}\t{s.end_char}\t{s.text}\t{s.label_}\t-1" for s in doc_with(nlp).ents]
    (tmp_path / "in.txt").write_text("\n".join(pubtator) + "\n\n", encoding="utf8")
    stats = link_file(tmp_path / "in.txt", tmp_path / "out.jsonl", tmp_path / "two", progress=False)
    (record,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf8").splitlines()]
    expected = [(e.label_, e.kb_id_) for e in nlp(doc_with(nlp)).ents]
    assert stats["mentions"] == 4 and [(m["label"], m["kb_id"]) for m in record["mentions"]] == expected
    assert all(m["kb_id"] in ids_of(kbs, m["label"]) and m["confidence"] is not None for m in record["mentions"])


def test_evaluate_and_calibrate_one_linker_of_several(kbs, tmp_path):
    nlp = two_linkers(kbs)
    nlp.to_disk(tmp_path / "two")
    ents = doc_with(nlp).ents
    ids = ["D1", "D4", "D3", "-1"]  # the second disease is NIL: calibration has something to fit
    lines = [f"1|t|{TEXT}", "1|a|"] + [f"1\t{e.start_char}\t{e.end_char}\t{e.text}\t{e.label_}\t{i}" for e, i in zip(ents, ids)]
    (tmp_path / "gold.txt").write_text("\n".join(lines) + "\n\n", encoding="utf8")
    convert_corpora([tmp_path / "gold.txt"], tmp_path / "gold.spacy")
    result = CliRunner().invoke(evaluate_app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "two"),
                                               "--linker", "disease_linker", "--output", str(tmp_path / "report.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["mentions"] == 2 and report["counts"]["nil"] == 1  # the diseases only
    result = CliRunner().invoke(calibrate_app, [str(tmp_path / "two"), str(tmp_path / "gold.spacy"), "-o", str(tmp_path / "cal"),
                                                "--linker", "disease_linker"])
    assert result.exit_code == 0, result.output
    config = spacy.util.load_config(tmp_path / "cal" / "config.cfg")
    assert config["components"]["disease_linker"]["threshold"] is not None
    assert config["components"]["chemical_linker"]["threshold"] is None
    result = CliRunner().invoke(evaluate_app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "two"), "--linker", "genes"])
    assert result.exit_code == 2 and "no pel_linker called 'genes'; its pel_linkers: chemical_linker, disease_linker" in result.stderr


@pytest.mark.parametrize("labels, message", [("Chemical", "labels.*is not typing.List"), ([1], "labels.*is not <class 'str'>"),
                                             ([""], "`labels` must be a list of span labels")])
def test_labels_must_be_a_list_of_labels(kbs, labels, message):
    nlp = spacy.blank("en")
    with pytest.raises(Exception, match=message):
        nlp.add_pipe("pel_linker", config={"kb": str(kbs["Chemical"]),
                                           "mentions": {"@misc": "spacy_pel.mentions.ents.v1", "labels": labels}})
