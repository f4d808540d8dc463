"""Speed on a CPU (the speed issue's table): whole-pipeline mentions/s and R@1 on BC5CDR dev gold spans,
the full MeSH KB build, pipeline load time / peak RSS, and scispaCy's linker side by side on MEDIC.

    python benchmarks/speed.py --encoder training/retriever/best --kb kbs/mesh --names kbs/mesh_names [--build-kb] \
        [--scispacy-python /tmp/scispacy-venv/bin/python]

Every figure is measured in this one run, on this machine (run it alone: two torch jobs on 2 cores
more than halve each other). Writes benchmarks/speed.json and benchmarks/speed.md.

Pipelines (all: BC5CDR dev, the 9,591 gold spans set as ``doc.ents``, ``nlp.pipe`` end to end, the config's
top_k (10), context 64, the trained retriever + the candidate rules of ``configs/linker_rules.cfg``, read from it:
abbreviations, BC5CDR train surface forms as alias rows, every MeSH name as a name row (``--names``),
the alias table over MeSH names and those forms, spelling variants, repeats, parenthetical synonyms,
undefined short forms, label types — the pipeline ``spacy project run all`` assembles):
* ``fp32, encode every mention`` — round 1's path: every mention through the transformer in fp32;
* ``+ precision auto`` — bf16 where the CPU has bf16 units;
* ``+ rules decide first`` — mentions the alias table decides alone (one allowed entity) and defined
  short forms skip the transformer and the index (the default);
* the same with ``collective`` vectors (one pass per document);
* the same with ``precision`` int8 and fp32: what a CPU without bf16 units would run (the KB's exact
  search stays bf16 here; on such a CPU it runs in float32, which measured about as fast: ~480 vs ~500
  queries/s over MeSH in batches of 256);
* ``fast preset`` (``FAST``, ``FASTER``) — the rules-first pipeline with a ``context_window`` of 16 (12)
  word pieces: settings for the side-by-side with scispaCy; the ``int8`` fast preset runs the encoder
  in ONNX Runtime with dynamic int8 (``FAST_INT8``). The fast presets leave the name rows' text pass
  off (``text_weight`` 0: a second transformer pass over the open mentions' texts), as does the row
  ``rules first, no text pass`` (what the text pass costs the default). (Until session 9 the fast
  presets alone had the spelling-variant and repeats rules; the default has them now.) The last fast
  preset leaves the name-row rule out (``FAST_NO_NAMES``): what the name rows cost.

Every pipeline first links 16 documents untimed (oneDNN builds its kernels on the first batches).
``--sections`` measures only some of kb_build, pipelines, load, medic; the others are copied from the
existing speed.json with the run they came from, and the report says which run each section is from.
"""
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import spacy
import typer
from spacy.tokens import Span

from _common import SHARED, cpu_id, cpu_seconds, linked_r1, machine, others_busy, with_gold_ents
from spacy_pel.corpora import GOLD_KEY, bare_doc, corpus_ids, gold_ids, gold_spans, read_docbin  # noqa: F401 (bare_doc: label_names imports it from here)
from spacy_pel.kb import read_kb
from spacy_pel.pipeline.aliases import mention_counts, write_aliases
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.names import build_names

HERE = Path(__file__).resolve().parent
SECTIONS = ("kb_build", "pipelines", "load", "medic")
FAST = {"context_window": 16, "text": False}  # the fast presets (module doc)
FASTER = {"context_window": 12, "text": False}
FAST_INT8 = {"context_window": 16, "precision": "int8", "text": False}
FAST_NO_NAMES = {"context_window": 16, "names": False}  # the fast preset without the name-row rule
NO_TEXT = {"text": False}  # the default without the name rows' text pass
RULES_CONFIG = HERE.parent / "configs" / "linker_rules.cfg"  # the candidate rules of every pipeline here
WARMUP_DOCS = 16
PREVIOUS_RUN = "2026-11-22 19:57 UTC, commit ada6794"  # the run before sections were stamped
MEDIC_ROWS = [("spacy_pel, KB names only", None, {}),
              ("spacy_pel, + BC5CDR train surface forms", "aliases.json", {}),
              ("spacy_pel fast preset (context 16), + BC5CDR train surface forms", "aliases.json", FAST),
              ("spacy_pel fast preset (context 16), + BC5CDR train surface forms, no name rows", "aliases.json", FAST_NO_NAMES),
              ("spacy_pel fast preset (context 12), KB names only", None, FASTER),
              ("spacy_pel fast preset (context 12), + BC5CDR train surface forms", "aliases.json", FASTER),
              ("spacy_pel fast preset (context 16, int8), + BC5CDR train surface forms", "aliases.json", FAST_INT8)]


