"""A linker's output as Prodigy review tasks, on a real corpus: ``link --output-format prodigy`` over BC5CDR dev's
gold mentions with a trained pipeline, then ``convert`` of the tasks as written (no review). What holds: the tasks
read back as the linked documents (texts, spans, ids); what a reviewer would face: how many pre-selected choices are
wrong (gold among the other options, or not offered at all), and how many options a task shows.

    python benchmarks/prodigy_review.py --pipeline training/pipeline_calibrated --corpus assets/bc5cdr/CDR_DevelopmentSet.PubTator.txt \\
        --work /tmp/review

Writes benchmarks/prodigy_review.md and .json. About a minute: one linking pass.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import spacy
import typer

from _common import HERE, invocation, lscpu_model, machine, machine_line, report_footer
from spacy_pel.bulk.local import link_file
from spacy_pel.corpora import NIL, gold_ids, gold_spans, read_docbin, read_pubtator
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.prodigy_corpus import NIL_PREFIX

app = typer.Typer(add_completion=False)


@app.command()
def main(pipeline: Path = typer.Option(..., help="a trained pipeline"), corpus: Path = typer.Option(..., help="a gold PubTator corpus"),
         work: Path = typer.Option(..., help="where the tasks and the converted corpus go"),
         output: str = typer.Option("prodigy_review"), notes: str = typer.Option("")):
    work.mkdir(parents=True, exist_ok=True)
    tasks_path, back_path = work / "review.jsonl", work / "review.spacy"
    stats = link_file(corpus, tasks_path, pipeline, output_format_name="prodigy", progress=False)
    tasks = [json.loads(line) for line in tasks_path.read_text(encoding="utf8").splitlines()]
    t0 = time.perf_counter()
    convert_corpora([tasks_path], back_path)
    convert_seconds = time.perf_counter() - t0
    back = read_docbin(spacy.blank("en"), back_path)
    gold = read_pubtator(corpus)
    by_doc = {d.pmid: d for d in gold}
    same_text = sum(by_doc[d.user_data["pmid"]].text == d.text for d in back if d.user_data["pmid"] in by_doc)
    written = [(t["meta"]["doc_id"], t["spans"][0]["start"], t["spans"][0]["end"], t["accept"][0]) for t in tasks]
    read = [(d.user_data["pmid"], s.start_char, s.end_char, s.kb_id_) for d in back for s in gold_spans(d)]
    expected = [(i, a, b, NIL if c.startswith(NIL_PREFIX) else c) for i, a, b, c in written]
    gold_of = {(d.pmid, a.start, a.end): set(a.ids) for d in gold for a in d.annotations}
    in_kb = [(t, gold_of[(t["meta"]["doc_id"], t["spans"][0]["start"], t["spans"][0]["end"])]) for t in tasks]
    in_kb = [(t, g) for t, g in in_kb if g != {NIL}]
    right = sum(t["accept"][0] in g for t, g in in_kb)
    offered = sum(bool(g & {o["id"] for o in t["options"]}) for t, g in in_kb)
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "pipeline": str(pipeline), "corpus": str(corpus),
              "docs": stats["docs"], "tasks": len(tasks), "link_seconds": stats["seconds"], "convert_seconds": round(convert_seconds, 2),
              "docs_read_back": len(back), "texts_equal": same_text, "mentions_read_back_as_linked": sorted(read) == sorted(expected),
              "in_kb_tasks": len(in_kb), "preselected_right": right, "gold_offered": offered,
              "options_per_task": round(sum(len(t["options"]) for t in tasks) / max(len(tasks), 1), 2),
              "gold_nil_tasks": len(tasks) - len(in_kb), "command": invocation(), "notes": notes}
    assert all(gold_ids(s.kb_id_) for d in back for s in gold_spans(d))
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    n = r["in_kb_tasks"]
    lines = ["# A linker's output as Prodigy review tasks (`link --output-format prodigy`), read back by `convert`", "",
             machine_line(r["machine"]) + ".", "",
             f"Pipeline `{r['pipeline']}`, corpus `{r['corpus']}` (its gold mentions linked; module doc of "
             "`benchmarks/prodigy_review.py`).", "",
             "| measure | value |", "|---|---:|",
             f"| documents / review tasks (one per mention) | {r['docs']} / {r['tasks']} |",
             f"| linking, seconds (one pass, `link`) / converting the tasks back, seconds | {r['link_seconds']} / {r['convert_seconds']} |",
             f"| documents read back, texts equal to the corpus's | {r['docs_read_back']}, {r['texts_equal']} |",
             f"| mentions read back exactly as linked (document, offsets, id) | {'yes' if r['mentions_read_back_as_linked'] else '**no**'} |",
             f"| options per task (the candidates and `NIL_otherLink`) | {r['options_per_task']} |",
             f"| tasks of a gold mention with an id (the KB's or not; NIL excluded) | {n} |",
             f"| … pre-selected choice right (a reviewer accepts) | {r['preselected_right']} ({r['preselected_right'] / max(n, 1):.3f}) |",
             f"| … gold among the options (a reviewer picks it) | {r['gold_offered']} ({r['gold_offered'] / max(n, 1):.3f}) |",
             f"| tasks of a gold NIL mention | {r['gold_nil_tasks']} |"]
    return "\n".join(lines + report_footer(r))


if __name__ == "__main__":
    app()
