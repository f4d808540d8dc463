"""Abbreviations defined in a text, ``long form (SF)``, found with Schwartz & Hearst's algorithm
(PSB 2003): the short form's characters are matched right to left against the words before the
parenthesis, the short form's first character starting a word.

The linker's abbreviation rule (``spacy_pel.rules.abbreviations.v1``) uses them so that a mention ``RA`` in a document that wrote
``retinoic acid (RA)`` is linked as its long form is.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..kb import normalize

_PAREN = re.compile(r"\(([^()]{1,12})\)")
# ``(DEN: 10 mg/kg)``, ``(ALF; n = 8)``: a short form with two capitals or more, then more words
_PAREN_MORE = re.compile(r"\(([^()\s;:,]{2,10})\s*[;:,][^()]*\)")
_WORD = re.compile(r"\S+")


def _valid_short(sf: str) -> bool:
    return 2 <= len(sf) <= 10 and len(sf.split()) <= 2 and sf[0].isalnum() and any(c.isalpha() for c in sf)


def best_long_form(short: str, words_before: str) -> Optional[str]:
    """The shortest ending of ``words_before`` that contains the characters of ``short`` in order,
    the first one at the start of a word (Schwartz & Hearst's ``findBestLongForm``); None if none."""
    s, l = len(short) - 1, len(words_before) - 1
    while s >= 0:
        c = short[s].lower()
        if not c.isalnum():
            s -= 1
            continue
        while l >= 0 and (words_before[l].lower() != c or (s == 0 and l > 0 and words_before[l - 1].isalnum())):
            l -= 1
        if l < 0:
            return None
        l -= 1
        s -= 1
    start = words_before.rfind(" ", 0, l + 1) + 1
    long = words_before[start:].strip()
    if len(long) <= len(short) or short.lower() in long.lower().split():
        return None
    return long


def initials_long_form(short: str, words_before: str, in_order: bool = False) -> Optional[str]:
    """The last ``len(short)`` words of ``words_before`` when their first letters are the letters of
    ``short``; None otherwise. By default in any order (``myotonic dystrophy (DM)``, after the Latin
    *dystrophia myotonica*), which :func:`best_long_form` cannot match; only for a short form of 2-5
    letters, two capitals or more.

    ``in_order``: only when the words' first letters spell ``short`` (2-10 letters, two capitals or more) —
    ``multiple myeloma (MM)``, ``attenuated adenomatous polyposis coli (AAPC)``, where Schwartz & Hearst's
    shortest match takes a later letter of a word for the short form's first (``myeloma``)."""
    longest = 10 if in_order else 5
    if not (2 <= len(short) <= longest and short.isalpha() and sum(c.isupper() for c in short) >= 2):
        return None
    words = words_before.split()[-len(short):]
    if len(words) < len(short):
        return None
    initials = [w[0].lower() for w in words]
    if (initials != list(short.lower())) if in_order else (sorted(initials) != sorted(short.lower())):
        return None
    return " ".join(words)


def definitions(text: str) -> Dict[str, Tuple[str, int, int]]:
    """``{short form: (long form, start, end)}`` for each ``long form (SF)`` in ``text`` — or ``long form
    (SF: more)``, ``(SF; more)``, ``(SF, more)`` where SF has two capitals or more —, with the long
    form's character offsets in ``text`` (the first definition wins). Words whose first letters spell the
    short form are its long form before Schwartz & Hearst's match; a short form whose letters begin the
    words before it in another order is taken too (:func:`initials_long_form`)."""
    found: Dict[str, Tuple[str, int, int]] = {}
    matches = [(m.start(), m.group(1).strip()) for m in _PAREN.finditer(text)]
    matches += [(m.start(), m.group(1)) for m in _PAREN_MORE.finditer(text) if sum(c.isupper() for c in m.group(1)) >= 2]
    for at, short in sorted(matches):
        if not _valid_short(short) or short in found:
            continue
        n = min(len(short) + 5, 2 * len(short))
        words = [w for w in _WORD.finditer(text, max(0, at - 40 * n), at)][-n:]
        before = " ".join(w.group() for w in words)
        long = initials_long_form(short, before, in_order=True) or best_long_form(short, before) or initials_long_form(short, before)
        if long:  # the long form is the last words before the parenthesis (it starts at a word)
            found[short] = (long, words[-len(long.split())].start(), words[-1].end())
    return found


def whole_word(short: str) -> "re.Pattern[str]":
    """``short`` where it stands as a word of its own: no letter, digit or underscore beside it."""
    return re.compile(rf"(?<!\w){re.escape(short)}(?!\w)")


def abbreviations(text: str) -> Dict[str, str]:
    """``{short form: long form}`` for each ``long form (SF)`` in ``text`` (the first definition wins)."""
    return {short: long for short, (long, _, _) in definitions(text).items()}


def span_chars(doc, doc_spans: Sequence[tuple]) -> List[Tuple[int, int, str]]:
    """``(start_char, end_char, label)`` of a doc's mention spans, given as ``(start, end, label)`` tokens."""
    return [(sp.start_char, sp.end_char, label) for sp, label in ((doc[a:b], label) for a, b, label in doc_spans)]


def short_form_links(docs: Sequence, spans: Sequence[list], texts: List[str],
                     doc_texts: Optional[Sequence[str]] = None) -> Tuple[List[str], Dict[int, int]]:
    """For the mentions of ``docs`` (``spans``: per doc ``(start, end, label)``; ``texts``: their texts,
    flat over the docs; ``doc_texts``: the docs' texts, if already made): the text to look up in an
    alias table (a defined short form's long form), and ``{i: j}`` — mention ``i`` is a short form
    whose long form is mention ``j`` of the same doc: a mention with the long form's text, or else the
    mention of the short form's label inside the long form where it is defined, its head first (``ribavirin-induced hemolytic anemia (RIHA)``: the Disease mention
    ``hemolytic anemia``)."""
    lookup, copy_from, start = list(texts), {}, 0
    for d, (doc, doc_spans) in enumerate(zip(docs, spans)):
        idx = range(start, start + len(doc_spans))
        start += len(doc_spans)
        defined = definitions(doc.text if doc_texts is None else doc_texts[d]) if doc_spans else {}
        if not defined:
            continue
        first: Dict[str, int] = {}
        for g in idx:
            first.setdefault(normalize(texts[g]), g)
        chars = span_chars(doc, doc_spans)
        for g in idx:
            found = defined.get(texts[g].strip())
            if found is None:
                continue
            long, lo, hi = found
            j = first.get(normalize(long))
            if j is None or j == g:
                j = _covering(chars, lo, hi, chars[g - idx.start][2], idx.start, g)
            if j is not None:
                copy_from[g] = j
            else:
                lookup[g] = long
    return lookup, copy_from


def _covering(chars: Sequence[Tuple[int, int, str]], lo: int, hi: int, label: str, first: int, skip: int) -> Optional[int]:
    """The mention (flat index: ``first`` + position) with ``label`` that lies mostly inside characters
    [lo, hi), other than ``skip``: one that ends where they end — the long form's head, ``hemolytic
    anemia`` in ``ribavirin-induced hemolytic anemia`` — before others, then the longest; None if none."""
    best, best_key = None, (False, 0)
    for n, (a, b, lab) in enumerate(chars):
        overlap = min(b, hi) - max(a, lo)
        if first + n == skip or lab != label or overlap * 2 < b - a:
            continue
        key = (abs(b - hi) <= 1, overlap)
        if key > best_key:
            best, best_key = first + n, key
    return best


_UNDEFINED = re.compile(r"^[A-Za-z][A-Za-z0-9]{1,7}$")


def undefined_short_form(text: str) -> Optional[str]:
    """The short form a mention text looks like (2-8 letters and digits, at least two capitals; a plural
    ``s`` after capitals dropped: ``VSDs`` → ``VSD``), or None."""
    text = text.strip()
    if not _UNDEFINED.match(text) or sum(c.isupper() for c in text) < 2:
        return None
    return text[:-1] if text.endswith("s") and text[:-1].isupper() else text


def undefined_short_form_links(docs: Sequence, spans: Sequence[list], still_open: Sequence[bool]) -> Dict[int, int]:
    """``{i: j}`` for the open mentions ``i`` that look like a short form (:func:`undefined_short_form`)
    where some other mention of the same document and label is a long form of it — its whole text is the
    Schwartz & Hearst long form of the short form (:func:`best_long_form`; more than one word or a
    hyphen, at most two words more than the short form has characters) — and all such mentions have
    one normalised text: ``j`` is the first of them. (An ``OAB`` in a text that never wrote
    ``overactive bladder (OAB)`` but has the mention ``overactive bladder``.)"""
    links, start = {}, 0
    for doc, doc_spans in zip(docs, spans):
        idx = range(start, start + len(doc_spans))
        start += len(doc_spans)
        texts = [doc[a:b].text.strip() for a, b, _ in doc_spans]
        for g in idx:
            short = undefined_short_form(texts[g - idx.start]) if still_open[g] else None
            if short is None:
                continue
            label, found = doc_spans[g - idx.start][2], {}
            for j in idx:
                text = texts[j - idx.start]
                if j == g or doc_spans[j - idx.start][2] != label or not (" " in text or "-" in text):
                    continue
                if len(text.split()) <= len(short) + 2 and best_long_form(short, text) == text:
                    found.setdefault(normalize(text), j)
            if len(found) == 1:
                links[g] = next(iter(found.values()))
    return links
