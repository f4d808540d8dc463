"""The benchmark scripts' fixes of session 73: user_speed's child errors and CPU counters, the speed
scripts' R@1 by evaluate's definitions (alternative ids, empty groups), dataset_workflow's figures and
workflow names, the CPU a report recorded (``_common.machine``) and the labels acceptance.py reads from it.
Tiny random models and fakes only (seconds)."""
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
import typer
from spacy.tokens import Span
from typer.testing import CliRunner

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
GOLD = ["OLD1", "D1", "D2", "OLD1"]  # OLD1: an alternative id of D1


def script(name: str):
    """A benchmark script as a module (benchmarks/ on sys.path, as when it runs)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def tiny(tiny_encoder_dir, tmp_path_factory):
    """A saved pipeline over a 2-entity KB (D1's older id OLD1), a corpus of 24 docs annotated
    OLD1, D1, D2, OLD1, … and one whose mentions are all NIL."""
    from spacy_pel.corpora import GOLD_KEY, write_docbin
    from spacy_pel.retrieval.build import build_kb

    work = tmp_path_factory.mktemp("s73")
    (work / "kb.jsonl").write_text(json.dumps({"id": "D1", "name": "lithium carbonate", "extra": {"alt_ids": ["OLD1"]}}) + "\n"
                                   + json.dumps({"id": "D2", "name": "aspirin"}) + "\n")
    build_kb(work / "kb.jsonl", work / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(work / "kb"), "threshold": None})
    nlp.to_disk(work / "pipeline")
    for name, ids in (("dev", GOLD), ("nil", ["NIL"])):
        docs = []
        for i in range(24):
            d = nlp.make_doc("Lithium carbonate toxicity in a newborn given aspirin")
            d.spans[GOLD_KEY] = [Span(d, 0, 2, label="Chemical", kb_id=ids[i % len(ids)]),
                                 Span(d, 7, 8, label="Chemical", kb_id=ids[(i + 1) % len(ids)])]
            docs.append(d)
        write_docbin(docs, work / f"{name}.spacy")
    return work


def loaded(tiny):
    from spacy_pel.corpora import read_docbin

    nlp = spacy.load(tiny / "pipeline")
    linker = nlp.get_pipe("pel_linker")
    linker.ensure_loaded()
    return nlp, linker, read_docbin(nlp, tiny / "dev.spacy")


def child_result(user_speed, tiny, capsys, corpus="dev", **kw) -> dict:
    capsys.readouterr()
    user_speed.child(tiny / "pipeline", tiny / f"{corpus}.spacy", 1, tiny / f"{corpus}_ids.json", setting=[],
                     warm_passes=kw.get("warm_passes", 0), small_batches=False)
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


# ------------------------------------------------------------------ bug01: user_speed's child errors
def test_user_speed_refuses_a_missing_pipeline_before_any_child(tmp_path, monkeypatch):
    user_speed = script("user_speed")
    monkeypatch.setattr(user_speed.subprocess, "run", lambda *a, **kw: pytest.fail("a child was started"))
    (tmp_path / "dev.spacy").write_bytes(b"")
    with pytest.raises(typer.BadParameter, match="not found: pipeline .*no_such_pipeline"):
        user_speed.run(pipeline=[tmp_path / "no_such_pipeline"], n_process=[1], dev=tmp_path / "dev.spacy", output=tmp_path / "us",
                       work=tmp_path / "w", notes="", setting=[], warm_passes=0, append=False, cold=False, label="", small_batches=False)


def test_user_speed_reports_the_childs_own_error(tmp_path, monkeypatch):
    user_speed = script("user_speed")
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "dev.spacy").write_bytes(b"")
    stderr = "Traceback (most recent call last):\n  File x\nOSError: [E050] Can't find model 'nowhere'.\n"

    def failing_child(cmd, *a, **kw):  # the child as subprocess.run returns it (raising as check=True would)
        if kw.get("check"):
            raise subprocess.CalledProcessError(1, cmd, "", stderr)
        return subprocess.CompletedProcess(cmd, 1, "", stderr)
    monkeypatch.setattr(user_speed.subprocess, "run", failing_child)
    with pytest.raises(SystemExit, match=r"failed: OSError: \[E050\] Can't find model 'nowhere'\."):
        user_speed.run(pipeline=[tmp_path / "pipeline"], n_process=[1], dev=tmp_path / "dev.spacy", output=tmp_path / "us",
                       work=tmp_path / "w", notes="", setting=[], warm_passes=0, append=False, cold=False, label="", small_batches=False)


# ------------------------------------------------------------------ bug03 / bug08: R@1 as evaluate scores it
def test_speed_run_pipeline_scores_as_evaluate_alternative_ids_too(tiny):
    from spacy_pel.evaluation.linking import evaluate

    speed = script("speed")
    nlp, linker, docs = loaded(tiny)
    for train_ids in ({"D2"}, {"OLD1"}):  # a training corpus may name D1 by its older id too
        ev = evaluate(linker, docs, train_ids=train_ids)
        sp = speed.run_pipeline(nlp, docs, linker.index.row, train_ids)
        assert ev["counts"]["in_kb"] == sp["in_kb"] == 48  # OLD1 is D1: every mention is in the KB
        assert sp["R@1_all"] == ev["recall_in_kb"]["R@1"]
        assert (sp["R@1_seen"], sp["R@1_unseen"]) == (ev["recall_seen"]["R@1"], ev["recall_unseen"]["R@1"])


def test_user_speed_scores_as_evaluate_alternative_ids_too(tiny, capsys, monkeypatch):
    from spacy_pel.evaluation.linking import evaluate

    user_speed = script("user_speed")
    monkeypatch.setattr(user_speed, "host_gflops", lambda: 0.0)
    _, linker, docs = loaded(tiny)
    ev = evaluate(linker, docs[user_speed.WARMUP_DOCS:])
    run = child_result(user_speed, tiny, capsys)
    assert run["in_kb"] == ev["counts"]["in_kb"] == 8
    assert run["R@1"] == ev["recall_in_kb"]["R@1"]


def test_speed_run_pipeline_without_seen_mentions_reports_none(tiny):
    speed = script("speed")
    nlp, linker, docs = loaded(tiny)
    sp = speed.run_pipeline(nlp, docs, linker.index.row, set())  # a training corpus sharing no entity with dev
    assert sp["R@1_seen"] is None and sp["R@1_unseen"] is not None and sp["mentions_per_s"] > 0


def test_user_speed_on_a_corpus_without_in_kb_mentions_reports_none(tiny, capsys, monkeypatch):
    user_speed = script("user_speed")
    monkeypatch.setattr(user_speed, "host_gflops", lambda: 0.0)
    run = child_result(user_speed, tiny, capsys, corpus="nil")
    assert (run["in_kb"], run["R@1"]) == (0, None) and run["mentions"] == 8
    md = user_speed.markdown({"machine": {"cpu": "x", "flags": [], "torch": "t", "torch_threads": 2}, "runs": [{"pipeline": "p", **run}]})
    assert "| – |" in md


# ------------------------------------------------------------------ bug06: the timed pass's CPU counters
def test_user_speed_reads_the_cpu_counters_around_the_timed_pass_only(tiny, capsys, monkeypatch):
    user_speed = script("user_speed")
    monkeypatch.setattr(user_speed, "host_gflops", lambda: 0.0)
    events = []
    real_cpu, real_pipe = user_speed.cpu_seconds, spacy.language.Language.pipe

    def cpu():
        events.append("cpu")
        return real_cpu()

    def pipe(self, docs, *a, **kw):
        out = list(real_pipe(self, docs, *a, **kw))
        events.append(f"pipe {kw.get('batch_size', 'default')}")
        return iter(out)
    monkeypatch.setattr(user_speed, "cpu_seconds", cpu)
    monkeypatch.setattr(spacy.language.Language, "pipe", pipe)
    child_result(user_speed, tiny, capsys, warm_passes=2)
    assert events == ["pipe default", "cpu", "pipe default", "cpu", "pipe 128", "pipe 128"]


# ------------------------------------------------------------------ bug04 / bug05: dataset_workflow
@pytest.fixture
def workflow_project(tmp_path, monkeypatch):
    """dataset_workflow over a fake project (two workflows) whose steps are recorded, not run: ``fail``
    holds the steps that exit 1."""
    dw = script("dataset_workflow")
    (tmp_path / "project.yml").write_text(json.dumps({
        "vars": {"subdir": "", "corpus": "c", "corpus_title": "C", "kb_title": "K", "transfer_from": "T"},
        "workflows": {"all": ["convert", "evaluate"], "e2e": ["train_e2e", "evaluate_e2e"]}}))
    (tmp_path / "metrics").mkdir()
    for suffix in ("", "_e2e"):  # what an earlier run left
        (tmp_path / "metrics" / f"c_dev{suffix}.json").write_text(json.dumps({"stale": True, "strict": {"f": 0.9999}}))
    (tmp_path / "empty.args").write_text("")
    calls, fail = [], set()
    real_run = subprocess.run

    def fake_run(cmd, *a, **kw):
        if cmd[1:4] != ["-m", "spacy", "project"]:  # e.g. platform's uname
            return real_run(cmd, *a, **kw)
        calls.append(cmd[5])
        return subprocess.CompletedProcess(cmd, int(cmd[5] in fail))
    monkeypatch.setattr(dw, "ROOT", tmp_path)
    monkeypatch.setattr(dw.subprocess, "run", fake_run)
    return dw, tmp_path, calls, fail


def test_dataset_workflow_failed_step_exits_1_without_stale_figures(workflow_project):
    dw, root, calls, fail = workflow_project
    fail.add("train_e2e")
    with pytest.raises(SystemExit, match="e2e/train_e2e"):
        dw.main(args=root / "empty.args", workflow=["e2e"], notes="", output=str(root / "r"), extra="")
    report = json.loads((root / "r.json").read_text())
    assert calls == ["train_e2e"] and report["figures"] == {}  # neither the stale e2e nor the stale linking report
    assert "0.9999" not in (root / "r.md").read_text()


def test_dataset_workflow_figures_come_from_this_runs_steps(workflow_project):
    dw, root, calls, _ = workflow_project
    (root / "metrics" / "c_dev_e2e.json").write_text(json.dumps({"strict": {"f": 0.8}}))  # evaluate_e2e's (as if written now)
    dw.main(args=root / "empty.args", workflow=["e2e"], notes="", output=str(root / "r"), extra="")
    assert json.loads((root / "r.json").read_text())["figures"] == {"e2e": {"strict": {"f": 0.8}}}  # no `all`: no linking table


def test_dataset_workflow_refuses_unknown_workflows_before_any_step(workflow_project):
    dw, root, calls, _ = workflow_project
    with pytest.raises(typer.BadParameter, match=r"unknown workflow\(s\) e2ee; project.yml has all, e2e"):
        dw.main(args=root / "empty.args", workflow=["all", "e2ee"], notes="", output=str(root / "r"), extra="")
    assert calls == []


def test_dataset_workflow_refuses_a_missing_args_file(tmp_path):
    dw = script("dataset_workflow")
    app = typer.Typer()
    app.command()(dw.main)
    result = CliRunner().invoke(app, ["--args", str(tmp_path / "missing.args")])
    assert result.exit_code == 2 and "does not exist" in result.output


# ------------------------------------------------------------------ bug02: which CPU a report ran on
def test_machine_records_what_tells_cpus_apart():
    common = script("_common")
    if not Path("/proc/cpuinfo").exists():
        pytest.skip("no /proc/cpuinfo")
    m = common.machine()
    assert {"vendor", "cpu_family", "cpu_model", "stepping", "flags_sha1"} <= m.keys()
    assert f"family {m['cpu_family']} model {m['cpu_model']}" in common.machine_line(m)


def test_acceptance_cpu_label_from_the_recorded_machine():
    acceptance = script("acceptance")
    zen4_flags = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert acceptance.cpu_label({"cpu": "AMD EPYC", "flags": zen4_flags}) == ("AMD EPYC Zen 4", "bf16")
    assert acceptance.cpu_label({"cpu": "AMD EPYC", "flags": zen4_flags + ["avx_vnni"]}) == ("AMD EPYC Zen 5", "bf16")
    recorded = {"cpu": "AMD EPYC", "vendor": "AuthenticAMD", "cpu_family": 26, "flags": zen4_flags + ["avx_vnni"]}
    assert acceptance.cpu_label(recorded)[0] == "AMD EPYC Zen 5"
    assert acceptance.cpu_label({**recorded, "cpu_family": 25, "flags": zen4_flags})[0] == "AMD EPYC Zen 4"
    xeon = {"cpu": "Intel(R) Xeon(R) Processor", "flags": zen4_flags + ["avx_vnni", "amx_bf16", "amx_int8"]}
    assert acceptance.cpu_label(xeon) == ("Xeon with AMX", "bf16")  # its generation is masked (model 167 in session 76)


def test_acceptance_labels_match_each_reports_machine():
    """No run is labelled a Zen 4 when its report's flags show avx_vnni (a Zen 5), nor the reverse."""
    acceptance = script("acceptance")
    labels = {}
    for row in acceptance.ROWS:
        for run in acceptance.measure(row)["runs"]:
            labels[run["report"]] = run["label"]
    for report, label in labels.items():
        machine = json.loads((BENCHMARKS / f"{report}.json").read_text()).get("machine")
        if isinstance(machine, dict) and machine["cpu"].startswith("AMD"):
            assert ("Zen 5" if "avx_vnni" in machine["flags"] else "Zen 4") in label, (report, label)
    assert "Zen 5" in labels["bc5cdr_default_workflow_s68"] and "Zen 4" in labels["bc5cdr_default_workflow_s48"]
