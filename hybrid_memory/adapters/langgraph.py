"""LangGraph's long-term memory store (``BaseStore``) kept in hybrid_memory.

``HybridMemoryStore.open("./memory")`` (or ``HybridMemoryStore(open_tenant)`` with a
function that opens one :class:`MemoryTree` per tenant) is a ``BaseStore``: pass it as
``graph.compile(store=...)`` and nodes reach it through ``get_store()`` or their
``store`` argument, or call ``put``, ``get``, ``search``, ``delete`` and
``list_namespaces`` on it directly.

How LangGraph's data lands in the tree, for namespace ``(tenant, a, b)``, key ``k``
and value ``v``:

- **tenant**, the namespace's first label, is a hybrid_memory namespace: a tenant
  behind walls of its own (its own rows, its own Chroma collection). Each is opened
  on first use, by ``open_tenant(label)``. A label must also be a valid hybrid_memory
  namespace (at most 128 characters, no control characters), or the op raises
  ``InvalidNamespaceError``.
- **the namespace** is a chain of ``task`` nodes: the tenant's root task (content: the
  tenant's label), a task ``a`` under it, a task ``b`` under that, each made on the
  first put into it and marked ``meta = {"langgraph": "namespace", "label": ...}``.
  They are the branches that retrieval locates.
- **the item** is one node (type ``fact``; ``item_type`` changes it) under its
  namespace's task. Its content is the text embedded for search: the value's fields
  named by the put's ``index`` or else the store's ``fields`` (LangGraph's path syntax),
  one per line; by default the JSON of the whole value, as LangGraph embeds it. Its
  meta is ``{"langgraph": "item", "key": k, "value": v, "indexed": bool}``.
- **put** on a key that exists updates its node (re-embedded when the text changed):
  ``created_at`` stays, ``updated_at`` moves, as in ``PostgresStore``. A value of
  ``None`` (``delete``) erases the node as :meth:`MemoryTree.delete` does.
- **search** with a ``query`` ranks by :meth:`MemoryTree.retrieve` (similarity and
  weight, the located branch first); ``SearchItem.score`` is the recall's score. The
  items of the prefix that the recall leaves out (another branch won, or their
  similarity is under ``retrieval.min_similarity``), and items put with
  ``index=False``, follow with ``score=None``, as ``InMemoryStore`` places items it
  has no vector for. A search's recall counts its hits as used, as ``retrieve``
  does (``reinforce=False`` turns that off); a get is not a use.
  Without a query, items come most recently updated first.
- **list_namespaces** lists the namespaces holding at least one item. The tenants a
  store has made are recorded in the hybrid_memory namespace ``langgraph.tenants`` (a
  LangGraph label cannot contain ``.``), so a search or listing across tenants finds
  them after a restart.

Where this differs from ``InMemoryStore`` (the contract leaves each open):

- ``batch`` runs its ops in order, each seeing what the ones before it wrote
  (``InMemoryStore`` answers reads from the state before the batch's writes,
  ``PostgresStore`` applies the writes first).
- A batch is not one transaction: every op is checked before any runs, then the new
  items of consecutive puts are written in one transaction, each update of an
  existing key and each delete in one of its own.
- A namespace whose items were all deleted is not listed (``InMemoryStore`` keeps it).
- A search filter's range (``$gt`` ...) over a field an item lacks, or holds as a
  non-number, does not match it (``InMemoryStore`` raises ``TypeError``).
- Values are stored as JSON: they must be JSON-serialisable (no NaN) and at most
  ``write.max_content_chars`` characters as JSON, and come back as JSON does (a
  tuple as a list). An embedded text longer than that limit is cut to it.
- TTLs are not supported (``supports_ttl = False``): a put with a ``ttl`` raises
  ``NotImplementedError``; ``refresh_ttl`` is ignored.
- An empty namespace is refused on put (``InvalidNamespaceError``); the root label
  ``"langgraph"`` is refused by ``put`` (BaseStore's rule) but allowed in a ``batch``.
- The tenant trees must not merge near-identical memories (``dedup.enabled``): two keys
  whose texts are alike are two items. :meth:`HybridMemoryStore.open` turns it off;
  a tree from ``open_tenant`` with it on raises :class:`ConfigError`.

Two processes that make the same namespace at the same moment can each make its task
node; reads follow both. A process caches where each tenant's root task is, so it
finds a root made by another process only after the cached one is gone or it reopens.

How an op, an item or a filter maps onto nodes (functions, no state) is in
:mod:`.langgraph_items`; this module holds the store: its tenants, their cached
roots, and the order in which a batch's ops run.

This module needs the ``langgraph`` extra (``pip install 'hybrid-memory[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
)

from .. import _validate as check
from ..config import Config
from ..crypto import Keyring
from ..embed import Embedder, make_embedder
from ..errors import (
    ClosedError,
    ConfigError,
    HybridMemoryError,
    InvalidInputError,
    InvalidTypeError,
)
from ..model import Node, NodeType
from ..tree import MemoryTree
from ..writing import ROOT
from .langgraph_items import (
    Children,
    Namespace,
    check_op,
    key_of,
    label_content,
    label_of,
    namespace_matches,
    newest,
    task_ref,
    to_item,
    to_json,
    to_search_item,
    value_matches,
)

__all__ = ["REGISTRY_NAMESPACE", "HybridMemoryStore"]

#: The hybrid_memory namespace that records the tenants a store has made.
REGISTRY_NAMESPACE = "langgraph.tenants"

#: A token budget no recall reaches: a search's page size is its limit, not tokens.
_NO_BUDGET = 10**9



class HybridMemoryStore(BaseStore):
    """A LangGraph ``BaseStore`` whose namespaces are hybrid_memory tenants and branches.

    ``open_tenant(label)`` returns the :class:`MemoryTree` of one tenant; the store
    calls it once per tenant (and once for :data:`REGISTRY_NAMESPACE`) and closes what
    it opened in :meth:`close`. ``fields`` are the value paths embedded when a put
    gives no ``index`` (default ``["$"]``: the whole value as JSON).
    """

    supports_ttl = False

    def __init__(
        self,
        open_tenant: Callable[[str], MemoryTree],
        *,
        fields: Sequence[str] | None = None,
        item_type: NodeType | str = NodeType.FACT,
        reinforce: bool = True,
    ) -> None:
        if not callable(open_tenant):
            raise InvalidTypeError("open_tenant must be a function of a tenant label returning a MemoryTree")
        if fields is not None and (isinstance(fields, str) or not all(isinstance(f, str) for f in fields)):
            raise InvalidTypeError("fields must be a list of value paths, e.g. ['text'] or ['$']")
        self._open_tenant = open_tenant
        self._fields = list(fields) if fields else ["$"]
        self._item_type = check.node_type(item_type)
        self._reinforce = check.flag(reinforce, "reinforce")
        self._trees: dict[str, MemoryTree] = {}
        self._roots: dict[str, list[str]] = {}  # tenant -> ids of its root task(s)
        self._registered: set[str] | None = None
        self._lock = threading.RLock()
        self._closed = False

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        store: str | None = None,
        chroma_url: str | None = None,
        config: Config | str | os.PathLike[str] | None = None,
        embedder: Embedder | None = None,
        key: Keyring | str | None = None,
        session: str = "langgraph",
        role: str = "write",
        clock: Callable[[], float] = time.time,
        fields: Sequence[str] | None = None,
        item_type: NodeType | str = NodeType.FACT,
        reinforce: bool = True,
    ) -> HybridMemoryStore:
        """A store whose tenants all live in one memory: the folder ``path`` (or the
        relational ``store`` URL and ``chroma_url``), as :meth:`MemoryTree.open` takes
        them. One embedder serves every tenant; ``dedup`` is turned off."""
        if store is not None and not isinstance(store, str):
            raise InvalidTypeError("store must be a SQLAlchemy URL here: each tenant opens its own connection")
        if path is None and (store is None or chroma_url is None):
            raise InvalidInputError("give a folder path, or both a store URL and chroma_url")
        if not isinstance(config, Config):
            config = Config.load(None if config is None else Path(config))
        config = dataclasses.replace(config, dedup=dataclasses.replace(config.dedup, enabled=False))
        shared = embedder if embedder is not None else make_embedder(config.embedding)
        loaded = config

        def open_tenant(label: str) -> MemoryTree:
            return MemoryTree.open(path, namespace=label, session=session, config=loaded, store=store,
                                   embedder=shared, clock=clock, chroma_url=chroma_url, key=key, role=role)

        return cls(open_tenant, fields=fields, item_type=item_type, reinforce=reinforce)

    # -- life cycle -------------------------------------------------------------------

    def __enter__(self) -> HybridMemoryStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close every tree this store opened. Idempotent."""
        with self._lock:
            self._closed = True
            trees, self._trees = list(self._trees.values()), {}
            for mem in trees:
                mem.close()

    # -- BaseStore ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; the results come in the same order. Every op is
        checked before any runs: a bad one raises and nothing is done."""
        ops = list(ops)
        for op in ops:
            check_op(op)
        results: list[Result] = [None] * len(ops)
        with self._lock:
            if self._closed:
                raise ClosedError("this HybridMemoryStore is closed")
            i = 0
            while i < len(ops):
                op = ops[i]
                if isinstance(op, PutOp):
                    j = i
                    while j < len(ops) and isinstance(ops[j], PutOp):
                        j += 1
                    self._put_all(ops[i:j])  # type: ignore[arg-type]
                    i = j
                    continue
                if isinstance(op, GetOp):
                    results[i] = self._get(op)
                elif isinstance(op, SearchOp):
                    results[i] = self._search(op)
                else:
                    assert isinstance(op, ListNamespacesOp)
                    results[i] = self._list_namespaces(op)
                i += 1
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (the tree's stores are synchronous)."""
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, ops)

    # -- tenants ------------------------------------------------------------------------

    def _tree(self, label: str) -> MemoryTree:
        mem = self._trees.get(label)
        if mem is None:
            mem = self._open_tenant(label)
            if not isinstance(mem, MemoryTree):
                raise InvalidTypeError(f"open_tenant({label!r}) returned {type(mem).__name__}, not a MemoryTree")
            if mem.namespace != label:
                mem.close()
                raise ConfigError(f"open_tenant({label!r}) opened namespace {mem.namespace!r}")
            if mem.config.dedup.enabled and label != REGISTRY_NAMESPACE:  # its nodes are all roots
                mem.close()
                raise ConfigError(
                    f"the tree of tenant {label!r} merges near-identical memories (dedup.enabled): "
                    "two keys with alike texts would become one item; open it with dedup off")
            self._trees[label] = mem
        return mem

    def _tenants(self) -> list[str]:
        """Every tenant this store (in any process) has made, and those opened here."""
        self._registered = None  # read afresh: another process may have made one since
        return sorted(self._registry() | {t for t in self._trees if t != REGISTRY_NAMESPACE})

    def _registry(self) -> set[str]:
        if self._registered is None:
            self._registered = {
                str(n.meta["label"]) for n in self._tree(REGISTRY_NAMESPACE).nodes()
                if n.meta.get("langgraph") == "tenant" and isinstance(n.meta.get("label"), str)
            }
        return self._registered

    def _register(self, label: str) -> None:
        # Before the tenant's first node is written: a crash in between leaves a
        # registered tenant without items, which nothing lists.
        if label not in self._registry():
            self._tree(REGISTRY_NAMESPACE).add(label, type=NodeType.FACT, parent=ROOT,
                                               meta={"langgraph": "tenant", "label": label})
            self._registry().add(label)

    # -- finding namespaces and items -----------------------------------------------------

    def _root_nodes(self, mem: MemoryTree) -> list[Node]:
        cached = self._roots.get(mem.namespace)
        if cached:
            try:
                nodes = [mem.get(i) for i in cached]
                if all(n.live and label_of(n) == mem.namespace for n in nodes):
                    return nodes
            except HybridMemoryError:
                pass  # deleted (or the tenant erased) since: look again
        nodes = [n for n in mem.nodes() if n.parent_id is None and label_of(n) == mem.namespace]
        self._roots[mem.namespace] = [n.id for n in nodes]
        return nodes

    def _resolve(self, mem: MemoryTree, namespace: Namespace, kids: Children) -> tuple[list[Node], int]:
        """The task nodes of the longest prefix of ``namespace`` that exists, and its length."""
        level = self._root_nodes(mem)
        if not level:
            return [], 0
        for depth, label in enumerate(namespace[1:], start=1):
            below = [c for n in level for c in kids(mem, n.id) if label_of(c) == label]
            if not below:
                return level, depth
            level = below
        return level, len(namespace)

    def _items(self, mem: MemoryTree, nodes: Sequence[Node] | None = None) -> list[tuple[Namespace, Node]]:
        """Every item of a tenant with its namespace, read in one pass over its nodes."""
        where: dict[str, Namespace] = {}
        items: list[tuple[Namespace, Node]] = []
        for n in mem.nodes() if nodes is None else nodes:  # parents come before their children
            label = label_of(n)
            if label is not None:
                if n.parent_id is None:
                    if label == mem.namespace:
                        where[n.id] = (label,)
                elif n.parent_id in where:
                    where[n.id] = (*where[n.parent_id], label)
            elif n.parent_id in where and key_of(n) is not None:
                items.append((where[n.parent_id], n))
        return items

    # -- ops ------------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        if not op.namespace:
            return None
        mem = self._tree(op.namespace[0])
        kids = Children()
        level, depth = self._resolve(mem, op.namespace, kids)
        if depth < len(op.namespace):
            return None
        found = [c for n in level for c in kids(mem, n.id) if key_of(c) == op.key]
        if not found:
            return None
        return to_item(op.namespace, max(found, key=newest))

    def _put_all(self, ops: Sequence[PutOp]) -> None:
        last: dict[tuple[Namespace, str], PutOp] = {}
        for op in ops:  # the last put of a key wins, as if they ran one by one
            last.pop((op.namespace, op.key), None)
            last[(op.namespace, op.key)] = op
        by_tenant: dict[str, list[PutOp]] = {}
        for op in last.values():
            by_tenant.setdefault(op.namespace[0], []).append(op)
        # Everything is checked (and every tenant opened) before anything is written.
        plans = []
        for label, tops in by_tenant.items():
            mem = self._tree(label)
            limit = mem.config.write.max_content_chars
            plans.append((mem, [(op, None if op.value is None else self._encode(op, limit)) for op in tops]))
        for mem, encoded in plans:
            self._put_tenant(mem, encoded)

    def _encode(self, op: PutOp, limit: int) -> tuple[str, dict[str, Any]]:
        """The content to embed and the meta of the item ``op`` puts."""
        if not isinstance(op.value, Mapping):
            raise InvalidTypeError(f"a value must be a mapping (or None to delete), got {type(op.value).__name__}")
        # Checked (JSON, size) before any text is taken from it; stored as JSON reads back.
        value = check.meta({"value": dict(op.value)}, limit)["value"]
        paths = [] if op.index is False else self._fields if op.index is None else list(op.index)
        texts = [t for p in paths for t in get_text_at_path(value, p) if t.strip()]
        content = "\n".join(texts) if texts else to_json(value)
        meta = check.meta({"langgraph": "item", "key": op.key, "value": value, "indexed": bool(texts)}, limit)
        return content[:limit], meta

    def _put_tenant(self, mem: MemoryTree, ops: Sequence[tuple[PutOp, tuple[str, dict[str, Any]] | None]]) -> None:
        kids = Children()
        resolved: dict[Namespace, tuple[list[Node], int]] = {}
        batch: list[dict[str, Any]] = []
        made: set[Namespace] = set()  # namespaces whose task this batch makes
        for op, encoded in ops:
            ns = op.namespace
            if ns not in resolved:
                resolved[ns] = self._resolve(mem, ns, kids)
            level, depth = resolved[ns]
            existing = [c for n in level for c in kids(mem, n.id) if key_of(c) == op.key] if depth == len(ns) else []
            existing.sort(key=newest, reverse=True)
            for twin in existing[1:] if encoded is not None else existing:
                mem.delete(twin)  # a duplicate (two writers at once), or the delete itself
            if encoded is None:
                continue
            content, meta = encoded
            if existing:
                node = existing[0]
                changed = content != node.content
                mem.update(node, content=content if changed else None, meta=meta)
                continue
            parent: str | object = ROOT
            if level:
                parent = min(level, key=lambda n: (n.created_at, n.id)).id
            if depth == 0:
                self._register(ns[0])
            for d in range(depth, len(ns)):
                ref = task_ref(ns[: d + 1])
                if ns[: d + 1] not in made:
                    made.add(ns[: d + 1])
                    batch.append({"key": ref, "content": label_content(ns[d]), "type": NodeType.TASK,
                                  "parent": parent, "meta": {"langgraph": "namespace", "label": ns[d]}})
                parent = ref
            batch.append({"content": content, "type": self._item_type, "parent": parent, "meta": meta})
        if batch:
            written = mem.add_many(batch)
            root = task_ref((mem.namespace,))
            for item, node in zip(batch, written, strict=True):
                if item.get("key") == root:  # the tenant's root task, just made
                    self._roots[mem.namespace] = [node.id]

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        tenants = [prefix[0]] if prefix else self._tenants()
        wanted = op.offset + op.limit if min(op.offset, op.limit) >= 0 else None
        query = op.query if op.query and op.query.strip() else None
        found: list[tuple[Namespace, Node]] = []
        scores: dict[str, float] = {}
        for label in tenants:
            mem = self._tree(label)
            nodes = mem.nodes()
            mine = [(ns, n) for ns, n in self._items(mem, nodes)
                    if ns[: len(prefix)] == prefix and value_matches(n.meta["value"], op.filter)]
            found.extend(mine)
            indexed = {n.id for _, n in mine if n.meta.get("indexed") is True}
            if query is not None and indexed:
                scores.update(self._rank(mem, query, indexed, wanted, len(nodes)))
        # Most recently updated first; ties by namespace and key (sorts are stable).
        found.sort(key=lambda x: (x[0], str(x[1].meta["key"])))
        found.sort(key=lambda x: x[1].updated_at, reverse=True)
        if scores:  # the recall's order, then what it left out
            found = (sorted((x for x in found if x[1].id in scores), key=lambda x: -scores[x[1].id])
                     + [x for x in found if x[1].id not in scores])
        page = found[op.offset: op.offset + op.limit]
        return [to_search_item(ns, n, scores.get(n.id)) for ns, n in page]

    def _rank(self, mem: MemoryTree, query: str, ids: set[str], wanted: int | None, total: int) -> dict[str, float]:
        """The recall's scores of the items ``ids`` for ``query``. Memories outside
        them (other namespaces of the tenant) can take places among the k, so k grows
        (those larger recalls not counted as uses) until enough of ``ids`` are in or
        k covers all ``total`` nodes of the tenant."""
        need = len(ids) if wanted is None else min(wanted, len(ids))
        if need <= 0:
            return {}
        k = max(1, min(need, total))
        reinforce = self._reinforce
        while True:
            recall = mem.retrieve(query, k=k, budget_tokens=_NO_BUDGET, reinforce=reinforce)
            got = {s.node.id: s.score for s in recall.nodes if s.node.id in ids}
            if len(got) >= need or k >= total:
                return got
            k, reinforce = min(total, k * 4), False

    def _list_namespaces(self, op: ListNamespacesOp) -> list[Namespace]:
        conditions = op.match_conditions or ()
        firsts = {c.path[0] for c in conditions if c.match_type == "prefix" and c.path and c.path[0] != "*"}
        if len(firsts) > 1:
            return []
        tenants = sorted(firsts) if firsts else self._tenants()
        spaces = {ns for label in tenants for ns, _ in self._items(self._tree(label))}
        spaces = {ns for ns in spaces if all(namespace_matches(c, ns) for c in conditions)}
        if op.max_depth is not None:
            spaces = {ns[: op.max_depth] for ns in spaces}
        return sorted(spaces)[op.offset: op.offset + op.limit]
