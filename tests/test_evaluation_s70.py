"""Session 70: evaluation, NIL and discovery figures on tiny hand-made cases — a span annotated twice, a linker
whose NIL label is not "NIL", the in-KB recall loss of calibrate, --errors with a labelled linker, tied NIL
confidences, and alternative ids in discover's ARI."""
import json

import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from spacy.training import Example
from typer.testing import CliRunner

import spacy_pel.evaluation.nil as nil_module
from spacy_pel.cli.discover import app as discover_app
from spacy_pel.cli.evaluate import app as evaluate_app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.discovery.cluster import DISCOVERED_KEY, cluster_scores, gold_cluster_scores
from spacy_pel.evaluation.errors import mention_errors
from spacy_pel.evaluation.linking import e2e_metrics, mention_table, metrics
from spacy_pel.evaluation.metrics import average_precision
from spacy_pel.evaluation.nil import calibrate, e2e_curve, e2e_evidence, nil_curve
from spacy_pel.evaluation.scorer import candidate_rows, pel_scores
from spacy_pel.pipeline.span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR

TEXT = "Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn"
ALIASES = {"@misc": "spacy_pel.rules.alias_table.v1"}  # the KB's names: "Lithium carbonate" → D1 whatever the encoder


def doc_with(nlp, spans, text=TEXT, ents=True):
    """A doc with gold spans ``(start, end, kb_id, label)`` in ``pel_gold`` (and, without overlaps, doc.ents)."""
    doc = nlp.make_doc(text)
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label=label, kb_id=k) for a, b, k, label in spans]
    if ents:
        doc.ents = spacy.util.filter_spans(list(doc.spans[GOLD_KEY]))
    return doc


def linked_doc(nlp, spans, text=TEXT):
    """A predicted doc whose ``pel_gold`` spans ``(start, end, label, candidates)`` carry their candidates."""
    doc = nlp.make_doc(text)
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label=label) for a, b, label, _ in spans]
    for span, (_, _, _, found) in zip(doc.spans[GOLD_KEY], spans):
        span._.set(CANDIDATES_ATTR, [[c, c, score] for c, score in found])
    return doc


# ---------------------------------------------------------------- bug01: the scorer, a span annotated twice
def test_the_scorer_scores_each_gold_mention_of_one_span_against_its_own_ids():
    """"Lithium carbonate" is Chemical D1 and Drug D4; both linked to D1: one right (the Chemical one), one
    wrong — R@1 2/3 with "tricuspid regurgitation" right, as `spacy_pel evaluate` counts (was 1/3: both
    rows scored against the last gold mention's D4)."""
    nlp = spacy.blank("en")
    ref = doc_with(nlp, [(0, 2, "D1", "Chemical"), (0, 2, "D4", "Drug"), (4, 6, "D2", "Disease")])
    pred = linked_doc(nlp, [(0, 2, "Chemical", [("D1", 0.9), ("D4", 0.8)]), (0, 2, "Drug", [("D1", 0.9), ("D4", 0.8)]),
                            (4, 6, "Disease", [("D2", 0.7)])])
    rows = candidate_rows([Example(pred, ref)])
    assert [r[0] for r in rows] == [["D1"], ["D4"], ["D2"]]
    scores = pel_scores(rows)
    assert scores["pel_r1"] == pytest.approx(0.6667) and scores["pel_r2"] == 1.0 and scores["pel_in_kb"] == 3
    # the predicted spans in another order (a Drug linker first): each still gets its own gold mention, by label
    pred = linked_doc(nlp, [(0, 2, "Drug", [("D4", 0.9)]), (0, 2, "Chemical", [("D4", 0.9)])])
    assert [r[0] for r in candidate_rows([Example(pred, ref)])] == [["D4"], ["D1"]]
    # a linker of one label (one per KB) links the Chemical mention only: scored against D1, not the Drug's D4
    pred = linked_doc(nlp, [(0, 2, "Chemical", [("D1", 0.9)])])
    assert pel_scores(candidate_rows([Example(pred, ref)]))["pel_r1"] == 1.0
    # a second prediction on a span annotated once uses no gold mention twice
    pred = linked_doc(nlp, [(4, 6, "Disease", [("D2", 0.9)]), (4, 6, "Other", [("D2", 0.9)])])
    assert len(candidate_rows([Example(pred, ref)])) == 1


