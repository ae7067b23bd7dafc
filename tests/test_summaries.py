"""Summaries of finished work (hybrid_memory.summaries): the extractive summarizer in
English and Chinese; summarize() and finish() with the real model on SQLite and
PostgreSQL; forgetting taking covered details first; a tight budget showing a
finished task's summary in place of its details; typed errors that change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_memory import ROOT, MemoryTree
from hybrid_memory.errors import InvalidInputError, InvalidTypeError, NotFoundError
from hybrid_memory.model import NodeType
from hybrid_memory.summaries import (
    COVERS,
    FINISHED_AT,
    SUMMARY_ID,
    SUMMARY_OF,
    Extractive,
    sentences,
)
from hybrid_memory.text import count_tokens

CASES = {
    "en": dict(
        task="Plan the Kyoto trip in April",
        notes=[("Flights booked on ANA, arriving April 3 at Kansai airport.", "event", 0.9),
               ("The hotel near Gion is confirmed for four nights. Breakfast is included.", "fact", 0.6),
               ("The user prefers window seats on long flights.", "preference", 0.8),
               ("A seven-day rail pass was bought for the trip.", "event", 0.3),
               ("The restaurant in Pontocho takes reservations only by phone.", "fact", 0.2)],
        other="Write the quarterly sales report",
        other_notes=["The draft of the sales report is due on Friday."],
        question="When do the flights arrive at Kansai?",
    ),
    "zh": dict(
        task="准备四月的京都旅行",
        notes=[("机票已经订好，四月三日到达关西机场。", "event", 0.9),
               ("祇园附近的酒店确认住四晚。含早餐。", "fact", 0.6),
               ("用户坐长途航班喜欢靠窗的座位。", "preference", 0.8),
               ("为这次旅行买了七天的铁路通票。", "event", 0.3),
               ("先斗町的那家餐厅只接受电话预订。", "fact", 0.2)],
        other="写季度销售报告",
        other_notes=["销售报告的初稿周五截止。"],
        question="航班什么时候到达关西机场？",
    ),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> dict[str, Any]:
    return CASES[request.param]


def trip(mem: MemoryTree, case: dict[str, Any]) -> tuple[str, list[str], str]:
    """The trip task with its notes, and another task (the active one)."""
    task = mem.add(case["task"], type="task", parent=ROOT)
    notes = [mem.add(c, type=t, parent=task, importance=imp).id for c, t, imp in case["notes"]]
    other = mem.add(case["other"], type="task", parent=ROOT)
    for c in case["other_notes"]:
        mem.add(c, type="state", parent=other)
    return task.id, notes, other.id


# -- the extractive summarizer -----------------------------------------------------


def test_sentences_are_cut_after_their_ends_in_both_languages():
    assert sentences("Flights booked. Hotel is 3.5 km away! Done?") == ["Flights booked.", "Hotel is 3.5 km away!",
                                                                       "Done?"]
    assert sentences("机票已经订好。酒店住四晚！\n含早餐") == ["机票已经订好。", "酒店住四晚！", "含早餐"]


@pytest.mark.parametrize("lang", sorted(CASES))
def test_the_summary_keeps_the_heaviest_sentences_within_its_budget(lang):
    texts = [c for c, _, _ in CASES[lang]["notes"]]
    weights = [imp for _, _, imp in CASES[lang]["notes"]]
    budget = count_tokens(texts[0]) + count_tokens(sentences(texts[2])[0]) + 2
    out = Extractive(budget)(texts, weights)
    assert count_tokens(out) <= budget
    assert texts[0] in out and texts[2] in out  # the two heaviest
    assert texts[4] not in out  # the lightest does not fit
    assert out.index(texts[0]) < out.index(texts[2])  # in the order of the texts


def test_a_sentence_said_twice_is_kept_once():
    texts = ["The hotel is confirmed for four nights.", "The hotel is confirmed for four nights.",
             "Breakfast is included."]
    assert Extractive(100)(texts) == "The hotel is confirmed for four nights. Breakfast is included."
    zh = ["酒店确认住四晚。", "酒店确认住四晚。", "含早餐。"]
    assert Extractive(100)(zh) == "酒店确认住四晚。含早餐。"


def test_a_bad_budget_or_weights_are_refused():
    with pytest.raises(InvalidInputError):
        Extractive(0)
    with pytest.raises(InvalidInputError):
        Extractive(True)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Extractive(10)(["a b c."], [1.0, 2.0])


# -- summarize and finish ----------------------------------------------------------


def test_finish_writes_a_summary_under_the_task_that_links_what_it_covers(open_memory, case):
    mem = open_memory()
    task, notes, _ = trip(mem, case)
    summary = mem.finish(task, budget_tokens=60)
    assert summary.type is NodeType.SUMMARY and summary.parent_id == task and summary.branch_id == task
    assert summary.meta[SUMMARY_OF] == task and summary.meta[COVERS] == notes
    assert count_tokens(summary.content) <= 60
    assert case["notes"][0][0] in summary.content  # the heaviest note
    assert summary.importance == pytest.approx(0.9)
    marked = mem.get(task).meta
    assert marked[SUMMARY_ID] == summary.id and isinstance(marked[FINISHED_AT], float)
    # The summary is a memory like any other: it is found by meaning.
    found = mem.retrieve(case["question"], k=8, budget_tokens=2000)
    assert summary.id in found.ids


def test_a_new_summary_archives_the_one_before(open_memory, case):
    mem = open_memory()
    task, _, _ = trip(mem, case)
    first = mem.summarize(task, budget_tokens=20)
    assert SUMMARY_ID in mem.get(task).meta and FINISHED_AT not in mem.get(task).meta
    mem.add(case["other_notes"][0] + " (copied to the trip)", type="fact", parent=task)
    second = mem.summarize(task, budget_tokens=200)
    assert second.id != first.id
    assert not mem.get(first.id).live and mem.get(second.id).live
    assert mem.get(task).meta[SUMMARY_ID] == second.id
    assert first.id not in second.meta[COVERS]  # a summary never covers a summary


def test_a_summarizer_gets_the_details_oldest_first(open_memory, case):
    mem = open_memory()
    task, _, _ = trip(mem, case)
    seen: list[list[str]] = []

    def llm(texts):
        seen.append(list(texts))
        return "Summary: " + texts[0]

    summary = mem.summarize(task, llm)
    assert seen == [[c for c, _, _ in case["notes"]]]
    assert summary.content == "Summary: " + case["notes"][0][0] and summary.meta["summarizer"] == "llm"


def test_what_another_handle_writes_while_the_summarizer_runs_is_kept(open_memory, tmp_path, case):
    """A slow summarizer (an LLM call) while another session of the same memory writes
    the task's meta: the finished task keeps that write and points at the summary."""
    mem = open_memory(folder=tmp_path / "mem")
    other = open_memory(folder=tmp_path / "mem", session="other")
    task, _, _ = trip(mem, case)

    def llm(texts):
        other.update(task, meta={"owner": "ops"})
        return "Summary: " + texts[0]

    summary = mem.finish(task, llm)
    for handle in (mem, other):
        meta = handle.get(task).meta
        assert meta["owner"] == "ops" and meta[SUMMARY_ID] == summary.id and FINISHED_AT in meta


