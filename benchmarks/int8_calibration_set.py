"""Write spacy_pel/models/data/int8_calibration.jsonl: the fixed inputs of the int8 towers' static
quantisation (spacy_pel/models/int8_calibration.py): the first documents of BC5CDR's training set
(public domain, NLM; title + abstract) with their mention offsets and types.

    python benchmarks/int8_calibration_set.py [--documents 20]
"""
from pathlib import Path

import srsly
import typer

from spacy_pel.corpora import read_pubtator
from spacy_pel.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "bc5cdr" / "CDR_TrainingSet.PubTator.txt"
OUTPUT = ROOT / "spacy_pel" / "models" / "data" / "int8_calibration.jsonl"


def main(documents: int = typer.Option(20, help="documents taken from the start of BC5CDR train"),
         source: Path = typer.Option(SOURCE, help="BC5CDR's training set (PubTator)")) -> None:
    rows = [{"pmid": d.pmid, "text": d.text, "mentions": [[a.start, a.end, a.type] for a in d.annotations]}
            for d in read_pubtator(source)[:documents]]
    atomic_write(OUTPUT, lambda tmp: srsly.write_jsonl(tmp, rows))
    typer.echo(f"{OUTPUT}: {len(rows)} documents, {sum(len(r['mentions']) for r in rows)} mentions")


if __name__ == "__main__":
    typer.run(main)