def test_nlp_evaluate_gives_the_figures_of_spacy_pel_evaluate_on_a_span_annotated_twice(kb_dir):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "rules": {"aliases": ALIASES}})
    doc = doc_with(nlp, [(0, 2, "D1", "Chemical"), (0, 2, "D4", "Drug"), (4, 6, "D2", "Disease")])
    rows, seconds = mention_table(linker, [doc])
    assert [(r[0], r[1][0]) for r in rows] == [(["D1"], "D1"), (["D4"], "D1"), (["D2"], "D2")]
    assert metrics(rows, seconds, linker.index.row)["recall_in_kb"]["R@1"] == pytest.approx(0.6667)
    scores = nlp.evaluate([Example(nlp.make_doc(doc.text), doc)])
    assert scores["pel_r1"] == pytest.approx(0.6667) and scores["pel_in_kb"] == 3
    assert scores["pel_nel_r"] == pytest.approx(2 / 3) and scores["pel_accuracy_with_nil"] == pytest.approx(0.6667)


# ---------------------------------------------------------------- bug02: a NIL label named otherwise
def found_doc(nlp, gold, ents):
    """The pipeline's output on ``gold``'s text: ``ents`` ``(start, end, kb_id, label, confidence)``."""
    doc = nlp.make_doc(gold.text)
    doc.ents = [Span(doc, a, b, label=label, kb_id=k) for a, b, k, label, _ in ents]
    for span, (*_, confidence) in zip(doc.ents, ents):
        if confidence is not None:
            span._.set(CONFIDENCE_ATTR, confidence)
    return doc


def test_e2e_measures_leave_out_the_linkers_nil_label():
    """A span the linker called NIL with ``nil_label = "CUI-less"`` is no linked prediction: strict P 1.0, R 1/2
    (it counted as a wrong link: P 1/2); the curve of calibrate --e2e keeps 1 span (was 2, P 1/2)."""
    nlp = spacy.blank("en")
    gold = doc_with(nlp, [(0, 2, "D1", "X"), (4, 6, "D2", "X")])
    pred = found_doc(nlp, gold, [(0, 2, "D1", "X", 0.9), (4, 6, "CUI-less", "X", None)])
    m = e2e_metrics([pred], [gold], nil_labels={"NIL", "CUI-less"})
    assert m["strict"] == {"p": 1.0, "r": 0.5, "f": 0.6667} and m["predicted"] == 1 and m["gold"] == 2
    assert m["span"] == {"p": 1.0, "r": 1.0, "f": 1.0}  # a NIL span is still a found span
    curve = e2e_curve([pred], [gold], nil_labels={"NIL", "CUI-less"})
    assert curve["without_threshold"] == {"p": 1.0, "r": 0.5, "f": pytest.approx(2 / 3), "kept": 1}


def ruler_pipeline(kb_dir, **linker):
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "X", "pattern": p} for p in ["Lithium carbonate", "tricuspid regurgitation", "atrial flutter"]])
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), **linker})
    return nlp


def test_evaluate_e2e_counts_no_link_for_a_nil_label_named_otherwise(kb_dir, tmp_path):
    """Threshold 1: the linker calls every found span NIL ("CUI-less"): nothing linked, strict R = 0 over
    the 3 gold mentions (it was 3 wrong links), P of nothing n/a (null)."""
    nlp = ruler_pipeline(kb_dir, threshold=1.0, nil_label="CUI-less")
    gold = doc_with(nlp, [(0, 2, "D1", "X"), (4, 6, "D2", "X"), (7, 9, "D3", "X")])
    assert [e.kb_id_ for e in nlp(gold.text).ents] == ["CUI-less"] * 3
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([gold], tmp_path / "gold.spacy")
    result = CliRunner().invoke(evaluate_app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "pipe"), "--e2e",
                                               "--output", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "m.json").read_text())
    assert (report["predicted"], report["gold"]) == (0, 3)
    assert report["strict"] == {"p": None, "r": 0.0, "f": None} and report["span"]["f"] == 1.0


