"""Summaries of finished work: the default summarizer, and what a summary covers.

``MemoryTree.summarize(node)`` writes one ``summary`` node under ``node``: the text
a summarizer makes of the live memories below it (the node's *details*), given in
tree order. Its meta links it to what it covers: ``summary_of`` (the node) and
``covers`` (the details' ids). ``finish(task)`` summarizes a task and marks it
finished: the task's meta gets ``finished_at`` and ``summary_id``.

What a summary changes elsewhere:

- forgetting takes a detail a live summary covers before any other memory
  (``forgetting.summarized``: the share of its weight it keeps);
- a recall whose picks do not all fit the token budget shows a finished task's
  summary in place of the details it picked under that task, and says so.

A summarizer is any callable from texts to one text (an LLM call, for example).
The default, :class:`Extractive`, is offline: it keeps the highest-weighted, least
redundant sentences of the details within a token budget, in any language the
lexical terms read (:func:`hybrid_memory.text.terms`: English words, Chinese words
and character pairs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from . import text
from .errors import InvalidInputError, InvalidTypeError
from .model import Node, NodeType

#: A summary's meta: the node it summarizes, and the ids of the details it covers.
SUMMARY_OF = "summary_of"
COVERS = "covers"
#: Which summarizer wrote it ("extractive" for the default, else the callable's name).
SUMMARIZER = "summarizer"
#: A finished task's meta: when it was finished, and its summary.
FINISHED_AT = "finished_at"
SUMMARY_ID = "summary_id"

#: Makes one text of the details' texts (oldest first, in tree order).
Summarizer = Callable[[Sequence[str]], str]

# A sentence ends after one of these (a Latin one before a space or the end), or at a line break.
_SENTENCE = re.compile(r"[^\n]*?(?:[。！？；…]+|[.!?;]+(?=\s|$)|\n|$)")
_CJK_END = frozenset("。！？；…")


def sentences(text_: str) -> list[str]:
    """The sentences of ``text_``, stripped, in order (empty ones left out)."""
    return [s.strip() for s in _SENTENCE.findall(text_) if s.strip()]


class Extractive:
    """The default summarizer: the sentences of the details that weigh most and repeat
    least, within ``budget_tokens`` (:func:`hybrid_memory.text.count_tokens`).

    Each sentence weighs what its memory weighs (equal weights when none are given).
    Sentences are taken one at a time, the one with the highest weight times its
    novelty (one less its largest term overlap with a sentence already taken) first,
    the earlier on a tie; a sentence that adds no new term, or no longer fits, is
    passed over. The kept sentences are joined in the order of the texts.
    """

    name = "extractive"

    def __init__(self, budget_tokens: int = 120) -> None:
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 1:
            raise InvalidInputError("budget_tokens must be an integer >= 1")
        self.budget_tokens = budget_tokens

    def __call__(self, texts: Sequence[str], weights: Sequence[float] | None = None) -> str:
        if weights is not None and len(weights) != len(texts):
            raise InvalidInputError("give one weight per text")
        pool: list[_Sentence] = []
        for i, t in enumerate(texts):
            for j, s in enumerate(sentences(t)):
                words = frozenset(text.terms(s))
                if words:
                    pool.append(_Sentence((i, j), s, words, 1.0 if weights is None else float(weights[i]),
                                          text.count_tokens(s)))
        kept: list[_Sentence] = []
        left = self.budget_tokens
        seen = [0.0] * len(pool)  # each sentence's largest overlap with one kept
        alive = [n for n, c in enumerate(pool) if c.tokens <= left]
        while alive:
            best = max(alive, key=lambda n: (pool[n].weight * (1.0 - seen[n]), -n))
            if pool[best].weight * (1.0 - seen[best]) <= 0:
                break
            kept.append(pool[best])
            left -= pool[best].tokens
            alive = [n for n in alive if n != best and pool[n].tokens <= left]
            for n in alive:
                seen[n] = max(seen[n], text.jaccard(pool[n].words, pool[best].words))
        return join(c.text for c in sorted(kept, key=lambda c: c.at))


class _Sentence(NamedTuple):
    at: tuple[int, int]  # (text, sentence) position
    text: str
    words: frozenset[str]
    weight: float
    tokens: int


def join(parts: Iterable[str]) -> str:
    """Sentences as one text: a space after a Latin one, none after a Chinese one."""
    out = ""
    for s in parts:
        out += s if not out or out[-1] in _CJK_END else " " + s
    return out


def details(below: Sequence[Node], node_id: str) -> list[Node]:
    """What a summary of ``node_id`` covers among the live nodes ``below`` it (its
    subtree without it, in tree order): every memory but the summaries."""
    return [n for n in below if n.id != node_id and n.live and n.type is not NodeType.SUMMARY]


def write_text(summarizer: Summarizer | None, details_: Sequence[Node], weights: Sequence[float],
               budget_tokens: int) -> tuple[str, str]:
    """The summary's text and the summarizer's name: ``summarizer`` given the details'
    texts, or :class:`Extractive` with their weights. A summarizer that does not return
    a non-empty text raises :class:`InvalidInputError`."""
    texts = [n.content for n in details_]
    if summarizer is None:
        made: object = Extractive(budget_tokens)(texts, weights)
        name = Extractive.name
    else:
        if not callable(summarizer):
            raise InvalidTypeError(f"summarizer must be callable, got {type(summarizer).__name__}")
        made = summarizer(texts)
        name = str(getattr(summarizer, "name", None) or getattr(summarizer, "__name__", type(summarizer).__name__))
    if not isinstance(made, str) or not made.strip():
        what = "an empty text" if isinstance(made, str) else f"a {type(made).__name__}, not a text"
        raise InvalidInputError(f"the summarizer returned {what}: nothing was written")
    return made.strip(), name


def summary_meta(node_id: str, covered: Sequence[Node], summarizer: str) -> dict[str, Any]:
    return {SUMMARY_OF: node_id, COVERS: [n.id for n in covered], SUMMARIZER: summarizer}


def finished_summary(node: Node) -> str | None:
    """The id of the summary of ``node`` when it is a finished task (None otherwise)."""
    if node.type is NodeType.TASK and node.meta.get(FINISHED_AT) is not None:
        sid = node.meta.get(SUMMARY_ID)
        return sid if isinstance(sid, str) else None
    return None


def covered_by(summaries: Iterable[Node]) -> set[str]:
    """The ids the live ``summaries`` cover (their ``covers`` meta)."""
    out: set[str] = set()
    for s in summaries:
        ids = s.meta.get(COVERS)
        if s.live and s.type is NodeType.SUMMARY and isinstance(ids, list):
            out.update(i for i in ids if isinstance(i, str))
    return out


def marked(meta: Mapping[str, Any], summary_id: str, finished_at: float | None) -> dict[str, Any]:
    """A summarized node's meta: ``meta`` with its summary (and, for ``finish``, when)."""
    out = dict(meta, **{SUMMARY_ID: summary_id})
    if finished_at is not None:
        out[FINISHED_AT] = finished_at
    return out
