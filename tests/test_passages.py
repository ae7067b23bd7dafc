"""Content of any length: a long memory is kept whole, cut into passages each with a
vector of its own, found by its best passage and shown by it within the budget.

Real SQLite (and PostgreSQL), Chroma and the model, in English and Chinese.
"""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_memory import ROOT, InvalidContentError, MemoryTree, passages, text

TEAMS = {"en": ["platform", "billing", "search", "mobile", "security", "data"],
         "zh": ["平台", "计费", "搜索", "移动端", "安全", "数据"]}
ITEMS = {"en": ["release checklist", "incident review", "capacity plan", "hiring pipeline", "vendor contract",
                "onboarding guide", "test matrix"],
         "zh": ["发布清单", "事故复盘", "容量规划", "招聘流程", "供应商合同", "入职手册", "测试矩阵"]}
DETAIL = {"en": "The backup generator for hall B was moved to the north loading dock on Thursday.",
          "zh": "B厅的备用发电机周四被搬到了北侧装卸区。"}
QUESTION = {"en": "Where was the backup generator moved to?", "zh": "备用发电机被搬到哪里了？"}


def report(lang: str, n: int = 320) -> str:
    """A long meeting log with one detail in its middle: every line differs."""
    lines = []
    for i in range(n):
        team, item = TEAMS[lang][i % 6], ITEMS[lang][i % 7]
        if lang == "en":
            lines.append(f"Week {i}: the {team} team reviewed the {item} and left {i % 5 + 2} questions open.")
        else:
            lines.append(f"第{i}周：{team}团队评审了{item}，还有{i % 5 + 2}个问题没有解决。")
        if i == n // 2:
            lines.append(DETAIL[lang])
    return "\n".join(lines)


def build(mem: MemoryTree, lang: str) -> tuple[str, str]:
    task = mem.add("Facilities log" if lang == "en" else "设施日志", type="task", parent=ROOT)
    doc = report(lang)
    node = mem.add(doc, type="event", parent=task)
    other = mem.add("Team offsite" if lang == "en" else "团队外出活动", type="task", parent=ROOT)
    mem.add("We booked a bus for the offsite." if lang == "en" else "我们为外出活动订了一辆大巴。", type="fact", parent=other)
    return node.id, doc


def test_cut_covers_every_token_in_passages_of_at_most_the_size() -> None:
    for lang in ("en", "zh"):
        doc = report(lang)
        spans = passages.cut(doc, 200)
        assert len(spans) > 5
        pieces = text.token_spans(doc)
        covered = sum(text.count_tokens(doc[a:b]) for a, b in spans)
        assert covered == sum(n for _, _, n in pieces)
        assert all(text.count_tokens(doc[a:b]) <= 200 for a, b in spans)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))
        # Cut after a sentence's end: each passage but the last ends with one.
        assert all(doc[b - 1] in ".。" for _, b in spans[:-1])
    assert passages.cut("A short note.", 200) == []
    # A single word longer than the size is a passage of its own, not a loop.
    assert passages.cut("x" * 2000, 16) == [(0, 2000)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_detail_deep_in_a_long_memory_is_found_and_shown_by_its_passage(open_memory: Any, lang: str) -> None:
    mem = open_memory(namespace=f"long{lang}")
    node_id, doc = build(mem, lang)
    assert len(doc) > 8000  # past the old limit
    assert mem.get(node_id).content == doc  # kept whole
    recall = mem.retrieve(QUESTION[lang], k=3, budget_tokens=400, reinforce=False)
    hit = next(s for s in recall.nodes if s.node.id == node_id)
    assert hit.passage is not None
    start, stop = hit.passage
    assert DETAIL[lang] in doc[start:stop]
    assert DETAIL[lang] in recall.context
    assert recall.tokens <= 400 < text.count_tokens(doc)
    # The stored passages are the cut of what the memory holds now.
    with mem.store.reading() as conn:
        held = passages.read(conn, mem.store.nodes.get_many(conn, [node_id]))[node_id]
    assert held.spans == tuple(passages.cut(doc, mem.config.write.passage_tokens))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_new_content_is_cut_again_and_erasure_takes_the_passages(open_memory: Any, lang: str) -> None:
    mem = open_memory(namespace=f"recut{lang}")
    node_id, doc = build(mem, lang)
    shorter = doc[: len(doc) // 2]
    mem.update(node_id, content=shorter)
    with mem.store.reading() as conn:
        held = passages.read(conn, mem.store.nodes.get_many(conn, [node_id]))[node_id]
    assert held.spans == tuple(passages.cut(shorter, mem.config.write.passage_tokens))
    mem.update(node_id, content="Now a short note." if lang == "en" else "现在只是一条短笔记。")
    with mem.store.reading() as conn:
        assert passages.read(conn, mem.store.nodes.get_many(conn, [node_id])) == {}
        assert passages.uncut(conn, mem.namespace, mem.config.write.passage_tokens) == []
    mem.update(node_id, content=doc)
    mem.admin.erase(node_id)
    with mem.store.reading() as conn:
        assert conn.execute(passages_of(node_id)).all() == []


def passages_of(node_id: str) -> Any:
    from sqlalchemy import select

    from hybrid_memory.store.schema import passages as table

    return select(table.c.seq).where(table.c.node_id == node_id)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_passages_lost_with_a_crash_are_cut_at_the_next_open(open_memory: Any, lang: str) -> None:
    mem = open_memory(namespace=f"crash{lang}")
    node_id, doc = build(mem, lang)
    before = mem.retrieve(QUESTION[lang], k=3, budget_tokens=400, reinforce=False)
    # A crash between the write's commit and its passages' commit: the rows are gone.
    mem.store.write(lambda conn: passages.drop(conn, [node_id]))
    with mem.store.reading() as conn:
        assert passages.uncut(conn, mem.namespace, mem.config.write.passage_tokens) == [node_id]
    mem.close()
    again = open_memory(namespace=f"crash{lang}")
    with again.store.reading() as conn:
        assert passages.uncut(conn, again.namespace, again.config.write.passage_tokens) == []
    after = again.retrieve(QUESTION[lang], k=3, budget_tokens=400, reinforce=False)
    assert [(s.node.id, s.passage) for s in after.nodes] == [(s.node.id, s.passage) for s in before.nodes]


def test_content_past_the_hard_cap_is_refused_and_nothing_is_written(open_memory: Any) -> None:
    mem = open_memory(namespace="cap", write={"max_content_chars": 20_000})
    task = mem.add("Facilities log", type="task", parent=ROOT)
    before = len(mem.nodes())
    with pytest.raises(InvalidContentError, match="write.max_content_chars"):
        mem.add("x " * 10_001, type="event", parent=task)
    with pytest.raises(InvalidContentError):
        mem.add_many([{"content": "fine", "type": "fact", "parent": task.id},
                      {"content": "y" * 20_001, "type": "fact", "parent": task.id}])
    assert len(mem.nodes()) == before


def test_the_default_hard_cap_is_a_megabyte() -> None:
    from hybrid_memory import Config

    assert Config.load().write.max_content_chars == 1_000_000
