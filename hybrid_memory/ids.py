"""Node ids that sort by creation time.

An id is 24 lowercase hex digits: 12 of the Unix time in milliseconds, then 12 of
a counter that starts at a random value each millisecond and counts up within it.
Ids made by one process therefore increase strictly, even if the clock steps back.
Two processes can only make the same id in the same millisecond, and then only if
their random starts (47 bits) land within the number of ids they make in it: odds
of about one in 10^13 for each id.

Why not random ids: every table keyed or indexed by node id (the nodes, the lexical
terms' node index, the op log's node index, the materialised paths) is a B-tree, and
random keys put each new row on a random page of it. Once those trees outgrow the page
cache, every row of a write batch dirties its own pages; ids that grow with time land
at the right edge instead (add_many of a 100k-node memory: a fifth faster overall,
about a third faster at its end, measured in eval/BENCHMARKS.md).

The leading digits are the same for every memory written within a minute, so the
short form people read and type (``short_id``, what the command line prints) is an
id's last eight digits, and the command line takes a unique prefix or a unique
suffix of an id.

Ids written by earlier versions (16 random hex digits) stay valid: nothing parses an
id, and the two kinds only differ in how they sort.
"""

from __future__ import annotations

import os
import secrets
import threading
import time

ID_LENGTH = 24
#: Digits of the short form (``short_id``).
SHORT_LENGTH = 8
_TIME_DIGITS = 12
_COUNTER_BITS = 48
# A new millisecond's counter starts below half its range, so counting up within one
# millisecond cannot run out (it would take 2^47 ids in a millisecond).
_START_BITS = _COUNTER_BITS - 1


# The wall clock, read through this name so that a test can hold it still.
_now_ns = time.time_ns


class _IdClock:
    """The last millisecond and counter handed out, guarded by a lock."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start afresh: what a forked child must do, or it would continue its parent's
        counter and hand out the parent's ids in the same millisecond (a new lock too,
        as the parent's may have been held by another thread at the fork)."""
        self._lock = threading.Lock()
        self._ms = 0
        self._count = 0

    def next(self) -> str:
        now = _now_ns() // 1_000_000
        with self._lock:
            if now > self._ms:
                self._ms, self._count = now, secrets.randbits(_START_BITS)
            else:
                # The same millisecond, or the clock stepped back: keep counting on the
                # last millisecond so that ids never decrease.
                self._count += 1
                if self._count >> _COUNTER_BITS:
                    self._ms, self._count = self._ms + 1, secrets.randbits(_START_BITS)
            return f"{self._ms:0{_TIME_DIGITS}x}{self._count:0{ID_LENGTH - _TIME_DIGITS}x}"


_CLOCK = _IdClock()
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_CLOCK.reset)


def new_node_id() -> str:
    """A fresh node id: 24 hex digits, increasing with every call in this process."""
    return _CLOCK.next()


def short_id(node_id: str) -> str:
    """The short form of an id for people: its last eight digits, which differ between
    memories written in the same minute (the leading ones do not)."""
    return node_id[-SHORT_LENGTH:]