def linker_config(kb: Path, encoder: Path, aliases: Optional[Path], precision: str, decide: bool, vectors: str,
                  context_window: int = 64, names: Optional[Path] = None, text: bool = True) -> dict:
    """The pipeline's linker block: the candidate rules of configs/linker_rules.cfg (``aliases`` None:
    the alias table over KB names only, no alias rows; ``names`` None: no name rows; ``text`` False: the
    name rows' text pass off), ``decide`` the alias table's ``decide_unique``; ``top_k`` is the config's."""
    overrides = {"paths.aliases": str(aliases) if aliases else None, "paths.names": str(names) if names else None}
    cfg = spacy.util.load_config(RULES_CONFIG, overrides=overrides, interpolate=True)
    rules = json.loads(json.dumps(cfg["components"]["pel_linker"]["rules"]))
    rules["aliases"]["decide_unique"] = decide
    if not text:
        rules["names"]["text_weight"] = 0.0
    return {
        "kb": str(kb), "encoder": str(encoder), "top_k": cfg["components"]["pel_linker"]["top_k"],
        "context_window": context_window, "device": "cpu",
        "precision": precision, "vectors": {"@misc": f"spacy_pel.vectors.{vectors}.v1"}, "rules": rules,
    }


def run_pipeline(nlp, docs, kb_ids, train_ids, passes: int = 1) -> dict:
    """Link with ``nlp.pipe`` (timed: linking only, the KB already loaded, after an untimed warm-up on
    the first documents; the median of ``passes`` timed passes) and score R@1 as evaluate does (``linked_r1``)."""
    list(nlp.pipe(with_gold_ents(docs[:WARMUP_DOCS]), batch_size=128))
    times, others = [], []
    for _ in range(passes):
        fresh = with_gold_ents(docs)
        c0, t0 = cpu_seconds(), time.perf_counter()
        linked = list(nlp.pipe(fresh, batch_size=128))
        times.append(time.perf_counter() - t0)
        others.append(others_busy(c0, cpu_seconds(), times[-1]))
    seconds = statistics.median(times)
    r1 = linked_r1(find_linker(nlp)[1], docs, linked, set(train_ids))  # evaluate's definitions; None for an empty group
    n = sum(len(d.ents) for d in linked)
    return {"mentions": n, "seconds": round(seconds, 2), "mentions_per_s": round(n / seconds, 1),
            "other_processes_cores": max(others), "in_kb": r1["in_kb"], "R@1_all": r1["R@1"],
            "R@1_seen": r1["R@1_seen"], "R@1_unseen": r1["R@1_unseen"]}


def batching_changes(nlp, linker, docs) -> int:
    """Mentions whose kb_id differs between linking ``docs`` in the timed batch settings (128 documents
    per call, the linker's batch size) and in small batches (7 documents, 8 mentions per forward pass):
    0 unless the precision makes a mention's vector depend on its batch (dynamic int8)."""
    def ids(doc_batch: int) -> list:
        return [e.kb_id_ for d in nlp.pipe(with_gold_ents(docs), batch_size=doc_batch) for e in d.ents]

    usual = ids(128)
    kept = linker.cfg
    linker.cfg = dataclasses.replace(kept, batch_size=8)
    try:
        small = ids(7)
    finally:
        linker.cfg = kept
    return sum(a != b for a, b in zip(usual, small))


