"""Command-line tools: an expected error is one line on stderr and exit status 2 (a traceback only
with --verbose), and every option is checked before any heavy work."""
import ast
import json
import warnings
from pathlib import Path

import pytest
import spacy
import typer
from spacy.tokens import Span
from typer.testing import CliRunner

import spacy_pel.cli.evaluate as evaluate_cli
import spacy_pel.evaluation.linking as linking
import spacy_pel.retrieval.build as build
from spacy_pel.cli import (
    adapt,
    aliases,
    build_kb,
    calibrate,
    convert,
    discover,
    evaluate,
    okb,
    visualize,
)
from spacy_pel.cli import app as main_app
from spacy_pel.cli._errors import cli_errors
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.kb import KBFormatError
from spacy_pel.models.encoder import BiEncoder

ROOT = Path(__file__).resolve().parents[1]


def run(app, args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def no_heavy_work(monkeypatch):
    """Fail the test if a KB is read, an encoder loaded or anything encoded."""

    def forbidden(*args, **kwargs):
        raise AssertionError("heavy work started before the options were checked")

    monkeypatch.setattr(build, "read_kb", forbidden)
    monkeypatch.setattr(BiEncoder, "from_pretrained", forbidden)
    monkeypatch.setattr(BiEncoder, "encode_entities", forbidden)


# ---------------------------------------------------------------------------- build-kb


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--format", "xlsx"], ["unknown KB format 'xlsx'", "jsonl, mesh, medic, obo, umls, csv, tsv"]),
        (["--index", "ivf"], ["unknown index kind 'ivf'", "flat, hnsw"]),
        (["--precision", "fp8"], ["--precision"]),
        (["--device", "tpu9"], ["device"]),
        (["--batch-size", "0"], ["batch size"]),
        (["--encoder", "/no/such/encoder"], ["encoder folder not found: /no/such/encoder"]),
        (["--encoder", "./relative/enc"], ["encoder folder not found"]),
    ],
)
def test_build_kb_options_checked_before_any_work(kb_file, tmp_path, no_heavy_work, args, fragments):
    result = run(build_kb.app, ["--kb", kb_file, "-o", tmp_path / "out", *args])
    one_line_error(result, *fragments)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_build_kb_paths_checked(kb_file, tmp_path, no_heavy_work):
    one_line_error(run(build_kb.app, ["--kb", tmp_path / "missing.jsonl", "-o", tmp_path / "o"]),
                   "KB file not found", "missing.jsonl")
    one_line_error(run(build_kb.app, ["-o", tmp_path / "o"]), "give a KB file")
    one_line_error(run(build_kb.app, ["--kb", kb_file, "--add", kb_file, "-o", tmp_path / "o"]), "not both")
    one_line_error(run(build_kb.app, ["--add", kb_file, "-o", tmp_path / "o"]), "not a KB folder")
    one_line_error(run(build_kb.app, ["--kb", tmp_path, "-o", tmp_path / "o"]), "is a folder")
    one_line_error(run(build_kb.app, ["--kb", tmp_path, "--format", "mesh", "-o", tmp_path / "o"]), "MeSH folder lacks")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    one_line_error(run(build_kb.app, ["--kb", kb_file, "-o", tmp_path / "notes"]), "not a KB; refusing to replace it")
    assert (tmp_path / "notes" / "mine.txt").exists()


def test_build_kb_bad_encoder(kb_file, tmp_path, monkeypatch):
    (tmp_path / "enc").mkdir()
    one_line_error(run(build_kb.app, ["--kb", kb_file, "-o", tmp_path / "o", "--encoder", tmp_path / "enc"]),
                   "neither pel_encoder.json")

    def hub_error(*args, **kwargs):  # what transformers raises for an unknown hub name (offline here)
        raise OSError("no-such-org/no-such-model is not a local folder and is not a valid model identifier\n"
                      "If this is a private repository, make sure to pass a token")

    monkeypatch.setattr(BiEncoder, "from_pretrained", hub_error)
    one_line_error(run(build_kb.app, ["--kb", kb_file, "-o", tmp_path / "o", "--encoder", "no-such-org/no-such-model"]),
                   "encoder not found: no-such-org/no-such-model (no such folder, and no Hugging Face model of that name "
                   "available offline: no-such-org/no-such-model is not a local folder")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