def test_calibrate_e2e_gives_the_curve_the_linkers_nil_label(kb_dir, tmp_path, monkeypatch):
    nlp = ruler_pipeline(kb_dir, nil_label="CUI-less")
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([doc_with(nlp, [(0, 2, "D1", "X"), (4, 6, "D2", "X")])], tmp_path / "gold.spacy")
    seen = {}

    def curve(predicted, gold, canonical=None, nil_labels=("NIL",)):
        seen["nil_labels"] = set(nil_labels)
        return e2e_curve(predicted, gold, canonical, nil_labels=nil_labels)

    monkeypatch.setattr(nil_module, "e2e_curve", curve)
    calibrate(tmp_path / "pipe", tmp_path / "gold.spacy", tmp_path / "out", e2e=True)
    assert seen["nil_labels"] == {"NIL", "CUI-less"}


# ---------------------------------------------------------------- bug03: the in-KB recall@1 loss
def test_the_recall_loss_is_a_share_of_the_in_kb_mentions():
    """NIL 0.1, in-KB right 0.2, NIL 0.3, gold id absent from the KB 0.5, in-KB right 0.9. The best cut (F1 0.8,
    below 0.5) turns 1 of the 2 in-KB mentions NIL: loss 1/2 (not 1/3, absent counted); so a bound of 0.4 keeps
    only the cut below 0.2 (F1 2/3)."""
    conf = np.array([0.1, 0.2, 0.3, 0.5, 0.9])
    is_nil = np.array([1, 0, 1, 0, 0], dtype=bool)
    correct = np.array([0, 1, 0, 0, 1], dtype=bool)
    in_kb = np.array([0, 1, 0, 0, 1], dtype=bool)
    free = nil_curve(conf, is_nil, correct, in_kb=in_kb)
    assert free["threshold"] == pytest.approx(0.4) and free["f"] == pytest.approx(0.8)
    assert free["in_kb_r1_loss"] == pytest.approx(0.5)
    bounded = nil_curve(conf, is_nil, correct, max_r1_loss=0.4, in_kb=in_kb)
    assert bounded["threshold"] == pytest.approx(0.15) and bounded["in_kb_r1_loss"] == 0.0
    assert bounded["f"] == pytest.approx(2 / 3)
    # every cut costs more than the bound: no threshold (nothing NIL, nothing lost), said in a note (session 73)
    none = nil_curve(np.array([0.3, 0.2, 0.5, 0.9]), np.array([1, 0, 0, 0], bool), np.array([0, 1, 0, 1], bool),
                     max_r1_loss=0.4, in_kb=np.array([0, 1, 0, 1], bool))
    assert none["threshold"] is None and none["in_kb_r1_loss"] == 0.0 and "0.4" in none["note"]


def test_calibrate_gives_the_curve_the_in_kb_mentions(kb_dir, tmp_path, monkeypatch):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([doc_with(nlp, [(0, 2, "D1", "X"), (2, 3, "NIL", "X"), (4, 6, "GONE", "X"), (7, 9, "D3", "X")])],
                 tmp_path / "gold.spacy")
    seen = {}

    def curve(top_scores, is_nil, correct=None, max_r1_loss=None, in_kb=None, **kwargs):
        seen["in_kb"] = None if in_kb is None else in_kb.tolist()
        return nil_curve(top_scores, is_nil, correct, max_r1_loss, in_kb=in_kb, **kwargs)

    monkeypatch.setattr(nil_module, "nil_curve", curve)
    calibrate(tmp_path / "pipe", tmp_path / "gold.spacy", tmp_path / "out")
    assert seen["in_kb"] == [True, False, False, True]


