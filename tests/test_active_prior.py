"""retrieval.active_prior: a query starts from where the agent is.

Two tasks of one kind (two business trips) hold memories that answer the same
question ("which hotel did we book?") equally well. With the prior on, the
question locates the trip the agent is focused on; a question that names the
other trip still goes there; with the prior off, the focus changes nothing. The
active node is stored (the session's cursor), so a reopened memory answers alike.
Real SQLite, Chroma and the model, in English and Chinese.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import ROOT, MemoryTree

NO_FLUSH = {"usage": {"flush_every": 1_000_000}}

TRIPS = {
    "en": (
        ("Business trip to Berlin for the partner summit",
         ["Booked the hotel near the station for three nights", "The flight leaves Monday at 08:10"]),
        ("Business trip to Madrid for the supplier audit",
         ["Booked the hotel by the old town for two nights", "The flight leaves Tuesday at 09:30"]),
    ),
    "zh": (
        ("去柏林出差参加合作伙伴峰会", ["订了火车站旁边的酒店，住三晚", "航班周一早上八点十分起飞"]),
        ("去马德里出差做供应商审核", ["订了老城区的酒店，住两晚", "航班周二早上九点半起飞"]),
    ),
}
AMBIGUOUS = {"en": "Which hotel did we book, and for how many nights?", "zh": "我们订的是哪家酒店，住几晚？"}
NAMES_MADRID = {"en": "Which hotel did we book for the Madrid supplier audit?", "zh": "去马德里做供应商审核订的是哪家酒店？"}


def build(mem: MemoryTree, lang: str) -> list[str]:
    tasks = []
    for title, memories in TRIPS[lang]:
        task = mem.add(title, type="task", parent=ROOT)
        for content in memories:
            mem.add(content, type="fact", parent=task)
        tasks.append(task.id)
    return tasks


def located(mem: MemoryTree, query: str) -> str:
    return mem.retrieve(query, k=3, reinforce=False).branches[0].branch_id


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_ambiguous_question_locates_the_task_the_agent_is_on(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"prior{lang}", retrieval={"active_prior": 0.5}, **NO_FLUSH)
    berlin, madrid = build(mem, lang)
    for focus in (berlin, madrid, berlin):
        mem.focus(focus)
        assert located(mem, AMBIGUOUS[lang]) == focus
    # A question that names the other trip still goes there.
    mem.focus(berlin)
    assert located(mem, NAMES_MADRID[lang]) == madrid
    recall = mem.retrieve(AMBIGUOUS[lang], k=3, reinforce=False)
    assert recall.branches[0].branch_id == berlin
    assert any(s.node.parent_id == berlin and s.reason == "hit" for s in recall.nodes)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_without_the_prior_the_focus_changes_nothing(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"noprior{lang}", retrieval={"active_prior": 0.0}, **NO_FLUSH)
    berlin, madrid = build(mem, lang)
    answers = []
    for focus in (berlin, madrid):
        mem.focus(focus)
        recall = mem.retrieve(AMBIGUOUS[lang], k=3, reinforce=False)
        answers.append((recall.ids, [(b.branch_id, b.score) for b in recall.branches]))
    assert answers[0] == answers[1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_prior_reads_the_stored_focus_so_a_reopened_memory_answers_alike(
        open_memory: Any, clock: Any, tmp_path: Path, lang: str) -> None:
    folder = tmp_path / f"reopen{lang}"
    mem = open_memory(namespace="t", folder=folder, retrieval={"active_prior": 0.5}, **NO_FLUSH)
    berlin, madrid = build(mem, lang)
    mem.focus(madrid)
    before = mem.retrieve(AMBIGUOUS[lang], k=3, reinforce=False)
    mem.close()
    again = open_memory(namespace="t", folder=folder, retrieval={"active_prior": 0.5}, **NO_FLUSH)
    after = again.retrieve(AMBIGUOUS[lang], k=3, reinforce=False)
    assert before.branches[0].branch_id == after.branches[0].branch_id == madrid
    assert before.ids == after.ids and before.context == after.context
    # Another session of the same memory has its own focus: no prior until it has one.
    other = open_memory(namespace="t", folder=folder, session="other", retrieval={"active_prior": 0.5}, **NO_FLUSH)
    unfocused = other.retrieve(AMBIGUOUS[lang], k=3, reinforce=False)
    plain = open_memory(namespace="t", folder=folder, session="third", retrieval={"active_prior": 0.0}, **NO_FLUSH)
    assert [(b.branch_id, b.score) for b in unfocused.branches] == \
        [(b.branch_id, b.score) for b in plain.retrieve(AMBIGUOUS[lang], k=3, reinforce=False).branches]
    assert berlin in {b.branch_id for b in unfocused.branches} | {madrid}
