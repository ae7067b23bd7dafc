"""What a write is given: references to nodes (a Node, an id, :data:`ROOT`, :data:`AUTO`),
the items of ``add``/``add_many`` checked into :class:`Prepared`, and the values of an
``update``, all checked before anything is written.

Invariant: a :class:`Prepared` holds only checked values (content within
``write.max_content_chars``, weights in [0, 1], a known type, a timestamp).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from . import _validate as check
from .config import Config
from .errors import InvalidInputError, InvalidTypeError, NotFoundError
from .model import Node, NodeType
from .weights import check_unit

_O = TypeVar("_O", bound="_OneOf")


class _OneOf:
    """A type with one instance, named by its class's ``__repr__`` text: calling the
    class again returns that instance."""

    _name = ""

    def __new__(cls: type[_O]) -> _O:
        instance = cls.__dict__.get("_instance")
        if instance is None:
            instance = super().__new__(cls)
            setattr(cls, "_instance", instance)  # noqa: B010 (one per subclass)
        return instance

    def __repr__(self) -> str:
        return self._name


class Root(_OneOf):
    """The type of :data:`ROOT`, its one instance: ``add(..., parent=ROOT)`` starts a
    new tree instead of hanging under the active node. ``Root()`` returns ROOT."""

    _name = "ROOT"


ROOT: Final = Root()


class Auto(_OneOf):
    """The type of :data:`AUTO`, its one instance: ``add(..., parent=AUTO)`` puts the
    memory under the task branch it reads closest to (:mod:`hybrid_memory.placement`).
    ``Auto()`` returns AUTO."""

    _name = "AUTO"


AUTO: Final = Auto()

NodeRef = Node | str
ParentRef = Node | str | Root | Auto | None

#: What the command line, HTTP and MCP take for :data:`AUTO` as a parent (no node id
#: can be it: ids are hexadecimal).
AUTO_WORD: Final = "auto"


def parent_named(text: str | None) -> str | Auto | None:
    """A parent as the command line, HTTP and MCP give it: :data:`AUTO` for
    :data:`AUTO_WORD`, else the id (or None) as it is."""
    return AUTO if text == AUTO_WORD else text


@dataclass(frozen=True)
class Prepared:
    """One validated memory ready to be written."""

    key: str | None
    content: str
    type: NodeType
    parent: ParentRef
    importance: float
    confidence: float
    meta: dict[str, Any]
    ts: float
    pinned: bool


def prepare(item: Mapping[str, Any], i: int, config: Config, clock: Callable[[], float]) -> Prepared:
    """Item ``i`` of a write (the keyword arguments of ``add``, and ``key``), checked and
    completed with the configured defaults: every item is checked before anything is
    written."""
    if not isinstance(item, Mapping):
        raise InvalidTypeError(f"item {i} must be a mapping of add() arguments")
    allowed = {"key", "content", "type", "parent", "importance", "confidence", "meta", "ts", "pinned"}
    unknown = set(item) - allowed
    if unknown:
        raise InvalidInputError(f"item {i}: unknown field(s) {sorted(unknown)}")
    if "content" not in item or "type" not in item:
        raise InvalidInputError(f"item {i}: content and type are required")
    ntype = check.node_type(item["type"])
    w = config.weights
    imp = item.get("importance")
    conf = item.get("confidence")
    key = item.get("key")
    if key is not None:
        check.text_arg(key, f"item {i}: key")
    parent = item.get("parent")
    if parent is not None and not isinstance(parent, (Node, str, Root, Auto)):
        raise InvalidTypeError(f"item {i}: parent must be a Node, a node id, ROOT, AUTO or None")
    if isinstance(parent, str) and ("\x00" in parent or len(parent) > 256 or not check.is_utf8(parent)):
        raise NotFoundError(f"item {i}: no node or earlier item {check.show(parent)}")
    pinned = item.get("pinned", False)
    if not isinstance(pinned, bool):
        raise InvalidTypeError(f"item {i}: pinned must be true or false")
    ts = item.get("ts")
    return Prepared(
        key=key,
        content=check.content(item["content"], config.write.max_content_chars),
        type=ntype,
        parent=parent,
        importance=w.importance_by_type[ntype.value] if imp is None else check_unit(imp, "importance"),
        confidence=w.confidence_by_type[ntype.value] if conf is None else check_unit(conf, "confidence"),
        meta=check.meta(item.get("meta"), config.write.max_content_chars),
        ts=clock() if ts is None else check.timestamp(ts),
        pinned=pinned,
    )


def prepare_many(items: Iterable[Mapping[str, Any]], config: Config, clock: Callable[[], float]) -> list[Prepared]:
    """The items of ``add_many``, each checked (:func:`prepare`), their keys unique."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise InvalidTypeError("add_many takes an iterable of mappings (one per memory)")
    prepared = [prepare(item, i, config, clock) for i, item in enumerate(items)]
    keys = [p.key for p in prepared if p.key is not None]
    if len(keys) != len(set(keys)):
        raise InvalidInputError("add_many: item keys must be unique")
    return prepared


def feedback_values(important: object, confirmed: object, importance: float | None,
                    confidence: float | None) -> tuple[float | None, float | None]:
    """The checked ``importance`` and ``confidence`` of a ``feedback`` (InvalidInputError
    when it says nothing)."""
    if not isinstance(important, bool) or not isinstance(confirmed, bool):
        raise InvalidTypeError("important and confirmed must be true or false")
    if importance is not None:
        importance = check_unit(importance, "importance")
    if confidence is not None:
        confidence = check_unit(confidence, "confidence")
    if not (important or confirmed or importance is not None or confidence is not None):
        raise InvalidInputError("feedback: say important=True, confirmed=True, or give a value")
    return importance, confidence


def update_values(content: str | None, importance: float | None, confidence: float | None,
                  meta: Mapping[str, Any] | None, expected_version: int | None, config: Config) -> dict[str, Any]:
    """The checked values an ``update`` changes (InvalidInputError when there are none)."""
    values: dict[str, Any] = {}
    if content is not None:
        values["content"] = check.content(content, config.write.max_content_chars)
    if importance is not None:
        values["importance"] = check_unit(importance, "importance")
    if confidence is not None:
        values["confidence"] = check_unit(confidence, "confidence")
    if meta is not None:
        values["meta"] = to_json(check.meta(meta, config.write.max_content_chars))
    if expected_version is not None and (isinstance(expected_version, bool) or not isinstance(expected_version, int)):
        raise InvalidTypeError(f"expected_version must be an integer, got {check.show(expected_version)}")
    if not values:
        raise InvalidInputError("update: nothing to change")
    return values


def to_json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), ensure_ascii=False, sort_keys=True)
