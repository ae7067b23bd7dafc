"""Text helpers shared by the lexical index, deduplication and the token budget.

Terms: Latin words are lower-cased and stemmed by the Snowball English stemmer
(PyStemmer), so "reproduced" and "reproduce" are one term; numbers and
identifiers stay whole. CJK text, which has no spaces, becomes overlapping
character bigrams (a lone character stands for itself) and, beside them, the
words of two or more characters that jieba's dictionary segments it into. The
bigrams make Chinese retrievable even with an English embedder; the words weigh
a real word above a pair that straddles two.

:data:`TERMS_VERSION` names this tokenization: a memory indexed under another is
re-indexed when it is opened.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

#: The version of :func:`terms` (1: whole words and bigrams; 2: stems, and jieba's
#: words beside the bigrams).
TERMS_VERSION = "2"

_CJK = (
    "\u3040-\u30ff"  # kana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul
)
# A Latin "word" is a run of word characters that are not CJK.
_WORD = rf"(?:(?![{_CJK}])[^\W_])+"
_PIECES = re.compile(rf"[{_CJK}]+|{_WORD}", re.UNICODE)
# A token: what spaces and CJK characters delimit ("TKT-1049", "v2.1").
_TOKENS = re.compile(rf"[^\s{_CJK}]+")
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
_TOKEN_PIECES = re.compile(rf"[{_CJK}]|{_WORD}|[^\s\w]", re.UNICODE)

_STOP = frozenset(
    "a an and are as at be been but by did do does for from had has have he her him his how i "
    "in is it its me my of on or our she so than that the their them then there they this to "
    "us was we were what when where which who why will with would you your".split()
)


# What English writes after an apostrophe ("Zhang's", "don't", "we'll"): not a
# word of its own, and as a one-letter term it looked rare enough to decide a match.
_CLITICS = frozenset(("s", "t", "m", "d", "ll", "re", "ve"))
_APOSTROPHES = frozenset("'\u2019")


#: What a word of a CJK run weighs in a query beside a Latin word (:func:`term_weights`);
#: fitted on the Chinese and mixed sources (eval/CHANGES.md, 2026-12-07, sixth session).
CJK_WORD_WEIGHT = 1 / 3

#: The top of the Zipf scale (log10 of a word's count per billion words): no word
#: reaches it ("the" is 7.7), so it is where :func:`language_rarity` reaches 0.
ZIPF_SCALE = 8.0


def terms(text: str) -> list[str]:
    """The lexical terms of ``text``, in order, with repeats."""
    return [t for run, _, _, _ in _runs(text) for t in run]


def term_set(text: str) -> frozenset[str]:
    """The distinct terms of ``text``."""
    return frozenset(terms(text))


def term_weights(text: str) -> dict[str, float]:
    """Each distinct term of :func:`terms` (in the same order) with what it weighs
    in a query. A Latin word weighs its :func:`language_rarity` (the first way the
    query writes it), and 1 in a token holding a digit ("TKT-1049", "v2", "2025"):
    such a token names one thing, and wordfreq counts numbers by their shape. A CJK
    run is read twice, as overlapping bigrams and as jieba's words, so its terms
    are parts of its words: each is (the words jieba finds in the run) / (the run's
    terms) of a word, a term both readings give (a two-character word is also a
    bigram) counting twice, at most one word; and a CJK word weighs
    ``CJK_WORD_WEIGHT``. Counted term by term, a Chinese phrase outweighed the
    identifier or name beside it that says which memory is meant."""
    named = [m.span() for m in _TOKENS.finditer(text.lower()) if any(c.isdigit() for c in m.group())]
    out: dict[str, float] = {}
    for run, words, piece, start in _runs(text):
        if not words:
            out.setdefault(run[0], 1.0 if any(a <= start < b for a, b in named) else language_rarity(piece))
            continue
        for term, n in Counter(run).items():
            out[term] = max(out.get(term, 0.0), CJK_WORD_WEIGHT * min(1.0, n * words / len(run)))
    return out


@functools.lru_cache(maxsize=1 << 16)
def language_rarity(word: str) -> float:
    """How rare a lower-case Latin ``word`` is in English: 1 minus its Zipf frequency
    over 8 (wordfreq's lists: a Zipf frequency of 6 is once in a thousand words, and
    none reaches 8), so "after" weighs 0.24, "ticket" 0.42, "handover" 0.63, and a
    word or identifier English does not use 1. A memory of a few thousand texts
    tells how rare a word is among them, not whether it is one any text may hold:
    counted by the memory alone, the "after" of "stay one extra night after PyCon"
    weighed as much as the ticket id a question named."""
    from wordfreq import zipf_frequency

    return max(0.0, 1.0 - zipf_frequency(word, "en") / ZIPF_SCALE)


def _runs(text: str) -> Iterator[tuple[list[str], int, str, int]]:
    """The terms of each piece of ``text``, in order: a Latin word's one term (and
    0), or a CJK run's terms (its bigrams, then jieba's words of two or more
    characters; a lone character stands for itself) and the number of words
    jieba finds in it; and the piece as written (lower case) and where it starts."""
    lower = text.lower()
    for match in _PIECES.finditer(lower):
        piece = match.group()
        start = match.start()
        if piece in _CLITICS and start and lower[start - 1] in _APOSTROPHES:
            continue
        if is_cjk(piece):
            if len(piece) == 1:
                yield [piece], 1, piece, start
            else:
                words = _segmenter().lcut(piece)
                bigrams = [piece[i : i + 2] for i in range(len(piece) - 1)]
                yield bigrams + [w for w in words if len(w) > 1], len(words), piece, start
        elif piece not in _STOP:
            yield [stem(piece) if piece.isalpha() else piece], 0, piece, start


_stemmers = threading.local()  # a PyStemmer object is not safe to share between threads


def stem(word: str) -> str:
    """The Snowball English stem of a lower-case word ("reproduced" -> "reproduc")."""
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        import Stemmer

        stemmer = _stemmers.english = Stemmer.Stemmer("english")
    return str(stemmer.stemWord(word))


@functools.cache
def _segmenter() -> Any:
    """jieba's tokenizer, its dictionary loaded on first use (about half a second)."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    return tokenizer


