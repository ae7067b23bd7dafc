"""Time travel and portability: export / import round trips, log replay, restore(seq=...).

Real SQLite files, a real embedded Chroma and the real bundled model throughout.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, inspect, select
from sqlalchemy import text as sql

from hybrid_memory import (
    ROOT,
    ConflictError,
    CycleError,
    InvalidInputError,
    InvalidTypeError,
    MemoryTree,
    NotFoundError,
    Status,
)
from hybrid_memory import portability as P
from hybrid_memory.portability import snapshot
from hybrid_memory.store.schema import checkpoints, cursors, nodes, oplog

# -- helpers -------------------------------------------------------------------------------------


def ops_of(mem: MemoryTree) -> list[P.Op]:
    with mem.store.reading() as conn:
        return P.read_ops(conn, mem.namespace)


def last_seq(mem: MemoryTree) -> int:
    with mem.store.reading() as conn:
        return mem.store.log.last_seq(conn, mem.namespace)


def assert_same(a: P.State, b: P.State, what: str = "") -> None:
    """Field by field, with a readable first difference."""
    assert set(a.nodes) == set(b.nodes), f"{what}: node sets differ: {set(a.nodes) ^ set(b.nodes)}"
    for i in a.nodes:
        diff = {f: (a.nodes[i][f], b.nodes[i][f]) for f in P.STATE_FIELDS if a.nodes[i][f] != b.nodes[i][f]}
        assert not diff, f"{what}: node {i} differs: {diff}"
    assert a.cursors == b.cursors, f"{what}: cursors differ"


def assert_replays(mem: MemoryTree) -> None:
    """Rebuilding from the log alone gives exactly the live tree."""
    mem.flush()
    state = P.replay(ops_of(mem))
    assert state.skipped == []
    assert_same(state, P.live_state(mem), "replay vs live")


def rows(mem: MemoryTree) -> dict[str, dict[str, Any]]:
    """Every column of every node of the namespace, embedding included."""
    with mem.store.reading() as conn:
        return {r.id: dict(r._mapping) for r in conn.execute(select(nodes).where(nodes.c.namespace == mem.namespace))}


def side_tables(mem: MemoryTree) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    ns = mem.namespace
    with mem.store.reading() as conn:
        cur = sorted(tuple(r) for r in conn.execute(
            select(cursors.c.session, cursors.c.active_id, cursors.c.updated_at).where(cursors.c.namespace == ns)))
        cps = [tuple(r) for r in conn.execute(
            select(checkpoints.c.id, checkpoints.c.session, checkpoints.c.active_id, checkpoints.c.log_seq,
                   checkpoints.c.ts, checkpoints.c.note).where(checkpoints.c.namespace == ns).order_by(checkpoints.c.id))]
    return cur, cps


def counts(mem: MemoryTree) -> dict[str, int]:
    ns = mem.namespace
    with mem.store.reading() as conn:
        return {
            "nodes": conn.execute(select(func.count()).where(nodes.c.namespace == ns)).scalar_one(),
            "ops": conn.execute(select(func.count()).where(oplog.c.namespace == ns)).scalar_one(),
            "cursors": conn.execute(select(func.count()).where(cursors.c.namespace == ns)).scalar_one(),
            "checkpoints": conn.execute(select(func.count()).where(checkpoints.c.namespace == ns)).scalar_one(),
        }


def live_ids(mem: MemoryTree) -> set[str]:
    return {n.id for n in mem.nodes()}


# -- a big bilingual memory ------------------------------------------------------------------------

KINDS = ["event", "fact", "state", "decision", "preference", "summary"]


def build_big(mem: MemoryTree, clock: Any, branches: int = 12, per_branch: int = 200) -> dict[str, str]:
    """``branches`` task trees of ``per_branch`` nodes, Chinese and English, two levels
    below each task (and a few sub-tasks), some pinned, unicode meta; one add_many."""
    base = clock.now
    items: list[dict[str, Any]] = []
    for b in range(branches):
        zh = b % 2 == 0
        task = f"t{b}"
        items.append(dict(
            key=task, parent=ROOT, type="task", ts=base + b * 1000,
            content=f"项目{b}：把订单数据库迁移到新集群" if zh else f"Project {b}: migrate the order database to the new cluster",
        ))
        for j in range(per_branch - 1):
            parent = task if j < 20 else f"n{b}_{j % 20}"
            ntype = "task" if j % 50 == 7 else KINDS[j % len(KINDS)]
            content = (
                f"第{j}条：客户{j * 7 % 97}号反馈发票问题，项目{b}。"
                if zh else f"Note {j}: customer {j * 7 % 97} reported an invoice problem in project {b}."
            )
            items.append(dict(
                key=f"n{b}_{j}", parent=parent, type=ntype, content=content, ts=base + b * 1000 + j + 1,
                pinned=j % 37 == 0, importance=None if j % 4 else (j % 10) / 10,
                meta={"来源": "邮件", "n": j, "tags": ["α", "β"], "emoji": "🙂", "x": 0.1 * j} if j % 3 == 0 else None,
            ))
    added = mem.add_many(items)
    assert not any(n.merged for n in added)
    clock.now = base + branches * 1000 + 10
    return {item["key"]: n.id for item, n in zip(items, added, strict=True)}


def churn(mem: MemoryTree, clock: Any, keys: dict[str, str]) -> None:
    """Archive, pin, feedback, update, read, focus, move, delete, checkpoint: a used memory."""
    clock.advance(60)
    mem.archive(keys["n0_3"])
    mem.archive(keys["n1_5"])
    mem.archive(keys["n2_30"])
    mem.pin(keys["n3_4"])
    mem.pin(keys["n0_0"], False)
    mem.feedback(keys["n4_8"], important=True, confirmed=True)
    mem.update(keys["n5_9"], content="更新后的内容：客户已经确认发票无误 ✓", meta={"状态": "已确认"})
    mem.update(keys["n6_10"], importance=0.95)
    for q in ("invoice problem of 13 euros", "发票问题", "migrate the order database"):
        mem.retrieve(q)
    mem.focus(keys["n7_2"])
    mem.move(keys["n8_11"], keys["n9_12"])
    mem.delete(keys["n10_13"])
    mem.checkpoint("检查点：迁移前 ✓")
    clock.advance(60)
    mem.flush()


# -- export / import ---------------------------------------------------------------------------------


def test_round_trip_of_a_few_thousand_nodes_is_lossless(open_memory, clock, tmp_path: Path):
    src = open_memory(folder=tmp_path / "src", dedup={"enabled": False})
    keys = build_big(src, clock, branches=12, per_branch=170)
    churn(src, clock, keys)
    other = open_memory(folder=tmp_path / "src", session="other", dedup={"enabled": False})
    other.focus(keys["n11_1"])
    assert len(rows(src)) > 2000

    for include_log in (False, True):
        file = tmp_path / f"snap-{include_log}.jsonl"
        out = src.admin.export(file, include_log=include_log)
        assert out.nodes == len(rows(src)) and out.cursors == 2 and out.checkpoints == counts(src)["checkpoints"]
        assert out.ops == (counts(src)["ops"] if include_log else 0)
        lines = file.read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0])
        assert header["format"] == "hybrid-memory" and header["version"] == 1
        assert header["namespace"] == "t" and header["embed_model"] == src.embedder.name and header["dim"] == 384
        assert {json.loads(line)["kind"] for line in lines[1:]} == (
            {"node", "cursor", "checkpoint", "op"} if include_log else {"node", "cursor", "checkpoint"}
        )
        assert "发票" in file.read_text(encoding="utf-8")  # readable, not escaped
        assert not list(tmp_path.glob(".snap*"))  # no temporary file left

        dst = open_memory(folder=tmp_path / f"dst-{include_log}", dedup={"enabled": False})
        got = dst.admin.import_(file)
        assert got.nodes == out.nodes and got.reembedded == 0

        # Every column of every node (embeddings byte for byte), cursors, checkpoints.
        a, b = rows(src), rows(dst)
        assert a.keys() == b.keys()
        for i in a:
            assert a[i] == b[i], f"node {i} differs"
        assert side_tables(src) == side_tables(dst)
        if include_log:
            assert [(o.seq, o.session, o.ts, o.op, o.node_id, o.payload) for o in ops_of(src)] == [
                (o.seq, o.session, o.ts, o.op, o.node_id, o.payload) for o in ops_of(dst)
            ]
        # Either way the new memory's log explains it.
        assert_replays(dst)
        # The vector index was filled by the usual drain, with exactly the live nodes.
        assert dst.index.ids("t") == live_ids(dst) == live_ids(src)
        # Retrieval gives the same answer in both.
        for q in ("customer 21 reported an invoice problem", "客户已经确认发票", "项目4 订单数据库"):
            assert dst.retrieve(q, now=clock.now).ids == src.retrieve(q, now=clock.now).ids
        assert dst.active is not None and src.active is not None and dst.active.id == src.active.id
        assert dst.get(keys["n5_9"]).meta == {"状态": "已确认"}
        assert dst.get(keys["n1_6"]).meta == src.get(keys["n1_6"]).meta
        assert dst.get(keys["n1_6"]).meta["emoji"] == "🙂" and dst.get(keys["n1_6"]).meta["来源"] == "邮件"


def test_import_refuses_a_non_empty_memory_and_changes_nothing(open_memory, clock, tmp_path: Path):
    src = open_memory(folder=tmp_path / "src")
    t = src.add("迁移订单数据库", type="task", parent=ROOT)
    src.add("The window is Saturday 02:00", type="decision", parent=t)
    file = tmp_path / "snap.jsonl"
    src.admin.export(file, include_log=True)

    dst = open_memory(folder=tmp_path / "dst")
    dst.add("Something already here", type="fact", parent=ROOT)
    before = (rows(dst), side_tables(dst), counts(dst), dst.index.ids("t"))
    with pytest.raises(ConflictError, match="not empty"):
        dst.admin.import_(file)
    assert (rows(dst), side_tables(dst), counts(dst), dst.index.ids("t")) == before

    # Same store, another namespace: the ids are taken (ids are unique per store).
    twin = open_memory(namespace="u", folder=tmp_path / "src")
    with pytest.raises(ConflictError, match="already exists"):
        twin.admin.import_(file)
    assert counts(twin) == {"nodes": 0, "ops": 0, "cursors": 0, "checkpoints": 0}
    assert twin.index.ids("u") == set()


def _assert_untouched(mem: MemoryTree) -> None:
    assert counts(mem) == {"nodes": 0, "ops": 0, "cursors": 0, "checkpoints": 0}
    assert mem.index.ids(mem.namespace) == set()
    with mem.store.reading() as conn:
        assert mem.store.outbox.pending(conn, mem.namespace) == []


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda obj, line: line[: len(line) // 2], "not valid JSON"),
        (lambda obj, line: json.dumps(dict(obj, importance="high"), ensure_ascii=False), "importance"),
        (lambda obj, line: json.dumps(dict(obj, type="memo"), ensure_ascii=False), "unknown node type"),
        (lambda obj, line: json.dumps(dict(obj, embedding="%%%"), ensure_ascii=False), "base64"),
        (lambda obj, line: json.dumps(dict(obj, path="nowhere/"), ensure_ascii=False), "path"),
        (lambda obj, line: json.dumps(dict(obj, kind="blob"), ensure_ascii=False), "unknown kind"),
        (lambda obj, line: json.dumps({k: v for k, v in obj.items() if k != "content"}), "content"),
    ],
    ids=["truncated", "bad-weight", "bad-type", "bad-embedding", "bad-path", "bad-kind", "missing-field"],
)
def test_a_corrupt_line_is_refused_with_its_number_and_nothing_is_written(open_memory, clock, tmp_path: Path, damage, message):
    src = open_memory(folder=tmp_path / "src")
    t = src.add("修复认证服务中的登录错误", type="task", parent=ROOT)
    kids = src.add_many([dict(content=f"Login failure number {i} traced to token expiry", type="event", parent=t)
                         for i in range(6)])
    src.add("Grandchild note about the session cookie", type="fact", parent=kids[2])
    file = tmp_path / "snap.jsonl"
    src.admin.export(file, include_log=True)
    lines = file.read_text(encoding="utf-8").splitlines()
    k = 5  # a node line in the middle
    obj = json.loads(lines[k - 1])
    assert obj["kind"] == "node"
    lines[k - 1] = damage(obj, lines[k - 1])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")

    dst = open_memory(folder=tmp_path / "dst")
    with pytest.raises(P.BadSnapshotError, match=message) as info:
        dst.admin.import_(bad)
    assert info.value.line == k and f"line {k}:" in str(info.value)
    assert isinstance(info.value, InvalidInputError)
    _assert_untouched(dst)


def test_a_cursor_whose_focus_flag_is_not_a_boolean_is_refused(open_memory, tmp_path: Path):
    src = open_memory(folder=tmp_path / "src")
    t = src.add("Renew the staging certificates", type="task", parent=ROOT)
    src.focus(t)
    file = tmp_path / "snap.jsonl"
    src.admin.export(file)
    lines = file.read_text(encoding="utf-8").splitlines()
    (k,) = [i for i, line in enumerate(lines, 1) if json.loads(line).get("kind") == "cursor"]
    cursor = json.loads(lines[k - 1])
    assert cursor["focused"] is True  # the session chose its node
    bad = tmp_path / "bad.jsonl"
    for n, value in enumerate(("yes", 1, None)):
        lines[k - 1] = json.dumps(dict(cursor, focused=value))
        bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
        dst = open_memory(folder=tmp_path / f"dst{n}")
        with pytest.raises(P.BadSnapshotError, match="focused must be true or false") as info:
            dst.admin.import_(bad)
        assert info.value.line == k
        _assert_untouched(dst)
    # A file written before the flag was kept: nothing was chosen.
    lines[k - 1] = json.dumps({key: v for key, v in cursor.items() if key != "focused"})
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    old = open_memory(folder=tmp_path / "old")
    old.admin.import_(bad)
    with old.store.reading() as conn:
        assert old.store.sessions.get_focus(conn, old.namespace, "main") == (t.id, False)


def test_a_missing_parent_is_reported_at_the_childs_line(open_memory, tmp_path: Path):
    src = open_memory(folder=tmp_path / "src")
    t = src.add("Plan the offsite", type="task", parent=ROOT)
    a = src.add("Venue shortlist: Lisbon or Porto", type="fact", parent=t)
    src.add("Porto is cheaper in May", type="fact", parent=a)
    file = tmp_path / "snap.jsonl"
    src.admin.export(file)
    lines = file.read_text(encoding="utf-8").splitlines()
    parent_line = next(i for i, s in enumerate(lines) if a.id in s and '"kind": "node"' in s and f'"id": "{a.id}"' in s)
    del lines[parent_line]
    child_line = next(i for i, s in enumerate(lines, 1) if f'"parent_id": "{a.id}"' in s)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dst = open_memory(folder=tmp_path / "dst")
    with pytest.raises(P.BadSnapshotError, match="parent") as info:
        dst.admin.import_(bad)
    assert info.value.line == child_line
    _assert_untouched(dst)
    with pytest.raises(P.BadSnapshotError, match="header"):
        (tmp_path / "nohead.jsonl").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
        dst.admin.import_(tmp_path / "nohead.jsonl")
    with pytest.raises(InvalidInputError, match="no such file"):
        dst.admin.import_(tmp_path / "absent.jsonl")
    _assert_untouched(dst)


def test_an_import_that_fails_inside_its_transaction_leaves_nothing(open_memory, tmp_path: Path, monkeypatch):
    src = open_memory(folder=tmp_path / "src", dedup={"enabled": False})
    src.add_many([dict(content=f"Fact number {i} about the billing pipeline", type="fact", parent=ROOT) for i in range(50)])
    file = tmp_path / "snap.jsonl"
    src.admin.export(file)
    dst = open_memory(folder=tmp_path / "dst")
    calls = {"n": 0}
    real = dst.store.terms.index

    def failing(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 30:
            raise RuntimeError("disk on fire")
        real(*args, **kwargs)

    monkeypatch.setattr(dst.store.terms, "index", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        dst.admin.import_(file)
    monkeypatch.undo()
    _assert_untouched(dst)
    assert dst.admin.import_(file).nodes == 50  # and it works once the fault is gone
    assert dst.index.ids("t") == live_ids(src)


def test_import_embeds_again_what_has_no_vector_or_another_model(open_memory, tmp_path: Path):
    src = open_memory(folder=tmp_path / "src")
    a = src.add("The staging build deploys every Friday afternoon", type="fact", parent=ROOT)
    b = src.add("用户喜欢编辑器的深色模式", type="preference", parent=ROOT)
    src.add("Cache invalidation is causing stale product pages", type="event", parent=ROOT)
    file = tmp_path / "snap.jsonl"
    src.admin.export(file)
    lines = file.read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        obj = json.loads(line)
        if obj.get("id") == a.id:
            obj["embedding"] = None
        if obj.get("id") == b.id:
            obj["embed_model"] = "some-other-model"
            # another model's (shorter) vector
            obj["embedding"] = base64.b64encode(np.ones(8, "<f4").tobytes()).decode("ascii")
        out.append(json.dumps(obj, ensure_ascii=False))
    # The header's dim (384) no longer fits b's vector: drop it to allow mixed dims.
    header = json.loads(out[0])
    header["dim"] = None
    out[0] = json.dumps(header)
    (tmp_path / "edited.jsonl").write_text("\n".join(out) + "\n", encoding="utf-8")
    dst = open_memory(folder=tmp_path / "dst")
    got = dst.admin.import_(tmp_path / "edited.jsonl")
    assert got.reembedded == 2
    ra, rb = rows(src), rows(dst)
    for i in (a.id, b.id):
        assert rb[i]["embed_model"] == dst.embedder.name
        assert np.allclose(np.frombuffer(ra[i]["embedding"], np.float32), np.frombuffer(rb[i]["embedding"], np.float32), atol=1e-5)
    assert dst.index.ids("t") == live_ids(src)


def test_import_with_log_into_a_store_whose_log_is_ahead_shifts_positions(open_memory, clock, tmp_path: Path):
    src = open_memory(folder=tmp_path / "src")
    t = src.add("Book a flight to Lisbon for the conference", type="task", parent=ROOT)
    a = src.add("Prefer a window seat", type="preference", parent=t)
    src.archive(a)
    cp = src.checkpoint("before boarding")
    file = tmp_path / "snap.jsonl"
    src.admin.export(file, include_log=True)

    busy = open_memory(namespace="busy", folder=tmp_path / "dst")
    busy.add_many([dict(content=f"Unrelated fact {i} of another tenant", type="fact", parent=ROOT) for i in range(20)])
    dst = open_memory(namespace="t", folder=tmp_path / "dst")
    dst.admin.import_(file)
    shifted = ops_of(dst)
    offset = shifted[0].seq - ops_of(src)[0].seq
    assert offset > 0
    assert [o.seq - offset for o in shifted] == [o.seq for o in ops_of(src)]
    assert dst.get(a.id).status is Status.ARCHIVED
    assert rows(dst)[a.id]["archived_op"] == rows(src)[a.id]["archived_op"] + offset
    assert side_tables(dst)[1][-1][3] == cp.log_seq + offset
    assert_replays(dst)
    # Restoring the archived node works on the shifted positions; time travel too.
    dst.unarchive(a.id)
    assert dst.get(a.id).live
    dst.rewind(seq=cp.log_seq + offset)
    assert dst.get(a.id).status is Status.ARCHIVED
    assert_replays(dst)


@pytest.mark.parametrize("include_log", [False, True])
def test_import_regroups_branches_by_the_importing_memorys_setting(open_memory, tmp_path: Path, include_log: bool):
    src = open_memory(folder=tmp_path / "src")  # nearest_task
    outer = src.add("Organise the conference", type="task", parent=ROOT)
    inner = src.add("Book the venue", type="task", parent=outer)
    fact = src.add("The venue holds 200 people", type="fact", parent=inner)
    assert src.get(fact).branch_id == inner.id
    file = tmp_path / "snap.jsonl"
    src.admin.export(file, include_log=include_log)
    dst = open_memory(folder=tmp_path / "dst", write={"branch_by": "top_task"})
    dst.admin.import_(file)
    assert dst.get(fact).branch_id == outer.id and dst.get(inner).branch_id == outer.id
    assert ops_of(dst)[-1].op == "branch_mode"
    assert_replays(dst)


def test_export_is_atomic(open_memory, tmp_path: Path, monkeypatch):
    mem = open_memory(folder=tmp_path / "m")
    mem.add_many([dict(content=f"Fact {i} about the release train", type="fact", parent=ROOT) for i in range(10)])
    file = tmp_path / "snap.jsonl"
    file.write_text("previous export\n", encoding="utf-8")
    real = P.node_line
    seen = {"n": 0}

    def failing(m: Any) -> dict[str, Any]:
        seen["n"] += 1
        if seen["n"] == 5:
            raise OSError("no space left on device")
        return real(m)

    monkeypatch.setattr(snapshot, "node_line", failing)
    with pytest.raises(Exception, match="no space left"):
        mem.admin.export(file)
    assert file.read_text(encoding="utf-8") == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "snap.jsonl"]


# -- replay ---------------------------------------------------------------------------------------------

EN = [
    "Fix the login bug in the auth service", "The user prefers dark mode in the editor",
    "Deploy the staging build on Friday afternoon", "The database migration failed at step three",
    "Decided to use PostgreSQL for the analytics store", "Cache invalidation is causing stale product pages",
]
ZH = [
    "修复认证服务中的登录错误", "用户喜欢编辑器的深色模式", "周五下午部署预发布版本",
    "数据库迁移在第三步失败了", "决定用PostgreSQL做分析存储", "缓存失效导致商品页面过期",
]
TYPES = ["task", "state", "event", "fact", "preference", "decision", "summary"]


def random_walk(open_memory, clock, folder: Path, seed: int, steps: int) -> MemoryTree:
    """A memory put through ``steps`` random operations, a reopen with another branch
    grouping, a second session, and time travels in the middle."""
    rng = random.Random(seed)
    mem = open_memory(folder=folder, usage={"flush_every": 3})
    second = open_memory(folder=folder, session="second")
    made: list[str] = []
    counter = 0
    regrouped = False

    def pick(live_only: bool = True) -> str | None:
        pool = [n.id for n in mem.nodes(include_archived=not live_only)]
        return rng.choice(pool) if pool else None

    def content() -> str:
        nonlocal counter
        counter += 1
        if made and rng.random() < 0.25:  # a copy: an exact or near twin to merge into
            try:
                return mem.get(rng.choice(made)).content
            except NotFoundError:
                pass
        pool = EN if rng.random() < 0.5 else ZH
        return f"{rng.choice(pool)} #{counter}" if rng.random() < 0.8 else rng.choice(pool)

    for _step in range(steps):
        clock.advance(rng.choice([1, 5, 60, 3600]))
        r = rng.random()
        target = pick()
        try:
            if r < 0.22 or target is None:
                parent = rng.choice([None, ROOT, target])
                n = mem.add(content(), type=rng.choice(TYPES), parent=parent, pinned=rng.random() < 0.1,
                            meta={"步": _step} if rng.random() < 0.3 else None)
                made.append(n.id)
            elif r < 0.30:
                items = [dict(content=content(), type=rng.choice(TYPES), parent=rng.choice([None, target]))
                         for _ in range(rng.randint(2, 4))]
                made.extend(n.id for n in mem.add_many(items))
            elif r < 0.36:
                mem.update(target, content=content() if rng.random() < 0.6 else None,
                           importance=rng.random() if rng.random() < 0.5 else None, meta={"v": rng.random()})
            elif r < 0.40:
                mem.feedback(target, important=rng.random() < 0.5, confirmed=True)
            elif r < 0.44:
                mem.pin(target, rng.random() < 0.6)
            elif r < 0.50:
                mem.move(target, rng.choice([ROOT, pick() or ROOT]))
            elif r < 0.55:
                (mem if rng.random() < 0.7 else second).focus(target)
            elif r < 0.58:
                mem.checkpoint(rng.choice([None, "注意 ✓", "note"]))
            elif r < 0.63:
                mem.archive(target)
            elif r < 0.67:
                archived = [n.id for n in mem.nodes(include_archived=True) if not n.live]
                if archived:
                    mem.unarchive(rng.choice(archived))
            elif r < 0.71:
                mem.delete(target)
            elif r < 0.75:
                mem.forget(threshold=rng.uniform(0.3, 0.6), delete=rng.random() < 0.4)
            elif r < 0.86:
                (mem if rng.random() < 0.8 else second).retrieve(rng.choice(EN + ZH)[:12])
            elif r < 0.89:
                second.add(content(), type=rng.choice(TYPES), parent=rng.choice([None, target]))
            elif r < 0.92 and not regrouped:
                regrouped = True
                mem.close()
                mem = open_memory(folder=folder, usage={"flush_every": 3}, write={"branch_by": "top_task"})
            elif r < 0.96:
                seqs = [o.seq for o in ops_of(mem)]
                mem.rewind(seq=rng.choice(seqs[: max(1, len(seqs) - 2)]))
            else:
                mem.flush()
                second.flush()
        except (CycleError, NotFoundError):
            pass
    mem.flush()
    second.flush()
    return mem


@pytest.mark.parametrize("seed", [1, 2])
def test_replaying_the_log_gives_exactly_the_live_tree(open_memory, clock, tmp_path: Path, seed: int):
    mem = random_walk(open_memory, clock, tmp_path / "walk", seed, steps=140)
    ops = ops_of(mem)
    kinds = {o.op for o in ops}
    assert {"add", "update", "archive", "delete", "access", "time_travel"} <= kinds, kinds
    assert any(o.purged for o in ops)  # erasures happened, and replay copes with them
    assert_replays(mem)
    # Any earlier position replays without a hitch too, and the replay of a prefix
    # is the state that a time travel there writes.
    n = ops[len(ops) // 2].seq
    at = P.replay(ops, upto=n)
    assert at.seq == n and not [s for s in at.skipped if s[1] == "unreadable"]
    mem.rewind(seq=n)
    expected = at.copy()
    P.travel_state(expected, P.erased_ids(at), clock.now, mem.config.write.branch_by)
    assert_same(expected, P.live_state(mem), "restore vs replay")
    assert_replays(mem)
    assert mem.index.ids("t") == live_ids(mem)


def test_replay_accepts_the_ops_of_an_export(open_memory, clock, tmp_path: Path):
    mem = random_walk(open_memory, clock, tmp_path / "walk", 3, steps=60)
    file = tmp_path / "snap.jsonl"
    mem.admin.export(file, include_log=True)
    ops = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()[1:]]
    state = P.replay(o for o in ops if o["kind"] == "op")
    assert_same(state, P.live_state(mem), "replay of the exported log")


# -- time travel ----------------------------------------------------------------------------------------


def build_small(mem: MemoryTree, clock: Any) -> dict[str, str]:
    ids: dict[str, str] = {}
    ids["claim"] = mem.add("报销柏林会议的差旅费用", type="task", parent=ROOT).id
    clock.advance(10)
    ids["ev"] = mem.add("三月三日提交了报销单，附上了酒店和出租车发票。", type="event", meta={"来源": "邮件"}).id
    ids["st"] = mem.add("The claim waits for approval from the finance team.", type="state").id
    ids["pr"] = mem.add("Reimbursements go to the savings account.", type="preference", pinned=True).id
    ids["sub"] = mem.add("Collect the missing taxi receipt", type="task").id
    ids["rc"] = mem.add("The taxi company will email the receipt on Monday", type="fact").id
    clock.advance(10)
    ids["db"] = mem.add("Migrate the order database", type="task", parent=ROOT).id
    ids["win"] = mem.add("Window is Saturday 02:00", type="decision").id
    ids["rb"] = mem.add("Rollback plan: restore the nightly snapshot", type="fact").id
    mem.focus(ids["sub"])
    mem.retrieve("taxi receipt")
    mem.checkpoint("good state")
    clock.advance(10)
    mem.flush()
    return ids


def bad_writes(mem: MemoryTree, clock: Any, ids: dict[str, str]) -> None:
    clock.advance(100)
    mem.update(ids["st"], content="The claim was rejected and is closed.")  # wrong
    mem.update(ids["ev"], content="报销单已作废。", importance=0.1)
    mem.archive(ids["claim"])  # takes the whole claim
    mem.add("Junk memory the agent invented", type="fact", parent=ROOT)
    mem.add("Another invented task", type="task", parent=ROOT)  # becomes active
    mem.move(ids["rb"], ROOT)
    mem.pin(ids["win"])
    mem.feedback(ids["win"], important=True)
    mem.retrieve("rollback plan")
    mem.forget(threshold=0.99)  # archives most leaves
    mem.flush()


def test_restore_seq_brings_back_exactly_the_earlier_tree_and_is_undoable(open_memory, clock, tmp_path: Path):
    mem = open_memory(folder=tmp_path / "m")
    ids = build_small(mem, clock)
    n = last_seq(mem)
    good = P.live_state(mem)
    good_rows = rows(mem)
    assert mem.active is not None and mem.active.id == ids["sub"]

    bad_writes(mem, clock, ids)
    assert mem.get(ids["claim"]).status is Status.ARCHIVED
    bad = P.live_state(mem)
    bad_seq = last_seq(mem)

    report = mem.rewind(seq=n)
    assert report.seq == n and report.previous_seq == bad_seq and report.erased == ()
    assert set(report.removed) == set(bad.nodes) - set(good.nodes)
    assert_same(P.live_state(mem), good, "after restore")
    assert mem.active is not None and mem.active.id == ids["sub"]
    assert mem.get(ids["st"]).content == "The claim waits for approval from the finance team."
    assert mem.get(ids["ev"]).meta == {"来源": "邮件"}
    # The vector index follows: exactly the live nodes, with the old contents' vectors.
    assert mem.index.ids("t") == set(good.nodes)
    after_rows = rows(mem)
    for i in (ids["st"], ids["ev"]):
        old = np.frombuffer(good_rows[i]["embedding"], np.float32)
        assert np.allclose(np.frombuffer(after_rows[i]["embedding"], np.float32), old, atol=1e-5)
        assert mem.index.query("t", old[None, :], 1)[0][0][0] == i
    assert ids["st"] in mem.retrieve("waiting for approval from finance").ids
    with mem.store.reading() as conn:
        assert mem.store.outbox.pending(conn, "t") == []
    assert_replays(mem)  # the time_travel entry replays to the same tree

    # Undo the restore: back to where the bad writes had left it.
    before_undo = last_seq(mem)  # the retrieve above logged its reads after the time travel
    undo = mem.rewind(seq=report.previous_seq)
    assert_same(P.live_state(mem), bad, "after undo")
    assert mem.index.ids("t") == live_ids(mem)
    assert undo.previous_seq == before_undo > report.op_seq
    assert_replays(mem)
    # And forward again.
    mem.rewind(seq=n)
    assert_same(P.live_state(mem), good, "after redo")
    assert_replays(mem)


def test_restore_as_of_a_time(open_memory, clock, tmp_path: Path):
    mem = open_memory(folder=tmp_path / "m")
    ids = build_small(mem, clock)
    good = P.live_state(mem)
    t0 = clock.now
    bad_writes(mem, clock, ids)  # starts 100 s later
    report = mem.rewind(as_of=t0 + 50)
    assert report.seq == good.seq
    assert_same(P.live_state(mem), good, "as_of")
    assert [o for o in ops_of(mem)][-1].payload["as_of"] == t0 + 50  # type: ignore[index]
    # Before the first write: the memory was empty then.
    mem.rewind(as_of=t0 - 10**6)
    assert mem.nodes(include_archived=True) == [] and mem.active is None and mem.index.ids("t") == set()
    assert_replays(mem)


def test_erasure_wins_over_time_travel(open_memory, clock, tmp_path: Path):
    mem = open_memory(folder=tmp_path / "m")
    t = mem.add("Set up the team password vault", type="task", parent=ROOT)
    secret = mem.add("The vault recovery hint is Zanzibar quokka marmalade.", type="fact", parent=t)
    under = mem.add("保险箱密码提示是斑马长颈鹿。", type="fact", parent=secret)
    moved = mem.add("Rotate the vault keys every quarter", type="decision", parent=secret)
    keep = mem.add("The vault is hosted on the internal server.", type="fact", parent=t)
    mem.focus(under)
    n = last_seq(mem)
    clock.advance(60)
    mem.move(moved, t)  # leaves the doomed subtree before the erasure
    mem.delete(secret)  # erases secret and `under`

    report = mem.rewind(seq=n)
    # The erased nodes cannot come back; neither can what hung under them at #n.
    assert set(report.erased) == {secret.id, under.id, moved.id}
    assert {n.id for n in mem.nodes(include_archived=True)} == {t.id, keep.id}
    assert mem.active is not None and mem.active.id == t.id  # the cursor climbed to what stayed
    assert mem.index.ids("t") == {t.id, keep.id}
    # Nothing of the erased words is anywhere in the file.
    with mem.store.engine.connect() as conn:
        cells = "\n".join(
            str(c) for table in inspect(conn).get_table_names()
            for row in conn.execute(sql(f'SELECT * FROM "{table}"')) for c in row
            if c is not None and not isinstance(c, bytes)
        )
    for needle in ("Zanzibar", "quokka", "斑马", "长颈鹿"):
        assert needle not in cells
    assert_replays(mem)
    # `moved` was never erased: undoing the restore brings it back, under t.
    mem.rewind(seq=report.previous_seq)
    assert mem.get(moved.id).parent_id == t.id
    with pytest.raises(NotFoundError):
        mem.get(secret.id)
    assert_replays(mem)


def test_rewind_arguments_are_checked_and_a_refused_call_logs_nothing(open_memory, clock, tmp_path: Path):
    mem = open_memory(folder=tmp_path / "m")
    a = mem.add("Prefer a window seat", type="preference", parent=ROOT)
    mem.archive(a)
    before = len(ops_of(mem))
    for kwargs in ({}, {"seq": 1, "as_of": 1.0}):
        with pytest.raises(InvalidInputError, match="exactly one"):
            mem.rewind(**kwargs)
    with pytest.raises(TypeError):
        mem.rewind(1)  # type: ignore[misc]
    with pytest.raises(InvalidInputError, match=">= 0"):
        mem.rewind(seq=-1)
    with pytest.raises(InvalidInputError, match="past the end"):
        mem.rewind(seq=10**9)
    with pytest.raises(InvalidTypeError):
        mem.rewind(seq="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        mem.rewind(seq=True)
    with pytest.raises(InvalidTypeError):
        mem.rewind(as_of=float("nan"))
    assert len(ops_of(mem)) == before
    assert mem.unarchive(a).live


def test_restore_is_a_deprecated_alias_of_unarchive_and_rewind(open_memory, clock, tmp_path: Path):
    mem = open_memory(folder=tmp_path / "m")
    a = mem.add("靠窗的座位", type="preference", parent=ROOT)
    mem.archive(a)
    at = mem.admin.stats().log_seq
    with pytest.warns(DeprecationWarning, match="unarchive"):
        assert mem.restore(a).live
    with pytest.warns(DeprecationWarning, match="rewind"):
        travel = mem.restore(seq=at)
    assert travel.seq == at and not mem.get(a.id).live  # back to the archived state
    before = len(ops_of(mem))
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidInputError, match="exactly one"):
        mem.restore(a, seq=1)  # type: ignore[call-overload]
    assert len(ops_of(mem)) == before


def test_log_summaries_are_readable(open_memory, clock, tmp_path: Path):
    mem = open_memory(folder=tmp_path / "m")
    t = mem.add("迁移订单数据库", type="task", parent=ROOT)
    e = mem.add("Window is Saturday 02:00", type="decision", parent=t)
    mem.update(e, importance=0.9)
    mem.pin(e)
    mem.retrieve("window")
    mem.checkpoint("before the move")
    mem.delete(e)
    mem.rewind(seq=1)
    lines = [(o.op, P.describe(o)) for o in P.recent_ops(mem, 20)]
    assert lines[0] == ("add", "[task] 迁移订单数据库 (now active)")
    assert ("add", "(erased)") in lines and ("update", "(erased)") in lines
    assert ("checkpoint", "before the move") in lines
    assert any(op == "access" and "read" in s for op, s in lines)
    assert lines[-2] == ("delete", "1 node erased")
    assert lines[-1][0] == "time_travel" and lines[-1][1].startswith("back to #1 (from #")
    assert [o.op for o in P.recent_ops(mem, 2)] == ["delete", "time_travel"]
