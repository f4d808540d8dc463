"""Session 75: the figures the evaluation reports (/tmp/hRR) — a figure of nothing is null / n/a, not 0; a table
formats each figure once from the exact one; e2e partial is a maximum one-to-one matching; the spans per-type
table breaks down the SPAN row; ``evaluate --e2e`` names the thresholds it applied; benchmarks/accuracy.py with a
null threshold. Tiny hand-made rows and docs, and one tiny pipeline."""
import importlib
import itertools
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from spacy.training import Example
from typer.testing import CliRunner

from spacy_pel.cli.evaluate import app as evaluate_app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.evaluation.linking import e2e_metrics, exact_hits, markdown, metrics
from spacy_pel.evaluation.scorer import LinkerScorer, linked_prf, pel_scores
from spacy_pel.pipeline.span_data import CANDIDATES_ATTR

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
KB = {"D1": 0, "D2": 1}
TEXT = "Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn"


def row(gold, top, confidence):
    return ([gold], [top], np.array([confidence]), confidence)


def line_of(report, start):
    return next(line for line in markdown(report).splitlines() if line.startswith(start))


# ---------------------------------------------------------------- bug01: a figure of nothing is n/a
def test_a_figure_of_nothing_is_null_in_the_report_and_n_a_in_its_table():
    """No gold NIL mention (NCBI disease): NIL recall, F1 and AP are undefined, not 0 (one mention called NIL by the
    threshold: NIL precision 0/1 = 0 is a figure); with no threshold nothing is called NIL: precision undefined."""
    rows = [row("D1", "D1", 0.9), row("D2", "D1", 0.4)]
    report = metrics(rows, 1.0, KB, None, threshold=0.5)
    assert report["nil"] == {"p": 0.0, "r": None, "f": None, "average_precision": None}
    assert "NIL P/R/F1: 0.000 / n/a / n/a; NIL average precision: n/a" in line_of(report, "- NIL threshold")
    assert '"r": null' in json.dumps(report)
    with_nil = metrics(rows + [row("NIL", "D2", 0.8)], 1.0, KB, None, threshold=None)
    assert (with_nil["nil"]["p"], with_nil["nil"]["r"], with_nil["nil"]["f"]) == (None, 0.0, None)
    assert line_of(with_nil, "- NIL threshold").startswith("- NIL threshold: none; NIL P/R/F1: n/a / 0.000 / n/a")
    nothing = metrics([], 0.0, KB)
    assert nothing["accuracy_with_nil"] is None and "NIL included: n/a" in markdown(nothing)


def test_the_spacy_scorer_gives_null_for_a_figure_of_nothing_but_a_number_for_pel_r1():
    """pel_r1 is in the linker's default score_weights (and the shipped configs'): spaCy needs a number there."""
    only_nil = pel_scores([row("NIL", "D1", 0.9)], KB, 0.5, 64)
    assert only_nil["pel_r1"] == 0.0 and only_nil["pel_in_kb"] == 0
    assert only_nil["pel_r2"] is None and only_nil["pel_r64"] is None and only_nil["pel_r1_linkable"] is None
    no_nil = pel_scores([row("D1", "D1", 0.9), row("D2", "D1", 0.4)], KB, 0.5, 64)
    assert (no_nil["pel_nil_p"], no_nil["pel_nil_r"], no_nil["pel_nil_f"], no_nil["pel_nil_ap"]) == (0.0, None, None, None)
    assert linked_prf([row("NIL", "D1", 0.9)], KB, 0.5) == {"p": None, "r": None, "f": None}
    assert linked_prf([row("D1", "D1", 0.4)], KB, 0.5) == {"p": None, "r": 0.0, "f": None}  # called NIL: nothing linked


def test_e2e_figures_of_nothing_are_null():
    nlp = spacy.blank("en")
    gold = nlp.make_doc(TEXT)
    gold.spans[GOLD_KEY] = [Span(gold, 0, 2, "Chemical", kb_id="D1")]
    found_nothing = e2e_metrics([nlp.make_doc(TEXT)], [gold])
    assert found_nothing["strict"] == {"p": None, "r": 0.0, "f": None} and found_nothing["span"]["p"] is None


# ---------------------------------------------------------------- bug02: each figure rounded once
def test_the_table_formats_each_figure_once_from_the_exact_one():
    """1586/1933 = 0.82049: 0.8205 in the JSON, 0.820 in the table (not 0.821, from 0.8205); 4/19 = 0.21053."""
    for hits, n, json_figure, shown in [(1586, 1933, 0.8205, "0.820"), (8702, 9362, 0.9295, "0.930"), (4, 19, 0.2105, "0.211")]:
        report = metrics([row("D1", "D1" if i < hits else "D2", 1.0) for i in range(n)], 1.0, KB)
        assert report["recall_in_kb"]["R@1"] == json_figure
        assert line_of(report, "| gold id in KB").split("|")[3].strip() == shown


