"""``bulk`` holds OUTPUT's lock for the whole run, as build-kb, build-names and every trainer do (/tmp/hQQ bug03): a
second run into the same OUTPUT, started while the first links (a workflow started twice, a resume started because the
first job looked dead), is refused at once in one line naming the holder. Before, both planned on a folder with no
finished shard, both linked every shard, and with two pipelines the folder ended with shards of each."""
import json
import os
import signal
import subprocess
import sys

import pytest

from spacy_pel.files import OutputBusyError

from .test_bulk_s69 import bulk_cli, in_process, jsonl, link, no_ray, pipelines  # noqa: F401 (fixtures)
from .test_training_lock_s73 import HOLD

pytestmark = pytest.mark.filterwarnings("ignore:pel_linker. this pipeline has no NIL threshold")


def corpus(folder):
    jsonl(folder / "s1.jsonl", ("a1", "lithium carbonate and atrial flutter."))
    jsonl(folder / "s2.jsonl", ("b1", "aspirin and warfarin were given."))
    return folder


def test_a_second_bulk_started_while_one_links_is_refused_and_the_first_finishes(pipelines, in_process, tmp_path):  # noqa: F811
    out, refused = tmp_path / "linked", []

    def on_shard(marker):  # run A has written its first shard: run B, with another pipeline, starts on OUTPUT
        if not refused:
            with pytest.raises(OutputBusyError) as err:
                link(tmp_path / "in", out, pipelines["other"])
            refused.append(str(err.value))

    summary = link(corpus(tmp_path / "in"), out, pipelines["ner"], on_shard=on_shard)
    assert refused == [f"{out} is being built by another process (pid {os.getpid()})"]
    assert summary["shards_linked_now"] == 2
    markers = [json.loads(p.read_text()) for p in sorted((out / "done").glob("*.json"))]
    assert [m["pipeline"]["path"] for m in markers] == [str(pipelines["ner"])] * 2  # one pipeline's links only
    assert not (tmp_path / "linked.lock").exists()
    assert link(tmp_path / "in", out, pipelines["ner"])["shards_skipped"] == 2  # the lock is gone with the run


def test_the_bulk_command_says_so_in_one_line_and_touches_nothing(pipelines, no_ray, tmp_path):  # noqa: F811
    out = tmp_path / "linked"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = bulk_cli(corpus(tmp_path / "in"), out, "--pipeline", pipelines["ner"])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {out} is being built by another process (pid {holder.pid})"
    assert not out.exists()
