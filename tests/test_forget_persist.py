"""Forgetting, archive/restore/delete by hand, and what survives closing the folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, select
from sqlalchemy import text as sql

from hybrid_memory import ROOT, MemoryTree, NotFoundError, Status
from hybrid_memory.store.schema import oplog, terms
from hybrid_memory.text import terms as text_terms

DAY = 86400.0
LOW = dict(importance=0.1, confidence=0.1)


def live_ids(mem: MemoryTree) -> set[str]:
    return {n.id for n in mem.nodes()}


def all_ids(mem: MemoryTree) -> set[str]:
    return {n.id for n in mem.nodes(include_archived=True)}


def status(mem: MemoryTree, node_id: str) -> str:
    return mem.get(node_id).status.value


# -- forget() -----------------------------------------------------------------------------


def forest(mem: MemoryTree) -> dict[str, Any]:
    """Two old projects, one current (focused) one; weights chosen by hand."""
    n: dict[str, Any] = {}
    n["old"] = mem.add("Old project: migrate the wiki", type="task", parent=ROOT, **LOW)
    n["a"] = mem.add("The wiki export took ten minutes", type="event", parent=n["old"], **LOW)
    n["keep"] = mem.add("The wiki admin password rotates monthly", type="fact", parent=n["old"], importance=0.9, confidence=0.9)
    n["mid"] = mem.add("Checked the attachments folder", type="event", parent=n["old"], **LOW)
    n["c"] = mem.add("Twelve attachments were larger than ten megabytes", type="fact", parent=n["mid"], **LOW)
    n["pinned"] = mem.add("The wiki lives at wiki.internal", type="fact", parent=n["old"], pinned=True, **LOW)
    n["mail"] = mem.add("Old project: clean up the shared mailbox", type="task", parent=ROOT, **LOW)
    n["e1"] = mem.add("Deleted the newsletters folder", type="event", parent=n["mail"], **LOW)
    n["cur"] = mem.add("Current project: quarterly revenue report", type="task", parent=ROOT, **LOW)
    n["step"] = mem.add("Drafting the revenue section", type="event", parent=n["cur"], **LOW)
    n["note"] = mem.add("Numbers come from the finance export", type="fact", parent=n["step"], importance=0.8, confidence=0.8)
    mem.focus(n["step"])
    return {k: v.id for k, v in n.items()}


def test_forget_archives_low_weight_leaves_and_spares_pinned_active_and_parents(open_memory, clock):
    mem = open_memory()
    n = forest(mem)
    assert forest_weights_are_what_the_test_assumes(mem, clock, n)
    clock.advance(60 * DAY)
    thr = mem.config.forgetting.threshold
    weights = {node.id: mem.weight(node, forgetting=True) for node in mem.nodes()}
    f = mem.config.forgetting
    # Where a leaf stands counts: "mail" is a task, and a heading over nothing once
    # "e1", its one memory, is gone; "e1" is the last live memory under its task.
    share = {n["mail"]: f.empty_task, n["e1"]: f.last_in_task}
    assert f.empty_task < 1 and f.last_in_task < 1

    report = mem.forget()
    gone = list(report.archived)
    assert set(gone) == {n["a"], n["c"], n["mid"], n["e1"], n["mail"]}
    # A parent goes in the same pass, but only after its last child.
    assert gone.index(n["c"]) < gone.index(n["mid"])
    assert gone.index(n["e1"]) < gone.index(n["mail"])
    assert report.deleted == () and not report.dry_run
    assert report.live_before == 11 and report.live_after == 6 == len(mem.nodes())
    assert [i for i, _ in report.details] == gone
    for node_id, w in report.details:
        assert w == pytest.approx(weights[node_id] * share.get(node_id, 1.0)) and w < thr
        assert status(mem, node_id) == "archived"
    assert not set(gone) & mem.index.ids(mem.namespace)
    # What stays, and why: under-threshold but pinned / active path / has live children.
    for key in ("old", "keep", "pinned", "cur", "step", "note"):
        assert status(mem, n[key]) == "live", key
    assert weights[n["pinned"]] < thr and weights[n["cur"]] < thr and weights[n["step"]] < thr
    assert weights[n["old"]] < thr  # kept only because "keep" and "pinned" hang under it
    assert mem.active is not None and mem.active.id == n["step"]
    # A second pass finds nothing more.
    assert mem.forget().archived == ()


def forest_weights_are_what_the_test_assumes(mem: MemoryTree, clock: Any, n: dict[str, str]) -> bool:
    later = clock.now + 60 * DAY
    thr = mem.config.forgetting.threshold
    low = [k for k in n if k not in ("keep", "note")]
    return all(mem.weight(mem.get(n[k]), later, forgetting=True) < thr for k in low) and all(
        mem.weight(mem.get(n[k]), later, forgetting=True) >= thr for k in ("keep", "note")
    )


def test_forget_protects_wherever_the_focus_is(open_memory, clock):
    mem = open_memory()
    n = forest(mem)
    mem.focus(n["e1"])
    clock.advance(60 * DAY)
    gone = set(mem.forget().archived)
    assert gone == {n["a"], n["c"], n["mid"]}
    assert status(mem, n["e1"]) == "live" and status(mem, n["mail"]) == "live"
    # No longer on the active path, but "note" (heavy) still hangs under them.
    assert status(mem, n["step"]) == "live" and status(mem, n["cur"]) == "live"


def test_forget_max_nodes_caps_the_live_count(open_memory, clock):
    mem = open_memory()
    task = mem.add("Collect quotes for the office chairs", type="task", parent=ROOT, importance=0.1)
    leaves = {
        imp: mem.add(f"Quote number {int(imp * 10)} from supplier {chr(65 + int(imp * 10))}", type="fact",
                     parent=task, importance=imp, confidence=0.5)
        for imp in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
    }
    pinned = mem.add("The budget ceiling is 300 euros per chair", type="fact", parent=task, importance=0.0,
                     confidence=0.0, pinned=True)
    assert len(mem.nodes()) == 8
    clock.advance(DAY)

    dry = mem.forget(threshold=0.0, max_nodes=5, dry_run=True)
    report = mem.forget(threshold=0.0, max_nodes=5)
    assert report.live_after == 5 == len(mem.nodes())
    # The lightest leaves went, lightest first; the pinned one (lighter still) stayed.
    assert list(report.archived) == [leaves[0.1].id, leaves[0.2].id, leaves[0.3].id]
    assert [w for _, w in report.details] == sorted(w for _, w in report.details)
    assert list(report.archived) == [i for i, _ in dry.details]
    assert status(mem, pinned.id) == "live" and status(mem, task.id) == "live"

    # A cap that cannot be met stops at what is protected.
    report = mem.forget(threshold=0.0, max_nodes=1)
    assert set(report.archived) == {leaves[x].id for x in (0.4, 0.5, 0.6)}
    assert live_ids(mem) == {task.id, pinned.id}  # the active task and the pinned leaf


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_superseded_state_is_forgotten_before_the_state_that_replaced_it(open_memory, clock, lang):
    """Of two states of a branch only the latest stands; the older one weighs
    forgetting.superseded of its weight, so a cap takes it before a fact or the
    current state of the same importance."""
    mem = open_memory()
    texts = ("Ship the quarterly report", "Draft is written", "Numbers are checked", "The report is due on Friday") \
        if lang == "en" else ("提交季度报告", "初稿已经写好", "数据已经核对完毕", "报告周五截止")
    task = mem.add(texts[0], type="task", parent=ROOT)
    fact = mem.add(texts[3], type="fact", parent=task, importance=0.5, confidence=0.5)  # the oldest leaf
    clock.advance(60)
    old = mem.add(texts[1], type="state", parent=task, importance=0.5, confidence=0.5)
    clock.advance(60)
    new = mem.add(texts[2], type="state", parent=task, importance=0.5, confidence=0.5)
    clock.advance(DAY)
    assert mem.weight(mem.get(old.id)) > 0.5 * mem.weight(mem.get(new.id))
    report = mem.forget(threshold=0.0, max_nodes=3)
    assert list(report.archived) == [old.id]
    assert report.details[0][1] == pytest.approx(mem.config.forgetting.superseded
                                                 * mem.weight(mem.get(old.id), forgetting=True))
    assert status(mem, new.id) == "live" and status(mem, fact.id) == "live"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("headings", [True, False])
def test_under_a_cap_the_last_memory_of_a_task_goes_with_its_heading(open_memory, clock, lang, headings):
    """Freeing two places by forgetting a task's one memory and then its empty heading
    beats splitting a task that has two memories of the same weight. With both shares
    at 1 (the factors off), the cap takes two of the three equal memories and leaves
    both headings."""
    shares = {} if headings else {"forgetting": {"empty_task": 1.0, "last_in_task": 1.0}}
    mem = open_memory(**shares)
    texts = (("Renew the office lease", "The landlord wants a two-year term",
              "Order new desks", "The supplier quotes 300 euros a desk", "Delivery takes three weeks",
              "Plan the team offsite", "Book the winter party venue")
             if lang == "en" else
             ("续签办公室租约", "房东要求签两年", "采购新办公桌", "供应商报价每张桌子 300 欧元", "送货要三周",
              "筹备团队外出活动", "预订年会场地"))
    lone_task = mem.add(texts[0], type="task", parent=ROOT)
    lone = mem.add(texts[1], type="fact", parent=lone_task, importance=0.5, confidence=0.5)
    pair_task = mem.add(texts[2], type="task", parent=ROOT)
    pair = [mem.add(t, type="fact", parent=pair_task, importance=0.5, confidence=0.5) for t in texts[3:5]]
    fresh = mem.add(texts[6], type="task", parent=ROOT)  # nothing under it yet: not empty
    current = mem.add(texts[5], type="task", parent=ROOT)
    mem.focus(current)  # the active task stays; the others are open to the cap
    clock.advance(30 * DAY)
    nodes = [lone_task, lone, pair_task, *pair, fresh]
    w = {n.id: mem.weight(mem.get(n.id), forgetting=True) for n in nodes}
    assert w[lone.id] == pytest.approx(w[pair[0].id]) == pytest.approx(w[pair[1].id])
    everything = dict(mem.forget(threshold=1.0, dry_run=True).details)
    assert everything[fresh.id] == pytest.approx(w[fresh.id])  # a new task keeps its whole weight
    report = mem.forget(threshold=0.0, max_nodes=5)
    f = mem.config.forgetting
    if headings:
        assert list(report.archived) == [lone.id, lone_task.id]
        assert dict(report.details) == pytest.approx({lone.id: w[lone.id] * f.last_in_task,
                                                      lone_task.id: w[lone_task.id] * f.empty_task})
        assert {n.id for n in mem.nodes()} == {current.id, fresh.id, pair_task.id, *(p.id for p in pair)}
    else:
        assert len(report.archived) == 2 and set(report.archived) <= {lone.id, *(p.id for p in pair)}
        assert all(status(mem, t.id) == "live" for t in (lone_task, pair_task, fresh))


def test_forget_weighs_reads_not_yet_written(open_memory, clock):
    """Reads buffered in the handle raise a node's weight in forget() exactly as in
    weight(): the pass must not archive what was just read because its count waits."""
    mem = open_memory()
    task = mem.add("Project: archive the old invoices", type="task", parent=ROOT, **LOW)
    read = mem.add("Invoices before 2019 are on tape", type="fact", parent=task, **LOW)
    other = mem.add("The tape library is in room 4", type="fact", parent=task, **LOW)
    clock.advance(30 * DAY)
    for _ in range(6):
        mem.retrieve("Which invoices are on tape?", k=1)
    before = {n.id: mem.weight(n, forgetting=True) for n in (mem.get(read.id), mem.get(other.id))}
    assert before[read.id] > before[other.id]
    report = mem.forget(threshold=1.0, dry_run=True)
    got = dict(report.details)
    # "other" goes first, at its weight; "read" is then the task's last memory and
    # goes at that weight times [forgetting] last_in_task.
    assert got[other.id] == pytest.approx(before[other.id])
    assert got[read.id] == pytest.approx(before[read.id] * mem.config.forgetting.last_in_task)
    assert [i for i, _ in report.details].index(other.id) < [i for i, _ in report.details].index(read.id)


def test_forget_delete_removes_rows_terms_and_vectors(open_memory, clock):
    mem = open_memory()
    n = forest(mem)
    # "a" keeps an archived child: "a" is a leaf for forgetting (no live children),
    # and erasing it must not leave that child behind as an orphan row.
    hidden = mem.add("The export log was saved to the old share", type="fact", parent=n["a"], **LOW)
    mem.archive(hidden)
    clock.advance(60 * DAY)
    before = all_ids(mem)
    report = mem.forget(delete=True)
    gone = set(report.deleted)
    assert {i for i, _ in report.details} == {n["a"], n["c"], n["mid"], n["e1"], n["mail"]}
    assert gone == {n["a"], n["c"], n["mid"], n["e1"], n["mail"], hidden.id}
    assert report.archived == ()
    remaining = mem.nodes(include_archived=True)
    assert all(x.parent_id is None or x.parent_id in {r.id for r in remaining} for x in remaining)
    assert all_ids(mem) == before - gone  # no archived rows left behind
    for node_id in gone:
        with pytest.raises(NotFoundError):
            mem.get(node_id)
    assert not gone & mem.index.ids(mem.namespace)
    assert mem.index.ids(mem.namespace) == live_ids(mem)
    with mem.store.engine.connect() as conn:
        assert conn.execute(select(terms.c.node_id).where(terms.c.node_id.in_(gone))).first() is None
    assert not gone & set(mem.retrieve("Twelve attachments were larger than ten megabytes").ids)


def test_forget_dry_run_changes_nothing(open_memory, clock):
    mem = open_memory()
    forest(mem)
    clock.advance(60 * DAY)
    nodes_before = mem.nodes(include_archived=True)
    index_before = mem.index.ids(mem.namespace)
    seq_before = mem.admin.stats().log_seq
    dry = mem.forget(dry_run=True)
    assert dry.dry_run and dry.archived == () and dry.deleted == ()
    assert len(dry.details) == 5
    assert dry.live_before == dry.live_after == 11
    assert mem.nodes(include_archived=True) == nodes_before
    assert mem.index.ids(mem.namespace) == index_before
    assert mem.admin.stats().log_seq == seq_before
    # The real run does exactly what the dry run announced.
    real = mem.forget()
    assert real.details == dry.details
    assert list(real.archived) == [i for i, _ in dry.details]


# -- archive / restore / delete by hand -------------------------------------------------------


def test_archive_and_restore_by_hand(open_memory, clock):
    mem = open_memory()
    t = mem.add("Plan the team offsite", type="task", parent=ROOT)
    a = mem.add("Shortlisted two venues by the lake", type="event", parent=t)
    a1 = mem.add("The second venue has no wheelchair access", type="fact", parent=a)
    b = mem.add("The offsite budget is 4,000 euros", type="fact", parent=t)
    other = mem.add("Renew the office lease", type="task", parent=ROOT)
    mem.focus(a1)

    assert mem.archive(b) == [b.id]
    taken = mem.archive(t)
    assert set(taken) == {t.id, a.id, a1.id}  # b was already archived, by another archive
    assert all(status(mem, i) == "archived" for i in (t.id, a.id, a1.id, b.id))
    assert mem.active is None  # the focus was inside the archived subtree, which had no live parent
    assert live_ids(mem) == {other.id}
    assert mem.index.ids(mem.namespace) == {other.id}
    assert not set(mem.retrieve("venue by the lake for the offsite").ids) & {t.id, a.id, a1.id, b.id}
    with pytest.raises(NotFoundError):
        mem.archive(a)  # already archived
    with pytest.raises(NotFoundError):
        mem.add("A note under an archived node", type="fact", parent=a)

    # Restoring the task brings back what that archive took, not b.
    assert mem.unarchive(t).live
    assert live_ids(mem) == {t.id, a.id, a1.id, other.id}
    assert status(mem, b.id) == "archived"
    assert mem.unarchive(b).live
    assert mem.unarchive(b).live  # restoring a live node is a no-op
    assert mem.index.ids(mem.namespace) == live_ids(mem)

    # Archive the task again (all four go in one op); restoring the deepest node
    # brings back its archived ancestors, not its aunt b.
    assert set(mem.archive(t)) == {t.id, a.id, a1.id, b.id}
    mem.unarchive(a1)
    assert live_ids(mem) == {t.id, a.id, a1.id, other.id}
    assert status(mem, b.id) == "archived"
    assert {s.node.id for s in mem.retrieve("Does the venue have wheelchair access?").nodes} >= {t.id, a.id, a1.id}

    # Archiving the active node moves the focus to its parent.
    mem.focus(a1)
    mem.archive(a1)
    assert mem.active is not None and mem.active.id == a.id


def test_delete_by_hand_erases_the_subtree_and_its_content_everywhere(open_memory, clock):
    mem = open_memory()
    t = mem.add("Set up the team password vault", type="task", parent=ROOT)
    secret = "The vault recovery phrase hint is Zanzibar quokka marmalade."
    secret2 = "The vault recovery phrase hint is now Zanzibar quokka marmalade seventy."
    secret_zh = "保险箱密码提示是斑马长颈鹿。"
    s = mem.add(secret, type="fact", parent=t)
    merged = mem.add(secret, type="fact", parent=t)  # a merge logs the repeated content too
    assert merged.merged and merged.id == s.id
    s_child = mem.add(secret_zh, type="fact", parent=s)
    keep = mem.add("The vault is hosted on the internal server.", type="fact", parent=t)
    mem.update(s, content=secret2)  # the update logs the new content
    mem.focus(s_child)
    mem.checkpoint("before the purge")
    # The SQLite file, or the PostgreSQL schema the test's store lives in.
    db_file = mem.store.file or Path(mem.store.engine.url.render_as_string())
    assert mem.store.file is not None or not mem.store.is_sqlite

    def dump() -> str:
        """Every cell of every table of the store (the SQLite file, or the schema), as text."""
        out = []
        with mem.store.engine.connect() as conn:
            for table in inspect(conn).get_table_names():
                for row in conn.execute(sql(f'SELECT * FROM "{table}"')):
                    for cell in row:
                        if isinstance(cell, bytes):
                            out.append(cell.decode("utf-8", "replace"))
                        elif cell is not None:
                            out.append(str(cell))
        return "\n".join(out)

    needles = ["Zanzibar", "quokka", "marmalade", "斑马", "长颈鹿"]
    needles += [json.dumps(x)[1:-1] for x in ("斑马", "长颈鹿")]  # in case JSON escaped them
    before = dump()
    assert all(x in before for x in needles[:5])  # the check can see them at all

    deleted = mem.delete(s)
    assert set(deleted) == {s.id, s_child.id}
    for i in deleted:
        with pytest.raises(NotFoundError):
            mem.get(i)
    assert mem.index.ids(mem.namespace) == {t.id, keep.id}
    assert mem.active is not None and mem.active.id == t.id  # focus moved to the deleted node's parent

    after = dump()
    for needle in needles:
        assert needle not in after, f"{needle!r} survives the delete somewhere in {db_file.name}"
    with mem.store.engine.connect() as conn:
        payloads = [r.payload for r in conn.execute(select(oplog.c.payload))]
        left = {r.term for r in conn.execute(select(terms.c.term))}
        ops = [r.op for r in conn.execute(select(oplog.c.op).where(oplog.c.node_id.in_(deleted)))]
    assert not any(x in p for p in payloads for x in needles)
    secret_terms = set(text_terms(secret) + text_terms(secret2) + text_terms(secret_zh))
    still_said = set(text_terms(keep.content) + text_terms(t.content))  # "vault" is still there
    assert not (secret_terms - still_said) & left
    assert {"zanzibar", "quokka", "斑马"} <= secret_terms - still_said
    assert ops  # the log keeps that something happened, only not what was said
    # The untouched nodes' history is still there.
    assert any("The vault is hosted on the internal server." in p for p in payloads)
    assert not set(deleted) & set(mem.retrieve("Zanzibar quokka marmalade").ids)


# -- persistence and recovery ----------------------------------------------------------------


def test_close_and_reopen_keeps_nodes_weights_active_node_and_checkpoint(open_memory, clock, tmp_path: Path):
    folder = tmp_path / "persist"
    mem = open_memory(folder=folder)
    t = mem.add("报销柏林会议的差旅费用", type="task", parent=ROOT)
    ev = mem.add("三月三日提交了报销单，附上了酒店和出租车发票。", type="event", parent=t, meta={"source": "email"})
    st = mem.add("The claim waits for approval from the finance team.", type="state", parent=t)
    pr = mem.add("Reimbursements go to the savings account.", type="preference", parent=t, pinned=True)
    clock.advance(3600)
    mem.feedback(ev, important=True)
    gone = mem.add("A note that will be archived", type="fact", parent=t)
    mem.archive(gone)
    other = mem.add("Book the Tokyo flights", type="task", parent=ROOT)
    clock.advance(600)
    recall = mem.retrieve("报销单附上了哪些发票？")
    assert recall.nodes
    mem.focus(ev)
    cp = mem.checkpoint("waiting for finance")  # also writes the buffered reads
    before = mem.nodes(include_archived=True)
    weights_before = {n.id: mem.weight(n, clock.now + 5 * DAY) for n in before}
    recovery_before = mem.recover()
    assert any(n.access_count > 0 for n in before)
    mem.close()
    mem.close()  # idempotent

    clock.advance(5 * DAY)
    again = open_memory(folder=folder)
    after = again.nodes(include_archived=True)
    assert after == before  # every stored field, archived node included
    assert {n.id: again.weight(n) for n in after} == pytest.approx(weights_before)
    assert again.get(pr).pinned and again.get(ev).meta == {"source": "email"}
    assert again.get(ev).importance == pytest.approx(0.7)
    assert again.get(gone).status is Status.ARCHIVED
    assert again.active is not None and again.active.id == ev.id
    rec = again.recover()
    assert rec.last_checkpoint == cp
    assert rec.last_checkpoint.note == "waiting for finance" and rec.last_checkpoint.active_id == ev.id
    assert rec.active == recovery_before.active and rec.path == recovery_before.path
    assert rec.state is not None and rec.state.id == st.id
    assert rec.replayed == 0 and rec.live_nodes == 5
    # The vector index came back too, and retrieval answers from it.
    assert again.index.ids(again.namespace) == {t.id, ev.id, st.id, pr.id, other.id}
    recall = again.retrieve("报销单附上了哪些发票？")
    assert recall.branches[0].branch_id == t.id and ev.id in recall.ids


def test_recover_returns_active_node_path_and_latest_state_of_its_branch(open_memory, clock, tmp_path: Path):
    folder = tmp_path / "recover"
    mem = open_memory(folder=folder)
    assert mem.recover().active is None and mem.recover().last_checkpoint is None
    proj = mem.add("Move the company to the new office", type="task", parent=ROOT)
    sub = mem.add("Migrate the file server", type="task", parent=proj)
    step = mem.add("Copying the shared drives", type="event", parent=sub)
    clock.advance(60)
    s1 = mem.add("Copy is 40% done.", type="state", parent=sub)
    clock.advance(60)
    s2 = mem.add("Copy is 80% done.", type="state", parent=step)  # deeper, same branch
    clock.advance(60)
    mem.add("Movers are booked for June 3.", type="state", parent=proj)  # newer, but another branch
    mem.focus(step)

    rec = mem.recover()
    assert rec.active is not None and rec.active.id == step.id
    assert [n.id for n in rec.path] == [proj.id, sub.id, step.id]
    assert rec.state is not None and rec.state.id == s2.id
    assert rec.live_nodes == 6
    focus_cp = rec.last_checkpoint
    assert focus_cp is not None and focus_cp.active_id == step.id  # focus writes a checkpoint

    clock.advance(60)
    cp = mem.checkpoint("copy nearly done")
    assert cp.note == "copy nearly done" and cp.active_id == step.id and cp.ts == clock.now
    assert cp.id > focus_cp.id and cp.log_seq > focus_cp.log_seq
    assert mem.recover().last_checkpoint == cp

    # A newer state supersedes; archiving it brings the previous one back.
    clock.advance(60)
    s3 = mem.add("Copy finished; checking file permissions.", type="state", parent=sub)
    assert mem.recover().state.id == s3.id
    mem.archive(s3)
    assert mem.recover().state.id == s2.id
    mem.archive(s2)
    assert mem.recover().state.id == s1.id

    mem.close()
    again = open_memory(folder=folder)
    rec = again.recover()
    assert rec.active.id == step.id
    assert [n.id for n in rec.path] == [proj.id, sub.id, step.id]
    assert rec.state.id == s1.id
    assert rec.last_checkpoint == cp

    # Another session on the same folder has its own focus and checkpoints.
    other = open_memory(folder=folder, session="other")
    assert other.recover().active is None and other.recover().last_checkpoint is None
    other.focus(proj)
    assert again.recover().active.id == step.id


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_stats_count_live_and_archived_and_the_shape_of_the_live_tree(open_memory, clock, lang):
    """stats() reads statuses, live types and the live depth in one pass: an archived
    node deeper than every live one does not count for the depth, nor for the types."""
    words = {"en": ("Ship the release", "Write the notes", "The notes are due Friday.", "A reviewer asked for a table.",
                    "Decided to ship on Monday."),
             "zh": ("发布新版本", "写发布说明", "发布说明周五截止。", "评审要求加一张表。", "决定周一发布。")}[lang]
    mem = open_memory()
    task = mem.add(words[0], type="task", parent=ROOT)
    sub = mem.add(words[1], type="task", parent=task.id)
    fact = mem.add(words[2], type="fact", parent=sub.id)
    deep = mem.add(words[3], type="event", parent=fact.id, **LOW)
    mem.add(words[4], type="decision", parent=task.id)
    mem.focus(task.id)
    clock.advance(90 * 86400)
    before = mem.admin.stats()
    assert (before.live, before.archived, before.depth) == (5, 0, 3)
    assert dict(before.by_type) == {"task": 2, "fact": 1, "event": 1, "decision": 1}
    report = mem.forget(threshold=0.3)
    assert [i for i, _ in report.details] == [deep.id]
    after = mem.admin.stats()
    assert (after.live, after.archived, after.depth) == (4, 1, 2)
    assert dict(after.by_type) == {"task": 2, "fact": 1, "decision": 1}
