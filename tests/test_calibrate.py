from pathlib import Path

import numpy as np
import pytest
import spacy
from confection import Config

from spacy_pel.evaluation.nil import calibrate, nil_curve


def test_nil_curve_picks_best_f1():
    top = np.array([0.1, 0.2, 0.3, 0.8, 0.9, 0.35])
    nil = np.array([1, 1, 0, 0, 0, 1], dtype=bool)
    curve = nil_curve(top, nil)
    # NIL if score < t: the best cut is between 0.35 and 0.8 → P 3/4, R 1 → F1 0.857 …
    # … or between 0.2 and 0.3 → P 1, R 2/3 → F1 0.8; the first wins
    assert curve["f"] == pytest.approx(6 / 7)
    assert 0.35 < curve["threshold"] < 0.8
    pred = top < curve["threshold"]
    assert (pred & nil).sum() == 3 and pred.sum() == 4
    with pytest.raises(ValueError, match="no gold NIL"):
        nil_curve(top, np.zeros(6, bool))


def test_nil_curve_never_cuts_above_a_confidence_of_one():
    """Mostly NIL, the in-KB mention decided (confidence 1.0): "every mention NIL" has the best F1 but its
    cut, above 1.0, is no threshold a linker takes (calibrate crashed on it); the best cut below 1 wins."""
    top = np.array([0.2, 0.6, 1.0, 1.0])
    nil = np.array([1, 0, 1, 1], dtype=bool)  # all NIL: P 3/4, R 1, F1 0.857, at a cut of 1.0005
    curve = nil_curve(top, nil)
    assert all(p["threshold"] <= 1.0 for p in curve["points"])
    assert 0.2 < curve["threshold"] < 0.6 and curve["f"] == pytest.approx(0.5)


def test_calibrate_writes_threshold_into_pipeline(kb_dir, tmp_path):
    from spacy_pel.corpora import write_docbin

    from .test_evaluate import gold_doc

    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([gold_doc(nlp, [(0, 2, "D1"), (4, 6, "NIL"), (7, 9, "D3")])], tmp_path / "dev.spacy")
    summary = calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "out", plot=tmp_path / "pr.png")
    assert summary["nil_mentions"] == 1 and (tmp_path / "pr.png").stat().st_size > 1000
    cfg = Config().from_disk(tmp_path / "out" / "config.cfg")
    assert cfg["components"]["pel_linker"]["threshold"] == pytest.approx(summary["threshold"])
    assert spacy.load(tmp_path / "out").get_pipe("pel_linker").threshold == pytest.approx(summary["threshold"])


def test_calibrate_on_a_corpus_without_nil_saves_the_pipeline_as_it_was(kb_dir, tmp_path):
    """NCBI disease's dev set has no NIL mention: nothing to fit, so the NIL decision (here a threshold
    set by hand) is kept, and the report and the plot say why instead of failing."""
    import json

    from spacy_pel.corpora import write_docbin

    from .test_evaluate import gold_doc

    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "threshold": 0.25})
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([gold_doc(nlp, [(0, 2, "D1"), (7, 9, "D3")])], tmp_path / "dev.spacy")
    summary = calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "out", plot=tmp_path / "pr.png", nil="classifier")
    assert summary["calibrated"] is False and summary["mentions"] == 2 and "no gold NIL mentions" in summary["reason"]
    assert json.loads((tmp_path / "out" / "nil_calibration.json").read_text()) == summary
    assert spacy.load(tmp_path / "out").get_pipe("pel_linker").threshold == 0.25
    assert (tmp_path / "pr.png").stat().st_size > 1000


def test_calibrate_refuses_a_corpus_of_another_kb(kb_dir, tmp_path):
    """NIL mentions and otherwise only ids the KB lacks: a threshold would be fitted against no in-KB
    mention (every mention NIL costs nothing there); refused in one line naming the corpus."""
    from spacy_pel.corpora import write_docbin
    from spacy_pel.files import InputError

    from .test_evaluate import gold_doc

    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([gold_doc(nlp, [(0, 2, "MESH:D1"), (4, 6, "NIL"), (7, 9, "MESH:D3")])], tmp_path / "other.spacy")
    with pytest.raises(InputError, match="other.spacy: none of its gold mentions has an id in the KB .*2 with ids it lacks, 1 NIL"):
        calibrate(tmp_path / "pipe", tmp_path / "other.spacy", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_calibrate_replaces_its_output_only_when_the_save_completes(kb_dir, tmp_path, monkeypatch):
    """A save that fails half way (disk full) leaves the previous output folder as it was, not a mix of
    two pipelines; calibrating a pipeline into its own folder works."""
    from spacy.language import Language

    from spacy_pel.corpora import write_docbin

    from .test_evaluate import gold_doc

    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([gold_doc(nlp, [(0, 2, "D1"), (4, 6, "NIL"), (7, 9, "D3")])], tmp_path / "dev.spacy")
    first = calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "out")
    before = {p.relative_to(tmp_path / "out"): p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    save = Language.to_disk

    def failing(self, path, **kwargs):
        save(self, path, **kwargs)
        (Path(path) / "config.cfg").write_text("half written")
        raise OSError("No space left on device")

    monkeypatch.setattr(Language, "to_disk", failing)
    with pytest.raises(OSError, match="No space"):
        calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "out")
    after = {p.relative_to(tmp_path / "out"): p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert after == before and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    monkeypatch.setattr(Language, "to_disk", save)
    again = calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "pipe")  # into its own folder
    assert again["threshold"] == pytest.approx(first["threshold"])
    assert spacy.load(tmp_path / "pipe").get_pipe("pel_linker").threshold == pytest.approx(first["threshold"])
