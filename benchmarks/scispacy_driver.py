"""scispaCy's TF-IDF linker over a KB file and a list of mentions — run inside a virtualenv with
``scispacy`` (it needs ``scipy<1.11`` and no torch; see benchmarks/speed.py, which calls this script).

    /path/to/scispacy-venv/bin/python benchmarks/scispacy_driver.py KB.jsonl MENTIONS.jsonl OUT.json

KB.jsonl: scispaCy's KB format (``concept_id``, ``canonical_name``, ``aliases``, ``types``).
MENTIONS.jsonl: ``{"text": ..., "gold": [ids], "doc": n}`` per line. The linking rule is scispaCy's
``EntityLinker``: candidates from the TF-IDF char-3-gram ANN index (k = 30), each concept scored by its
best alias similarity, kept if ≥ 0.7, best first; no candidate = no link. Only the standard library
and scispaCy are imported here. Speeds: the median of ``PASSES`` timed passes.
"""
import json
import os
import resource
import sys
import tempfile
import time

from scispacy.candidate_generation import CandidateGenerator, create_tfidf_ann_index
from scispacy.linking_utils import Entity, KnowledgeBase

K = 30
THRESHOLD = 0.7  # scispaCy EntityLinker's default
BATCH = 256
PASSES = 3


def read_jsonl(path):
    with open(path, encoding="utf8") as f:
        return [json.loads(line) for line in f if line.strip()]


def link(gen, batches):
    """Each batch's mentions through the candidate generator: concept ids best first, scispaCy's rule."""
    predictions = []
    for texts in batches:
        for cands in gen(texts, K):
            scored = sorted(((max(c.similarities), c.concept_id) for c in cands), reverse=True)
            predictions.append([cid for s, cid in scored if s >= THRESHOLD])
    return predictions


def cpu_seconds():
    """(busy CPU seconds of the whole machine, this process's CPU seconds)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:8]]
    own = resource.getrusage(resource.RUSAGE_SELF)
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK"), own.ru_utime + own.ru_stime


def timed(gen, batches):
    """The predictions, the median seconds of ``PASSES`` passes, and the most cores other processes
    kept busy during a pass."""
    times, others = [], []
    for _ in range(PASSES):
        c0, t0 = cpu_seconds(), time.perf_counter()
        predictions = link(gen, batches)
        times.append(time.perf_counter() - t0)
        c1 = cpu_seconds()
        others.append(round(max(0.0, (c1[0] - c0[0]) - (c1[1] - c0[1])) / times[-1], 2))
    return predictions, sorted(times)[len(times) // 2], max(others)


def main(kb_path, mentions_path, out_path):
    kb = KnowledgeBase([Entity(**{**e, "types": e.get("types", []), "aliases": e.get("aliases", [])})
                        for e in read_jsonl(kb_path)])
    mentions = read_jsonl(mentions_path)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        aliases, vectorizer, ann = create_tfidf_ann_index(tmp, kb)
        build = time.perf_counter() - t0
        gen = CandidateGenerator(ann_index=ann, tfidf_vectorizer=vectorizer, ann_concept_aliases_list=aliases, kb=kb)
        predictions, seconds, other = timed(gen, [[m["text"] for m in mentions[i : i + BATCH]] for i in range(0, len(mentions), BATCH)])
        # per document, as scispaCy's EntityLinker component calls its candidate generator in nlp.pipe
        by_doc = {}
        for m in mentions:
            by_doc.setdefault(m.get("doc", 0), []).append(m["text"])
        per_doc, doc_seconds, doc_other = timed(gen, list(by_doc.values()))
    in_kb = [i for i, m in enumerate(mentions) if any(g in kb.cui_to_entity for g in m["gold"])]
    hits1 = sum(1 for i in in_kb if predictions[i][:1] and predictions[i][0] in mentions[i]["gold"])
    hits10 = sum(1 for i in in_kb if set(predictions[i][:10]) & set(mentions[i]["gold"]))
    report = {
        "tool": "scispacy 0.6.2 TF-IDF + ANN linker",
        "kb_entities": len(kb.cui_to_entity),
        "mentions": len(mentions),
        "in_kb": len(in_kb),
        "r_at_1": round(hits1 / len(in_kb), 4),
        "r_at_10": round(hits10 / len(in_kb), 4),
        "index_build_seconds": round(build, 2),
        "link_seconds": round(seconds, 3),
        "mentions_per_second": round(len(mentions) / seconds, 1),
        "per_document_mentions_per_second": round(len(mentions) / doc_seconds, 1),
        "per_document_same_predictions": sorted(map(str, per_doc)) == sorted(map(str, predictions)),
        "other_processes_cores": {"batched": other, "per_document": doc_other},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    with open(out_path, "w", encoding="utf8") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main(*sys.argv[1:4])