def test_build_kb_malformed_line_is_one_line_and_leaves_nothing(tmp_path, tiny_encoder_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "A", "name": "x"}\n{"id": "B", "name": "y", "description": 42}\n')
    out = tmp_path / "out"
    result = run(build_kb.app, ["--kb", bad, "-o", out, "--encoder", tiny_encoder_dir])
    one_line_error(result, f"{bad}:2: \"description\" must be a string, not int")
    assert not out.exists() and not (tmp_path / "out.partial").exists()
    # --verbose: the traceback, for a bug report
    result = run(build_kb.app, ["--kb", bad, "-o", out, "--encoder", tiny_encoder_dir, "--verbose"])
    assert isinstance(result.exception, KBFormatError)
    # --skip-bad-lines: built from the good lines, with a summary of what was left out
    result = run(build_kb.app, ["--kb", bad, "-o", out, "--encoder", tiny_encoder_dir, "--skip-bad-lines"])
    assert result.exit_code == 0, result.output
    assert "skipped 1 malformed line(s):" in result.stderr and f"{bad}:2:" in result.stderr
    assert json.loads(result.stdout)["skipped_lines"] == 1 and json.loads(result.stdout)["entities_total"] == 1


def test_build_kb_add_existing_id_is_refused_before_encoding(kb_dir, kb_file, tiny_encoder_dir, monkeypatch):
    monkeypatch.setattr(BiEncoder, "encode_entities", lambda *a, **k: pytest.fail("encoded"))
    result = run(build_kb.app, ["--add", kb_file, "-o", kb_dir, "--encoder", tiny_encoder_dir])
    one_line_error(result, "5 entity id(s) already in the KB", "D1, D2")


def test_main_app_commands_have_verbose():
    result = CliRunner().invoke(main_app, ["build-kb", "--help"])
    assert result.exit_code == 0 and "--verbose" in result.output and "--skip-bad-lines" in result.output


# ---------------------------------------------------------------------------- convert


def test_convert_errors(tmp_path):
    one_line_error(run(convert.app, [tmp_path / "missing.txt", tmp_path / "o.spacy"]), "corpus file not found")
    source = tmp_path / "c.txt"
    source.write_bytes(b"1|t|Caf\xe9\n1|a|x\n")
    one_line_error(run(convert.app, [source, tmp_path / "o.spacy"]), f"{source}:1: not UTF-8 text")
    source.write_text("")
    one_line_error(run(convert.app, [source, tmp_path / "o.spacy"]), f"{source}:1: no PubTator documents")
    source.write_text("1|t|A b.\n1|a|C.\n")
    one_line_error(run(convert.app, [source, tmp_path / "o.spacy", "--lang", "xx-nope"]), "--lang")
    one_line_error(run(convert.app, [source, tmp_path / "o.spacy", "--format", "brat"]), "--format 'brat' is not one of")
    # an output named like an input (the order mixed up) would be a DocBin where text was: refused, the input kept
    one_line_error(run(convert.app, [source, tmp_path / "dev.txt"]), "should be a .spacy file")
    assert not (tmp_path / "dev.txt").exists()
    twice = tmp_path / "same.spacy"
    twice.write_bytes(b"")
    one_line_error(run(convert.app, [source, twice, twice]), "is one of the inputs")
    (tmp_path / "c.xml").write_text("<collection><document>")
    one_line_error(run(convert.app, [source, tmp_path / "c.xml", tmp_path / "o.spacy"]), f"{tmp_path / 'c.xml'}:1: not well-formed BioC XML")
    assert not (tmp_path / "o.spacy").exists()


