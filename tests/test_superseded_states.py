"""A state that a later state of its branch supersedes gives its place to what is current.

A task's state lines follow one another ("submitted, waiting for approval", then
"approved, queued for finance review"); each reads about as close to "where does
the claim stand?" as the next. Once a later state is written, the earlier one is
history: it is matched at ``SUPERSEDED_SIMILARITY`` of its similarity, so the
current state and the task's other memories come first, while a question that
reads clearly closer to the old state still finds it. The same lines written as
events (nothing supersedes an event) keep their whole similarity: the factor is
the only difference. A fact that a later fact of its branch restates ("the
approver is now Lee") is matched at the same share, while the update is stored and
unless it is pinned. Real SQLite files (and PostgreSQL), Chroma and the model, in
English and Chinese.
"""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_memory import ROOT, MemoryTree, Recall, text
from hybrid_memory.dedup import TermSets
from hybrid_memory.model import Node, NodeType, Status
from hybrid_memory.retrieval.rank import SUPERSEDED_SIMILARITY

NO_FLUSH = {"usage": {"flush_every": 1_000_000}}

CLAIMS = {
    "en": ("Expense claim EXP-4417 for Zhang San's trip to Berlin", [
        "Claim EXP-4417: drafted, receipts still being gathered",
        "Claim EXP-4417: submitted, waiting for the manager's approval",
        "Claim EXP-4417: approved, queued for the finance review",
    ], ["Zhang San uploaded a clearer scan of the hotel invoice"],
        "Where does claim EXP-4417 stand?",
        "Were the receipts for EXP-4417 still being gathered?"),
    "zh": ("张三柏林出差的报销单 EXP-4417", [
        "报销单 EXP-4417：草稿，票据还在收集",
        "报销单 EXP-4417：已提交，等经理审批",
        "报销单 EXP-4417：已批准，排队等财务复核",
    ], ["张三重新上传了清晰的酒店发票扫描件"],
        "报销单 EXP-4417 现在到哪一步了？",
        "EXP-4417 的票据还在收集吗？"),
}


def build(mem: MemoryTree, clock: Any, lang: str, line_type: str) -> list[str]:
    """The claim with its three status lines (as ``line_type``) and an event; the
    status lines' ids, oldest first."""
    title, lines, events, _, _ = CLAIMS[lang]
    task = mem.add(title, type="task", parent=ROOT)
    ids = []
    for content in lines:
        clock.advance(3600)
        ids.append(mem.add(content, type=line_type, parent=task).id)
    for content in events:
        clock.advance(3600)
        mem.add(content, type="event", parent=task)
    return ids


def ask(mem: MemoryTree, query: str, k: int = 3) -> Recall:
    return mem.retrieve(query, k=k, reinforce=False)


def hits(recall: Recall) -> list[str]:
    return [s.node.id for s in sorted((s for s in recall.nodes if s.reason == "hit"), key=lambda s: -s.score)]