def test_bad_summaries_are_refused_and_change_nothing(open_memory, case):
    mem = open_memory()
    task, notes, other = trip(mem, case)
    mem.archive(other)

    def state() -> dict[str, tuple[int, str, dict[str, Any]]]:
        return {n.id: (n.version, n.status.value, dict(n.meta)) for n in mem.nodes(include_archived=True)}

    before = state()
    with pytest.raises(InvalidInputError, match="finish takes a task"):
        mem.finish(notes[0])
    with pytest.raises(InvalidInputError, match="nothing under"):
        mem.summarize(notes[0])
    with pytest.raises(InvalidInputError, match="summarizer returned"):
        mem.summarize(task, lambda texts: "  ")
    with pytest.raises(InvalidInputError, match="summarizer returned"):
        mem.summarize(task, lambda texts: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidTypeError):
        mem.summarize(task, "extractive")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        mem.finish(task, budget_tokens=0)
    with pytest.raises(NotFoundError):
        mem.finish("no-such-node")
    with pytest.raises(NotFoundError):
        mem.finish(other)  # archived
    assert state() == before


# -- forgetting and retrieval --------------------------------------------------------


def test_forgetting_takes_the_covered_details_first_and_they_come_back(open_memory, case):
    mem = open_memory()
    task, notes, other = trip(mem, case)
    summary = mem.finish(task)
    live = len(mem.nodes())
    # A cap that frees as many places as the trip has details: exactly they go.
    report = mem.forget(threshold=0.0, max_nodes=live - len(notes))
    assert sorted(report.archived) == sorted(notes)
    assert mem.get(summary.id).live and mem.get(task).live
    assert all(mem.get(n).live for n in mem.nodes() if n.branch_id == other)
    # A detail comes back as before, and is found again.
    assert mem.unarchive(notes[0]).live
    assert notes[0] in mem.retrieve(case["question"], k=8, budget_tokens=2000).ids