def test_convert_says_what_it_left_out(tmp_path):
    source = tmp_path / "c.txt"
    source.write_text("1|t|Aspirin and fever.\n1|a|No.\n1\t0\t7\tAspirin\tChemical\tD001241\n"
                      "1\t12\t17\tfever\tDisease\t-\n1\t0\t3\tXYZ\tChemical\tD1\n1\tAssociation\tD001241\tD005334\tNovel\n")
    one_line_error(run(convert.app, [source, tmp_path / "o.spacy"]), f"{source}:5: offsets 0-3 give 'Asp'")
    result = run(convert.app, [source, tmp_path / "o.spacy", "--skip-bad-lines"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["mentions"] == 2 and stats["nil"] == 1 and stats["relations_skipped"] == {"Association": 1}
    assert "left out relation lines (not mentions): 1 Association" in result.stderr
    assert "skipped 1 malformed line(s):" in result.stderr and f"{source}:5:" in result.stderr


# ---------------------------------------------------------------------------- the other commands


def corpus(tmp_path: Path) -> Path:
    nlp = spacy.blank("en")
    doc = nlp.make_doc("Lithium carbonate toxicity with tricuspid regurgitation and atrial flutter")
    doc.spans[GOLD_KEY] = [Span(doc, 0, 2, "Chemical", kb_id="D1"), Span(doc, 4, 6, "Disease", kb_id="D2"),
                           Span(doc, 7, 9, "Disease", kb_id="D3")]
    doc.ents = list(doc.spans[GOLD_KEY])
    path = tmp_path / "gold.spacy"
    write_docbin([doc] * 20, path)
    return path


@pytest.mark.parametrize(
    "app, args, fragment",
    [
        (evaluate.app, ["{missing}", "--kb", "{kb}"], "corpus not found"),
        (evaluate.app, ["{corpus}", "--kb", "{missing}"], "KB folder not found"),
        (evaluate.app, ["{corpus}", "--kb", "{kb}", "--encoder", "nosuchdir/"], "encoder folder not found: nosuchdir/"),
        (evaluate.app, ["{corpus}", "--pipeline", "{kb}"], "has no config.cfg"),
        (evaluate.app, ["{corpus}", "--kb", "{kb}", "--train", "{missing}"], "training corpus not found"),
        (evaluate.app, ["{corpus}"], "give --pipeline or --kb"),
        (evaluate.app, ["{notdocbin}", "--kb", "{kb}"], "not a .spacy DocBin file"),
        (visualize.app, ["{missing}", "{out}", "--kb", "{kb}"], "corpus not found"),
        (visualize.app, ["{corpus}", "{out}", "--kb", "{kb}", "--url-template", "x"], "--url-template"),
        (discover.app, ["{missing}", "{out}", "--kb", "{kb}"], "corpus not found"),
        (discover.app, ["{corpus}", "{out}", "--kb", "{kb}", "--k", "0"], "--k"),
        (aliases.app, ["{missing}", "-o", "{out}"], "corpus not found"),
        (okb.app, ["--kb", "{missing}", "--remove", "C10", "--corpus", "{corpus}", "-o", "{out}"], "KB folder not found"),
        (calibrate.app, ["{missing}", "{corpus}", "-o", "{out}"], "pipeline not found"),
        (calibrate.app, ["{missing}", "{corpus}", "-o", "{out}", "--nil", "bogus"], "--nil 'bogus' is not one of"),
        (evaluate.app, ["{corpus}", "--pipeline", "{kb}", "--kb", "{kb}"], "not both"),
        (evaluate.app, ["{corpus}", "--pipeline", "{kb}", "--encoder", "x"], "--encoder goes with --kb"),
        (discover.app, ["{corpus}", "{out}", "--pipeline", "{kb}", "--kb", "{kb}"], "not both"),
        (visualize.app, ["{corpus}", "{out}", "--pipeline", "{kb}", "--kb", "{kb}"], "not both"),
    ],
)
def test_other_commands_one_line_before_loading(tmp_path, kb_dir, monkeypatch, app, args, fragment):
    import spacy_pel.pipeline.linker as linker_module

    for module in (evaluate_cli, visualize, discover):
        monkeypatch.setattr(module, "load_pipeline", lambda *a, **k: pytest.fail("loaded before checking"))
    monkeypatch.setattr(linker_module, "load_pipeline", lambda *a, **k: pytest.fail("loaded before checking"))
    (tmp_path / "not.spacy").write_text("not a docbin")
    paths = {"missing": tmp_path / "missing", "kb": kb_dir, "corpus": corpus(tmp_path),
             "out": tmp_path / "out" / "o.html", "notdocbin": tmp_path / "not.spacy"}
    if fragment == "not a .spacy DocBin file":  # read after the pipeline is loaded
        monkeypatch.setattr(evaluate_cli, "load_pipeline", lambda *a, **k: (spacy.blank("en"), None))
    one_line_error(run(app, [a.format(**paths) for a in args]), fragment)


def test_a_config_override_of_no_section_is_one_line(tmp_path, kb_file):
    """An override of a section the config lacks: one line naming it, from a config file (confection's
    error) or from the built-in settings (adapt without --config)."""
    cases = [(["train", ROOT / "configs" / "train_both.cfg", "--output", tmp_path / "r"], "nosuch.key: not a section value"),
             (["adapt", kb_file, "-o", tmp_path / "a", "--config", ROOT / "configs" / "adapt.cfg"], "nosuch.key: not a section"),
             (["adapt", kb_file, "-o", tmp_path / "a"], "unknown section(s) ['nosuch']")]
    for args, fragment in cases:
        one_line_error(run(main_app, [*args, "--nosuch.key", "1"]), fragment)
    assert not (tmp_path / "a").exists()


# ---------------------------------------------------------------------------- progress bars


class Bars:
    """Records every tqdm bar made in a module: its settings and its updates."""

    def __init__(self):
        self.made = []

    def __call__(self, iterable=None, **kwargs):
        bar = {"kwargs": kwargs, "updates": []}
        self.made.append(bar)

        class Bar:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def update(self, n=1):
                bar["updates"].append(n)

            def __iter__(self):
                return iter(iterable)

        return Bar()


def test_build_progress_moves_per_batch_in_entities(kb_file, tmp_path, tiny_encoder_dir, monkeypatch):
    import spacy_pel.retrieval.chunks as chunks  # the progress bar moved there with the resumable chunks (78a5660)

    bars = Bars()
    monkeypatch.setattr(chunks, "tqdm", bars)
    build.build_kb(kb_file, tmp_path / "kb", encoder=str(tiny_encoder_dir), batch_size=2, progress=True)
    (bar,) = bars.made
    assert bar["kwargs"]["unit"] == " entities" and bar["kwargs"]["total"] == 5
    assert bar["updates"] == [2, 2, 1]  # one step per batch of 2, not one per 16,384-entity chunk


def test_encoder_progress_counts_entities(tiny_encoder_dir, monkeypatch):
    import spacy_pel.models.encoder as encoder_module
    from spacy_pel.kb import Entity

    bars = Bars()
    monkeypatch.setattr(encoder_module, "tqdm", bars)
    enc = BiEncoder.from_pretrained(tiny_encoder_dir)
    enc.encode_entities([Entity(f"E{i}", f"name {i}") for i in range(5)], batch_size=2, progress=True)
    (bar,) = bars.made
    assert bar["kwargs"]["unit"] == " entities" and bar["updates"] == [2, 2, 1]


def test_evaluate_progress_counts_mentions(tmp_path, kb_dir, monkeypatch):
    bars = Bars()
    monkeypatch.setattr(linking, "tqdm", bars)
    out = tmp_path / "m.json"
    result = run(evaluate.app, [corpus(tmp_path), "--kb", kb_dir, "--output", out])
    assert result.exit_code == 0, result.output
    bar, deeper = bars.made  # the pipeline's own top_k, then the top 64 for recall@k beyond it
    for b in (bar, deeper):
        assert b["kwargs"]["unit"] == " mentions" and b["kwargs"]["total"] == 60
        assert b["updates"] == [24, 24, 12]  # 8 documents of 3 mentions a step, not one step per 64 documents
    assert bar["kwargs"]["desc"] == "linking"
    assert json.loads(out.read_text())["mentions"] == 60


# ---------------------------------------------------------------------------- packaging


def test_project_package_ships_spacy_pel_beside_the_pipeline():
    """The packaged pipeline requires spacy_pel, which is not on the package index: the project's
    package command builds a spacy_pel wheel next to the pipeline's (a wheel, not an sdist: issue 32
    item 7; built and installed offline by tests/test_package_wheel.py), and the docs say how to
    install both, online and offline."""
    import srsly

    project = srsly.read_yaml(ROOT / "project.yml")
    (command,) = [c for c in project["commands"] if c["name"] == "package"]
    script = " && ".join(command["script"])
    assert "pip wheel . --no-deps" in script and "--wheel-dir packages/wheels" in script
    assert script.index("pip wheel") < script.index("spacy package")
    assert " --build wheel " in command["script"][-1]
    assert "rmtree('build'" in command["script"][0]  # an in-tree build's stale build/lib cleared first
    assert "'.[package]'" in command["help"]
    readme = (ROOT / "docs" / "scale-out.md").read_text(encoding="utf8")  # Packaging, moved from the README
    assert "pip install packages/wheels/spacy_pel-0.1.0-py3-none-any.whl" in readme
    assert "pip install --no-index --find-links wheels" in readme and ".tar.gz" not in readme
    assert "spacy_pel>=0.1.0,<0.2.0" in readme
    extras = ast.literal_eval(next(n.value for n in ast.walk(ast.parse((ROOT / "setup.py").read_text(encoding="utf8")))
                                   if isinstance(n, ast.keyword) and n.arg == "extras_require"))
    assert any(r.startswith("build") for r in extras["package"])


def test_a_warning_is_one_line_while_a_command_runs():
    """A library warning during a command reads ``warning: <message>`` on one line, not Python's
    ``FILE:LINE: UserWarning`` naming a line of typer; after the command warnings show as before."""
    app = typer.Typer()

    @app.command()
    @cli_errors
    def warn_once() -> None:
        warnings.warn("this pipeline has no NIL threshold", UserWarning)
        typer.echo("done")

    before = warnings.showwarning
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == ["warning: this pipeline has no NIL threshold"]
    assert "UserWarning" not in result.stderr and result.stdout.strip() == "done"
    assert warnings.showwarning is before


def test_adapt_refuses_an_option_and_a_setting_that_disagree(kb_file, tmp_path, no_heavy_work, monkeypatch):
    """``--max-steps 200 --synonyms.steps 500`` (the transfer workflow's step var beside an older
    ``transfer_options``): one of them would be dropped without a word; the command says so instead."""
    monkeypatch.setattr(adapt, "adapt_retriever", lambda *a, **k: pytest.fail("adapt started"))
    line = one_line_error(run(adapt.app, [kb_file, "-o", tmp_path / "enc", "--max-steps", "200", "--synonyms.steps", "500"]),
                          "--max-steps 200", "--synonyms.steps 500")
    assert "give one" in line
    one_line_error(run(adapt.app, [kb_file, "-o", tmp_path / "enc", "--device", "cpu", "--training.device", "cuda"]),
                   "--device cpu")
    calls = []
    monkeypatch.setattr(adapt, "adapt_retriever", lambda config, output, overrides: calls.append(overrides) or {"step": 0})
    result = run(adapt.app, [kb_file, "-o", tmp_path / "enc", "--max-steps", "5", "--synonyms.steps", "5"])
    assert result.exit_code == 0 and calls[0]["synonyms.steps"] == 5  # the same value twice is no conflict
    result = run(adapt.app, [kb_file, "-o", tmp_path / "enc", "--max-minutes", "10", "--training.max_minutes", "10"])
    assert result.exit_code == 0 and calls[1]["training.max_minutes"] == 10  # nor an int and the same float


def test_e2e_needs_a_pipeline_that_finds_mentions(tmp_path, kb_dir, monkeypatch):
    """evaluate --e2e / calibrate --e2e on a pipeline with neither an NER nor a span finder would score (or
    calibrate on) no mention at all: refused in one line before loading; with an NER before the linker it runs."""
    gold_only = spacy.blank("en")
    gold_only.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    gold_only.to_disk(tmp_path / "gold_only")
    gold = corpus(tmp_path)
    monkeypatch.setattr(evaluate_cli, "load_pipeline", lambda *a, **k: pytest.fail("loaded before checking"))
    one_line_error(run(evaluate.app, [gold, "--pipeline", tmp_path / "gold_only", "--e2e"]), "--e2e runs pipeline",
                   "no span finder", "leave out --e2e")
    one_line_error(run(evaluate.app, [gold, "--kb", kb_dir, "--e2e"]), "give --pipeline")
    one_line_error(run(calibrate.app, [tmp_path / "gold_only", gold, "-o", tmp_path / "out", "--e2e"]), "--e2e runs pipeline")
    monkeypatch.undo()
    with_ner = spacy.blank("en")
    with_ner.add_pipe("entity_ruler").add_patterns([{"label": "Chemical", "pattern": "Lithium carbonate"}])
    with_ner.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    with_ner.to_disk(tmp_path / "with_ner")
    result = run(evaluate.app, [gold, "--pipeline", tmp_path / "with_ner", "--e2e", "--output", tmp_path / "e2e.json"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "e2e.json").read_text())["span"]["p"] == 1.0  # its NER found the span it knows


# ---------------------------------------------------------------------------- outputs that are files


def test_an_output_file_that_is_a_folder_is_refused_but_a_folder_output_may_exist(tmp_path):
    """require_output_file (silver, split, visualize …) refuses an existing folder where a file goes;
    require_writable_parent alone (retarget, adapt, build-names, bulk …: their output is a folder) takes one."""
    from spacy_pel.cli._errors import require_output_file, require_writable_parent
    from spacy_pel.files import InputError

    folder = tmp_path / "out.spacy"
    folder.mkdir()
    with pytest.raises(InputError, match=f"cannot write output {folder}: it is a folder"):
        require_output_file(folder, "output")
    require_writable_parent(folder, "output")
    require_output_file(tmp_path / "new" / "out.spacy", "output")  # a file to be made, its folders too
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        require_output_file(tmp_path / "afile" / "out.spacy", "output")


@pytest.mark.parametrize("template", ["https://x.org/q?id={}&fmt={fmt}", "https://x.org/{}/{}", "https://x.org/{{}}"])
def test_visualize_url_template_checked_before_linking(tmp_path, monkeypatch, template):
    monkeypatch.setattr(visualize, "load_pipeline", lambda *a, **k: pytest.fail("loaded before checking"))
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "meta.json").write_text("{}")
    one_line_error(run(visualize.app, [corpus(tmp_path), tmp_path / "o.html", "--kb", kb, "--url-template", template]),
                   "--url-template needs {} once", template)
    assert not (tmp_path / "o.html").exists()


def test_visualize_output_folder_refused_before_linking(tmp_path, monkeypatch):
    monkeypatch.setattr(visualize, "load_pipeline", lambda *a, **k: pytest.fail("loaded before checking"))
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "meta.json").write_text("{}")
    (tmp_path / "page.html").mkdir()
    line = one_line_error(run(visualize.app, [corpus(tmp_path), tmp_path / "page.html", "--kb", kb]),
                          str(tmp_path / "page.html"))
    assert "folder" in line and ".tmp-" not in line


def test_visualize_a_failed_write_keeps_the_earlier_page(tmp_path, monkeypatch):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "meta.json").write_text("{}")
    gold = corpus(tmp_path)
    out = tmp_path / "pages" / "page.html"
    out.parent.mkdir()
    out.write_text("<html>the earlier page</html>", encoding="utf8")
    monkeypatch.setattr(visualize, "load_pipeline", lambda *a, **k: (spacy.blank("en"), None))
    monkeypatch.setattr(visualize, "link_docs", lambda nlp, docs: (list(docs), 0))
    monkeypatch.setattr(visualize, "render", lambda docs, *a: "<html>\ud800</html>")  # fails as it is written
    result = run(visualize.app, [gold, out, "--kb", kb])
    assert result.exit_code != 0
    assert out.read_text(encoding="utf8") == "<html>the earlier page</html>"
    assert [p.name for p in out.parent.iterdir()] == ["page.html"]  # no temporary file left
    monkeypatch.setattr(visualize, "render", lambda docs, *a: "<html>new</html>")
    assert run(visualize.app, [gold, out, "--kb", kb]).exit_code == 0 and out.read_text() == "<html>new</html>"
