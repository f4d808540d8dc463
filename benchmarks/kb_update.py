"""A KB release update on real MeSH: the next release built from nothing vs with ``--reuse`` the earlier
release's KB and name rows (``spacy_pel.retrieval.reuse``), timed as a user runs them, and compared.

The next release is made from MeSH 2024 (``../shared/data/mesh``) by a seeded edit, as a yearly MeSH
release changes it: ``--changed`` of the records gain a synonym, ``--withdrawn`` are dropped and
``--new`` new records (new ids; a name made from an existing one) are added, in both files. Each build
is a ``python -m spacy_pel`` command in its own process, alone. Compared: the vectors of the update
and of the full build (largest difference, rows bit for bit equal), and the retriever's R@1 on BC5CDR dev
gold mentions with each KB (``evaluate --kb``: entity rows only, the mention tower of ``--encoder``).

    python benchmarks/kb_update.py --earlier-kb kbs/mesh --earlier-names kbs/mesh_names \\
        --encoder training/retriever/best --corpus corpus/bc5cdr_dev.spacy --work /tmp/kb_update

``--earlier-kb``: MeSH 2024 built by ``build_kb`` (the base encoder; the default workflow's ``kbs/mesh``),
``--earlier-names`` its name rows (``kbs/mesh_names``), on this machine's precision. Writes
benchmarks/kb_update.md and benchmarks/kb_update.json.
"""
import argparse
import json
import random
import time
from pathlib import Path

import numpy as np

from _common import ROOT, invocation, lscpu_model, machine, machine_line, report_footer, run_timed
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex

MESH_FILES = ("mesh_id_label_mappings.tsv", "mesh_supp_id_label_mappings.tsv")


