"""nlp.pipe(n_process=2) links in forked workers, with the same ids as one process (issue 32 item 1:
torch's OpenMP pool did not survive spaCy's fork and both workers hung on its barrier)."""
import json
import subprocess
import sys
import textwrap

import spacy

SCRIPT = textwrap.dedent('''
    import json, sys
    import spacy, torch
    from spacy.tokens import Span
    torch.set_num_threads(2)
    nlp = spacy.load(sys.argv[1])
    texts = ["Lithium carbonate toxicity in a newborn .", "Atrial flutter and aspirin .", "Warfarin was stopped ."] * 4

    def docs():
        for t in texts:
            doc = nlp.make_doc(t)
            doc.ents = [Span(doc, 0, 2, "X")]
            yield doc

    one = [[e.kb_id_ for e in d.ents] for d in nlp.pipe(docs(), batch_size=3)]  # the parent's thread pool is up
    two = [[e.kb_id_ for e in d.ents] for d in nlp.pipe(docs(), batch_size=3, n_process=2)]
    print(json.dumps({"one": one, "two": two}))
''')


def test_two_processes_finish_with_the_ids_of_one(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "pipeline")], capture_output=True, text=True,
                            timeout=120)  # a hang fails here instead of stalling the suite
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["one"] == out["two"] and all(ids[0] for ids in out["one"])
