"""The times a transcript writes, as epoch seconds.

Read: a number (epoch seconds; past 10^11, milliseconds), ISO 8601 ("2023-05-08",
"2023-05-08T13:56:00Z", "2023-05-08 13:56"), and the forms two public chat data
sets use: "1:56 pm on 8 May, 2023" and "2023/05/20 (Sat) 02:21". A time without
a zone is read as UTC. Anything else is None: the caller names the line.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

_MONTHS = "january february march april may june july august september october november december".split()
# "1:56 pm on 8 May, 2023"
_SPOKEN = re.compile(r"(\d{1,2}):(\d{2})\s*([ap])\.?m\.? on (\d{1,2}) ([a-z]+),? (\d{4})", re.I)
# "2023/05/20 (Sat) 02:21", "2023/05/20 02:21", "2023/05/20"
_SLASHED = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})(?: \(\w+\))?(?: (\d{1,2}):(\d{2}))?")


def parse(value: object) -> float | None:
    """Epoch seconds of ``value``, or None when it is not a time this module reads."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds):
            return None
        return seconds / 1000.0 if abs(seconds) >= 1e11 else seconds
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        return parse(float(text))
    try:
        return _dated(text)
    except (ValueError, OverflowError):
        return None


def _dated(text: str) -> float | None:
    spoken = _SPOKEN.fullmatch(text)
    if spoken is not None:
        if spoken[5].lower() not in _MONTHS:
            return None
        hour = int(spoken[1]) % 12 + (12 if spoken[3].lower() == "p" else 0)
        return _utc(int(spoken[6]), _MONTHS.index(spoken[5].lower()) + 1, int(spoken[4]), hour, int(spoken[2]))
    slashed = _SLASHED.fullmatch(text)
    if slashed is not None:
        return _utc(int(slashed[1]), int(slashed[2]), int(slashed[3]), int(slashed[4] or 0), int(slashed[5] or 0))
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def _utc(year: int, month: int, day: int, hour: int, minute: int) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=timezone.utc).timestamp()


def show(ts: float) -> str:
    """A time as a person reads it: "2023-05-08 13:56 UTC"."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