# ---------------------------------------------------------------- bug04: --errors with a linker of some labels
def test_errors_of_a_linker_of_some_labels(kb_dir, tmp_path):
    """The chemicals linker links "Lithium carbonate" only: with threshold 2 it is called NIL, the one error
    (the Disease mentions are another linker's)."""
    nlp = spacy.blank("en")
    for name, label in (("chemicals", "Chemical"), ("diseases", "Disease")):
        nlp.add_pipe("pel_linker", name=name, config={"kb": str(kb_dir),
                                                      "mentions": {"@misc": "spacy_pel.mentions.ents.v1", "labels": [label]}})
    doc = doc_with(nlp, [(0, 2, "D1", "Chemical"), (2, 3, "NIL", "Disease"), (4, 6, "D2", "Disease"), (7, 9, "D3", "Disease")])
    linker = nlp.get_pipe("chemicals")
    rows, _ = mention_table(linker, [doc])
    errors = mention_errors(rows, [doc], linker.index, threshold=2.0, mentions=linker.mentions)
    assert [(e["kind"], e["text"]) for e in errors] == [("called_nil" if rows[0][1][0] == "D1" else "wrong_entity",
                                                         "Lithium carbonate")]
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([doc], tmp_path / "gold.spacy")
    out, errors_file = tmp_path / "m.json", tmp_path / "errors.jsonl"
    result = CliRunner().invoke(evaluate_app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "pipe"),
                                               "--linker", "chemicals", "--threshold", "2.0", "--errors", str(errors_file),
                                               "--output", str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert [(e["text"], e["label"], e["predicted"]) for e in lines] == [("Lithium carbonate", "Chemical", "NIL")]
    assert sum(json.loads(out.read_text())["errors"]["kinds"].values()) == 1


# ---------------------------------------------------------------- bug05: e2e, a span annotated twice
def test_e2e_strict_and_typed_match_either_gold_mention_of_a_span_annotated_twice():
    """"Lithium carbonate" is Chemical D1 and Drug D4: the prediction D1/Chemical is a strict and typed hit
    (it was a miss: only the last, D4/Drug, was kept): strict P 1, R 2/3, never above partial."""
    nlp = spacy.blank("en")
    gold = doc_with(nlp, [(0, 2, "D1", "Chemical"), (0, 2, "D4", "Drug"), (4, 6, "D2", "Disease")], ents=False)
    pred = found_doc(nlp, gold, [(0, 2, "D1", "Chemical", 0.9), (4, 6, "D2", "Disease", 0.8)])
    m = e2e_metrics([pred], [gold])
    expected = {"p": 1.0, "r": 0.6667, "f": 0.8}
    assert m["strict"] == expected and m["typed"] == expected and m["partial"] == expected
    # D4 labelled Chemical: the Drug mention's id, not its label — strict, not typed
    pred = found_doc(nlp, gold, [(0, 2, "D4", "Chemical", 0.9)])
    m = e2e_metrics([pred], [gold])
    assert m["strict"] == {"p": 1.0, "r": 0.3333, "f": 0.5} and m["typed"] == {"p": 0.0, "r": 0.0, "f": 0.0}
    curve = e2e_curve([found_doc(nlp, gold, [(0, 2, "D1", "Chemical", 0.9), (4, 6, "D2", "Disease", 0.8)])], [gold])
    assert curve["without_threshold"] == {"p": 1.0, "r": pytest.approx(2 / 3), "f": pytest.approx(0.8), "kept": 2}


def test_e2e_evidence_counts_a_strict_hit_on_a_span_annotated_twice(kb_dir):
    nlp = ruler_pipeline(kb_dir, rules={"aliases": ALIASES})
    gold = doc_with(nlp, [(0, 2, "D1", "Chemical"), (0, 2, "D4", "Drug"), (4, 6, "D2", "Disease")], ents=False)
    assert [e.kb_id_ for e in nlp(gold.text).ents][:2] == ["D1", "D2"]
    evidence = e2e_evidence(nlp, "pel_linker", nlp.get_pipe("pel_linker"), [gold])
    assert evidence.correct.tolist() == [True, True, False] and evidence.gold.tolist() == [3]


# ---------------------------------------------------------------- bug06: tied NIL confidences
def test_average_precision_of_tied_scores_does_not_depend_on_their_order():
    """scikit-learn's definition: a tie is one operating point, precision taken after the whole tie."""
    assert average_precision(np.array([1, 0]), np.array([0.5, 0.5])) == 0.5
    assert average_precision(np.array([0, 1]), np.array([0.5, 0.5])) == 0.5
    # 0.9: NIL; 0.5: in-KB and NIL; 0.1: NIL → (1 + 2/3 + 3/4) / 3
    for labels, scores in (([1, 0, 1, 1], [0.9, 0.5, 0.5, 0.1]), ([1, 1, 0, 1], [0.9, 0.5, 0.5, 0.1])):
        assert average_precision(np.array(labels), np.array(scores)) == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)
    assert average_precision(np.array([1, 0, 1]), np.array([0.9, 0.8, 0.1])) == pytest.approx((1 + 2 / 3) / 2)


