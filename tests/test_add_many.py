"""add_many writes a batch with one statement per kind; what it stores must be
exactly what the same memories added one by one store: the tree, the weights,
the merges, the lexical terms, the operation log, the cursor and the focus
checkpoints (each naming the log position of its task's add)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from hybrid_memory import ROOT, MemoryTree
from hybrid_memory.store.schema import checkpoints, oplog, terms

T0 = 1_750_000_000.0

# A batch that exercises every path of the write: new trees (ROOT), parents named
# by an earlier item's key and by the active node (None, which follows each new
# task), twins inside the batch and of a node written before it, ancestors whose
# active time is raised, English and Chinese.
BATCH: list[dict[str, Any]] = [
    dict(key="trip", content="Book the Berlin trip for the March offsite", type="task", parent=ROOT),
    dict(content="Flight LH 2037 leaves Munich at 07:40", type="fact"),
    dict(key="hotel", content="Find a hotel near the Berlin venue", type="task", parent="trip"),
    dict(content="The hotel must have a gym", type="preference"),
    dict(content="Hotel Adlon quoted 240 EUR per night", type="fact", parent="hotel"),
    dict(content="Hotel Adlon quoted 240 EUR per night.", type="fact", parent="hotel"),  # twin in the batch
    dict(key="claim", content="报销三月差旅费用", type="task", parent=ROOT),
    dict(content="出租车发票金额为 86 元", type="fact"),
    dict(content="报销单已提交给财务审批", type="state"),
    dict(content="报销单已提交给财务审批。", type="state"),  # twin in the batch
    dict(content="The team prefers aisle seats", type="preference", parent="trip"),
    dict(content="Flight LH 2037 leaves Munich at 07:40.", type="fact", parent="trip"),  # twin of an earlier item
    dict(content="财务要求补充酒店发票", type="event", parent="claim"),
    dict(content="The budget owner is Dana", type="fact", parent="existing"),
    dict(content="The quarterly budget review is on Monday.", type="event", parent="existing"),  # twin of a node before the batch
]


def _prelude(mem: MemoryTree) -> str:
    task = mem.add("Quarterly budget review", type="task", parent=ROOT, ts=T0 - 100)
    mem.add("The quarterly budget review is on Monday", type="event", parent=task, ts=T0 - 50)
    return task.id


def _items(existing: str) -> list[dict[str, Any]]:
    out = []
    for i, item in enumerate(BATCH):
        item = dict(item, ts=T0 + 10 * i)
        if item.get("parent") == "existing":
            item["parent"] = existing
        out.append(item)
    return out


def _one_by_one(mem: MemoryTree, items: list[dict[str, Any]]) -> None:
    ids: dict[str, str] = {}
    for item in items:
        item = dict(item)
        key = item.pop("key", None)
        if isinstance(item.get("parent"), str) and item["parent"] in ids:
            item["parent"] = ids[item["parent"]]
        node = mem.add(**item)
        if key is not None:
            ids[key] = node.id


def _stored(mem: MemoryTree) -> dict[str, Any]:
    """Everything the write path stores, with random ids replaced by contents."""
    nodes = {n.id: n for n in mem.nodes(include_archived=True)}
    name = {i: n.content for i, n in nodes.items()}
    tree = sorted(
        (n.content, n.type.value, name.get(n.parent_id or "", ""), n.depth, name[n.branch_id], n.importance,
         round(n.confidence, 9), n.version, n.created_at, n.accessed_at, n.active_at, n.status.value)
        for n in nodes.values()
    )
    with mem.store.reading() as conn:
        words = sorted((name[r.node_id], r.term, r.tf) for r in conn.execute(select(terms)))
        log = [(r.seq, r.op, name.get(r.node_id or "", "")) for r in conn.execute(select(oplog).order_by(oplog.c.seq))]
        marks = [(name.get(r.active_id or "", ""), r.log_seq, r.ts, r.note)
                 for r in conn.execute(select(checkpoints).order_by(checkpoints.c.id))]
    first = log[0][0]
    position = {seq: i for i, (seq, _, _) in enumerate(log)}
    return {
        "tree": tree,
        "terms": words,
        "log": [(op, content) for _, op, content in log],
        # A checkpoint names the log entry of its task's add: compared by position in the log.
        "checkpoints": [(active, position[seq], ts, note) for active, seq, ts, note in marks],
        "active": None if mem.active is None else mem.active.content,
        "index": sorted(name[i] for i in mem.index.ids(mem.namespace)),
        "first_seq": first > 0,
    }


def test_a_batch_stores_exactly_what_the_same_adds_one_by_one_store(open_memory, tmp_path):
    batched = open_memory(folder=tmp_path / "batched")
    items = _items(_prelude(batched))
    out = batched.add_many(items)
    single = open_memory(folder=tmp_path / "single")
    _one_by_one(single, _items(_prelude(single)))

    assert [n.merged for n in out] == [False, False, False, False, False, True, False, False, False, True,
                                       False, True, False, False, True]
    a, b = _stored(batched), _stored(single)
    for part in a:
        assert a[part] == b[part], part
    # The batch's own checks: each new task focused once, in order, and the cursor
    # ends on the last; the earlier task's active time was raised by its descendants.
    assert [c[0] for c in a["checkpoints"]] == [
        "Quarterly budget review", "Book the Berlin trip for the March offsite",
        "Find a hotel near the Berlin venue", "报销三月差旅费用"]
    assert a["active"] == "报销三月差旅费用"
    assert all(a["log"][at] == ("add", active) for active, at, _, _ in a["checkpoints"])
    # (one by one runs the same code path, so the figures are also checked on their own)
    # A task's active time is the latest write below it: an add or a merge.
    active_at = {n.content: n.active_at - T0 for n in batched.nodes() if n.type.value == "task"}
    assert active_at == {"Quarterly budget review": 140, "Book the Berlin trip for the March offsite": 110,
                         "Find a hotel near the Berlin venue": 50, "报销三月差旅费用": 120}


def test_a_refused_item_anywhere_in_the_batch_writes_nothing(open_memory, tmp_path):
    mem = open_memory(folder=tmp_path / "m")
    _prelude(mem)
    before = _stored(mem)
    items = _items("no-such-node")
    with pytest.raises(Exception, match="unknown parent"):
        mem.add_many(items)
    assert _stored(mem) == before
