"""How LangGraph's store operations and items map onto hybrid_memory nodes, for
:class:`~hybrid_memory.adapters.langgraph.HybridMemoryStore`: the checks an op passes
before a batch runs, the namespace label and item key a node carries, the ``Item``
read off a node, and the matching of search filters and namespace conditions.

Functions of their arguments only: the store's state (open tenants, cached roots)
stays in :mod:`.langgraph`. Needs the ``langgraph`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)

from .. import _validate as check
from ..errors import InvalidInputError, InvalidTypeError
from ..model import Node, NodeType
from ..tree import MemoryTree

#: A LangGraph namespace: its first label names the tenant.
Namespace = tuple[str, ...]


class Children:
    """``mem.children(node)``, read once per op (a tree read is a query)."""

    def __init__(self) -> None:
        self._seen: dict[str, list[Node]] = {}

    def __call__(self, mem: MemoryTree, node_id: str) -> list[Node]:
        if node_id not in self._seen:
            self._seen[node_id] = mem.children(node_id)
        return self._seen[node_id]


def check_op(op: Op) -> None:
    """Raise what ``op`` would fail on (its type, labels, key, index, query, filter), before a batch runs."""
    if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
        raise InvalidTypeError(f"unknown store operation {type(op).__name__}")
    # BaseStore's methods check labels; ops given to batch() directly are checked here.
    paths = ([op.namespace] if isinstance(op, (GetOp, PutOp)) else [op.namespace_prefix]
             if isinstance(op, SearchOp) else [c.path for c in op.match_conditions or ()])
    for path in paths:
        for label in path:
            if not isinstance(label, str) or not label or "." in label or "\x00" in label:
                raise InvalidNamespaceError(
                    f"invalid namespace label {label!r} in {path!r}: labels are non-empty strings "
                    "without '.' or NUL")
    tenant: Namespace = ()
    if isinstance(op, (GetOp, PutOp)):
        tenant = op.namespace[:1]
        if not isinstance(op.key, str):
            raise InvalidTypeError(f"a key must be a string, got {type(op.key).__name__}")
    if isinstance(op, PutOp):
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if getattr(op, "ttl", None) is not None:
            raise NotImplementedError("TTL is not supported by HybridMemoryStore; put with ttl=None")
        if op.index not in (None, False) and (
                not isinstance(op.index, list) or not all(isinstance(p, str) for p in op.index)):
            raise InvalidTypeError("index must be None, False or a list of value paths")
    if isinstance(op, SearchOp):
        tenant = op.namespace_prefix[:1]
        if op.query is not None and not isinstance(op.query, str):
            raise InvalidTypeError(f"a query must be a string, got {type(op.query).__name__}")
        if op.filter is not None and not isinstance(op.filter, Mapping):
            raise InvalidTypeError("a filter must be a mapping of value fields to values or {'$op': value}")
    for label in tenant:
        try:
            check.namespace(label)
        except InvalidInputError as exc:
            raise InvalidNamespaceError(f"namespace label {label!r} cannot name a hybrid_memory tenant: {exc}") from None


def label_of(node: Node) -> str | None:
    """The namespace label of a namespace task node (None for any other node)."""
    if node.type is NodeType.TASK and node.meta.get("langgraph") == "namespace":
        label = node.meta.get("label")
        return label if isinstance(label, str) else None
    return None


def key_of(node: Node) -> str | None:
    """The key of an item node (None for any other node)."""
    if node.meta.get("langgraph") == "item" and isinstance(node.meta.get("value"), dict):
        key = node.meta.get("key")
        return key if isinstance(key, str) else None
    return None


def newest(node: Node) -> tuple[float, float, str]:
    """Sort key of item nodes: the most recently updated is the largest."""
    return node.updated_at, node.created_at, node.id


def task_ref(namespace: Namespace) -> str:
    """An ``add_many`` key for a namespace task made in the same call (never a node id)."""
    return "namespace:" + to_json(list(namespace))


def label_content(label: str) -> str:
    """The content of a namespace task node: its label (as JSON when it is blank)."""
    return label if label.strip() else to_json(label)


def to_json(value: Any) -> str:
    """``value`` as the JSON a node stores (keys sorted, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def to_item(namespace: Namespace, node: Node) -> Item:
    """The LangGraph ``Item`` an item node holds."""
    return Item(namespace=namespace, key=str(node.meta["key"]), value=dict(node.meta["value"]),
                created_at=_when(node.created_at), updated_at=_when(node.updated_at))


def to_search_item(namespace: Namespace, node: Node, score: float | None) -> SearchItem:
    """The LangGraph ``SearchItem`` of an item node, with its recall score (None: not ranked)."""
    return SearchItem(namespace=namespace, key=str(node.meta["key"]), value=dict(node.meta["value"]),
                      created_at=_when(node.created_at), updated_at=_when(node.updated_at), score=score)


def namespace_matches(condition: MatchCondition, namespace: Namespace) -> bool:
    """Whether ``namespace`` passes a ``list_namespaces`` prefix or suffix condition (``*`` matches any label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidInputError(f"unknown namespace match type {condition.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)


def value_matches(value: Any, flt: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a search filter: fields equal (nested mappings
    and lists compared as JSON), or compared by ``$eq $ne $gt $gte $lt $lte``."""
    return not flt or all(_compare(value.get(k), v) for k, v in flt.items())


def _compare(have: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        if any(str(k).startswith("$") for k in want):
            return all(_operator(have, op, arg) for op, arg in want.items())
        return isinstance(have, Mapping) and all(_compare(have.get(k), v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return (isinstance(have, (list, tuple)) and len(have) == len(want)
                and all(_compare(h, w) for h, w in zip(have, want, strict=True)))
    return bool(have == want)


def _operator(have: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(have == arg)
    if op == "$ne":
        return bool(have != arg)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise InvalidInputError(f"unsupported filter operator {op!r}; use $eq $ne $gt $gte $lt $lte")
    try:
        a, b = float(have), float(arg)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field is not in any range
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
