"""Argument checks shared by the facade: each raises a typed error before anything is written."""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping
from typing import Any

from .errors import InvalidContentError, InvalidInputError, InvalidTypeError
from .model import NodeType


def content(value: object, max_chars: int) -> str:
    if not isinstance(value, str):
        raise InvalidContentError(f"content must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidContentError("content is empty")
    if len(value) > max_chars:
        raise InvalidContentError(
            f"content has {len(value)} characters; the limit is {max_chars} (write.max_content_chars)"
        )
    if "\x00" in value:
        raise InvalidContentError("content contains a NUL character")
    return value


def node_type(value: object) -> NodeType:
    if isinstance(value, NodeType):
        return value
    if isinstance(value, str):
        try:
            return NodeType(value.strip().lower())
        except ValueError:
            pass
    allowed = ", ".join(t.value for t in NodeType)
    raise InvalidTypeError(f"unknown node type {value!r}; expected one of: {allowed}")


def meta(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidTypeError("meta must be a mapping with string keys")
    try:
        encoded = json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"meta must be JSON-serialisable: {exc}") from None
    decoded: dict[str, Any] = json.loads(encoded)
    return decoded


def timestamp(value: object, name: str = "ts") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a finite number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise InvalidTypeError(f"{name} must be a finite number of seconds, got {value!r}")
    return seconds


def positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
    return value


def namespace(value: object, name: str = "namespace") -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    if len(value) > 128:
        raise InvalidInputError(f"{name} is longer than 128 characters")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise InvalidInputError(f"{name} contains control characters")
    return value


#: Handle roles, each allowing what the one before it does and more.
ROLES = ("read", "write", "admin")


def role(value: object) -> str:
    if value not in ROLES:
        raise InvalidInputError(f"role must be one of {', '.join(ROLES)}, got {value!r}")
    return str(value)
