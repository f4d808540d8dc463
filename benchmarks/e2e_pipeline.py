"""Raw text in, linked entities out (issue 12): the end-to-end pipeline of `spacy project run e2e`
on BC5CDR dev documents that chose neither γ, the training step nor the NIL threshold.

    python benchmarks/e2e_pipeline.py --span-model training/e2e/best --retriever training/retriever/best \
        --kb kbs/mesh --aliases training/aliases.json [--names kbs/mesh_names] [--one-pass-model DIR]

Every pipeline below finds its mentions with a span model of `train_e2e` (the transformer fine-tuned
from the retriever; best step and γ chosen on dev docs 0-99) and applies candidate rules (the
span-model pipelines: those of `configs/linker_e2e.cfg`, as `configs/linker_rules.cfg`; the one-pass
row: abbreviations and alias table) and the NIL rule (the threshold calibrated on the gold mentions of BC5CDR
train, since dev docs 0-99 have no NIL mention); they differ in how found spans are linked:

* **span model + retriever** (`configs/linker_e2e.cfg`, the default): one marked-up input per found
  span through the trained retriever — "span finder + per-mention linking"; with and without the
  finder's document-level consistency (`propagate`);
* **one pass** (`--one-pass-model`, a span model trained with the linking loss): that model's own token
  vectors, the mean over each found span (the paper's collective design: one transformer pass per
  document does everything).

Today's joint model (`benchmarks/e2e_joint.md`, 50 joint steps from the base encoder) is quoted
from its report (dev docs 250-499); the default is also scored on those documents to compare.
Writes benchmarks/e2e_pipeline.json and .md.
"""
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import spacy
import typer

from _common import cpu_seconds, invocation, machine, others_busy
from spacy_pel.corpora import bare_doc, read_docbin
from spacy_pel.evaluation.linking import e2e_metrics
from spacy_pel.evaluation.nil import calibrate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RULES = {"abbreviations": {"@misc": "spacy_pel.rules.abbreviations.v1"}}
MEASURES = ("span", "strict", "typed", "partial")


def raw(nlp, docs, tokenize: bool = False):
    """The documents' text, no annotations: with the corpus's tokens (``tokenize`` False), or tokenized
    by the pipeline as a user's text is (spans are scored by character offsets either way)."""
    return [nlp.make_doc(d.text) if tokenize else bare_doc(d, nlp.vocab) for d in docs]


def run(pipeline: Path, docs, overrides: Optional[dict] = None, tokenize: bool = False) -> dict:
    """The pipeline (with config ``overrides``) on the raw text of ``docs``: e2e scores and speed
    (``tokenize``: see :func:`raw`)."""
    nlp = spacy.load(pipeline, config=overrides or {})
    texts = raw(nlp, docs, tokenize)
    list(nlp.pipe(raw(nlp, docs[:4], tokenize)))  # warm-up: lazy loading is not linking time
    before, t0 = cpu_seconds(), time.perf_counter()
    predicted = list(nlp.pipe(texts))
    seconds = time.perf_counter() - t0
    found = sum(len(d.ents) for d in predicted)
    return {**e2e_metrics(predicted, docs, nlp.get_pipe("pel_linker").index.canonical), "docs": len(docs), "seconds": round(seconds, 1),
            "docs_per_s": round(len(docs) / seconds, 2), "found_mentions_per_s": round(found / seconds, 1),
            "other_busy_cores": others_busy(before, cpu_seconds(), seconds)}


def span_model_row(folder: Path) -> dict:
    """A train_e2e run's settings and its figures on the tuning docs (from its own logs)."""
    cfg = spacy.util.load_config(folder / "config.cfg")
    log = json.loads((folder / "train_log.json").read_text())
    report = log["span_report"]
    return {"run": str(folder), "kind": cfg["spans"].get("kind", "span"),
            "link_weight": float(cfg["training"].get("link_weight", 1.0)), "steps": log["step"],
            "best_step": log["best_step"], "train_minutes": round(log["train_seconds"] / 60, 1), "gamma": report["threshold"],
            "span": report["dev"]["span"], "one_pass_strict": report["dev"]["strict"], "one_pass_gold_span_R@1": report["dev"]["gold_span_R@1"]}


def one_pass_pipeline(span_model: Path, kb: Path, aliases: Optional[Path], out: Path) -> None:
    nlp = spacy.blank("en")
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "scorer": str(span_model / "span_scorer.safetensors")}
    rules = {**RULES, "aliases": {"@misc": "spacy_pel.rules.alias_table.v1", "aliases": str(aliases) if aliases else None}}
    nlp.add_pipe("pel_linker", config={"kb": str(kb), "encoder": str(span_model), "mentions": finder,
                                       "vectors": {"@misc": "spacy_pel.vectors.collective.v1"}, "rules": rules})
    nlp.initialize()
    nlp.to_disk(out)


