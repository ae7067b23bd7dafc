"""Bad input is refused with a typed error, and the stored memory is left exactly as it was.

Most cases share one populated memory (module scope): each case takes a snapshot of
everything observable, makes the bad call, and compares. A case that wrongly wrote
something fails itself; the next case takes a fresh "before" snapshot.
"""

from __future__ import annotations

import datetime
import inspect
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hybrid_memory import (
    ROOT,
    AccessDeniedError,
    ClosedError,
    Config,
    ConfigError,
    ConflictError,
    CycleError,
    HybridMemoryError,
    InvalidContentError,
    InvalidInputError,
    InvalidTypeError,
    InvalidWeightError,
    MemoryTree,
    NamespaceError,
    NotFoundError,
    StorageError,
    errors,
)
from hybrid_memory.dedup import is_twin

NOW = 1_750_000_000.0
MISSING_ID = "0123456789abcdef"


# -- helpers ----------------------------------------------------------------------


def snapshot(mem: MemoryTree) -> dict[str, Any]:
    """Everything observable about the stored memory of ``mem``'s namespace."""
    nodes = sorted(
        (
            (
                n.id,
                n.parent_id,
                n.type.value,
                n.content,
                dict(n.meta),
                n.importance,
                n.confidence,
                n.status.value,
                n.version,
                n.pinned,
            )
            for n in mem.nodes(include_archived=True)
        ),
        key=lambda t: t[0],
    )
    active = mem.active
    return {
        "nodes": nodes,
        "active": None if active is None else active.id,
        "log_seq": mem.admin.stats().log_seq,
        "index": sorted(mem.index.ids(mem.namespace)),
    }


def refused(mems: MemoryTree | list[MemoryTree], error: type[HybridMemoryError], call: Callable[[], object]) -> HybridMemoryError:
    """``call()`` raises exactly ``error`` and leaves every memory in ``mems`` unchanged."""
    mems = mems if isinstance(mems, list) else [mems]
    before = [snapshot(m) for m in mems]
    with pytest.raises(HybridMemoryError) as info:
        call()
    assert type(info.value) is error, f"expected {error.__name__}, got {type(info.value).__name__}: {info.value}"
    assert [snapshot(m) for m in mems] == before
    return info.value


def populate(mem: MemoryTree) -> SimpleNamespace:
    """Two trees, a nested task, meta, a pinned node and an archived node."""
    trip = mem.add("Plan the Lisbon trip in May", type="task")
    hotel = mem.add("The hotel near Alfama is booked from May 3 to May 7", type="fact", meta={"source": "email"})
    seats = mem.add("The user prefers window seats on flights", type="preference", pinned=True)
    porto = mem.add("Compare train and flight options to Porto", type="task", parent=trip)
    train = mem.add("The morning train to Porto takes about three hours", type="fact", parent=porto)
    billing = mem.add("Refactor the billing service", type="task", parent=ROOT)
    old = mem.add("An outdated note about the old invoice format", type="event", parent=billing)
    mem.archive(old)
    mem.focus(porto)
    return SimpleNamespace(trip=trip, hotel=hotel, seats=seats, porto=porto, train=train, billing=billing, old=old)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, embedder: Any, module_stores: Any) -> Iterator[tuple[MemoryTree, SimpleNamespace]]:
    mem = module_stores.open(
        tmp_path_factory.mktemp("bad-input") / "mem", namespace="t", embedder=embedder, clock=lambda: NOW
    )
    n = populate(mem)
    snap = snapshot(mem)
    assert len(snap["nodes"]) == 7 and snap["active"] == n.porto.id
    assert n.old.id not in snap["index"] and n.hotel.id in snap["index"]
    yield mem, n
    mem.close()


Case = Callable[[MemoryTree, SimpleNamespace], object]


def test_snapshot_sees_every_kind_of_change(open_memory: Callable[..., MemoryTree]) -> None:
    """Guard for the helper: each successful change shows up in the snapshot."""
    mem = open_memory()
    n = populate(mem)
    changes: list[Callable[[], object]] = [
        lambda: mem.add("A fresh note about trams in Lisbon", type="fact", parent=n.trip),
        lambda: mem.update(n.hotel, content="The hotel near Alfama is booked from May 4 to May 8"),
        lambda: mem.update(n.hotel, meta={"source": "phone"}),
        lambda: mem.feedback(n.hotel, important=True),
        lambda: mem.feedback(n.hotel, confirmed=True),
        lambda: mem.pin(n.hotel),
        lambda: mem.focus(n.trip),
        lambda: mem.move(n.train, n.trip),
        lambda: mem.archive(n.train),
        lambda: mem.unarchive(n.old),
        lambda: mem.checkpoint("a note"),
        lambda: mem.delete(n.billing),
    ]
    for change in changes:
        before = snapshot(mem)
        change()
        assert snapshot(mem) != before


def case(name: str, error: type[HybridMemoryError], call: Case) -> Any:
    return pytest.param(error, call, id=name)


# -- parents, moves and other node references ----------------------------------------


REFERENCE_CASES = [
    case("add-unknown-parent-id", NotFoundError, lambda m, n: m.add("A new fact", type="fact", parent=MISSING_ID)),
    case("add-archived-parent-node", NotFoundError, lambda m, n: m.add("A new fact", type="fact", parent=n.old)),
    case("add-archived-parent-id", NotFoundError, lambda m, n: m.add("A new fact", type="fact", parent=n.old.id)),
    case("add-parent-of-wrong-type", InvalidTypeError, lambda m, n: m.add("A new fact", type="fact", parent=42)),
    case("move-into-grandchild", CycleError, lambda m, n: m.move(n.trip, n.train)),
    case("move-into-child", CycleError, lambda m, n: m.move(n.trip, n.porto)),
    case("move-under-itself", CycleError, lambda m, n: m.move(n.porto, n.porto)),
    case("move-under-itself-by-id", CycleError, lambda m, n: m.move(n.porto.id, n.porto.id)),
    case("move-to-None", InvalidInputError, lambda m, n: m.move(n.porto, None)),  # type: ignore[arg-type]
    case("move-to-unknown-parent", NotFoundError, lambda m, n: m.move(n.porto, MISSING_ID)),
    case("move-to-archived-parent", NotFoundError, lambda m, n: m.move(n.porto, n.old)),
    case("move-archived-node", NotFoundError, lambda m, n: m.move(n.old, n.trip)),
    case("move-to-parent-of-wrong-type", InvalidTypeError, lambda m, n: m.move(n.porto, 3.5)),  # type: ignore[arg-type]
    case("get-unknown-id", NotFoundError, lambda m, n: m.get(MISSING_ID)),
    case("get-wrong-type", InvalidTypeError, lambda m, n: m.get(42)),  # type: ignore[arg-type]
    case("focus-archived", NotFoundError, lambda m, n: m.focus(n.old)),
    case("archive-archived", NotFoundError, lambda m, n: m.archive(n.old)),
    case("update-archived", NotFoundError, lambda m, n: m.update(n.old, importance=0.9)),
    case("feedback-archived", NotFoundError, lambda m, n: m.feedback(n.old, important=True)),
    case("delete-unknown", NotFoundError, lambda m, n: m.delete(MISSING_ID)),
    case("update-stale-version", ConflictError,
         lambda m, n: m.update(n.hotel, content="The hotel is booked from May 4", expected_version=n.hotel.version + 5)),
]


