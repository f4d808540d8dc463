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
