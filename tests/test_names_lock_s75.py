"""build-names and build-kb on one KB exclude each other (/tmp/hQQ bug01): build-names holds the KB's own lock
(``KB.lock``, which build-kb holds for a build, ``--add`` or ``--force``) for its whole run, from reading the KB to
writing its name index. Before, it held only ``KB/names.lock``: a ``build-kb --add`` meanwhile replaced the KB folder,
both exited 0, and ``KB/names`` was the index of the KB before ``--add``, which the next load refused."""
import errno
import json
import signal
import subprocess
import sys

import pytest

import spacy_pel.retrieval.kb_lock as kb_lock
from spacy_pel.files import OutputBusyError
from spacy_pel.retrieval import names
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.names import NameIndex, build_names

from .test_build_kb_guard import ids, one_line_error, run
from .test_training_lock_s73 import HOLD


@pytest.fixture
def added(tmp_path):
    path = tmp_path / "added.jsonl"
    path.write_text('{"id": "D9", "name": "heparin", "types": ["Chemical"]}\n', encoding="utf8")
    return path


def test_build_kb_add_is_refused_while_build_names_runs_on_the_kb(kb_dir, added, monkeypatch):
    refused = []
    build = NameIndex.build

    def build_and_add(*args, **kwargs):  # build-names is encoding: build-kb --add starts on the same KB
        with pytest.raises(OutputBusyError) as err:
            build_kb(None, kb_dir, add=added, progress=False)
        refused.append(str(err.value))
        return build(*args, **kwargs)

    monkeypatch.setattr(names.NameIndex, "build", build_and_add)
    report = build_names(kb_dir, progress=False)
    assert len(refused) == 1 and refused[0].startswith(f"{kb_dir} is being built by another process (pid ")
    assert ids(kb_dir) == ["D1", "D2", "D3", "D4", "D5"]  # the KB is the one the name index was built for
    assert report["entities"] == json.loads((kb_dir / "names" / "meta.json").read_text())["entities"] == 5
    assert not (kb_dir.parent / "kb.lock").exists() and not (kb_dir / "names.lock").exists()
    monkeypatch.undo()
    assert build_kb(None, kb_dir, add=added, progress=False)["entities_total"] == 6  # once build-names is done


@pytest.mark.parametrize("elsewhere", [False, True])
def test_build_names_is_refused_in_one_line_while_the_kb_is_being_built(kb_dir, tmp_path, elsewhere):
    output = tmp_path / "names_elsewhere" if elsewhere else kb_dir / "names"  # a name index outside it is stale too
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(kb_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = run("build-names", kb_dir, "--output", output)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    one_line_error(result, f"{kb_dir} is being built by another process (pid {holder.pid})")
    assert not output.exists() and not output.with_name(output.name + ".partial").exists()
    assert not output.with_name(output.name + ".lock").exists()


class ReadOnly:
    """``output_lock`` of a KB beside which nothing can be written (a read-only share)."""

    def __init__(self, target):
        pass

    def __enter__(self):
        raise PermissionError(errno.EACCES, "Permission denied")

    def __exit__(self, *exc):
        return False


def test_a_kb_beside_which_nothing_can_be_written_is_read_unlocked_for_an_index_outside_it(kb_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(kb_lock, "output_lock", ReadOnly)
    assert build_names(kb_dir, tmp_path / "mine" / "names", progress=False)["entities"] == 5
    with pytest.raises(PermissionError):  # an index inside it: what writing there would meet
        build_names(kb_dir, progress=False)