def test_the_table_shows_the_nil_threshold_and_average_precision_as_the_other_figures():
    rows = [row("D1", "D1", 0.9), row("D2", "D2", 0.5), row("NIL", "D1", 0.6), row("NIL", "D2", 0.3)]
    report = metrics(rows, 1.0, KB, None, threshold=0.7761684954166412)
    assert report["nil"]["average_precision"] == pytest.approx(0.8333, abs=1e-9)  # the JSON's 4 places
    assert "- NIL threshold: 0.776; NIL P/R/F1: 0.667 / 1.000 / 0.800; NIL average precision: 0.833" in markdown(report)


def test_e2e_figures_are_rounded_once():
    """4 right of 19 found spans: P 0.2105 in the JSON, 0.211 in the --e2e table."""
    from spacy_pel.cli.evaluate import e2e_markdown
    from spacy_pel.evaluation.metrics import exact

    nlp = spacy.blank("en")
    words = " ".join(f"w{i}" for i in range(19))
    gold, pred = nlp.make_doc(words), nlp.make_doc(words)
    gold.spans[GOLD_KEY] = [Span(gold, i, i + 1, "X", kb_id="D1") for i in range(4)]
    pred.ents = [Span(pred, i, i + 1, "X", kb_id="D1") for i in range(19)]
    measured = e2e_metrics([pred], [gold])
    assert measured["strict"] == {"p": 0.2105, "r": 1.0, "f": 0.3478}
    run = {"linker": None, "threshold": {"pel_linker": None}, "nil_strategy": {"pel_linker": "x"}, "docs": 1,
           "tokens": "pipeline", "seconds": 0.1, "predicted_mentions_per_s": 1.0}
    assert "| strict | 0.211 | 1.000 | 0.348 |" in e2e_markdown({**exact(measured), **run}, "t")


# ---------------------------------------------------------------- bug03: partial, a maximum one-to-one matching
def test_e2e_partial_does_not_depend_on_the_order_of_the_gold_mentions():
    """Gold "acute atrial flutter" and nested "acute" (both D3), found "acute" and "flutter": 2 partial hits in
    either order (a greedy matching gave "acute" the long mention first, leaving "flutter" none)."""
    nlp = spacy.blank("en")
    text = "acute atrial flutter was seen"

    def partial(order):
        gold = nlp.make_doc(text)
        spans = {"long": Span(gold, 0, 3, "Disease", kb_id="D3"), "short": Span(gold, 0, 1, "Disease", kb_id="D3")}
        gold.spans[GOLD_KEY] = [spans[k] for k in order]
        pred = nlp.make_doc(text)
        pred.ents = [Span(pred, 0, 1, "Disease", kb_id="D3"), Span(pred, 2, 3, "Disease", kb_id="D3")]
        return e2e_metrics([pred], [gold])["partial"]

    assert partial(["long", "short"]) == partial(["short", "long"]) == {"p": 1.0, "r": 1.0, "f": 1.0}


def test_exact_hits_of_found_spans_that_share_offsets_are_a_maximum_matching():
    """Two found spans of one offsets (a span group), D1 and D2; gold mentions there: D1|D2 and D1. The first found
    span taking D1|D2 left the second none; one-to-one, both are hits."""
    golds = [(0, 5, {"D1", "D2"}, "X"), (0, 5, {"D1"}, "X")]
    preds = [(0, 5, "D1", "X"), (0, 5, "D2", "X")]
    assert exact_hits(golds, preds) == [(True, True), (True, True)]
    assert exact_hits(golds, preds[::-1]) == [(True, True), (True, True)]


def test_max_matching_finds_as_many_pairs_as_brute_force():
    from spacy_pel.evaluation.metrics import max_matching

    rng = random.Random(0)
    for _ in range(300):
        n_left, n_right = rng.randint(0, 5), rng.randint(0, 5)
        edges = [[r for r in range(n_right) if rng.random() < 0.4] for _ in range(n_left)]
        match = max_matching(edges)
        taken = [m for m in match if m is not None]
        assert len(taken) == len(set(taken)) and all(m is None or m in e for m, e in zip(match, edges))
        best = max((k for k in range(min(n_left, n_right) + 1)
                    for lefts in itertools.combinations(range(n_left), k)
                    for rights in itertools.permutations(range(n_right), k)
                    if all(r in edges[left] for left, r in zip(lefts, rights))), default=0)
        assert len(taken) == best


