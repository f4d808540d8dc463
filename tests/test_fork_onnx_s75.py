"""A forked child (spaCy's ``nlp.pipe(n_process=N)`` under fork, a user's own pool) links with an ONNX Runtime precision
(/tmp/hQQ bug02): the parent's ONNX sessions, made with its torch thread count, are never run nor destroyed in the
child (their intra-op thread pool did not survive the fork: destroying one waited forever), and the child makes its own.
Each run is a script under a timeout, so a regression fails instead of stalling the suite."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import gc, json, os, sys
    import numpy as np, torch
    from spacy_pel.models.encoder import BiEncoder, Mention
    torch.set_num_threads(2)  # what torch picks by itself on a 2-core machine
    enc = BiEncoder.from_pretrained(sys.argv[1], precision=sys.argv[2])
    mentions = [Mention("atrial flutter recurred", 0, 14), Mention("aspirin was given", 0, 7)]
    parent = enc.encode_mentions(mentions)  # the parent's sessions (2 intra-op threads) are made and run
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one torch thread (as spacy_pel's at-fork hook sets), its own sessions
        torch.set_num_threads(1)
        child = enc.encode_mentions(mentions)
        os.write(write, json.dumps(float(np.abs(child - parent).max())).encode())
        if sys.argv[3] == "drop":  # the child lets the encoder and its copies of the parent's sessions go
            del enc
            gc.collect()
        os._exit(0)  # as multiprocessing's forked workers do
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        diff = json.loads(f.read() or "null")
    again = enc.encode_mentions(mentions)  # the parent's sessions still work
    print(json.dumps({"status": status, "diff": diff, "parent_same": bool(np.array_equal(again, parent))}))
''')


@pytest.mark.parametrize("precision,exit", [("onnx_fp32", "drop"), ("int8", "keep")])
def test_a_forked_child_encodes_with_onnx_and_neither_hangs(tiny_encoder_dir, precision, exit):
    script = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tiny_encoder_dir), precision, exit],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = script.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(script.pid, signal.SIGKILL)  # the script and its forked child, which would be left hanging
        script.communicate()
        pytest.fail(f"{precision}: the forked child (or the parent after it) hung on the parent's ONNX sessions")
    assert script.returncode == 0, stderr[-2000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["status"] == 0 and out["diff"] is not None and out["diff"] < 1e-5 and out["parent_same"]


SEARCH_SCRIPT = textwrap.dedent('''
    import gc, json, os
    import numpy as np, torch
    from spacy_pel.retrieval.search import FlatSearch
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    kb = rng.standard_normal((3000, 32)).astype(np.float32)
    search = FlatSearch(torch.from_numpy(kb), screened=True)  # int8-screened: an ONNX Runtime session per KB
    queries = kb[:4] + 0.01
    parent = search.search(queries, 5)[1]  # the parent's screen is made and run
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        torch.set_num_threads(1)
        child = search.search(queries, 5)[1]
        search.add(np.zeros((2, 32), np.float32))  # a grown KB: the screen made again, the parent's let go
        grown = search.search(queries, 5)[1]
        del search
        gc.collect()
        os.write(write, json.dumps([child.tolist() == parent.tolist(), grown.tolist() == parent.tolist()]).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        same = json.loads(f.read() or "null")
    print(json.dumps({"status": status, "same": same, "parent_same": search.search(queries, 5)[1].tolist() == parent.tolist()}))
''')


def test_a_forked_child_searches_an_int8_screened_kb_and_lets_the_parents_screen_go():
    """The int8 screen (`search_precision` int8 on CPUs with VNNI and no bf16) is an ONNX Runtime session too: a forked
    child that grew the KB (`FlatSearch.add`) or let it go freed the parent's screen, which waited forever."""
    script = subprocess.Popen([sys.executable, "-c", SEARCH_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        stdout, stderr = script.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(script.pid, signal.SIGKILL)
        script.communicate()
        pytest.fail("the forked child hung on the parent's int8 screen")
    assert script.returncode == 0, stderr[-2000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out == {"status": 0, "same": [True, True], "parent_same": True}
