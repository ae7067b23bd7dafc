"""Supersession on write, with the real model: a new fact, preference or decision
that restates or updates an earlier one of its type in its branch lowers the
earlier one's importance (``dedup.supersede``), so that it ranks below the update
and is forgotten first. English and Chinese."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_portability import assert_replays, ops_of

from hybrid_memory import ROOT, MemoryTree
from hybrid_memory import portability as P
from hybrid_memory.ids import short_id

CASES = {
    "en": dict(
        task="Expense claim EXP-5957 for Jennifer Garcia: conference fees in Boston",
        old="Olivia Lee is the approver for claim EXP-5957",
        other="Invoice for EXP-5957: $6,380, paid at The Oak Room on March 26",
        new="Approver for EXP-5957 is now Nancy Lewis; Olivia Lee is on leave",
        elsewhere_task="Expense claim EXP-7001 for Tom Baker: taxi receipts",
        elsewhere="Olivia Lee is the approver for claim EXP-7001",
    ),
    "zh": dict(
        task="报销单 EXP-5957：张伟在杭州参会的差旅费",
        old="报销单 EXP-5957 的审批人是李娜",
        other="EXP-5957 的发票金额为 6380 元，三月二十六日在西湖饭店支付",
        new="EXP-5957 的审批人改为王芳，李娜休假了",
        elsewhere_task="报销单 EXP-7001：赵磊的出租车票",
        elsewhere="报销单 EXP-7001 的审批人是李娜",
    ),
}


def write(mem: MemoryTree, case: dict[str, str]) -> dict[str, Any]:
    task = mem.add(case["task"], type="task", parent=ROOT)
    old = mem.add(case["old"], type="fact", parent=task, importance=0.6)
    other = mem.add(case["other"], type="fact", parent=task, importance=0.6)
    away = mem.add(case["elsewhere_task"], type="task", parent=ROOT)
    elsewhere = mem.add(case["elsewhere"], type="fact", parent=away, importance=0.6)
    new = mem.add(case["new"], type="fact", parent=task, importance=0.7)
    return dict(task=task, old=old, other=other, elsewhere=elsewhere, new=new)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_update_lowers_the_memory_it_supersedes_and_nothing_else(open_memory, lang):
    mem = open_memory()
    n = write(mem, CASES[lang])
    share = mem.config.dedup.supersede
    assert n["new"].merged is False  # an update is not a twin: both stay
    old = mem.get(n["old"].id)
    assert old.importance == pytest.approx(share * 0.7)
    assert old.version == n["old"].version  # a weight the memory changed itself, not an edit
    assert old.live
    # The task's other fact, the same fact of another task, and the update keep theirs.
    assert mem.get(n["other"].id).importance == pytest.approx(0.6)
    assert mem.get(n["elsewhere"].id).importance == pytest.approx(0.6)
    assert mem.get(n["new"].id).importance == pytest.approx(0.7)
    # The log says what did it, and a replay of the log rebuilds the same tree.
    entries = [o for o in ops_of(mem) if o.op == "supersede"]
    assert [(o.node_id, o.payload["by"]) for o in entries] == [(n["old"].id, n["new"].id)]
    assert P.describe(entries[0]).startswith(f"superseded by {short_id(n['new'].id)}")
    assert_replays(mem)


def test_the_superseded_memory_weighs_less_than_its_update_and_is_forgotten_first(open_memory):
    mem = open_memory()
    n = write(mem, CASES["en"])
    live = mem.admin.stats().live
    report = mem.forget(max_nodes=live - 1, dry_run=True)
    assert report.details[0][0] == n["old"].id
    got = mem.retrieve("Who approves claim EXP-5957?", k=5, reinforce=False)
    score = {s.node.id: s for s in got.nodes}
    assert score[n["new"].id].reason == "hit"
    assert n["old"].id not in score or score[n["old"].id].weight < score[n["new"].id].weight


def test_off_pinned_events_and_twins_are_left_alone(open_memory):
    case = CASES["en"]
    off = open_memory(namespace="off", dedup={"supersede": 1.0})
    n = write(off, case)
    assert off.get(n["old"].id).importance == pytest.approx(0.6)

    mem = open_memory(namespace="on")
    task = mem.add(case["task"], type="task", parent=ROOT)
    pinned = mem.add(case["old"], type="fact", parent=task, importance=0.6, pinned=True)
    event = mem.add("Olivia Lee approved claim EXP-5957 on Monday", type="event", parent=task, importance=0.5)
    mem.add(case["new"], type="fact", parent=task, importance=0.7)
    mem.add("Olivia Lee approved claim EXP-5957 on Monday again", type="event", parent=task, importance=0.5)
    assert mem.get(pinned.id).importance == pytest.approx(0.6)  # pinned: the caller said keep it as it is
    assert mem.get(event.id).importance == pytest.approx(0.5)  # events do not supersede each other
    twin = mem.add(case["new"], type="fact", parent=task, importance=0.7)
    assert twin.merged is True  # a twin reinforces; it lowers nothing
    assert not [o for o in P.recent_ops(mem, 50) if o.op == "supersede"]


def test_a_batch_supersedes_its_own_earlier_items_and_stored_ones(open_memory):
    mem = open_memory()
    case = CASES["zh"]
    task = mem.add(case["task"], type="task", parent=ROOT)
    stored = mem.add(case["old"], type="fact", parent=task, importance=0.6)
    items = [
        dict(content=case["other"], type="fact", parent=task.id, importance=0.6),
        dict(content=case["new"], type="fact", parent=task.id, importance=0.8),
        dict(content="EXP-5957 的发票金额更正为 6491 元（原为 6380 元）：三月二十六日在西湖饭店支付时漏了服务费",
             type="fact", parent=task.id, importance=0.6),
    ]
    got = mem.add_many(items)
    share = mem.config.dedup.supersede
    assert mem.get(stored.id).importance == pytest.approx(share * 0.8)
    assert mem.get(got[0].id).importance == pytest.approx(share * 0.6)  # the invoice, corrected in the batch
    assert mem.get(got[1].id).importance == pytest.approx(0.8)
    assert_replays(mem)


def test_supersession_survives_export_and_import(open_memory, tmp_path: Path):
    src = open_memory(namespace="src")
    n = write(src, CASES["en"])
    file = tmp_path / "snap.jsonl"
    src.admin.export(file, include_log=True)
    dst = open_memory(namespace="dst", folder=tmp_path / "dst")
    dst.admin.import_(file)
    by_content = {x.content: x for x in dst.nodes()}
    assert by_content[CASES["en"]["old"]].importance == pytest.approx(src.get(n["old"].id).importance)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half"])
def test_bad_settings_are_refused(open_memory, bad):
    from hybrid_memory.errors import ConfigError

    with pytest.raises((ConfigError, TypeError, ValueError)):
        open_memory(dedup={"supersede": bad})
    with pytest.raises((ConfigError, TypeError, ValueError)):
        open_memory(dedup={"supersede_words": bad})