def next_release(mesh: Path, out: Path, changed: float, withdrawn: float, new: float, seed: int) -> dict:
    """Write the edited release into ``out`` (the two MeSH TSVs); counts of each edit."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    counts = {"records": 0, "changed": 0, "withdrawn": 0, "new": 0}
    for name in MESH_FILES:
        lines = (mesh / name).read_text(encoding="utf8").splitlines()
        kept = []
        for line in lines:
            cols = line.split("\t")
            draw = rng.random()
            if draw < withdrawn:
                counts["withdrawn"] += 1
                continue
            if draw < withdrawn + changed:
                cols[2] = "|".join(filter(None, [cols[2], f"{cols[1]}, {rng.choice(['human', 'rat', 'mouse'])}"]))
                counts["changed"] += 1
            kept.append("\t".join(cols))
        prefix = "D9" if name.startswith("mesh_id") else "C9"
        for n in range(int(len(lines) * new)):
            cols = rng.choice(lines).split("\t")
            cols[0], cols[1], cols[2] = f"{prefix}{n:06d}", f"{cols[1]} analog {n}", ""
            kept.append("\t".join(cols))
            counts["new"] += 1
        counts["records"] += len(kept)
        (out / name).write_text("\n".join(kept) + "\n", encoding="utf8")
    return counts


def r_at_1(kb: Path, encoder: str, corpus: str, out: Path) -> float:
    run_timed(f"python -m spacy_pel evaluate {corpus} --kb {kb} --encoder {encoder} --output {out} > /dev/null")
    return json.loads(out.read_text())["recall_in_kb"]["R@1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mesh", type=Path, default=ROOT.parent / "shared/data/mesh")
    ap.add_argument("--earlier-kb", type=Path, required=True)
    ap.add_argument("--earlier-names", type=Path, required=True)
    ap.add_argument("--encoder", required=True, help="the retriever whose mention tower evaluate uses")
    ap.add_argument("--corpus", default="corpus/bc5cdr_dev.spacy")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--changed", type=float, default=0.03)
    ap.add_argument("--withdrawn", type=float, default=0.005)
    ap.add_argument("--new", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pipeline", help="a trained pipeline over the earlier KB: retargeted to both builds and evaluated")
    ap.add_argument("--keep-builds", action="store_true", help="take the builds already in --work (and their minutes)")
    ap.add_argument("--output", default="kb_update")
    args = ap.parse_args()
    w = args.work.resolve()
    edits = next_release(args.mesh, w / "release", args.changed, args.withdrawn, args.new, args.seed)
    kb_source = json.loads((args.earlier_kb / "meta.json").read_text())["encoder_source"]
    build = f"python -m spacy_pel build-kb --kb {w / 'release'} --format mesh --encoder {kb_source} --force"
    names = "python -m spacy_pel build-names"
    kept = w / "minutes.json"
    minutes = json.loads(kept.read_text()) if args.keep_builds and kept.exists() else {
        "build-kb, from nothing": run_timed(f"{build} --output {w / 'full'} > {w / 'full.log'}", 2),
        "build-kb --reuse (the 2024 KB)": run_timed(f"{build} --output {w / 'update'} --reuse {args.earlier_kb.resolve()}"
                                                    f" > {w / 'update.log'}", 2),
        "build-names, from nothing": run_timed(f"{names} {w / 'full'} --output {w / 'full_names'} --force"
                                               f" > {w / 'full_names.log'}", 2),
        "build-names --reuse (the 2024 name rows)": run_timed(
            f"{names} {w / 'update'} --output {w / 'update_names'} --force --reuse {args.earlier_names.resolve()}"
            f" > {w / 'update_names.log'}", 2),
    }
    kept.write_text(json.dumps(minutes))
    reports = {k: json.loads((w / k / "build_report.json").read_text()) for k in ("full", "update", "full_names", "update_names")}
    full, update = EntityIndex.from_disk(w / "full"), EntityIndex.from_disk(w / "update")
    assert list(full.entities.ids) == list(update.entities.ids)
    a, b = full.embeddings.astype(np.float32), update.embeddings.astype(np.float32)
    fn, un = NameIndex.from_disk(w / "full_names", in_memory=False), NameIndex.from_disk(w / "update_names", in_memory=False)
    assert fn.names == un.names
    na, nb = fn.name_vectors(np.arange(len(fn))).numpy(), un.name_vectors(np.arange(len(un))).numpy()
    t = time.perf_counter()
    recall = {"full build": r_at_1(w / "full", args.encoder, args.corpus, w / "eval_full.json"),
              "update": r_at_1(w / "update", args.encoder, args.corpus, w / "eval_update.json")}
    pipeline_r1 = {}
    if args.pipeline:
        for key, kb, names_dir in (("full build", "full", "full_names"), ("update", "update", "update_names")):
            run_timed(f"python -m spacy_pel retarget {args.pipeline} --kb {w / kb} --names {w / names_dir} "
                      f"-o {w / ('pipeline_' + kb)} > /dev/null")
            run_timed(f"python -m spacy_pel evaluate {args.corpus} --pipeline {w / ('pipeline_' + kb)} "
                      f"--output {w / ('eval_pipeline_' + kb + '.json')} > /dev/null")
            pipeline_r1[key] = json.loads((w / f"eval_pipeline_{kb}.json").read_text())["recall_in_kb"]["R@1"]
    report = {
        "command": invocation(), "machine": {**machine(), "lscpu_model": lscpu_model()}, "edits": edits,
        "minutes": minutes, "reports": reports, "evaluate_minutes": round((time.perf_counter() - t) / 60, 2),
        "entity_rows": {"rows": len(a), "equal_bitwise": int((a == b).all(1).sum()),
                        "max_abs_difference": float(np.abs(a - b).max()),
                        "min_cosine": float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())},
        "name_rows": {"rows": len(na), "equal_bitwise": int((na == nb).all(1).sum()),
                      "max_abs_difference": float(np.abs(na - nb).max())},
        "retriever_r1": recall, "pipeline": args.pipeline, "pipeline_r1": pipeline_r1,
    }
    out = ROOT / "benchmarks" / args.output
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    upd, upn = reports["update"], reports["update_names"]
    lines = [
        "# A KB release update: MeSH's next release from nothing vs `--reuse` the earlier one", "",
        machine_line(report["machine"]) + "; each build alone, in its own process.", "",
        f"The next release: MeSH 2024 ({args.mesh}) edited with seed {args.seed}: {edits['changed']:,} records gained a "
        f"synonym, {edits['withdrawn']:,} were withdrawn, {edits['new']:,} are new ({edits['records']:,} records). "
        f"The earlier release: `{args.earlier_kb}` and `{args.earlier_names}` (MeSH 2024, encoder `{kb_source}`).", "",
        "| step | minutes | encoded | reused |", "|---|---:|---:|---:|",
    ]
    for (step, m), key in zip(minutes.items(), ("full", "update", "full_names", "update_names")):
        r = reports[key]
        enc = r.get("entities_encoded", r.get("names_encoded"))
        reused = r.get("resume", {}).get("reuse", {}).get("reused", 0)
        lines.append(f"| {step} | {m} | {enc:,} | {reused:,} |")
    e, n = report["entity_rows"], report["name_rows"]
    lines += [
        "", "| compared, update vs from nothing | value |", "|---|---:|",
        f"| entity rows bit for bit equal | {e['equal_bitwise']:,} of {e['rows']:,} |",
        f"| entity rows: largest difference / lowest cosine | {e['max_abs_difference']:.2g} / {e['min_cosine']:.6f} |",
        f"| name rows bit for bit equal | {n['equal_bitwise']:,} of {n['rows']:,} |",
        f"| name rows: largest difference | {n['max_abs_difference']:.2g} |",
        f"| retriever R@1, BC5CDR dev ({args.encoder}), full build | {recall['full build']:.4f} |",
        f"| retriever R@1, the update | {recall['update']:.4f} |",
        *([f"| pipeline R@1 (`{args.pipeline}` retargeted: rules, name rows), full build | {pipeline_r1['full build']:.4f} |",
           f"| pipeline R@1, the update | {pipeline_r1['update']:.4f} |"] if pipeline_r1 else []),
        "", f"Entities encoded by the update: {upd['entities_encoded']:,} of {upd['entities_total']:,}; names: "
        f"{upn['names_encoded']:,} of {upn['names']:,}. A reused vector is the earlier build's float16 row; one "
        "encoded again differs from it only by rounding that depends on the batch it shares.",
    ]
    lines += report_footer(report)
    out.with_suffix(".md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
