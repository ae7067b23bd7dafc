"""In the family the agent chose to work on, what it wrote last comes first.

One task holds a run of progress notes of one kind, each as good an answer to
"where are we" as the others. When the agent has focused on that task, the query
lands there and the latest note leads; the weight part alone grows, so a note that
matches the query clearly better still wins. Without a focus (or with the prior
off), with the focus elsewhere, or after a write moved the cursor to a new task,
the plain order holds. The flag is stored with the cursor: a reopened memory, an
export and import, a rewind and an older store without the column all keep it.
Real SQLite files (and PostgreSQL), Chroma and the model, in English and Chinese.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import ROOT, MemoryTree, Recall
from hybrid_memory.retrieval.rank import NEWEST_GAIN

NO_FLUSH = {"usage": {"flush_every": 1_000_000}}

WORK = {
    "en": ("Migrate the billing service to the new database", [
        "Progress: copied the customer tables to the new database",
        "Progress: switched the invoice reads to the new database",
        "Progress: moved the payment writes to the new database",
    ], "Rotate the staging certificates", ["Progress: renewed the staging certificate"],
        "How far along is the database migration?",
        "Which tables did we copy to the new database?"),
    "zh": ("把计费服务迁移到新数据库", [
        "进展：客户表已经复制到新数据库",
        "进展：发票读取已经切换到新数据库",
        "进展：支付写入已经迁到新数据库",
    ], "更新预发环境的证书", ["进展：预发环境证书已经续期"],
        "数据库迁移进行到哪一步了？",
        "哪些表已经复制到新数据库？"),
}


def build(mem: MemoryTree, clock: Any, lang: str) -> tuple[str, list[str], str]:
    title, notes, other_title, other_notes, _, _ = WORK[lang]
    task = mem.add(title, type="task", parent=ROOT)
    ids = []
    for content in notes:
        clock.advance(60)
        ids.append(mem.add(content, type="event", parent=task).id)
    other = mem.add(other_title, type="task", parent=ROOT)
    for content in other_notes:
        clock.advance(60)
        mem.add(content, type="event", parent=other)
    return task.id, ids, other.id


def ask(mem: MemoryTree, query: str) -> Recall:
    return mem.retrieve(query, k=3, reinforce=False)


def rank_note(recall: Recall) -> str:
    return dict(recall.stages)["rank"]


def hits(recall: Recall) -> list[str]:
    return [s.node.id for s in sorted((s for s in recall.nodes if s.reason == "hit"), key=lambda s: -s.score)]


def assert_scores(mem: MemoryTree, recall: Recall) -> None:
    """Each hit's score is its parts: the weight part times the newest factor."""
    lam = mem.config.retrieval.lambda_
    for s in recall.nodes:
        if s.reason == "hit":
            own = (lam * s.similarity + (1 - lam) * s.weight * s.newest_factor) * s.branch_factor
            assert s.score == pytest.approx(own, abs=1e-9)


def assert_plain_order(mem: MemoryTree, recall: Recall) -> None:
    assert all(s.newest_factor == 1.0 for s in recall.nodes)
    assert_scores(mem, recall)