LOAD_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
import spacy, spacy_pel
from spacy.tokens import Span
from spacy_pel.corpora import bare_doc, read_docbin, gold_spans
config = {"components": {"pel_linker": {"kb": sys.argv[3]}}} if len(sys.argv) > 3 else {}
nlp = spacy.load(sys.argv[1], config=config)
linker = nlp.get_pipe("pel_linker")
linker.ensure_loaded()
load = time.perf_counter() - t0
docs = read_docbin(spacy.blank("en"), sys.argv[2])
fresh = []
for d in docs:
    c = bare_doc(d, nlp.vocab)
    c.ents = [Span(c, s.start, s.end, label=s.label_) for s in gold_spans(d)]
    fresh.append(c)
t0 = time.perf_counter()
out = list(nlp.pipe(fresh))
seconds = time.perf_counter() - t0
sys.path.insert(0, BENCHMARKS)
from _common import linked_r1
r1 = linked_r1(linker, docs, out)["R@1"]  # evaluate's definitions (alternative ids as primary); None: no in-KB mention
# VmHWM: this process's own peak (ru_maxrss would include the parent's memory at fork, kept across exec)
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
print(json.dumps({"load_seconds": round(load, 2), "peak_rss_mb": round(peak, 1), "R@1": r1,
                  "mentions_per_s": round(sum(len(o.ents) for o in out) / seconds, 1), "kb_entities": len(linker.index)}))
"""


def main(
    encoder: Path = typer.Option(..., help="trained encoder folder (training/retriever/best)"),
    kb: Path = typer.Option(Path("kbs/mesh"), help="full MeSH KB folder (rebuilt into it with --build-kb)"),
    names: Optional[Path] = typer.Option(None, help="the KB's name index (kbs/mesh_names, from build-names); none: no name rows"),
    build: bool = typer.Option(False, "--build-kb", help="build the full MeSH KB in this run (timed)"),
    dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
    train: Path = typer.Option(Path("corpus/bc5cdr_train.spacy")),
    scispacy_python: Optional[Path] = typer.Option(None, help="python of a virtualenv with scispacy (side by side)"),
    skip_baseline: bool = typer.Option(False, help="skip the slow fp32 encode-everything row"),
    load_only: Optional[Path] = typer.Option(None, help="only measure load time / peak RSS of this saved pipeline"),
    sections: str = typer.Option(",".join(SECTIONS), help="sections to measure; the others are kept from speed.json"),
    note: str = typer.Option("machine otherwise idle unless stated", help="a sentence for the report's machine line"),
):
    if load_only is not None:
        typer.echo(json.dumps(measure_load(load_only, dev)))
        return
    wanted = {x.strip() for x in sections.split(",") if x.strip()}
    if wanted - set(SECTIONS):
        raise typer.BadParameter(f"unknown sections {sorted(wanted - set(SECTIONS))}; choose among {', '.join(SECTIONS)}")
    if not build:
        wanted.discard("kb_build")
    report = {"machine": machine(), "note": note, "run": this_run()}
    keep_previous(report, wanted)
    if "kb_build" in wanted:
        t0 = time.perf_counter()
        info = build_kb(SHARED / "mesh", kb, "mesh", str(encoder), precision="auto")
        report["kb_build"] = {"entities": info.get("entities_total"), "seconds": round(time.perf_counter() - t0, 1),
                              "precision": "auto"}
        save(report, partial=True)
    nlp0 = spacy.blank("en")
    docs, train_docs = read_docbin(nlp0, dev), read_docbin(nlp0, train)
    with tempfile.TemporaryDirectory(prefix="pel_speed_") as scratch:  # a saved pipeline, MEDIC's KB: ~1.3 GB
        work = Path(scratch)
        write_aliases(mention_counts(train_docs), work / "aliases.json")
        if "pipelines" in wanted or "load" in wanted:
            default_nlp = bc5cdr_pipelines(report, wanted, encoder, kb, names, docs, corpus_ids(train_docs), work / "aliases.json",
                                           skip_baseline)
            if "load" in wanted:
                default_nlp.to_disk(work / "pipeline")
                report["load"] = measure_load(work / "pipeline", dev)
                save(report, partial=True)
        if "medic" in wanted:
            report["medic"] = medic_side_by_side(encoder, docs, train_docs, work, scispacy_python, names is not None)
    save(report)
    typer.echo(markdown(report))


def this_run() -> str:
    """The date and commit of this run."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    return f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit or 'unknown'}"


