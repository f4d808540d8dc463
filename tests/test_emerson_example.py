"""docs/your-own-data.md's spaCy-tutorial example runs as written: its commands (a CSV KB, Prodigy
annotations, evaluate) on the real tutorial files, then its Python snippet, with a tiny model."""
import re
import shutil
import subprocess
import sys

from .conftest import shared
from .test_workflow_vars import doc_blocks

SECTION = "Example: spaCy's entity-linking tutorial data (a CSV KB, Prodigy annotations)"
IDS = {"Q312545", "Q48226", "Q215952"}


def test_the_tutorial_example_runs_as_documented(tmp_path, tiny_encoder_dir, monkeypatch):
    commands, snippet = doc_blocks(SECTION)
    for name in ("entities.csv", "emerson_annotated_text.jsonl"):
        shutil.copy(shared("nel-emerson", name), tmp_path / name)
    out = ""
    for line in commands.strip().splitlines():
        args = line.split()[3:]  # after "python -m spacy_pel"
        if args[0] == "build-kb":
            args += ["--encoder", str(tiny_encoder_dir)]  # the test's tiny model, not the bundled one
        run = subprocess.run([sys.executable, "-m", "spacy_pel", *args], cwd=tmp_path, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]
        out = run.stdout
    assert re.search(r"\| gold id in KB \| 30 \|", out), out  # every tutorial mention read and linked
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(snippet, "your-own-data.md", "exec"), scope)  # noqa: S102 - the docs' own snippet
    ent = scope["doc"].ents[0]
    assert ent.text == "Emerson" and ent.kb_id_ in IDS
    candidates = ent._.pel_candidates
    assert {c[0] for c in candidates} == IDS and candidates[0][0] == ent.kb_id_
    assert [c[2] for c in candidates] == sorted((c[2] for c in candidates), reverse=True)