def main(span_model: Path = typer.Option(Path("training/e2e/best")), retriever: Path = typer.Option(Path("training/retriever/best")),
         one_pass_model: Optional[Path] = typer.Option(None, help="A span model trained with the linking loss, for the one-pass row"),
         compare: List[Path] = typer.Option([], help="Other train_e2e output folders to tabulate (their dev docs 0-99 figures)"),
         kb: Path = typer.Option(Path("kbs/mesh")), aliases: Optional[Path] = typer.Option(Path("training/aliases.json")),
         names: Optional[Path] = typer.Option(None, help="a name index of the KB (build-names; kbs/mesh_names), for configs/linker_e2e.cfg's "
                                             "name-row rule (null: rule off)"),
         dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
         nil_corpus: Path = typer.Option(Path("corpus/bc5cdr_train.spacy"), help="Gold corpus the NIL threshold is calibrated on (dev docs 0-99 have no NIL mention)"),
         work: Path = typer.Option(Path("training/bench/e2e_pipeline")),
         context_window: int = typer.Option(64),
         output: str = typer.Option("e2e_pipeline", help="report name in benchmarks/")):
    work.mkdir(parents=True, exist_ok=True)
    span_report = json.loads((span_model / "span_report.json").read_text())
    log = json.loads((span_model.parent / "train_log.json").read_text())
    tuned = int(span_report["dev_docs"])  # dev docs 0..tuned-1 chose the step and γ
    nlp = spacy.blank("en")
    docs = read_docbin(nlp, dev)
    held_out = docs[tuned:]
    report = {"machine": machine(), "nil_corpus": str(nil_corpus), "span_model": str(span_model), "retriever": str(retriever), "kb": str(kb), "names": str(names) if names else None,
              "tuning_docs": tuned, "held_out_docs": len(held_out), "span_report": span_report,
              "training": {k: log.get(k) for k in ("step", "best_step", "train_seconds", "wall_seconds") if k in log},
              "pipelines": {}, "span_models": [span_model_row(span_model.parent)] + [span_model_row(c) for c in compare]}
    default, other = work / "pipeline_e2e", work / "pipeline_e2e_other"
    config = ROOT / "configs" / "linker_e2e.cfg"
    finder = spacy.util.load_config(config)["components"]["pel_linker"]["mentions"]
    propagate, floor = finder.get("propagate", False), float(finder.get("propagate_floor", 0.0))
    settings = [(default, propagate, floor), (other, not propagate, floor)]
    runs = [(f"span model + retriever, propagate {str(propagate).lower()}" + (f", floor {floor}" if propagate and floor else "") + " (default)", default),
            (f"span model + retriever, propagate {str(not propagate).lower()}" + (f", floor {floor}" if not propagate and floor else ""), other)]
    if floor:  # the config's floor against none (every occurrence propagated)
        settings.append((work / "pipeline_e2e_no_floor", True, 0.0))
        runs.append(("span model + retriever, propagate true, no floor", work / "pipeline_e2e_no_floor"))
    for folder, prop, fl in settings:
        subprocess.run([sys.executable, "-m", "spacy", "assemble", str(config), str(folder),
                        "--paths.kb", str(kb), "--paths.encoder", str(retriever), "--paths.span_model", str(span_model),
                        "--paths.aliases", str(aliases) if aliases else "null", "--paths.names", str(names) if names else "null",
                        "--components.pel_linker.mentions.propagate", str(prop).lower(),
                        "--components.pel_linker.mentions.propagate_floor", str(fl),
                        "--components.pel_linker.context_window", str(context_window)], check=True)
    if one_pass_model:
        one_pass_pipeline(one_pass_model, kb, aliases, work / "one_pass")
        runs.append((f"one pass: `{one_pass_model}` finds and links", work / "one_pass"))
    for name, folder in runs:
        nil = calibrate(folder, nil_corpus, folder.with_name(folder.name + "_calibrated"))
        result = run(folder.with_name(folder.name + "_calibrated"), held_out)
        report["pipelines"][name] = {**result, "nil_threshold": nil["threshold"]}
        print(name, json.dumps({k: result[k] for k in MEASURES}), flush=True)
    report["default_on_docs_250_499"] = run(default.with_name(default.name + "_calibrated"), docs[250:])
    joint = HERE / "e2e_joint.json"
    if joint.exists():
        report["todays_joint_model"] = json.loads(joint.read_text())["e2e"]
    report["command"] = invocation()
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    m, t = r["machine"], r["training"]
    lines = [
        "# Raw text in, linked entities out: BC5CDR dev vs all 354,068 MeSH records",
        "",
        f"Reproduce: `{r.get('command', 'python benchmarks/e2e_pipeline.py')}` after `spacy project run all` and `spacy project run e2e` "
        f"(span model `{r['span_model']}`, retriever `{r['retriever']}`). Machine: {m['cpu']} ({', '.join(m['flags'])}), "
        f"{m['torch_threads']} torch threads, torch {m['torch']}; one run. Accuracy does not depend on load; docs/s "
        "does: the last column says how many cores other jobs kept busy while each pipeline was timed.",
        "",
        f"Span model: `train_e2e` from the trained retriever, {t.get('step')} steps of 4 documents "
        f"(best step {t.get('best_step')} by span F1 on dev docs 0-{r['tuning_docs'] - 1}), "
        f"training time {round((t.get('train_seconds') or 0) / 60, 1)} min; γ = {r['span_report']['threshold']}. "
        f"The NIL threshold of each pipeline is calibrated on the gold mentions of `{r['nil_corpus']}` (dev docs 0-{r['tuning_docs'] - 1} have no NIL mention). "
        f"Scores below: dev docs {r['tuning_docs']}-{r['tuning_docs'] + r['held_out_docs'] - 1} ({r['held_out_docs']} documents, none used for tuning).",
        "",
        "| pipeline | span P / R / F1 | strict P / R / F1 | typed strict F1 | partial F1 | docs/s | found mentions/s | other busy cores |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, p in r["pipelines"].items():
        span, strict = p["span"], p["strict"]
        lines.append(f"| {name} | {span['p']:.3f} / {span['r']:.3f} / **{span['f']:.3f}** | {strict['p']:.3f} / {strict['r']:.3f} / "
                     f"**{strict['f']:.3f}** | {p['typed']['f']:.3f} | {p['partial']['f']:.3f} | {p['docs_per_s']} | {p['found_mentions_per_s']} | {p['other_busy_cores']} |")
    lines += ["", f"Span models compared (`train_e2e`, same budget; figures on the tuning docs 0-{r['tuning_docs'] - 1}, at each "
              "run's own γ; one-pass strict = the model's own linking by its mean span vectors, without rules):", "",
              "| run | span head | linking loss weight | steps (best) | train min | γ | span P / R / F1 | one-pass strict F1 | one-pass gold-span R@1 |",
              "|---|---|---:|---|---:|---:|---|---:|---:|"]
    for m in r["span_models"]:
        sp = m["span"]
        lines.append(f"| `{m['run']}` | {m['kind']} | {m['link_weight']} | {m['steps']} ({m['best_step']}) | {m['train_minutes']} | {m['gamma']} | "
                     f"{sp['p']:.3f} / {sp['r']:.3f} / **{sp['f']:.3f}** | {m['one_pass_strict']['f']:.3f} | {m['one_pass_gold_span_R@1']:.3f} |")
    d = r["default_on_docs_250_499"]
    lines += ["", "On dev docs 250-499, where today's joint model was measured:", "",
              "| pipeline | span F1 | strict P / R / F1 | partial F1 |", "|---|---:|---|---:|",
              f"| span model + retriever (default) | {d['span']['f']:.3f} | {d['strict']['p']:.3f} / {d['strict']['r']:.3f} / "
              f"{d['strict']['f']:.3f} | {d['partial']['f']:.3f} |"]
    j = r.get("todays_joint_model")
    if j:
        lines.append(f"| today's joint model (`benchmarks/e2e_joint.md`, quoted) | – | {j['strict']['p']:.3f} / {j['strict']['r']:.3f} / "
                     f"{j['strict']['f']:.3f} | {j['partial']['f']:.3f} |")
    lines += ["", "Strict: exact span and right id; typed: also the gold label (Chemical, Disease) from the span model's label head; "
              "partial: overlapping span and right id; span: exact boundaries, ids ignored. Other busy cores: what processes "
              "other than the benchmark kept busy during the timed pass (from /proc/stat; 0 = an idle machine; 2 cores in all). NIL gold mentions and NIL "
              "predictions are left out of the linked measures. The paper (BioBERT, GPU, full training) reports strict F1 0.738 "
              "on BC5CDR test.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    typer.run(main)