@pytest.mark.parametrize(("error", "call"), REFERENCE_CASES)
def test_bad_reference_is_refused(world: tuple[MemoryTree, SimpleNamespace], error: type[HybridMemoryError], call: Case) -> None:
    mem, n = world
    refused(mem, error, lambda: call(mem, n))


# -- content and type ------------------------------------------------------------------


BAD_CONTENT = [
    pytest.param("", id="empty"),
    pytest.param("   \n\t  ", id="whitespace"),
    pytest.param("x" * 1_000_001, id="oversized"),
    pytest.param("before\x00after", id="nul"),
    pytest.param(42, id="int"),
    pytest.param(None, id="None"),
    pytest.param(b"bytes are not text", id="bytes"),
]


@pytest.mark.parametrize("content", BAD_CONTENT)
@pytest.mark.parametrize("site", ["add", "add_many", "update"])
def test_bad_content_is_refused(world: tuple[MemoryTree, SimpleNamespace], site: str, content: object) -> None:
    mem, n = world
    assert mem.config.write.max_content_chars == 1_000_000  # "oversized" above is one character over
    calls: dict[str, Callable[[], object]] = {
        "add": lambda: mem.add(content, type="fact", parent=n.trip),  # type: ignore[arg-type]
        "add_many": lambda: mem.add_many([
            {"content": "A good first memory of the batch", "type": "fact"},
            {"content": content, "type": "fact"},
        ]),
        "update": lambda: mem.update(n.hotel, content=content),  # type: ignore[arg-type]
    }
    # update(content=None) means "keep the content": then there is nothing to change.
    expected = InvalidInputError if (site, content) == ("update", None) else InvalidContentError
    refused(mem, expected, calls[site])


def test_content_limit_is_the_configured_one(open_memory: Callable[..., MemoryTree]) -> None:
    mem = open_memory(write={"max_content_chars": 40})
    at_limit = mem.add("a" * 39 + "b", type="fact")
    assert at_limit.content == "a" * 39 + "b"
    refused(mem, InvalidContentError, lambda: mem.add("c" * 41, type="fact"))
    refused(mem, InvalidContentError, lambda: mem.update(at_limit, content="d" * 41))


@pytest.mark.parametrize(
    "ntype",
    [
        pytest.param("memo", id="unknown-string"),
        pytest.param("", id="empty-string"),
        pytest.param("tasks", id="near-miss"),
        pytest.param(3, id="int"),
        pytest.param(None, id="None"),
        pytest.param(["fact"], id="list"),
    ],
)
@pytest.mark.parametrize("site", ["add", "add_many"])
def test_bad_node_type_is_refused(world: tuple[MemoryTree, SimpleNamespace], site: str, ntype: object) -> None:
    mem, n = world
    if site == "add":
        refused(mem, InvalidTypeError, lambda: mem.add("A new memory", type=ntype, parent=n.trip))  # type: ignore[arg-type]
    else:
        refused(mem, InvalidTypeError, lambda: mem.add_many([
            {"content": "A good first memory of the batch", "type": "fact"},
            {"content": "A new memory", "type": ntype},
        ]))


# -- importance and confidence ------------------------------------------------------------


BAD_UNIT = [
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param(-0.1, id="-0.1"),
    pytest.param(1.5, id="1.5"),
    pytest.param("0.5", id="str"),
    pytest.param(True, id="bool"),
]


def _batch_with(field: str, value: object) -> list[dict[str, Any]]:
    return [
        {"content": "First good memory of the batch", "type": "fact", "key": "one"},
        {"content": "Second memory, with the bad value", "type": "fact", "parent": "one", field: value},
        {"content": "Third good memory of the batch", "type": "event"},
    ]


WEIGHT_SITES: dict[str, Callable[[MemoryTree, SimpleNamespace, object], object]] = {
    "add-importance": lambda m, n, v: m.add("A new memory", type="fact", parent=n.trip, importance=v),
    "add-confidence": lambda m, n, v: m.add("A new memory", type="fact", parent=n.trip, confidence=v),
    "update-importance": lambda m, n, v: m.update(n.hotel, importance=v),
    "update-confidence": lambda m, n, v: m.update(n.hotel, confidence=v),
    "update-content-and-importance": lambda m, n, v: m.update(n.hotel, content="Moved to May 4", importance=v),
    "feedback-importance": lambda m, n, v: m.feedback(n.hotel, importance=v),
    "feedback-confidence": lambda m, n, v: m.feedback(n.hotel, confidence=v),
    "feedback-important-and-bad-confidence": lambda m, n, v: m.feedback(n.hotel, important=True, confidence=v),
    "add_many-importance": lambda m, n, v: m.add_many(_batch_with("importance", v)),
    "add_many-confidence": lambda m, n, v: m.add_many(_batch_with("confidence", v)),
}


@pytest.mark.parametrize("value", BAD_UNIT)
@pytest.mark.parametrize("site", list(WEIGHT_SITES))
def test_bad_weight_is_refused(world: tuple[MemoryTree, SimpleNamespace], site: str, value: object) -> None:
    mem, n = world
    err = refused(mem, InvalidWeightError, lambda: WEIGHT_SITES[site](mem, n, value))
    bad_field = site.rsplit("-", 1)[1]
    assert bad_field in str(err), "the message names the refused argument"