def is_cjk(term: str) -> bool:
    """Whether ``term`` is CJK text (a character or a bigram of :func:`terms`)."""
    return bool(_CJK_RUN.match(term))


def term_counts(text: str) -> Counter[str]:
    return Counter(terms(text))


def overlap(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' term sets (1.0 for two texts with no terms)."""
    return jaccard(set(terms(a)), set(terms(b)))


def jaccard(ta: set[str] | frozenset[str], tb: set[str] | frozenset[str]) -> float:
    if not ta and not tb:
        return 1.0
    return len(ta & tb) / len(ta | tb)


def figures(text: str) -> frozenset[str]:
    """The terms that hold a digit: amounts, dates, ids. Two memories that differ in
    one are different memories, however alike the rest reads."""
    return frozenset(t for t in terms(text) if any(ch.isdigit() for ch in t))


def content_hash(content: str) -> str:
    """SHA-256 of the whitespace-normalised content: what finds an exact twin (the store
    keys it with its keyring when it has one)."""
    return hashlib.sha256(" ".join(content.split()).encode("utf-8")).hexdigest()


def token_spans(text: str) -> list[tuple[int, int, int]]:
    """(start, stop, tokens) of each piece :func:`count_tokens` counts, in order."""
    return [(m.start(), m.end(), max(1, math.ceil((m.end() - m.start()) / 4)))
            for m in _TOKEN_PIECES.finditer(text)]


#: How much of a text :func:`mostly_cjk` reads: its opening tells the script.
_SCRIPT_SAMPLE = 400


def mostly_cjk(text: str) -> bool:
    """Whether ``text`` is written mostly in CJK: its CJK characters outnumber its
    other words (the pieces :func:`count_tokens` reads, each counted once): a Chinese
    note naming "Susan Harris" and EXP-8964 is, an English one naming 如家酒店 is not.
    Only the first 400 characters are read."""
    return _mostly_cjk(text[:_SCRIPT_SAMPLE])


@functools.lru_cache(maxsize=16_384)
def _mostly_cjk(text: str) -> bool:
    cjk = other = 0
    for piece in _TOKEN_PIECES.findall(text):
        if is_cjk(piece):
            cjk += 1
        elif piece[0].isalnum():
            other += 1
    return cjk > other


def count_tokens(text: str) -> int:
    """An estimate of an LLM tokenizer's count: one per CJK character or punctuation
    mark, one per four characters of a Latin word (at least one)."""
    n = 0
    for piece in _TOKEN_PIECES.findall(text):
        n += max(1, math.ceil(len(piece) / 4)) if len(piece) > 1 else 1
    return n
