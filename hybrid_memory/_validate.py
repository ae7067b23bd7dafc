"""Argument checks shared by the facade: each raises a typed error before anything is written."""

from __future__ import annotations

import functools
import inspect
import json
import math
import reprlib
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .errors import AccessDeniedError, InvalidContentError, InvalidInputError, InvalidTypeError
from .model import NodeType

#: Nesting of meta (mappings and lists inside each other) allowed at most.
MAX_META_DEPTH = 64

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxstring, _repr.maxother = 3, 60, 60


def show(value: object) -> str:
    """A short, safe repr for an error message: bounded in length and nesting."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    try:
        return _repr.repr(value)
    except Exception:  # a value whose own repr fails
        return f"a {type(value).__name__}"


def is_utf8(value: str) -> bool:
    """Whether UTF-8 can hold the text (lone surrogates, as from undecodable bytes, it cannot)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8(value: str, name: str) -> str:
    """Refuse text that UTF-8 cannot hold."""
    if not is_utf8(value):
        at = next(i for i, ch in enumerate(value) if "\ud800" <= ch <= "\udfff")
        raise InvalidContentError(f"{name} is not valid Unicode text (a lone surrogate at position {at})")
    return value


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
    return utf8(value, "content")


def node_type(value: object) -> NodeType:
    if isinstance(value, NodeType):
        return value
    if isinstance(value, str):
        try:
            return NodeType(value.strip().lower())
        except ValueError:
            pass
    allowed = ", ".join(t.value for t in NodeType)
    raise InvalidTypeError(f"unknown node type {show(value)}; expected one of: {allowed}")


def meta(value: object, max_chars: int | None = None) -> dict[str, Any]:
    """A JSON object of at most ``MAX_META_DEPTH`` levels (and ``max_chars`` characters
    as JSON), of valid Unicode text."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidTypeError("meta must be a mapping with string keys")
    _nesting(value)
    try:
        encoded = json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidTypeError(f"meta must be JSON-serialisable: {show(str(exc))}") from None
    utf8(encoded, "meta")
    if max_chars is not None and len(encoded) > max_chars:
        raise InvalidContentError(
            f"meta has {len(encoded)} characters as JSON; the limit is {max_chars} (write.max_content_chars)")
    decoded: dict[str, Any] = json.loads(encoded)
    return decoded


def _nesting(value: object) -> None:
    """Walk containers without recursion; refuse more than MAX_META_DEPTH levels."""
    stack: list[tuple[object, int]] = [(value, 1)]
    seen = 0
    while stack:
        v, depth = stack.pop()
        if depth > MAX_META_DEPTH:
            raise InvalidTypeError(f"meta is nested more than {MAX_META_DEPTH} levels deep")
        seen += 1
        if isinstance(v, Mapping):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend((x, depth + 1) for x in v)


def flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be true or false, got {show(value)}")
    return value


def text_arg(value: object, name: str) -> str:
    """A string argument (a query, a note) of valid Unicode text without NUL."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidContentError(f"{name} contains a NUL character")
    return utf8(value, name)


def timestamp(value: object, name: str = "ts") -> float:
    return _finite(value, name, "a finite number of seconds")


def finite(value: object, name: str) -> float:
    """A finite number (a cosine a hair past 1, float rounding, is one)."""
    return _finite(value, name, "a finite number")


def _finite(value: object, name: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be {what}, got {show(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidTypeError(f"{name} must be {what}, got {show(value)}")
    return number


def positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {show(value)}")
    return value


def namespace(value: object, name: str = "namespace") -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    if len(value) > 128:
        raise InvalidInputError(f"{name} is longer than 128 characters")
    if any(unicodedata.category(ch).startswith("C") for ch in value):
        raise InvalidInputError(f"{name} contains control characters")  # lone surrogates are category Cs
    return value


#: Handle roles, each allowing what the one before it does and more.
ROLES = ("read", "write", "admin")


def role(value: object) -> str:
    if value not in ROLES:
        raise InvalidInputError(f"role must be one of {', '.join(ROLES)}, got {show(value)}")
    return str(value)


def allow(role: str, needed: str, what: str) -> None:
    """Refuse ``what()`` (AccessDeniedError) to a handle whose ``role`` is below ``needed``."""
    if ROLES.index(role) < ROLES.index(needed):
        raise AccessDeniedError(f"{what}() needs the {needed!r} role; this handle was opened as {role!r}")


F = TypeVar("F", bound=Callable[..., Any])


def requires(needed: str) -> Callable[[F], F]:
    """Refuse the call (AccessDeniedError, nothing done) on a handle whose ``role`` is
    below ``needed``; a wrong call is a TypeError first, as unwrapped."""
    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
            sig.bind(self, *args, **kwargs)
            allow(self.role, needed, fn.__name__)
            return fn(self, *args, **kwargs)
        return checked  # type: ignore[return-value]
    return wrap
