"""A short name-level fine-tune of the mention tower (issue 14, item 2, optional): each BC5CDR train
mention is pulled towards its gold entity's best name row (of the MeSH name index) and away from the
name rows of other entities that the name index retrieves for it.

    python benchmarks/name_rows_finetune.py --minutes 12   # the committed run: name_rows_finetune.json
    python benchmarks/name_rows.py measure --encoder /tmp/s7/names/ft/encoder --out name_rows_finetuned

Start: the trained retriever (its mention tower; the entity tower stays the frozen base, so the KB and
the name index keep their fingerprint). Positives: per mention, the gold entity's name row that the
starting mention vector scores highest. Negatives: the top name rows of other entities (mined once, with
the starting tower) and the other mentions' positives in the batch. Loss: cross-entropy over
``scale`` × cosine. Stops after ``minutes`` of training (CPU, 2 threads, bf16 autocast where the CPU has
it) and saves the encoder; no dev figure is used to choose anything.
"""
import json
import random
import time
from pathlib import Path

import numpy as np
import spacy
import torch
import typer

HERE = Path(__file__).resolve().parent

from spacy_pel.corpora import gold_spans, read_docbin
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.precision import resolve_precision
from spacy_pel.pipeline.updating import linkable_mentions
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex


def main(encoder: Path = typer.Option(Path("/tmp/baseline/training/retriever/best")),
         kb: Path = typer.Option(Path("/tmp/s5/kb_mesh")), names: Path = typer.Option(Path("/tmp/s7/names/kb_names/name")),
         train: Path = typer.Option(Path("corpus/bc5cdr_train.spacy")), output: Path = typer.Option(Path("/tmp/s7/names/ft")),
         minutes: float = typer.Option(18.0), batch_size: int = typer.Option(32), hard: int = typer.Option(15),
         lr: float = typer.Option(2e-5), scale: float = typer.Option(20.0), context: int = typer.Option(64),
         seed: int = typer.Option(0)):
    random.seed(seed)
    torch.manual_seed(seed)
    enc = BiEncoder.from_pretrained(encoder, mention_max_length=context, precision="auto")
    index, name_index = EntityIndex.from_disk(kb), NameIndex.from_disk(names)
    name_index.check(enc, index.entities.ids)
    docs = read_docbin(spacy.blank("en"), train)
    items = [(d.text, s.start_char, s.end_char, s.kb_id_) for d in docs for s in gold_spans(d)]
    mentions, gold, skipped = linkable_mentions(items, index.lookup)
    t0 = time.perf_counter()
    start_vectors = enc.encode_mentions(mentions, batch_size=64, progress=True)
    matrix = name_index.searcher.matrix
    positives, negatives = [], []
    _, found = name_index.searcher.search(start_vectors, 4 * hard + 16)
    for i, rows in enumerate(gold):
        own = np.concatenate([name_index.by_entity[name_index.ptr[r] : name_index.ptr[r + 1]] for r in rows])
        scores = matrix[torch.from_numpy(own)].float().numpy() @ start_vectors[i]
        positives.append(int(own[np.argmax(scores)]))
        other = [int(n) for n in found[i] if int(name_index.entity_rows[n]) not in rows]
        negatives.append(other[:hard])
    mine_s = time.perf_counter() - t0
    entity_of = name_index.entity_rows
    enc.train()
    enc.entity_model.requires_grad_(False)
    params = [p for p in enc.mention_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    bf16 = resolve_precision("auto", torch.device("cpu")) == "bf16"
    order, steps, losses, t1 = list(range(len(mentions))), 0, [], time.perf_counter()
    while time.perf_counter() - t1 < minutes * 60:
        random.shuffle(order)
        for b in range(0, len(order) - batch_size + 1, batch_size):
            if time.perf_counter() - t1 >= minutes * 60:
                break
            idx = order[b : b + batch_size]
            cand = [positives[i] for i in idx] + sorted({n for i in idx for n in negatives[i]})
            targets = matrix[torch.tensor(cand)].float()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                m = enc.embed_mentions(enc.mention_inputs([mentions[i] for i in idx]))
            logits = scale * m.float() @ targets.T
            # a candidate naming one of the mention's own gold entities is not a negative
            cand_entities = entity_of[np.asarray(cand)]
            own = torch.tensor([[int(e) in gold[i] for e in cand_entities] for i in idx])
            own[torch.arange(len(idx)), torch.arange(len(idx))] = False
            logits = logits.masked_fill(own, -1e4)
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(idx)))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            steps += 1
            losses.append(loss.item())
            if steps % 20 == 0:
                typer.echo(f"step {steps} loss {np.mean(losses[-20:]):.4f} ({time.perf_counter() - t1:.0f} s)", err=True)
    train_s = time.perf_counter() - t1
    enc.eval()
    enc.save(output / "encoder")
    report = {"start": str(encoder), "train_mentions": len(mentions), "skipped": skipped, "steps": steps,
              "batch_size": batch_size, "hard_negatives": hard, "lr": lr, "scale": scale, "context": context,
              "epochs": round(steps * batch_size / len(mentions), 2), "mine_s": round(mine_s, 1),
              "train_s": round(train_s, 1), "loss_first_20": round(float(np.mean(losses[:20])), 4),
              "loss_last_20": round(float(np.mean(losses[-20:])), 4), "bf16_autocast": bf16}
    (output / "finetune_report.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    typer.echo(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
