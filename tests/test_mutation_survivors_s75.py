"""Tests pinning behaviour that hand mutation testing (round 2) found unchecked: each fails on the mutant named in
its docstring and passes on the code as it is.

E1, E4: end-to-end matching (partial overlap; one gold mention per strict hit); N1, N2: the strict e2e NIL curve
(tie rule; no cut between equal confidences); B3: a stale bulk errors file; A5: adapt's held-out entities;
C2: ``adapt --max-minutes``."""
import json

import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

import spacy_pel.cli.adapt as cli_adapt
from spacy_pel.bulk import output
from spacy_pel.bulk.shards import Shard
from spacy_pel.corpora import GOLD_KEY
from spacy_pel.evaluation.linking import Scope, e2e_metrics, exact_hits, partial_hits
from spacy_pel.evaluation.nil import strict_curve
from spacy_pel.kb import Entity
from spacy_pel.training.adapt import KBNames, split_entities


# ------------------------------------------------------------------ E1: partial needs a shared character
def test_partial_needs_a_shared_character_not_a_touching_boundary():
    """E1 (``a < y and x < b`` → ``<=``): a found span that only touches a gold mention — hyphenated text, which
    spaCy splits without spaces — is no partial hit, even with the right id."""
    nlp = spacy.blank("en")
    gold = nlp.make_doc("aspirin-induced asthma")  # aspirin | - | induced | asthma
    gold.spans[GOLD_KEY] = [Span(gold, 0, 1, label="Chemical", kb_id="D1")]  # chars 0-7
    pred = nlp.make_doc(gold.text)
    pred.ents = [Span(pred, 1, 3, label="Chemical", kb_id="D1")]  # "-induced": chars 7-15, touches 0-7
    assert e2e_metrics([pred], [gold])["partial"] == {"p": 0.0, "r": 0.0, "f": 0.0}
    # touching on either side, and one shared character is enough
    golds = [(7, 15, {"D1"}, "Chemical")]
    assert partial_hits(golds, [(0, 7, "D1", "Chemical")]) == 0
    assert partial_hits(golds, [(15, 22, "D1", "Chemical")]) == 0
    assert partial_hits(golds, [(0, 8, "D1", "Chemical")]) == 1
    assert partial_hits(golds, [(14, 22, "D1", "Chemical")]) == 1


# ------------------------------------------------------------------ E4: one strict hit per gold mention
def test_a_gold_mention_is_one_strict_hit_however_often_its_span_is_found():
    """E4 (a gold mention matched by several found spans): a span group holding the same span under two labels,
    both linked to the gold id, gives one strict hit, not two (recall above 1)."""
    assert exact_hits([(0, 17, {"D1"}, "Chemical")],
                      [(0, 17, "D1", "Chemical"), (0, 17, "D1", "Drug")]) == [(True, True), (False, False)]
    hits = exact_hits([(0, 17, {"D1"}, "Chemical")], [(0, 17, "D1", "Drug"), (0, 17, "D1", "Chemical")])
    assert sum(s for s, _ in hits) == 1 and [t for _, t in hits] == [False, True]  # which copy is strict: either
    nlp = spacy.blank("en")
    gold = nlp.make_doc("Lithium carbonate toxicity")
    gold.spans[GOLD_KEY] = [Span(gold, 0, 2, label="Chemical", kb_id="D1")]
    pred = nlp.make_doc(gold.text)
    pred.spans["sc"] = [Span(pred, 0, 2, label="Chemical", kb_id="D1"), Span(pred, 0, 2, label="Drug", kb_id="D1")]
    scope = Scope(list, lambda span: (lambda i: i), lambda doc: list(doc.spans["sc"]))
    m = e2e_metrics([pred], [gold], scope)
    assert m["strict"] == {"p": 0.5, "r": 1.0, "f": 0.6667}
    assert m["typed"] == {"p": 0.5, "r": 1.0, "f": 0.6667}
    assert m["partial"] == {"p": 0.5, "r": 1.0, "f": 0.6667}


# ------------------------------------------------------------------ N2, N1: the strict curve
def _kept_at(confidence: np.ndarray, threshold) -> int:
    """The spans a linker keeps at ``threshold`` (NIL when its confidence is below it)."""
    return len(confidence) if threshold is None else int((confidence >= threshold).sum())


def test_strict_curve_never_cuts_between_equal_confidences():
    """N2 (``cut`` all True): no curve point keeps some of several spans of equal confidence, since no threshold
    does; the chosen threshold keeps what the curve says it keeps, and its F1 is the one reached."""
    conf = np.array([0.9, 0.9, 0.5])
    c = strict_curve(conf, np.array([True, False, False]), 1)
    assert [p["kept"] for p in c["points"]] == [2, 3]
    assert (c["threshold"], c["kept"]) == (pytest.approx(0.7), 2) and c["f"] == pytest.approx(2 / 3)
    for point in c["points"]:
        assert _kept_at(conf, point["threshold"]) == point["kept"]
    # spans with no confidence (inf) all kept at once
    conf = np.array([np.inf, np.inf, 0.4])
    c = strict_curve(conf, np.array([True, False, True]), 2)
    assert [p["kept"] for p in c["points"]] == [2, 3]
    assert all(_kept_at(conf, p["threshold"]) == p["kept"] for p in c["points"])