def test_good_weights_at_the_bounds_are_accepted(open_memory: Callable[..., MemoryTree]) -> None:
    """The refusals above are about the values, not the sites: 0, 1 and ints are fine."""
    mem = open_memory()
    lo = mem.add("Lowest weights", type="fact", importance=0, confidence=0.0)
    hi = mem.add("Highest weights", type="fact", importance=1, confidence=1.0)
    assert (lo.importance, lo.confidence, hi.importance, hi.confidence) == (0.0, 0.0, 1.0, 1.0)
    assert isinstance(lo.importance, float)


# -- add_many structure: the whole batch is refused ------------------------------------------


BATCH_CASES = [
    case("item-missing-content", InvalidInputError,
         lambda m, n: m.add_many([{"content": "Fine", "type": "fact"}, {"type": "fact"}])),
    case("item-missing-type", InvalidInputError,
         lambda m, n: m.add_many([{"content": "Fine", "type": "fact"}, {"content": "No type"}])),
    case("item-unknown-field", InvalidInputError,
         lambda m, n: m.add_many([{"content": "Fine", "type": "fact"}, {"content": "x", "type": "fact", "colour": "red"}])),
    case("item-misspelt-field", InvalidInputError,
         lambda m, n: m.add_many([{"content": "Fine", "type": "fact", "importnace": 0.9}])),
    case("duplicate-keys", InvalidInputError,
         lambda m, n: m.add_many([
             {"content": "First", "type": "fact", "key": "k"},
             {"content": "Second", "type": "fact", "key": "k"},
         ])),
    case("item-not-a-mapping", InvalidTypeError,
         lambda m, n: m.add_many([{"content": "Fine", "type": "fact"}, "just a string"])),
    case("key-not-a-string", InvalidTypeError,
         lambda m, n: m.add_many([{"content": "Fine", "type": "fact", "key": 7}])),
    case("pinned-not-a-bool", InvalidTypeError,
         lambda m, n: m.add_many([{"content": "Fine", "type": "fact", "pinned": "yes"}])),
    # These are only found inside the write transaction: it must roll back entirely.
    case("later-item-unknown-parent", NotFoundError,
         lambda m, n: m.add_many([
             {"content": "A brand new task for the batch", "type": "task", "parent": ROOT, "key": "t"},
             {"content": "A note under the new task", "type": "fact", "parent": "t"},
             {"content": "A note under nothing", "type": "fact", "parent": MISSING_ID},
         ])),
    case("later-item-archived-parent", NotFoundError,
         lambda m, n: m.add_many([
             {"content": "A good note under the trip", "type": "fact", "parent": n.trip},
             {"content": "A note under an archived node", "type": "fact", "parent": n.old},
         ])),
    case("parent-key-defined-later", NotFoundError,
         lambda m, n: m.add_many([
             {"content": "A child that names a later key", "type": "fact", "parent": "later"},
             {"content": "The later parent", "type": "task", "key": "later"},
         ])),
    case("merge-then-failure", NotFoundError,
         lambda m, n: m.add_many([
             # A twin of an existing node: would reinforce it (version+1) if committed.
             {"content": n.train.content, "type": "fact", "parent": n.porto},
             {"content": "A note under nothing", "type": "fact", "parent": MISSING_ID},
         ])),
]


@pytest.mark.parametrize(("error", "call"), BATCH_CASES)
def test_bad_batch_writes_nothing(world: tuple[MemoryTree, SimpleNamespace], error: type[HybridMemoryError], call: Case) -> None:
    mem, n = world
    refused(mem, error, lambda: call(mem, n))


def test_merge_then_failure_case_would_really_merge(open_memory: Callable[..., MemoryTree]) -> None:
    """Guard for the "merge-then-failure" case above: its first item alone does merge."""
    mem = open_memory()
    n = populate(mem)
    (out,) = mem.add_many([{"content": n.train.content, "type": "fact", "parent": n.porto}])
    assert out.merged and out.id == n.train.id and out.version == n.train.version + 1


# -- meta, timestamps and other arguments ------------------------------------------------


class _Opaque:
    pass


BAD_META = [
    pytest.param({"when": datetime.datetime(2025, 5, 3)}, id="datetime-value"),
    pytest.param({"tags": {"a", "b"}}, id="set-value"),
    pytest.param({"obj": _Opaque()}, id="object-value"),
    pytest.param({"x": math.nan}, id="nan-value"),
    pytest.param({"nested": {"deep": math.inf}}, id="nested-inf"),
    pytest.param({1: "one"}, id="int-key"),
    pytest.param({("a", "b"): 1}, id="tuple-key"),
    pytest.param(["source", "email"], id="list-not-mapping"),
    pytest.param("source=email", id="str-not-mapping"),
]


@pytest.mark.parametrize("meta", BAD_META)
@pytest.mark.parametrize("site", ["add", "add_many", "update"])
def test_bad_meta_is_refused(world: tuple[MemoryTree, SimpleNamespace], site: str, meta: object) -> None:
    mem, n = world
    calls: dict[str, Callable[[], object]] = {
        "add": lambda: mem.add("A new memory", type="fact", parent=n.trip, meta=meta),  # type: ignore[arg-type]
        "add_many": lambda: mem.add_many([{"content": "Fine", "type": "fact"}, {"content": "x", "type": "fact", "meta": meta}]),
        "update": lambda: mem.update(n.hotel, meta=meta),  # type: ignore[arg-type]
    }
    refused(mem, InvalidTypeError, calls[site])


BAD_TS = [
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param("2025-05-03", id="str"),
    pytest.param(True, id="bool"),
]


@pytest.mark.parametrize("ts", BAD_TS)
@pytest.mark.parametrize("site", ["add", "add_many", "update", "retrieve-now", "weight-now", "forget-now"])
def test_bad_timestamp_is_refused(world: tuple[MemoryTree, SimpleNamespace], site: str, ts: object) -> None:
    mem, n = world
    calls: dict[str, Callable[[], object]] = {
        "add": lambda: mem.add("A new memory", type="fact", parent=n.trip, ts=ts),  # type: ignore[arg-type]
        "add_many": lambda: mem.add_many([{"content": "Fine", "type": "fact"}, {"content": "x", "type": "fact", "ts": ts}]),
        "update": lambda: mem.update(n.hotel, importance=0.7, ts=ts),  # type: ignore[arg-type]
        "retrieve-now": lambda: mem.retrieve("hotel", now=ts),  # type: ignore[arg-type]
        "weight-now": lambda: mem.weight(n.hotel, now=ts),  # type: ignore[arg-type]
        "forget-now": lambda: mem.forget(now=ts),  # type: ignore[arg-type]
    }
    refused(mem, InvalidTypeError, calls[site])


