"""A KB's name rows, and its entity rows, encoded in int8 (block-wise ``int8`` or ``int8_rows``) instead of
as built, in the pipeline ``spacy project run all`` assembled: the calibrated pipeline copied with its
rows replaced by ones built with ``--precision int8`` (or ``int8_rows``), evaluated on dev gold mentions;
the build times from each build's report. Rows are labelled by the precisions the builds report.

    python benchmarks/index_rows_int8.py --project DIR --names NAMES_INT8 [--kb KB_INT8]

DIR: a folder where ``all`` ran (``training/pipeline_calibrated``, ``kbs/``, ``corpus/``); NAMES_INT8 /
KB_INT8: the same KB's name rows / entity rows built by ``build-names`` / ``build_kb`` with
``--precision int8``. Writes benchmarks/index_rows_int8.{md,json}. Run it alone (~3 min).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import invocation, lscpu_model, machine, machine_line, report_footer  # noqa: E402

HERE = Path(__file__).resolve().parent
NAME_FILES = ("embeddings.npy", "entity_rows.npy", "meta.json", "names.json")


def evaluate(project: Path, pipeline: Path, out: Path) -> dict:
    """``spacy_pel.evaluate`` of ``pipeline`` on the project's dev corpus (a subprocess: the environment,
    e.g. a simulated CPU's ``PYTHONPATH``, is the caller's)."""
    corpus = next((project / "corpus").glob("*_dev.spacy"))
    train = corpus.with_name(corpus.name.replace("_dev", "_train"))
    subprocess.run([sys.executable, "-m", "spacy_pel.evaluate", str(corpus), "--pipeline", str(pipeline),
                    "--train", str(train), "--output", str(out)], check=True, capture_output=True)
    figures = json.loads(out.read_text())
    return {"R@1": figures["recall_in_kb"]["R@1"], "unseen R@1": figures["recall_unseen"]["R@1"],
            "R@64": figures["recall_in_kb"]["R@64"], "accuracy with NIL": figures["accuracy_with_nil"]}


def build_row(folder: Path) -> dict:
    report = json.loads((folder / "build_report.json").read_text())
    return {"folder": str(folder), "precision": report["precision"], "encode_min": round(report["encode_s"] / 60, 2),
            "per_s": report.get("entities_per_s") or report.get("names_per_s")}


def main(project: Path = typer.Option(..., help="A folder where `spacy project run all` ran"),
         names: Path = typer.Option(..., help="The KB's name rows built with --precision int8"),
         kb: Optional[Path] = typer.Option(None, help="The KB's entity rows built with --precision int8"),
         fp32_kb: str = typer.Option("kbs/mesh", help="The project's KB folder as `all` built it (under --project)"),
         fp32_names: str = typer.Option("kbs/mesh_names", help="The project's name rows as `all` built them (under --project)"),
         notes: str = typer.Option("", help="A line about the run conditions"),
         output: Path = typer.Option(HERE / "index_rows_int8", help="Report path without suffix")) -> None:
    pipeline = project / "training" / "pipeline_calibrated"
    linker = pipeline / "pel_linker"
    builds = [build_row(project / f) for f in (fp32_kb, fp32_names)] + [build_row(f) for f in (names, kb) if f]
    built_kb, built_names, new_names = (b["precision"] for b in builds[:3])
    variants = [(f"as built ({built_kb} entity rows, {built_names} name rows)", None, None),
                (f"{new_names} name rows", names, None)]
    if kb is not None:
        variants.append((f"{new_names} name rows + {builds[3]['precision']} entity rows", names, kb))
    rows = []
    with tempfile.TemporaryDirectory(prefix="index_rows_int8_") as tmp:
        for label, name_rows, entity_rows in variants:
            copy = Path(tmp) / "pipeline"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(pipeline, copy)
            for file in NAME_FILES if name_rows else ():
                shutil.copy(name_rows / file, copy / "pel_linker" / "name_rows" / file)
            if entity_rows:
                shutil.copy(entity_rows / "embeddings.npy", copy / "pel_linker" / "kb" / "embeddings.npy")
            rows.append({"variant": label, **evaluate(project, copy, Path(tmp) / "metrics.json")})
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "project": str(project), "pipeline": str(linker),
              "rows": rows, "builds": builds, "command": invocation(), "notes": notes}
    output.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    lines = ["# A KB's rows encoded in int8: the pipeline `all` assembled, BC5CDR dev gold mentions", "",
             f"Pipeline: `{pipeline}`; linked with its saved settings (`precision = \"auto\"`) in this environment.", "",
             machine_line(report["machine"]), "", "| rows | R@1 | unseen R@1 | R@64 | accuracy with NIL |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['variant']} | {r['R@1']:.4f} | {r['unseen R@1']:.4f} | {r['R@64']:.4f} | {r['accuracy with NIL']:.4f} |"
              for r in rows]
    lines += ["", "Builds (each alone on the machine; from their `build_report.json`):", "",
              "| folder | precision | encoding minutes | rows/s |", "|---|---|---:|---:|"]
    lines += [f"| `{b['folder']}` | {b['precision']} | {b['encode_min']} | {b['per_s']} |" for b in builds]
    output.with_suffix(".md").write_text("\n".join(lines + report_footer(report)), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