# ---------------------------------------------------------------- bug04: the per-type table of the SPAN row
def test_spans_per_type_is_the_span_row_per_gold_label():
    """One label: OLD1 (an alternative id of D1) linked to D1 and D2|D5 linked to D2 are right, as in the SPAN row
    (spaCy's exact id strings call them wrong: nel_f_per_type, left as it is); two labels: each its own mentions."""
    nlp = spacy.blank("en")
    ref = nlp.make_doc(TEXT)
    ref.spans[GOLD_KEY] = [Span(ref, 0, 2, "X", kb_id="OLD1"), Span(ref, 4, 6, "X", kb_id="D2|D5"),
                           Span(ref, 7, 9, "Y", kb_id="D3"), Span(ref, 11, 12, "Y", kb_id="D6")]
    ref.ents = list(ref.spans[GOLD_KEY])
    pred = nlp.make_doc(TEXT)
    linked = [(0, 2, "X", "D1"), (4, 6, "X", "D2"), (7, 9, "Y", "D3"), (11, 12, "Y", "D3")]
    pred.spans[GOLD_KEY] = [Span(pred, a, b, label, kb_id=top) for a, b, label, top in linked]
    for span in pred.spans[GOLD_KEY]:
        span._.set(CANDIDATES_ATTR, [[span.kb_id_, span.kb_id_, 0.9]])
    pred.ents = list(pred.spans[GOLD_KEY])
    scores = LinkerScorer("nel")([Example(pred, ref)], kb_ids={"D1", "D2", "D3", "D5", "D6"},
                                 canonical=lambda i: {"OLD1": "D1"}.get(i, i))
    assert (scores["spans_nel_p"], scores["spans_nel_r"]) == (0.75, 0.75)
    assert scores["spans_nel_per_type"] == {"X": {"p": 1.0, "r": 1.0, "f": 1.0}, "Y": {"p": 0.5, "r": 0.5, "f": 0.5}}
    assert scores["nel_f_per_type"]["X"]["f"] == 0.0  # spaCy's own figures stay under their own key
    one_label = LinkerScorer("nel")([Example(pred, ref)], kb_ids={"D1", "D2", "D3", "D5", "D6"},
                                    canonical=lambda i: {"OLD1": "D1"}.get(i, i), threshold=0.95)
    assert one_label["spans_nel_per_type"] == {"X": {"p": None, "r": 0.0, "f": None}, "Y": {"p": None, "r": 0.0, "f": None}}


# ---------------------------------------------------------------- bug05: the e2e report's thresholds
def test_evaluate_e2e_reports_the_threshold_each_linker_applied(tmp_path, module_kb_dir):
    """The pipeline's own 0.95 calls every found span NIL: the report says so (it said null, "no threshold")."""
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "X", "pattern": p} for p in ["Lithium carbonate", "atrial flutter"]])
    nlp.add_pipe("pel_linker", config={"kb": str(module_kb_dir), "threshold": 0.95})
    nlp.to_disk(tmp_path / "pipe")
    gold = nlp.make_doc(TEXT)
    gold.spans[GOLD_KEY] = [Span(gold, 0, 2, "X", kb_id="D1"), Span(gold, 7, 9, "X", kb_id="D3")]
    write_docbin([gold], tmp_path / "gold.spacy")
    args = [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "pipe"), "--e2e",
            "--output", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")]
    result = CliRunner().invoke(evaluate_app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["threshold"] == {"pel_linker": 0.95}
    assert report["nil_strategy"] == {"pel_linker": "spacy_pel.nil.top_score.v1"}
    assert report["strict"] == {"p": None, "r": 0.0, "f": None}  # nothing linked: precision of nothing
    table = (tmp_path / "r.md").read_text()
    assert "| strict | n/a | 0.000 | n/a |" in table and "pel_linker 0.950 (spacy_pel.nil.top_score.v1)" in table
    result = CliRunner().invoke(evaluate_app, args + ["--threshold", "-1"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["threshold"] == {"pel_linker": -1.0}


# ---------------------------------------------------------------- bug07: benchmarks/accuracy.py, a null threshold
def test_accuracy_benchmark_with_a_null_threshold(tmp_path, module_kb_dir, monkeypatch):
    """calibrate --max-r1-loss gives a null threshold when no cut keeps the loss in bound: nothing is NIL, so the
    in-KB R@1 with NIL is the one without, and the table says "none"."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    accuracy = importlib.import_module("accuracy")
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(module_kb_dir), "threshold": None,
                                        "rules": {"aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}}})
    nlp.to_disk(tmp_path / "pipe")
    gold = nlp.make_doc("Lithium carbonate toxicity in a newborn")
    gold.spans[GOLD_KEY] = [Span(gold, 0, 2, "X", kb_id="D1"), Span(gold, 5, 6, "X", kb_id="NIL")]
    write_docbin([gold], tmp_path / "dev.spacy")
    monkeypatch.setattr(accuracy, "HELD_OUT", (0, 1))
    held = accuracy.held_out(tmp_path / "pipe", tmp_path / "dev.spacy")
    assert held["in_kb_R@1_with_nil"] == held["in_kb_R@1_without_nil"] == 1.0
    assert held["nil"]["p"] is None and held["nil"]["r"] == 0.0
    cells = accuracy.fmt_nil({"held_out": held, "fit": {"threshold": None}})
    assert cells.endswith("| none") and cells.startswith("n/a / 0.000 / **n/a**")
