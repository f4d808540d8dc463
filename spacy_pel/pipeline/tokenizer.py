"""``spacy_pel.tokenizer.v1``: spaCy's tokenizer for the language, with the extra splits biomedical
text needs where a span finder reads it.

A span finder can only find a mention whose boundaries are token boundaries. spaCy's English
tokenizer keeps ``(BHA)-induced``, ``[3H]nicotine``, ``thallium-201`` and ``piperacillin-`` (in
``piperacillin- vs tobramycin-``) whole, so ``BHA``, ``nicotine``, ``thallium`` and ``piperacillin``
cannot be found: 131 of BC5CDR dev's 9,591 gold mentions (none of NCBI disease dev's). With these splits
— a hyphen between word characters or after a closing bracket, a bracket inside a token, a hyphen that
ends a word — 28 remain (``5-HT`` in ``5-HT6``, ``hepatitis C`` before a full stop). Spans are scored
by character offsets, so a finer tokenization only adds boundaries. Chosen in the config::

    [nlp.tokenizer]
    @tokenizers = "spacy_pel.tokenizer.v1"

A saved pipeline keeps the tokenizer's patterns in its ``tokenizer`` file, as spaCy's own does.
"""
from __future__ import annotations

from typing import Callable

from spacy.language import Language
from spacy.tokenizer import Tokenizer
from spacy.util import compile_infix_regex, compile_suffix_regex, registry

NAME = "spacy_pel.tokenizer.v1"
DEFAULT = "spacy.Tokenizer.v1"  # spaCy's own: the language's prefixes, suffixes, infixes and exceptions
EXTRA_INFIXES = (
    r"(?<=[\w\)\]])[-–](?=[\w\(\[])",  # a hyphen between word characters or after a bracket: (BHA)-induced, thallium-201
    r"[\[\]\(\)]",  # a bracket inside a token: [3H]nicotine, Na(v)1.6
)
EXTRA_SUFFIXES = (r"(?<=\w)-",)  # a hyphen that ends a word: piperacillin- vs tobramycin-induced


@registry.tokenizers(NAME)
def biomedical_tokenizer() -> Callable[[Language], Tokenizer]:
    """spaCy's default tokenizer for the language with :data:`EXTRA_INFIXES` and :data:`EXTRA_SUFFIXES`."""
    make_default = registry.tokenizers.get(DEFAULT)()

    def make(nlp: Language) -> Tokenizer:
        tokenizer = make_default(nlp)
        tokenizer.suffix_search = compile_suffix_regex([*(nlp.Defaults.suffixes or []), *EXTRA_SUFFIXES]).search
        tokenizer.infix_finditer = compile_infix_regex([*(nlp.Defaults.infixes or []), *EXTRA_INFIXES]).finditer
        return tokenizer

    return make