def keep_previous(report: dict, wanted: set) -> None:
    """Copy the sections not measured in this run from the existing speed.json, each marked with its run."""
    old_file = HERE / "speed.json"
    if wanted == set(SECTIONS) or not old_file.exists():
        return
    old = json.loads(old_file.read_text(encoding="utf8"))
    for section in SECTIONS:
        if section not in wanted and section in old:
            report[section] = old[section]
            report.setdefault("runs", {})[section] = old.get("runs", {}).get(section) or old.get("run", PREVIOUS_RUN)


def bc5cdr_pipelines(report: dict, wanted: set, encoder: Path, kb: Path, names: Optional[Path], docs, train_ids, aliases: Path,
                     skip_baseline: bool):
    """The BC5CDR dev rows (module doc) into ``report["pipelines"]`` (if wanted); returns the default pipeline."""
    rows = [("fp32, encode every mention", "fp32", False, "per_mention", {}),
            ("+ precision auto", "auto", False, "per_mention", {}),
            ("+ rules decide first (default)", "auto", True, "per_mention", {}),
            ("rules first, no text pass", "auto", True, "per_mention", NO_TEXT),
            ("collective vectors, rules first", "auto", True, "collective", {}),
            ("int8 (for CPUs without bf16), rules first", "int8", True, "per_mention", {}),
            ("fp32 (for CPUs without bf16), rules first", "fp32", True, "per_mention", {}),
            ("fast preset: context 16", "auto", True, "per_mention", FAST),
            ("fast preset: context 12", "auto", True, "per_mention", FASTER),
            ("fast preset: context 16, int8", "int8", True, "per_mention", FAST),
            ("fast preset: context 16, no name rows", "auto", True, "per_mention", FAST_NO_NAMES)]
    if skip_baseline:
        rows = rows[1:]
    if "pipelines" not in wanted:
        rows = [r for r in rows if r[0].endswith("(default)")]
    else:
        report["pipelines"] = {}
    default_nlp = None
    for label, precision, decide, vectors, preset in rows:
        nlp = spacy.blank("en")
        preset = dict(preset)
        with_names = names if preset.pop("names", True) else None
        linker = nlp.add_pipe("pel_linker", config=linker_config(kb, encoder, aliases, precision, decide, vectors, names=with_names, **preset))
        linker.ensure_loaded()
        if "pipelines" in wanted:
            report["pipelines"][label] = run_pipeline(nlp, docs, linker.index.row, train_ids)
            if precision == "int8" or label.endswith("(default)"):
                report["pipelines"][label]["ids_changed_by_batching"] = batching_changes(nlp, linker, docs)
            save(report, partial=True)
        if label.endswith("(default)"):
            default_nlp = nlp
    return default_nlp


def save(report: dict, partial: bool = False) -> None:
    """Write the JSON (``speed.partial.json`` while the run goes on) and, when finished, the markdown."""
    (HERE / ("speed.partial.json" if partial else "speed.json")).write_text(json.dumps(report, indent=2), encoding="utf8")
    if not partial:
        (HERE / "speed.md").write_text(markdown(report), encoding="utf8")
        (HERE / "speed.partial.json").unlink(missing_ok=True)