def test_strict_curve_ties_go_to_the_lower_threshold():
    """N1 (equal F1 → fewer spans kept): the documented rule, ties go to the lower threshold (more spans kept).
    Here F1 is 2/3 keeping one span and keeping all four: no threshold is chosen."""
    c = strict_curve(np.array([0.9, 0.5, 0.4, 0.3]), np.array([True, False, False, True]), 2)
    assert [round(p["f"], 4) for p in c["points"]] == [0.6667, 0.5, 0.4, 0.6667]
    assert c["kept"] == 4 and c["threshold"] is None and c["r"] == 1.0
    # a tie between two thresholds: the lower one
    c = strict_curve(np.array([0.9, 0.8, 0.7, 0.6]), np.array([True, False, True, False]), 2)
    assert [round(p["f"], 4) for p in c["points"]] == [0.6667, 0.5, 0.8, 0.6667]
    assert c["kept"] == 3 and c["threshold"] == pytest.approx(0.65)


# ------------------------------------------------------------------ B3: a stale errors file
def test_a_clean_rerun_of_a_shard_removes_the_errors_file_an_unfinished_run_left(tmp_path):
    """B3 (the stale ``errors/<shard>.jsonl`` kept): a run killed after writing a shard's errors file but before
    its marker leaves the file; the next run, where no document fails, removes it, so ``errors/`` agrees with the
    marker's ``errors: 0``."""
    src = tmp_path / "a.jsonl"
    src.write_text('{"id": "d1", "text": "x"}\n')
    shard = Shard(str(src), "a.jsonl", "jsonl")
    out = tmp_path / "out"
    stale = output.shard_file(out, output.ERRORS, shard.name)
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"doc_id": "d1", "reason": "worker died"}) + "\n")
    result = output.ShardResult(shard, 1, {"path": "p", "sha256": "s"}, shard.stamp())
    result.add(0, {"doc_id": "d1", "rows": "[]", "mentions": 0, "nil": 0, "error": "", "seconds": 0.1})
    marker = result.write(out)
    assert marker["errors"] == 0 and marker["docs"] == 1
    assert not stale.exists()
    assert output.finished(out, shard) == marker
    # a run where the document fails again writes the file anew
    failed = output.ShardResult(shard, 1, {"path": "p", "sha256": "s"}, shard.stamp())
    failed.add(0, {"doc_id": "d1", "rows": "[]", "mentions": 0, "nil": 0, "error": "boom", "seconds": 0.1})
    assert failed.write(out)["errors"] == 1
    assert [json.loads(line)["doc_id"] for line in stale.read_text().splitlines()] == ["d1"]


# ------------------------------------------------------------------ A5: held-out entities are not trained on
def test_split_entities_holds_out_entities_the_training_set_lacks():
    """A5 (the training entities include the held-out ones): ``synonym_r1`` measures synonyms never trained on;
    the two sets split the entities with two or more names, and the split is the same for a seed."""
    entities = [Entity(f"E{i}", f"name {i}", [f"synonym {i}"] if i % 5 else []) for i in range(50)]
    names = KBNames(entities)
    train, held = split_entities(names, 1000, seed=0)
    assert len(held) == 4  # a tenth of the 40 with a synonym
    assert not np.intersect1d(train, held).size
    assert sorted(np.concatenate([train, held]).tolist()) == names.multi().tolist()
    again_train, again_held = split_entities(names, 1000, seed=0)
    assert again_train.tolist() == train.tolist() and again_held.tolist() == held.tolist()


# ------------------------------------------------------------------ C2: adapt --max-minutes
@pytest.fixture
def adapt_calls(monkeypatch):
    """The overrides ``adapt`` (synonyms objective) hands to its training: no encoder is checked or trained."""
    calls = []
    monkeypatch.setattr(cli_adapt, "adapt_retriever", lambda config, out, overrides: calls.append(overrides) or {"step": 0})
    monkeypatch.setattr(cli_adapt, "check_base_encoder", lambda *a, **k: None)
    return calls


def _adapt(tmp_path, *args):
    kb = tmp_path / "kb.jsonl"
    kb.write_text('{"id": "E1", "name": "a", "aliases": ["b"]}\n')
    return CliRunner().invoke(cli_adapt.app, [str(kb), "-o", str(tmp_path / "out"), *args])


def test_adapt_max_minutes_reaches_the_training(tmp_path, adapt_calls):
    """C2 (``--max-minutes`` dropped from the option → setting table): ``adapt KB -o OUT --max-minutes 5`` ran its
    whole step budget with no time limit."""
    result = _adapt(tmp_path, "--max-minutes", "5")
    assert result.exit_code == 0, result.output
    assert adapt_calls[-1]["training.max_minutes"] == 5.0
    result = _adapt(tmp_path, "--max-steps", "7", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert adapt_calls[-1]["synonyms.steps"] == 7 and adapt_calls[-1]["training.device"] == "cpu"
    assert "training.max_minutes" not in adapt_calls[-1]


def test_adapt_max_minutes_and_a_different_setting_are_refused(tmp_path, adapt_calls):
    """C2: ``--max-minutes 5 --training.max_minutes 10`` sets one thing twice: refused in one line, nothing run."""
    result = _adapt(tmp_path, "--max-minutes", "5", "--training.max_minutes", "10")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--max-minutes 5" in lines[0], result.stderr
    assert "set the same thing" in lines[0] and not adapt_calls