OTHER_CASES = [
    case("update-nothing", InvalidInputError, lambda m, n: m.update(n.hotel)),
    case("update-all-None", InvalidInputError, lambda m, n: m.update(n.hotel, content=None, importance=None, meta=None)),
    case("feedback-nothing", InvalidInputError, lambda m, n: m.feedback(n.hotel)),
    case("add-pinned-not-bool", InvalidTypeError, lambda m, n: m.add("A new memory", type="fact", pinned=1)),  # type: ignore[arg-type]
    case("pin-not-bool", InvalidTypeError, lambda m, n: m.pin(n.hotel, "yes")),  # type: ignore[arg-type]
    case("weight-forgetting-not-bool", InvalidTypeError, lambda m, n: m.weight(n.hotel, forgetting=1)),  # type: ignore[arg-type]
    case("checkpoint-note-not-str", InvalidTypeError, lambda m, n: m.checkpoint(note=5)),  # type: ignore[arg-type]
    case("forget-threshold-out-of-range", InvalidWeightError, lambda m, n: m.forget(threshold=1.5)),
    case("forget-threshold-nan", InvalidWeightError, lambda m, n: m.forget(threshold=math.nan)),
    case("forget-max-nodes-negative", InvalidInputError, lambda m, n: m.forget(max_nodes=-1)),
    case("forget-max-nodes-float", InvalidInputError, lambda m, n: m.forget(max_nodes=2.5)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("error", "call"), OTHER_CASES)
def test_other_bad_arguments_are_refused(world: tuple[MemoryTree, SimpleNamespace], error: type[HybridMemoryError], call: Case) -> None:
    mem, n = world
    refused(mem, error, lambda: call(mem, n))


# -- retrieve ---------------------------------------------------------------------------


RETRIEVE_CASES = [
    case("k=0", InvalidInputError, lambda m, n: m.retrieve("hotel", k=0)),
    case("k=-3", InvalidInputError, lambda m, n: m.retrieve("hotel", k=-3)),
    case("k=1.5", InvalidInputError, lambda m, n: m.retrieve("hotel", k=1.5)),  # type: ignore[arg-type]
    case("k=True", InvalidInputError, lambda m, n: m.retrieve("hotel", k=True)),
    case("budget=-1", InvalidInputError, lambda m, n: m.retrieve("hotel", budget_tokens=-1)),
    case("budget=0", InvalidInputError, lambda m, n: m.retrieve("hotel", budget_tokens=0)),
    case("branches=0", InvalidInputError, lambda m, n: m.retrieve("hotel", branches=0)),
    case("empty-query", InvalidInputError, lambda m, n: m.retrieve("")),
    case("whitespace-query", InvalidInputError, lambda m, n: m.retrieve("  \n ")),
    case("int-query", InvalidTypeError, lambda m, n: m.retrieve(42)),  # type: ignore[arg-type]
    case("bytes-query", InvalidTypeError, lambda m, n: m.retrieve(b"hotel")),  # type: ignore[arg-type]
    case("list-query", InvalidTypeError, lambda m, n: m.retrieve(["hotel"])),  # type: ignore[arg-type]
    case("k=0-without-query", InvalidInputError, lambda m, n: m.retrieve(k=0)),
]


@pytest.mark.parametrize(("error", "call"), RETRIEVE_CASES)
def test_bad_retrieve_is_refused(world: tuple[MemoryTree, SimpleNamespace], error: type[HybridMemoryError], call: Case) -> None:
    mem, n = world
    refused(mem, error, lambda: call(mem, n))


def test_refused_write_keeps_buffered_reads(open_memory: Callable[..., MemoryTree]) -> None:
    """Reads are buffered and written with the next write; a write that is refused
    inside its transaction (rolled back) must not take the buffered reads with it."""
    mem = open_memory()
    n = populate(mem)
    recall = mem.retrieve("When is the hotel near Alfama booked?")
    hits = [s.node.id for s in recall.nodes if s.reason in ("hit", "standing", "top")]
    assert n.hotel.id in hits
    refused(mem, NotFoundError, lambda: mem.add("A note under nothing", type="fact", parent=MISSING_ID))
    refused(mem, CycleError, lambda: mem.move(n.trip, n.train))
    refused(mem, ConflictError, lambda: mem.update(n.hotel, importance=0.9, expected_version=99))
    mem.flush()
    assert mem.get(n.hotel).access_count == hits.count(n.hotel.id) == 1


# -- namespaces ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory, embedder: Any, module_stores: Any) -> Iterator[tuple[MemoryTree, SimpleNamespace, MemoryTree, SimpleNamespace]]:
    """Namespaces "a" and "b" in one folder, each with the same shape of tree."""
    folder = tmp_path_factory.mktemp("tenants") / "mem"
    a = module_stores.open(folder, namespace="a", embedder=embedder, clock=lambda: NOW)
    b = module_stores.open(folder, namespace="b", embedder=embedder, clock=lambda: NOW)
    na, nb = populate(a), populate(b)
    assert {x.id for x in a.nodes(include_archived=True)}.isdisjoint(x.id for x in b.nodes(include_archived=True))
    yield a, na, b, nb
    b.close()
    a.close()


# Each call is made on memory "b" with nodes "x" of namespace "a" (as Node objects or as ids).
FOREIGN_CASES: dict[str, Callable[[MemoryTree, Any, SimpleNamespace], object]] = {
    "get": lambda b, x, nb: b.get(x.hotel),
    "children": lambda b, x, nb: b.children(x.trip),
    "children-archived": lambda b, x, nb: b.children(x.trip, include_archived=True),
    "path": lambda b, x, nb: b.path(x.train),
    "update": lambda b, x, nb: b.update(x.hotel, importance=0.9),
    "update-content": lambda b, x, nb: b.update(x.hotel, content="Changed by another tenant"),
    "feedback": lambda b, x, nb: b.feedback(x.hotel, important=True),
    "pin": lambda b, x, nb: b.pin(x.hotel),
    "focus": lambda b, x, nb: b.focus(x.trip),
    "move-foreign-node": lambda b, x, nb: b.move(x.porto, nb.trip),
    "move-under-foreign-parent": lambda b, x, nb: b.move(nb.porto, x.trip),
    "archive": lambda b, x, nb: b.archive(x.hotel),
    "restore-archived": lambda b, x, nb: b.unarchive(x.old),
    "delete": lambda b, x, nb: b.delete(x.trip),
    "delete-archived": lambda b, x, nb: b.delete(x.old),
    "add-under-foreign-parent": lambda b, x, nb: b.add("A note in b", type="fact", parent=x.trip),
    "add_many-under-foreign-parent": lambda b, x, nb: b.add_many([
        {"content": "Fine note in b", "type": "fact", "parent": nb.trip},
        {"content": "A note in b", "type": "fact", "parent": x.trip},
    ]),
}


def _as_ids(n: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(**{k: v.id for k, v in vars(n).items()})


@pytest.mark.parametrize("ref", ["node", "id"])
@pytest.mark.parametrize("op", list(FOREIGN_CASES))
def test_other_namespace_is_a_wall(tenants: tuple[MemoryTree, SimpleNamespace, MemoryTree, SimpleNamespace], op: str, ref: str) -> None:
    a, na, b, nb = tenants
    foreign = na if ref == "node" else _as_ids(na)
    refused([a, b], NamespaceError, lambda: FOREIGN_CASES[op](b, foreign, nb))


def test_other_namespace_is_invisible_to_listing_and_retrieval(tenants: tuple[MemoryTree, SimpleNamespace, MemoryTree, SimpleNamespace]) -> None:
    a, na, b, nb = tenants
    a_ids = {x.id for x in a.nodes(include_archived=True)}
    assert a_ids.isdisjoint(x.id for x in b.nodes(include_archived=True))
    assert a_ids.isdisjoint(b.index.ids("b"))
    recall = b.retrieve(na.hotel.content)
    assert recall.ids and a_ids.isdisjoint(recall.ids)


BAD_NAMESPACES = [
    pytest.param("", id="empty"),
    pytest.param("   ", id="blank"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\nb", id="newline"),
    pytest.param("tab\there", id="tab"),
    pytest.param("bell\x07", id="bell"),
    pytest.param("x" * 129, id="too-long"),
    pytest.param(5, id="int"),
    pytest.param(None, id="None"),
]


@pytest.mark.parametrize("namespace", BAD_NAMESPACES)
def test_invalid_namespace_at_open(tmp_path: Path, embedder: Any, namespace: object) -> None:
    fresh = tmp_path / "fresh"
    with pytest.raises(HybridMemoryError) as info:
        MemoryTree.open(fresh, namespace=namespace, embedder=embedder)  # type: ignore[arg-type]
    assert type(info.value) is InvalidInputError
    assert not fresh.exists(), "a refused open must not create anything on disk"


@pytest.mark.parametrize("session", [pytest.param("", id="empty"), pytest.param("s\x1b", id="escape")])
def test_invalid_session_at_open(tmp_path: Path, embedder: Any, session: str) -> None:
    with pytest.raises(HybridMemoryError) as info:
        MemoryTree.open(tmp_path / "fresh", session=session, embedder=embedder)
    assert type(info.value) is InvalidInputError
    assert not (tmp_path / "fresh").exists()


def test_invalid_namespace_at_open_leaves_existing_memory_alone(open_memory: Callable[..., MemoryTree], tmp_path: Path, embedder: Any) -> None:
    mem = open_memory(namespace="t")
    populate(mem)
    before = snapshot(mem)
    files = sorted(p.name for p in (tmp_path / "mem").iterdir())
    for bad in ("", "t\n"):
        with pytest.raises(InvalidInputError):
            MemoryTree.open(tmp_path / "mem", namespace=bad, embedder=embedder)
    assert snapshot(mem) == before
    assert sorted(p.name for p in (tmp_path / "mem").iterdir()) == files


# -- closed memory ----------------------------------------------------------------------------


CLOSED_OPS: dict[str, Callable[[MemoryTree, SimpleNamespace], object]] = {
    "add": lambda m, n: m.add("A new memory", type="fact"),
    "add_many": lambda m, n: m.add_many([{"content": "A new memory", "type": "fact"}]),
    "add_many-empty": lambda m, n: m.add_many([]),
    "update": lambda m, n: m.update(n.hotel, importance=0.9),
    "move": lambda m, n: m.move(n.train, n.trip),
    "focus": lambda m, n: m.focus(n.trip),
    "feedback": lambda m, n: m.feedback(n.hotel, important=True),
    "pin": lambda m, n: m.pin(n.hotel),
    "archive": lambda m, n: m.archive(n.train),
    "restore": lambda m, n: m.unarchive(n.old),
    "delete": lambda m, n: m.delete(n.train),
    "forget": lambda m, n: m.forget(threshold=1.0),
    "retrieve": lambda m, n: m.retrieve("hotel"),
    "retrieve-active": lambda m, n: m.retrieve(),
    "checkpoint": lambda m, n: m.checkpoint("after close"),
    "recover": lambda m, n: m.recover(),
    "stats": lambda m, n: m.admin.stats(),
    "verify": lambda m, n: m.admin.verify(),
    "repair": lambda m, n: m.admin.repair(),
    "reindex": lambda m, n: m.admin.reindex(),
    "rotate_key": lambda m, n: m.admin.rotate_key(),
    "erase_namespace": lambda m, n: m.admin.erase_namespace(),
    "erase": lambda m, n: m.admin.erase(n.train),
    "erase-no-compact": lambda m, n: m.admin.erase(n.train, compact=False),
    "export": lambda m, n: m.admin.export(Path(m.folder or ".") / "closed.jsonl"),
    "import_": lambda m, n: m.admin.import_(Path(m.folder or ".") / "closed.jsonl"),
    "get": lambda m, n: m.get(n.hotel),
    "children": lambda m, n: m.children(n.trip),
    "path": lambda m, n: m.path(n.train),
    "nodes": lambda m, n: m.nodes(),
    "active": lambda m, n: m.active,
    "flush": lambda m, n: m.flush(),
}


@pytest.fixture(scope="module")
def closed_world(tmp_path_factory: pytest.TempPathFactory, embedder: Any, module_stores: Any) -> Iterator[tuple[MemoryTree, SimpleNamespace, dict[str, Any], Path]]:
    folder = tmp_path_factory.mktemp("closed") / "mem"
    mem = module_stores.open(folder, namespace="t", embedder=embedder, clock=lambda: NOW)
    n = populate(mem)
    mem.retrieve("When is the hotel booked?")  # a buffered read: close() flushes it
    before = snapshot(mem)
    before["log_seq"] += 1  # close() flushes the read: one "access" log entry (portability)
    mem.close()
    mem.close()  # idempotent
    yield mem, n, before, folder


@pytest.mark.parametrize("op", list(CLOSED_OPS))
def test_closed_memory_refuses_every_operation(closed_world: tuple[MemoryTree, SimpleNamespace, dict[str, Any], Path], op: str) -> None:
    mem, n, _, _ = closed_world
    with pytest.raises(HybridMemoryError) as info:
        CLOSED_OPS[op](mem, n)
    assert type(info.value) is ClosedError


def test_closed_memory_is_unchanged_after_refused_calls(closed_world: tuple[MemoryTree, SimpleNamespace, dict[str, Any], Path], embedder: Any, module_stores: Any) -> None:
    mem, n, before, folder = closed_world
    for call in CLOSED_OPS.values():
        with pytest.raises(ClosedError):
            call(mem, n)
    with module_stores.open(folder, namespace="t", embedder=embedder, clock=lambda: NOW) as reopened:
        assert snapshot(reopened) == before
        assert reopened.get(n.hotel).access_count == 1, "close() flushed the buffered read"


# -- configuration ----------------------------------------------------------------------------


BAD_CONFIG = [
    pytest.param({"bogus": {"x": 1}}, id="unknown-section"),
    pytest.param({"retrieval": {"kk": 5}}, id="unknown-key"),
    pytest.param({"weights": {"importance_by_type": {"memo": 0.5}}}, id="unknown-type-key"),
    pytest.param({"retrieval": {"k": "5"}}, id="str-for-int"),
    pytest.param({"retrieval": {"k": 2.5}}, id="float-for-int"),
    pytest.param({"retrieval": {"k": True}}, id="bool-for-int"),
    pytest.param({"write": {"focus_new_tasks": 1}}, id="int-for-bool"),
    pytest.param({"weights": {"half_life_s": "7d"}}, id="str-for-float"),
    pytest.param({"weights": {"usage_scale": math.nan}}, id="nan-float"),
    pytest.param({"weights": 0.5}, id="scalar-for-table"),
    pytest.param({"retrieval": {"lambda": 1.5}}, id="lambda-above-1"),
    pytest.param({"retrieval": {"k": 0}}, id="k-zero"),
    pytest.param({"retrieval": {"budget_tokens": -1}}, id="budget-negative"),
    pytest.param({"write": {"branch_by": "deepest_task"}}, id="unknown-branch-mode"),
    pytest.param({"retrieval": {"spread_branches": -1}}, id="spread-branches-negative"),
    pytest.param({"retrieval": {"standing_max": -1}}, id="standing-max-negative"),
    pytest.param({"retrieval": {"standing_types": ["state"]}}, id="retired-key"),
    pytest.param({"accel": {"common_postings": -1}}, id="common-postings-negative"),
    pytest.param({"retrieval": {"family_open": -1}}, id="family-open-negative"),
    pytest.param({"retrieval": {"active_prior": -0.1}}, id="active-prior-negative"),
    pytest.param({"retrieval": {"active_prior": 11.0}}, id="active-prior-above-ten"),
    pytest.param({"retrieval": {"family_rarity": -0.5}}, id="family-rarity-negative"),
    pytest.param({"retrieval": {"family_rarity": math.inf}}, id="family-rarity-infinite"),
    pytest.param({"weights": {"half_life_s": 0}}, id="half-life-zero"),
    pytest.param({"weights": {"importance": -1.0}}, id="negative-coefficient"),
    pytest.param({"weights": {"importance_by_type": {"task": 1.2}}}, id="type-default-above-1"),
    pytest.param({"feedback": {"important_step": -0.2}}, id="negative-step"),
    pytest.param({"forgetting": {"max_nodes": -1}}, id="max-nodes-negative"),
    pytest.param({"forgetting": {"recency": -0.1}}, id="forgetting-recency-negative"),
    pytest.param({"forgetting": {"half_life_s": 0.0}}, id="forgetting-half-life-zero"),
    pytest.param({"forgetting": {"empty_task": 1.5}}, id="empty-task-above-one"),
    pytest.param({"forgetting": {"last_in_task": -0.1}}, id="last-in-task-negative"),
    pytest.param({"forgetting": {"last_in_task": "0.9"}}, id="last-in-task-string"),
    pytest.param({"write": {"max_content_chars": 0}}, id="max-content-zero"),
    pytest.param({"usage": {"flush_every": 0}}, id="flush-every-zero"),
]


@pytest.mark.parametrize("overrides", BAD_CONFIG)
def test_bad_config_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(HybridMemoryError) as info:
        Config.load(overrides=overrides)
    assert type(info.value) is ConfigError


def test_bad_config_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Config.load(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[retrieval\nk = 5\n")
    with pytest.raises(ConfigError):
        Config.load(broken)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[retrieval]\nkk = 5\n")
    with pytest.raises(ConfigError):
        Config.load(unknown)


def test_bad_config_at_open_creates_no_store(tmp_path: Path, embedder: Any) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[retrieval]\nk = 0\n")
    with pytest.raises(ConfigError):
        MemoryTree.open(tmp_path / "fresh", config=cfg, embedder=embedder)
    assert not (tmp_path / "fresh" / "memory.db").exists()
    assert not (tmp_path / "fresh" / "chroma").exists()


# -- the error classes themselves -----------------------------------------------------------------


EXPECTED_CODES = {
    "HybridMemoryError": ("hybrid_memory_error", 1),
    "InvalidInputError": ("invalid_input", 2),
    "InvalidContentError": ("invalid_content", 2),
    "InvalidWeightError": ("invalid_weight", 2),
    "InvalidTypeError": ("invalid_type", 2),
    "CycleError": ("cycle", 2),
    "IngestError": ("invalid_transcript", 2),
    "NotFoundError": ("not_found", 3),
    "NamespaceError": ("namespace_mismatch", 4),
    "ConflictError": ("conflict", 5),
    "ConfigError": ("config", 6),
    "ClosedError": ("closed", 7),
    "StorageError": ("storage", 8),
    "EncryptionKeyError": ("encryption_key", 6),
    "AccessDeniedError": ("access_denied", 9),
}


def test_every_error_class_has_a_distinct_stable_code_and_an_exit_code() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    assert sorted(errors.__all__) == sorted(EXPECTED_CODES)
    codes = [cls.code for cls in classes]
    assert len(set(codes)) == len(codes), "codes must be distinct"
    for cls in classes:
        assert issubclass(cls, HybridMemoryError)
        assert "code" in vars(cls), f"{cls.__name__} must define its own code, not inherit one"
        assert isinstance(cls.code, str) and cls.code
        assert type(cls.exit_code) is int and 0 < cls.exit_code < 126
        assert (cls.code, cls.exit_code) == EXPECTED_CODES[cls.__name__]
        # Instances carry the same values, and the caller's message survives.
        err = cls("boom")
        assert (err.code, err.exit_code, str(err)) == (cls.code, cls.exit_code, "boom")


def test_input_errors_share_the_input_exit_code_and_others_do_not() -> None:
    for cls in (InvalidContentError, InvalidWeightError, InvalidTypeError, CycleError, errors.IngestError):
        assert issubclass(cls, InvalidInputError)
    others = (NotFoundError, NamespaceError, ConflictError, ConfigError, ClosedError, StorageError, AccessDeniedError)
    for cls in others:
        assert not issubclass(cls, InvalidInputError)
    assert len({cls.exit_code for cls in others} | {InvalidInputError.exit_code, HybridMemoryError.exit_code}) == 9


# -- odd values that reached Python errors instead of typed ones ----------------------


@pytest.mark.parametrize("items", [None, "content", {"content": "x", "type": "event"}, 42])
def test_add_many_refuses_a_non_iterable_of_mappings(open_memory, items):
    mem = open_memory()
    before = snapshot(mem)
    with pytest.raises(InvalidTypeError):
        mem.add_many(items)
    assert snapshot(mem) == before


def test_huge_integers_are_refused_with_typed_errors(open_memory):
    mem = open_memory()
    before = snapshot(mem)
    with pytest.raises(InvalidWeightError):
        mem.add("a memory", type="fact", importance=10**400)
    with pytest.raises(InvalidTypeError):
        mem.add("a memory", type="fact", ts=10**400)
    assert snapshot(mem) == before


def test_feedback_flags_must_be_booleans(open_memory):
    mem = open_memory()
    node = mem.add("a fact", type="fact")
    before = snapshot(mem)
    with pytest.raises(InvalidTypeError):
        mem.feedback(node, important="yes")  # type: ignore[arg-type]
    assert snapshot(mem) == before


def test_weight_checks_the_memory_and_the_namespace(open_memory, tmp_path):
    a = open_memory(namespace="a", folder=tmp_path / "shared")
    b = open_memory(namespace="b", folder=tmp_path / "shared")
    node = a.add("a fact of tenant a", type="fact")
    with pytest.raises(NamespaceError):
        b.weight(node)
    a.close()
    with pytest.raises(ClosedError):
        a.weight(node)


def test_a_bad_config_file_creates_no_folder(tmp_path, embedder):
    bad = tmp_path / "bad.toml"
    bad.write_text("[retrieval]\nk = 0\n")
    folder = tmp_path / "never"
    with pytest.raises(ConfigError):
        MemoryTree.open(folder, config=bad, embedder=embedder)
    assert not folder.exists()


# -- hostile input found by fuzzing (tests/test_fuzz.py): each was an untyped crash,
# -- a poisoned memory or a partial write before its fix --------------------------------


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_CASES = [
    case("add-lone-surrogate", InvalidContentError, lambda m, n: m.add("a\udc80b", type="fact", parent=n.trip)),
    case("add-many-lone-surrogate", InvalidContentError,
         lambda m, n: m.add_many([{"content": "fine", "type": "fact"}, {"content": "\ud800", "type": "fact"}])),
    case("update-lone-surrogate", InvalidContentError, lambda m, n: m.update(n.hotel, content="x\udcff")),
    case("meta-lone-surrogate", InvalidContentError,
         lambda m, n: m.add("fine words", type="fact", parent=n.trip, meta={"v": "\udcff"})),
    case("meta-key-lone-surrogate", InvalidContentError, lambda m, n: m.update(n.hotel, meta={"\ud800": 1})),
    case("retrieve-lone-surrogate", InvalidContentError, lambda m, n: m.retrieve("\udcc7")),
    case("retrieve-nul", InvalidContentError, lambda m, n: m.retrieve("a\x00b")),
    case("get-lone-surrogate-id", NotFoundError, lambda m, n: m.get("\udcdd")),
    case("delete-nul-id", NotFoundError, lambda m, n: m.delete("ab\x00cd")),
    case("checkpoint-lone-surrogate", InvalidContentError, lambda m, n: m.checkpoint("\ud800")),
    case("meta-nested-too-deep", InvalidTypeError,
         lambda m, n: m.add("deep meta", type="fact", parent=n.trip, meta={"d": _nested(980)})),
    case("meta-nested-far-too-deep", InvalidTypeError,
         lambda m, n: m.update(n.hotel, meta={"d": _nested(100_000)})),
    case("meta-over-the-content-limit", InvalidContentError,
         lambda m, n: m.add("short", type="fact", parent=n.trip, meta={"m": "z" * 1_000_001})),
    case("k-deeply-nested", InvalidInputError, lambda m, n: m.retrieve("hotel", k=_nested(1000))),
    case("now-deeply-nested", InvalidTypeError, lambda m, n: m.weight(n.hotel, now=_nested(1000))),
    case("erase-compact-not-bool", InvalidTypeError, lambda m, n: m.admin.erase(n.billing, compact={})),  # type: ignore[arg-type]
    case("erase-namespace-compact-not-bool", InvalidTypeError, lambda m, n: m.admin.erase_namespace(compact="yes")),  # type: ignore[arg-type]
    case("forget-delete-not-bool", InvalidTypeError, lambda m, n: m.forget(max_nodes=1, delete="no")),  # type: ignore[arg-type]
    case("forget-dry-run-not-bool", InvalidTypeError, lambda m, n: m.forget(max_nodes=1, dry_run="no")),  # type: ignore[arg-type]
    case("nodes-include-archived-not-bool", InvalidTypeError, lambda m, n: m.nodes(include_archived="x")),  # type: ignore[arg-type]
    case("update-version-a-string", InvalidTypeError,
         lambda m, n: m.update(n.hotel, importance=0.5, expected_version="1")),  # type: ignore[arg-type]
    case("is-twin-not-text", InvalidTypeError, lambda m, n: is_twin("a", 5, 0.5, config=m.config, embedder=m.embedder)),  # type: ignore[arg-type]
    case("is-twin-bytes", InvalidTypeError, lambda m, n: is_twin("a", b"a", 0.5, config=m.config, embedder=m.embedder)),  # type: ignore[arg-type]
    case("is-twin-cosine-a-string", InvalidTypeError, lambda m, n: is_twin("a", "a", "x", config=m.config, embedder=m.embedder)),  # type: ignore[arg-type]
    case("export-under-a-file", InvalidInputError, lambda m, n: m.admin.export(Path(__file__) / "x.jsonl")),
    case("export-name-too-long", InvalidInputError, lambda m, n: m.admin.export(Path(m.folder or ".") / ("x" * 300))),
    case("export-nul-in-path", InvalidInputError, lambda m, n: m.admin.export("a\x00b.jsonl")),
    case("export-path-not-a-path", InvalidTypeError, lambda m, n: m.admin.export(5)),  # type: ignore[arg-type]
    case("export-include-log-not-bool", InvalidTypeError,
         lambda m, n: m.admin.export(Path(m.folder or ".") / "x.jsonl", include_log="yes")),  # type: ignore[arg-type]
    case("import-nul-in-path", InvalidInputError, lambda m, n: m.admin.import_("a\x00b.jsonl")),
    case("import-a-folder", InvalidInputError, lambda m, n: m.admin.import_(Path(__file__).parent)),
    case("import-path-bytes", InvalidTypeError, lambda m, n: m.admin.import_(b"x.jsonl")),  # type: ignore[arg-type]
    case("erase-unknown-node", NotFoundError, lambda m, n: m.admin.erase("no-such-node")),
]


@pytest.mark.parametrize(("error", "call"), HOSTILE_CASES)
def test_hostile_input_is_refused(world: tuple[MemoryTree, SimpleNamespace], error: type[HybridMemoryError],
                                  call: Case) -> None:
    mem, n = world
    refused(mem, error, lambda: call(mem, n))


def test_meta_at_the_nesting_limit_is_kept_and_reads_back(open_memory: Callable[..., MemoryTree]) -> None:
    """64 levels are accepted and every later read and export works (980 levels used
    to be accepted and then broke nodes() and export() with a RecursionError)."""
    mem = open_memory()
    node = mem.add("deep but allowed", type="task", meta={"d": _nested(62)})
    assert mem.get(node.id).meta == {"d": _nested(62)}
    assert len(mem.nodes()) == 1
    assert mem.admin.export(Path(mem.folder or ".") / "x.jsonl").nodes == 1  # type: ignore[operator]


def test_open_refuses_arguments_of_the_wrong_type(tmp_path: Path, embedder: Any) -> None:
    for path in (b"", {}, 3):
        with pytest.raises(InvalidTypeError, match="path"):
            MemoryTree.open(path, embedder=embedder)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="NUL"):
        MemoryTree.open(str(tmp_path / "a\x00b"), embedder=embedder)
    with pytest.raises(InvalidTypeError, match="store"):
        MemoryTree.open(tmp_path / "m", store=3, embedder=embedder)  # type: ignore[arg-type]
    with pytest.raises(StorageError, match="driver"):
        MemoryTree.open(tmp_path / "m", store="mysql://u@h/db", embedder=embedder)
    assert not (tmp_path / "m").exists()


def test_import_of_a_deeply_nested_line_is_a_bad_snapshot(open_memory: Callable[..., MemoryTree], tmp_path: Path) -> None:
    mem = open_memory()
    mem.add("one", type="task")
    mem.admin.export(tmp_path / "ok.jsonl")
    header = (tmp_path / "ok.jsonl").read_text().splitlines()[0]
    (tmp_path / "deep.jsonl").write_text(header + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    other = open_memory(namespace="u")
    with pytest.raises(InvalidInputError, match="nested too deeply"):
        other.admin.import_(tmp_path / "deep.jsonl")
    assert other.nodes() == []


def test_the_cli_tree_prints_a_chain_deeper_than_pythons_recursion(tmp_path: Path, embedder: Any,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The tree printer walks with its own stack: a chain deeper than the recursion
    limit prints, one line each, deepest last. (The limit is lowered to 150 frames
    above this test's own for the call, so that a short chain proves it: each level
    embeds a path of its own, and 1,000 of them take minutes.)"""
    from hybrid_memory.cli import main as cli

    levels = 400
    config = tmp_path / "deep.toml"
    config.write_text(f"[write]\nmax_depth = {levels + 10}\n")
    with MemoryTree.open(tmp_path / "m", config=config, embedder=embedder) as mem:
        mem.add_many([{"content": "level 0", "type": "task", "key": "0"}]
                     + [{"content": f"level {i}", "type": "event", "parent": str(i - 1), "key": str(i)}
                        for i in range(1, levels + 1)])
    capsys.readouterr()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 150)
    try:
        assert sys.getrecursionlimit() < levels
        code = cli(["--path", str(tmp_path / "m"), "--config", str(config), "tree"])
    finally:
        sys.setrecursionlimit(limit)
    assert code == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "level" in ln]
    assert len(lines) == levels + 1 and f"level {levels}" in lines[-1]


@pytest.mark.parametrize("argv", [
    ["log", "-n", "99999999999999999999"],
    ["audit", "show", "-n", "-5"],
    ["add", "a\udc80b", "-t", "fact"],
    ["add", "fine", "-t", "fact", "--meta", "[" * 5000],
    ["--db-url", "mysql://u@h/db", "stats"],
])
def test_the_cli_refuses_hostile_arguments_with_a_documented_exit_code(
        tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from hybrid_memory.cli import main as cli

    (tmp_path / "m").mkdir()
    code = cli(["--path", str(tmp_path / "m"), *argv])
    err = capsys.readouterr().err
    assert code in (2, 8) and err.startswith("error [") and "Traceback" not in err


def test_the_cli_refuses_an_unreadable_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hybrid_memory.cli import main as cli

    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe[write]")
    (tmp_path / "folder.toml").mkdir()
    for config in ("bad.toml", "folder.toml"):
        assert cli(["--path", str(tmp_path / "m"), "--config", str(tmp_path / config), "stats"]) == 6
        assert capsys.readouterr().err.startswith("error [config]")


def test_an_export_never_overwrites_the_memorys_own_files(open_memory: Callable[..., MemoryTree],
                                                          stores: Any) -> None:
    """Found by fuzzing the CLI: `export memory.db` replaced the database with the export."""
    mem = open_memory()
    mem.add("still here", type="task")
    folder = Path(mem.folder)  # type: ignore[arg-type]
    targets = [folder / "chroma" / "x.jsonl"]
    if stores.is_sqlite:
        targets += [folder / "memory.db", folder / "memory.db-wal"]
    for target in targets:
        with pytest.raises(InvalidInputError, match="own files"):
            mem.admin.export(target)
    assert [n.content for n in mem.nodes()] == ["still here"]