def focused_on_the_work(open_memory: Any, clock: Any, lang: str, question: int) -> tuple[MemoryTree, list[str], Recall]:
    """A memory focused on the migration, asked WORK[lang][question]: the memory,
    the migration's notes (oldest first) and the recall."""
    mem = open_memory(namespace=f"q{question}{lang}", **NO_FLUSH)
    task, notes, _ = build(mem, clock, lang)
    mem.focus(task)
    recall = ask(mem, WORK[lang][question])
    assert recall.branches[0].branch_id == task
    assert "focused family's newest first: applied to" in rank_note(recall)
    assert_scores(mem, recall)
    return mem, notes, recall


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_in_the_focused_family_the_latest_note_leads(open_memory: Any, clock: Any, lang: str) -> None:
    _, notes, recall = focused_on_the_work(open_memory, clock, lang, 4)
    assert hits(recall)[0] == notes[-1]
    factors = {s.node.id: s.newest_factor for s in recall.nodes}
    # The newest memory of the family counts 1 + gain, the next 1 + gain/2, ...
    assert factors[notes[-1]] == pytest.approx(1 + NEWEST_GAIN)
    assert factors[notes[-2]] == pytest.approx(1 + NEWEST_GAIN / 2)
    assert "newest" in recall.explain().splitlines()[len(recall.branches) + len(recall.stages) + 1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_note_that_matches_clearly_better_still_wins(open_memory: Any, clock: Any, lang: str) -> None:
    _, notes, recall = focused_on_the_work(open_memory, clock, lang, 5)
    assert hits(recall)[0] == notes[0]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_without_a_chosen_focus_the_plain_order_holds(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"plain{lang}", **NO_FLUSH)
    task, _, other = build(mem, clock, lang)
    # Writing the second task moved the cursor there; nobody chose it.
    assert "no focused node" in rank_note(ask(mem, WORK[lang][4]))
    assert_plain_order(mem, ask(mem, WORK[lang][4]))
    # Chosen, but the query lands in the other family.
    mem.focus(other)
    recall = ask(mem, WORK[lang][4])
    assert recall.branches[0].branch_id == task
    assert "located elsewhere" in rank_note(recall)
    assert_plain_order(mem, recall)
    # Chosen, then a new task written: the write moved the cursor, the choice lapses.
    mem.focus(task)
    mem.add(WORK[lang][2] + " (2)", type="task", parent=ROOT)
    assert "no focused node" in rank_note(ask(mem, WORK[lang][4]))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_with_the_prior_off_the_focus_changes_nothing(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"off{lang}", retrieval={"active_prior": 0.0}, **NO_FLUSH)
    task, _, _ = build(mem, clock, lang)
    before = ask(mem, WORK[lang][4])
    mem.focus(task)
    after = ask(mem, WORK[lang][4])
    assert "newest first: off" in rank_note(after)
    assert_plain_order(mem, after)
    assert [(s.node.id, s.score) for s in before.nodes] == [(s.node.id, s.score) for s in after.nodes]


def test_the_flag_is_stored_with_the_cursor(open_memory: Any, clock: Any, tmp_path: Path) -> None:
    """Reopened, exported and imported, rewound: the same answer."""
    lang = "en"
    mem = open_memory(namespace="kept", folder=tmp_path / "a", **NO_FLUSH)
    task, notes, _ = build(mem, clock, lang)
    mem.focus(task)
    want = ask(mem, WORK[lang][4])
    assert hits(want)[0] == notes[-1]
    mem.close()
    again = open_memory(namespace="kept", folder=tmp_path / "a", **NO_FLUSH)
    assert hits(ask(again, WORK[lang][4])) == hits(want)
    file = tmp_path / "kept.jsonl"
    again.admin.export(file)
    copy = open_memory(namespace="copy", folder=tmp_path / "b", **NO_FLUSH)
    copy.admin.import_(file)
    assert hits(ask(copy, WORK[lang][4])) == hits(want)
    assert "applied to" in rank_note(ask(copy, WORK[lang][4]))


def test_a_rewind_restores_whether_the_cursor_was_chosen(open_memory: Any, clock: Any) -> None:
    mem = open_memory(namespace="rewound", **NO_FLUSH)
    task, notes, _ = build(mem, clock, "en")
    before = mem.checkpoint("before the focus")
    clock.advance(60)
    mem.focus(task)
    focused = mem.checkpoint("focused")
    clock.advance(60)
    mem.add("Progress: the reports read from the new database", type="event", parent=task)
    mem.rewind(seq=focused.log_seq)
    recall = ask(mem, WORK["en"][4])
    assert "applied to" in rank_note(recall) and hits(recall)[0] == notes[-1]
    mem.rewind(seq=before.log_seq)
    assert "no focused node" in rank_note(ask(mem, WORK["en"][4]))


def test_an_older_store_without_the_column_opens_with_nothing_chosen(
        open_memory: Any, clock: Any, tmp_path: Path) -> None:
    mem = open_memory(namespace="old", folder=tmp_path / "old", **NO_FLUSH)
    task, _, _ = build(mem, clock, "en")
    mem.focus(task)
    with mem.store.engine.begin() as conn:  # the table as the first release made it
        conn.exec_driver_sql("ALTER TABLE hm_cursors DROP COLUMN focused")
    mem.close()
    reopened = open_memory(namespace="old", folder=tmp_path / "old", **NO_FLUSH)
    recall = ask(reopened, WORK["en"][4])
    assert "no focused node" in rank_note(recall)
    reopened.focus(task)
    assert "applied to" in rank_note(ask(reopened, WORK["en"][4]))