def measure_load(pipeline: Path, dev: Path, kb: Optional[Path] = None) -> dict:
    """spacy.load (with ``kb`` instead of the pipeline's own KB, if given) + linking all dev gold spans
    in a fresh process: load seconds, that process's peak RSS, R@1, mentions/s."""
    args = [str(pipeline), str(dev)] + ([str(kb)] if kb else [])
    out = subprocess.run([sys.executable, "-c", LOAD_SCRIPT.replace("BENCHMARKS", repr(str(HERE))), *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def medic_side_by_side(encoder: Path, docs, train_docs, work: Path, scispacy_python: Optional[Path], names: bool) -> dict:
    """spacy_pel and scispaCy on the same KB file (MEDIC) and the same BC5CDR dev Disease mentions
    (each linker's speed: the median of 3 timed passes); ``names``: MEDIC's name index is built (its
    time counts in the index build) and the rows have name rows unless their preset says not."""
    medic = SHARED / "ncbi-disease" / "medic_06Jul2012.txt"
    entities = read_kb(medic, format="medic")
    t0 = time.perf_counter()
    build_kb(medic, work / "medic_kb", "medic", str(encoder), precision="auto")
    if names:
        build_names(work / "medic_kb", work / "medic_names", progress=False)
    build_s = time.perf_counter() - t0
    disease = only_label(docs, "Disease")
    out = {"kb_entities": len(entities), "spacy_pel_kb_build_seconds": round(build_s, 1)}
    train_ids = corpus_ids(train_docs)
    for label, aliases, preset in MEDIC_ROWS:
        nlp = spacy.blank("en")
        settings = dict(preset)
        precision = settings.pop("precision", "auto")
        with_names = work / "medic_names" if settings.pop("names", names) else None
        cfg = linker_config(work / "medic_kb", encoder, work / aliases if aliases else None, precision, True, "per_mention",
                            names=with_names, **settings)
        linker = nlp.add_pipe("pel_linker", config=cfg)
        linker.ensure_loaded()
        out[label] = run_pipeline(nlp, disease, linker.index.row, train_ids, passes=3)
    if scispacy_python:
        out["scispacy"] = run_scispacy(scispacy_python, entities, disease, work)
    return out


def run_scispacy(python: Path, entities, disease, work: Path) -> dict:
    kb_file, mentions_file, result = work / "medic_scispacy.jsonl", work / "dev_disease.jsonl", work / "sci.json"
    with kb_file.open("w", encoding="utf8") as f:
        for e in entities:
            f.write(json.dumps({"concept_id": e.id, "canonical_name": e.name, "aliases": e.aliases, "types": e.types}) + "\n")
    with mentions_file.open("w", encoding="utf8") as f:
        for n, d in enumerate(disease):
            for s in gold_spans(d):
                f.write(json.dumps({"text": s.text, "gold": gold_ids(s.kb_id_), "doc": n}) + "\n")
    env = {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    subprocess.run([str(python), str(HERE / "scispacy_driver.py"), str(kb_file), str(mentions_file), str(result)],
                   check=True, env=env)
    return json.loads(result.read_text())


def only_label(docs, label: str):
    """Copies of ``docs`` whose gold spans are those of ``label``."""
    out = []
    for doc in docs:
        copy = doc.copy()
        copy.spans[GOLD_KEY] = [Span(copy, s.start, s.end, label=s.label_, kb_id=s.kb_id_)
                                for s in gold_spans(doc) if s.label_ == label]
        out.append(copy)
    return out


def markdown(r: dict) -> str:
    m, runs = r["machine"], r.get("runs", {})
    dash = lambda value: "–" if value is None else value  # noqa: E731  (an R@1 without mentions to measure)

    def ran(section: str) -> list:
        if section not in runs:
            return []
        how = "; one timed pass, no warm-up" if runs[section] == PREVIOUS_RUN else ""
        return [f"*Section from an earlier run ({runs[section]}{how}).*", ""]

    lines = ["# Speed on a CPU: BC5CDR dev through the whole pipeline, MeSH KB build, scispaCy side by side", "",
             "Reproduce: `python benchmarks/speed.py --encoder training/retriever/best --kb kbs/mesh --names kbs/mesh_names --build-kb "
             "--scispacy-python VENV/bin/python` (after `spacy project run convert` and `train`).", "",
             f"Machine: {m['cpu']}{f' ({cpu_id(m)})' if cpu_id(m) else ''}, flags {', '.join(m['flags'])}; torch {m['torch']}, {m['torch_threads']} threads. "
             f"{r['note']}. Run: {r.get('run', PREVIOUS_RUN)}"
             + ("; sections marked below come from earlier runs of this script" if runs else "") + ".", "",
             "Timing: linking only (the KB loaded), after an untimed warm-up on 16 documents. Every pipeline has the "
             "candidate rules of `configs/linker_rules.cfg` (abbreviations, alias rows, name rows, alias table, spelling "
             "variants, repeats, parenthetical synonyms, undefined short forms, label types) unless its label says otherwise. The default's name rows include the text pass (each open mention's "
             "text encoded as a name: `text_weight` 0.33). Fast presets: the default with "
             "context_window 16 or 12 (default 64) and the text pass off. "
             "int8: the towers run in ONNX Runtime, dynamically quantised (the `int8` precision).", ""]
    if "kb_build" in r:
        b = r["kb_build"]
        lines += ran("kb_build") + [f"Full MeSH KB build ({b['entities']:,} records, precision {b['precision']}): "
                                    f"**{b['seconds'] / 60:.1f} min** ({b['entities'] / b['seconds']:.0f} entities/s).", ""]
    lines += ran("pipelines") + ["| pipeline | mentions/s | R@1 | R@1 seen | R@1 unseen | seconds | other processes (cores) "
                                 "| ids changed by batching |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, p in r["pipelines"].items():
        lines.append(f"| {label} | {p['mentions_per_s']} | {dash(p['R@1_all'])} | {dash(p['R@1_seen'])} | {dash(p['R@1_unseen'])} | {p['seconds']} | "
                     f"{p.get('other_processes_cores', '–')} | {p.get('ids_changed_by_batching', '–')} |")
    lines += ["", "Ids changed by batching: mentions whose kb_id differs when the same documents are linked in "
              "small batches (7 documents per call, 8 mentions per forward pass) instead of the timed ones. "
              "int8 quantises activations per batch, so its answers depend on batching; that is why `auto` "
              "does not choose it."]
    ld = r["load"]
    lines += [""] + ran("load") + [f"Saved default pipeline: load {ld['load_seconds']} s, peak RSS {ld['peak_rss_mb']:.0f} MB while linking dev "
                                   "(a fresh process: spacy.load, then nlp.pipe over all dev docs).", ""]
    md = r["medic"]
    lines += [f"## Side by side on MEDIC ({md['kb_entities']:,} concepts) vs BC5CDR dev Disease mentions", ""] + ran("medic") + [
        "Speed: the median of 3 timed passes for each linker. Other processes: the most cores that processes "
        "other than the benchmark kept busy during a timed pass (from /proc/stat; 0 = an idle machine).", "",
        "| linker | mentions/s | R@1 | index build | other processes (cores) |", "|---|---:|---:|---:|---:|"]
    for label, _, _ in MEDIC_ROWS:
        if label in md:
            p = md[label]
            lines.append(f"| {label} | {p['mentions_per_s']} | {dash(p['R@1_all'])} | {md['spacy_pel_kb_build_seconds']} s | "
                         f"{p.get('other_processes_cores', '–')} |")
    if "scispacy" in md:
        s = md["scispacy"]
        other = s.get("other_processes_cores", {})
        lines.append(f"| {s['tool']}, mentions batched by 256 across documents | {s['mentions_per_second']} | {s['r_at_1']} | "
                     f"{s['index_build_seconds']} s | {other.get('batched', '–')} |")
        if "per_document_mentions_per_second" in s:
            lines.append(f"| {s['tool']}, per document (as its EntityLinker runs in nlp.pipe) | "
                         f"{s['per_document_mentions_per_second']} | {s['r_at_1']} | {s['index_build_seconds']} s | "
                         f"{other.get('per_document', '–')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    typer.run(main)