def test_nil_average_precision_of_the_same_mentions_in_another_order():
    rows = [(["D4"], ["D4"], np.array([0.9]), 0.9), (["NIL"], ["D4"], np.array([0.4]), 0.4),
            (["D9"], ["D9"], np.array([0.4]), 0.4), (["D4"], ["D4"], np.array([0.9]), 0.9)]
    for order in (rows, rows[2:] + rows[:2]):
        assert metrics(order, 0.0, {"D4", "D9"})["nil"]["average_precision"] == 0.5


# ---------------------------------------------------------------- bug07: discover's ARI, alternative ids
def discovered_doc(nlp, gold, predicted, text="Lithium carbonate toxicity in a newborn"):
    doc = doc_with(nlp, gold, text=text)
    doc.spans[DISCOVERED_KEY] = [Span(doc, a, b, label=label, kb_id=p) for (a, b, _, label), p in zip(gold, predicted)]
    return doc


def test_gold_cluster_scores_read_an_alternative_id_as_its_entity():
    """ALT1 is D1's alternative id: every mention has its gold entity, ARI = NMI = 1 (was 4/7 and 0.8)."""
    nlp = spacy.blank("en")
    docs = [discovered_doc(nlp, [(0, 2, "D1", "X"), (2, 3, "D9", "X")], ["D1", "D9"]),
            discovered_doc(nlp, [(0, 2, "ALT1", "X"), (2, 3, "D9", "X")], ["D1", "D9"])]
    primary = {"ALT1": "D1", "ALT9": "D9"}.get
    assert gold_cluster_scores(docs, canonical=lambda i: primary(i, i)) == {"ari": 1.0, "nmi": 1.0, "mentions": 4}
    # each part of a composite id too: ALT1|ALT9 is D1|D9
    docs = [discovered_doc(nlp, [(0, 2, "D1|D9", "X"), (2, 3, "D9", "X")], ["N0", "D9"]),
            discovered_doc(nlp, [(0, 2, "ALT1|ALT9", "X"), (2, 3, "D9", "X")], ["N0", "D9"])]
    assert gold_cluster_scores(docs, canonical=lambda i: primary(i, i))["ari"] == 1.0


def test_discover_scores_the_gold_ids_as_the_kb_resolves_them(tmp_path, tiny_encoder_dir):
    """Threshold 2: every mention its own NIL cluster. The gold D1, ALT1 (= D1) and D4 are two entities, so the
    singletons score ARI 0 (raw ids, three entities: 1)."""
    from spacy_pel.retrieval.build import build_kb

    lines = [{"id": "D1", "name": "lithium carbonate", "types": ["Chemical"], "extra": {"alt_ids": ["ALT1"]}},
             {"id": "D4", "name": "aspirin", "types": ["Chemical"]}, {"id": "D9", "name": "toxicity", "types": ["Disease"]}]
    (tmp_path / "kb.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf8")
    build_kb(tmp_path / "kb.jsonl", tmp_path / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    nlp = spacy.blank("en")
    text = "Lithium carbonate and aspirin"
    docs = [doc_with(nlp, [(0, 2, "D1", "Chemical"), (3, 4, "D4", "Chemical")], text=text),
            doc_with(nlp, [(0, 2, "ALT1", "Chemical")], text=text)]
    write_docbin(docs, tmp_path / "gold.spacy")
    result = CliRunner().invoke(discover_app, [str(tmp_path / "gold.spacy"), str(tmp_path / "out.spacy"),
                                               "--kb", str(tmp_path / "kb"), "--threshold", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["nil_clusters"] == 3
    assert report["gold"] == {**cluster_scores(["D1", "D4", "D1"], [0, 1, 2]), "mentions": 3}
    assert report["gold"]["ari"] == 0.0
