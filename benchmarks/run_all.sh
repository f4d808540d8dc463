#!/usr/bin/env bash
# Regenerate every benchmark report (hours on 2 cores): KB build, foundation, retriever, e2e.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/logs corpus
[ -f corpus/bc5cdr_dev.spacy ] || python -m spacy_pel.convert ../shared/data/bc5cdr/CDR_DevelopmentSet.PubTator.txt corpus/bc5cdr_dev.spacy
[ -f corpus/bc5cdr_train.spacy ] || python -m spacy_pel.convert ../shared/data/bc5cdr/CDR_TrainingSet.PubTator.txt corpus/bc5cdr_train.spacy
[ -f kbs/mesh/meta.json ] || python -m spacy_pel.build_kb --kb ../shared/data/mesh --format mesh --output kbs/mesh
python benchmarks/foundation.py
python benchmarks/retriever.py
python benchmarks/e2e.py
python benchmarks/discovery.py
python benchmarks/aliases.py --encoder training/bench/ce_mixed50_3ep/best --name ce_mixed50_3ep
python benchmarks/aliases.py --encoder training/bench/ce_cosine_mixed50_3ep/best --name ce_cosine_mixed50_3ep
# speed (needs a scispaCy virtualenv for the side-by-side row: python -m venv V && V/bin/pip install "scipy<1.11" scispacy==0.6.2)
python benchmarks/speed.py --encoder training/bench/ce_cosine_mixed50_3ep/best --kb kbs/mesh_speed --build-kb ${SCISPACY_PYTHON:+--scispacy-python "$SCISPACY_PYTHON"}
# a 2.4M-entity KB: compressed indexes vs exact search, and the whole pipeline over it (needs the pipeline
# `spacy project run all` saves; ~4 GB of RAM and 2 GB of scratch disk)
python benchmarks/large_kb.py --pipeline training/pipeline