def test_without_a_summary_the_same_cap_takes_other_memories(open_memory, case):
    mem = open_memory()
    task, notes, _ = trip(mem, case)
    live = len(mem.nodes())
    report = mem.forget(threshold=0.0, max_nodes=live - len(notes))
    assert sorted(report.archived) != sorted(notes)


def test_a_tight_budget_shows_a_finished_tasks_summary_and_says_so(open_memory, case):
    mem = open_memory()
    task, notes, _ = trip(mem, case)
    summary = mem.finish(task, budget_tokens=30)
    roomy = mem.retrieve(case["question"], k=8, budget_tokens=2000, reinforce=False)
    assert set(notes) <= set(roomy.ids)  # everything fits: the details, as before
    # Room for the summary and its task, not for the details picked.
    cost = next(s.tokens for s in roomy.nodes if s.node.id == summary.id)
    title = next(s.tokens for s in roomy.nodes if s.node.id == task)
    tight = mem.retrieve(case["question"], k=8, budget_tokens=cost + title + 2, reinforce=False)
    reasons = {s.node.id: s.reason for s in tight.nodes}
    assert reasons.get(summary.id) == "summary"
    assert not set(notes) & set(reasons)
    assert "finished tasks shown by their summary 1" in tight.explain()


def test_a_summary_of_an_unfinished_task_does_not_replace_its_details(open_memory, case):
    mem = open_memory()
    task, notes, _ = trip(mem, case)
    summary = mem.summarize(task, budget_tokens=30)
    roomy = mem.retrieve(case["question"], k=8, budget_tokens=2000, reinforce=False)
    cost = next(s.tokens for s in roomy.nodes if s.node.id == summary.id)
    title = next(s.tokens for s in roomy.nodes if s.node.id == task)
    tight = mem.retrieve(case["question"], k=8, budget_tokens=cost + title + 2, reinforce=False)
    assert all(s.reason != "summary" for s in tight.nodes)


def test_a_finished_task_reads_the_same_after_a_restart(open_memory, tmp_path, case):
    mem = open_memory(folder=tmp_path / "m")
    task, notes, _ = trip(mem, case)
    summary = mem.finish(task, budget_tokens=30)
    roomy = mem.retrieve(case["question"], k=8, budget_tokens=2000, reinforce=False)
    budget = sum(s.tokens for s in roomy.nodes if s.node.id in (summary.id, task)) + 2
    before = mem.retrieve(case["question"], k=8, budget_tokens=budget, reinforce=False)
    mem.close()
    again = open_memory(folder=tmp_path / "m")
    after = again.retrieve(case["question"], k=8, budget_tokens=budget, reinforce=False)
    assert after.ids == before.ids and summary.id in after.ids
    assert again.get(task).meta[SUMMARY_ID] == summary.id