def similarity_by_content(recall: Recall) -> dict[str, float]:
    return {s.node.content: s.similarity for s in recall.nodes}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_current_state_comes_before_the_states_it_superseded(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"states{lang}", **NO_FLUSH)
    states = build(mem, clock, lang, "state")
    recall = ask(mem, CLAIMS[lang][3], k=len(states) + 1)
    factors = {s.node.id: s.superseded_factor for s in recall.nodes}
    assert hits(recall)[0] == states[-1]
    assert factors[states[-1]] == 1.0
    assert [factors[i] for i in states[:-1]] == [SUPERSEDED_SIMILARITY] * 2
    assert all(f == 1.0 for i, f in factors.items() if i not in states)
    assert f"superseded memories matched at {SUPERSEDED_SIMILARITY:g}: 2" in dict(recall.stages)["rank"]
    table = recall.explain().splitlines()
    assert "supers" in table[len(recall.branches) + len(recall.stages) + 1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_factor_is_the_only_difference_from_the_same_lines_as_events(
        open_memory: Any, clock: Any, lang: str) -> None:
    as_states = open_memory(namespace=f"s{lang}", **NO_FLUSH)
    build(as_states, clock, lang, "state")
    as_events = open_memory(namespace=f"e{lang}", **NO_FLUSH)
    build(as_events, clock, lang, "event")
    query = CLAIMS[lang][3]
    k = len(CLAIMS[lang][1]) + 1
    state_sim = similarity_by_content(ask(as_states, query, k))
    event_sim = similarity_by_content(ask(as_events, query, k))
    old, current = CLAIMS[lang][1][:-1], CLAIMS[lang][1][-1]
    for content in old:
        assert state_sim[content] == pytest.approx(SUPERSEDED_SIMILARITY * event_sim[content], abs=1e-6)
    assert state_sim[current] == pytest.approx(event_sim[current], abs=1e-6)
    assert all(s.superseded_factor == 1.0 for s in ask(as_events, query, k).nodes)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_question_about_the_old_state_still_finds_it(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"old{lang}", **NO_FLUSH)
    states = build(mem, clock, lang, "state")
    recall = ask(mem, CLAIMS[lang][4])
    assert states[0] in hits(recall)
    assert {s.node.id: s.superseded_factor for s in recall.nodes}[states[0]] == SUPERSEDED_SIMILARITY


def test_before_the_next_state_is_written_a_state_is_current(open_memory: Any, clock: Any) -> None:
    """Supersession is read from what is stored when the question is asked: rewound
    to before the later states, the first one is current again."""
    mem = open_memory(namespace="rewound", **NO_FLUSH)
    title, lines, _, question, _ = CLAIMS["en"]
    task = mem.add(title, type="task", parent=ROOT)
    clock.advance(3600)
    first = mem.add(lines[0], type="state", parent=task)
    mark = mem.checkpoint("one state")
    for content in lines[1:]:
        clock.advance(3600)
        mem.add(content, type="state", parent=task)
    assert {s.node.id: s.superseded_factor for s in ask(mem, question, k=4).nodes}[first.id] == SUPERSEDED_SIMILARITY
    mem.rewind(seq=mark.log_seq)
    recall = ask(mem, question, k=4)
    assert hits(recall) == [first.id]
    assert all(s.superseded_factor == 1.0 for s in recall.nodes)


# A fact that a later fact of its branch restates ("the approver is now Lee"): the
# rule writing uses to lower the earlier one's importance (``dedup.supersede_words``),
# read again when a question is asked.
APPROVERS = {
    "en": ("Expense claim EXP-5120 for the Lisbon offsite",
           "The approver for claim EXP-5120 is Chen",
           "The approver for claim EXP-5120 is now Lee; Chen is on leave",
           "Who approves claim EXP-5120?"),
    "zh": ("里斯本团建的报销单 EXP-5120",
           "报销单 EXP-5120 的审批人是陈经理",
           "报销单 EXP-5120 的审批人现在是李经理，陈经理休假",
           "报销单 EXP-5120 由谁审批？"),
}


def build_approver(mem: MemoryTree, clock: Any, lang: str, line_type: str, pinned: bool = False) -> tuple[str, str]:
    """The claim with its two approver lines (as ``line_type``); their ids, old first."""
    title, old, new, _ = APPROVERS[lang]
    task = mem.add(title, type="task", parent=ROOT)
    clock.advance(3600)
    first = mem.add(old, type=line_type, parent=task, pinned=pinned)
    clock.advance(3600)
    second = mem.add(new, type=line_type, parent=task)
    assert not first.merged and not second.merged
    return first.id, second.id


def factors(recall: Recall) -> dict[str, float]:
    return {s.node.id: s.superseded_factor for s in recall.nodes}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_restated_fact_gives_its_place_to_the_update(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"restated{lang}", **NO_FLUSH)
    old, new = build_approver(mem, clock, lang, "fact")
    recall = ask(mem, APPROVERS[lang][3])
    assert hits(recall)[0] == new
    assert factors(recall)[old] == SUPERSEDED_SIMILARITY
    assert factors(recall)[new] == 1.0
    assert f"superseded memories matched at {SUPERSEDED_SIMILARITY:g}: 1" in dict(recall.stages)["rank"]
    # The same lines as events: nothing restates an event.
    events = open_memory(namespace=f"restatedev{lang}", **NO_FLUSH)
    build_approver(events, clock, lang, "event")
    assert set(factors(ask(events, APPROVERS[lang][3])).values()) == {1.0}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_deleted_update_restates_nothing(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"deleted{lang}", **NO_FLUSH)
    old, new = build_approver(mem, clock, lang, "fact")
    assert factors(ask(mem, APPROVERS[lang][3]))[old] == SUPERSEDED_SIMILARITY
    mem.delete(new)
    recall = ask(mem, APPROVERS[lang][3])
    assert hits(recall)[0] == old
    assert factors(recall)[old] == 1.0


def test_a_pinned_fact_and_a_memory_without_supersession_keep_their_similarity(
        open_memory: Any, clock: Any) -> None:
    pinned = open_memory(namespace="pinnedfact", **NO_FLUSH)
    old, _ = build_approver(pinned, clock, "en", "fact", pinned=True)
    assert factors(ask(pinned, APPROVERS["en"][3]))[old] == 1.0
    off = open_memory(namespace="nosupersede", dedup={"supersede": 1.0}, **NO_FLUSH)
    old, _ = build_approver(off, clock, "en", "fact")
    assert factors(ask(off, APPROVERS["en"][3]))[old] == 1.0


def _fact(node_id: str, content: str) -> Node:
    return Node(id=node_id, namespace="ns", parent_id=None, type=NodeType.FACT, content=content, meta={},
                importance=0.5, confidence=1.0, access_count=0, pinned=False, status=Status.LIVE, version=1,
                depth=1, path=f"{node_id}/", branch_id=node_id, created_at=0.0, updated_at=0.0,
                accessed_at=0.0, active_at=0.0)


def test_term_sets_follow_an_edit_and_stay_bounded() -> None:
    cache = TermSets(2)
    assert cache.of(_fact("a", "The approver is Chen")) == text.term_set("The approver is Chen")
    assert cache.of(_fact("a", "审批人现在是李")) == text.term_set("审批人现在是李")
    cache.of(_fact("b", "Budget 5,000"))
    cache.of(_fact("c", "Hotel booked"))
    assert len(cache) == 2
