"""A question in one language about a memory written in the other: the dense
scores of memories written mostly in CJK and of the others are levelled before
they are blended (``retrieval.candidates.level_scripts``), since a multilingual
embedder scores a text of the question's own language higher whatever it says."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid_memory import ROOT, MemoryTree
from hybrid_memory.retrieval.candidates import level_scripts
from hybrid_memory.text import mostly_cjk


def test_each_group_is_scaled_to_the_best_of_all_and_keeps_its_order() -> None:
    dense = {"en1": 0.6, "en2": 0.3, "zh1": 0.4, "zh2": 0.2, "unlisted": 0.5}
    cjk = {"en1": False, "en2": False, "zh1": True, "zh2": True}
    out = level_scripts(dense, cjk)
    assert out["en1"] == out["zh1"] == 0.6  # each group's best meets the best of all
    assert out["en2"] == 0.3 and out["zh2"] == pytest.approx(0.3)  # the rest scaled with their best
    assert out["unlisted"] == 0.5
    assert dense["zh1"] == 0.4  # the input is not changed


@pytest.mark.parametrize("cjk", [{"a": False, "b": False}, {"a": True, "b": True}])
def test_one_group_alone_is_left_as_it_is(cjk: dict[str, bool]) -> None:
    assert level_scripts({"a": 0.7, "b": 0.2}, cjk) == {"a": 0.7, "b": 0.2}


def test_a_group_without_a_positive_score_is_not_scaled() -> None:
    dense = {"a": 0.7, "b": 0.0, "c": -0.1}
    assert level_scripts(dense, {"a": False, "b": True, "c": True}) == dense


def test_mostly_cjk_counts_characters_against_words() -> None:
    assert mostly_cjk("报销单 EXP-8964：草稿已建，还在收集票据")
    assert mostly_cjk("Susan Harris 重新上传了 EXP-8964 的清晰发票扫描件")  # a Chinese note naming an English name
    assert not mostly_cjk("Booked Sofia Clark at the 如家酒店 in Amsterdam for 5 nights")
    assert not mostly_cjk("How much did 马婷 spend on EXP-8964?")
    assert not mostly_cjk("") and not mostly_cjk("12:30 !!")


EN_PEOPLE = ["Emma Brown", "Liam Wilson", "Olivia Moore", "Noah Taylor", "Ava Clark", "Mason Hall",
             "Sophia King", "Lucas Wright", "Mia Scott", "Ethan Green", "Amelia Baker", "James Hill"]
EN_CITIES = ["Chicago", "Denver", "Boston", "Seattle", "Austin", "Atlanta", "Phoenix", "Portland",
             "Dallas", "Miami", "Detroit", "Nashville"]
ZH_PEOPLE = ["马婷", "王磊", "李娜", "赵强", "刘洋", "陈静", "杨帆", "黄敏", "周杰", "吴芳", "徐亮", "孙悦"]
ZH_CITIES = ["青岛", "成都", "杭州", "西安", "南京", "武汉", "厦门", "长沙", "重庆", "苏州", "昆明", "大连"]


def _write(mem: MemoryTree) -> dict[str, tuple[str, str, str]]:
    """Twelve English and twelve Chinese trips (the same domain in both languages,
    as a bilingual team's memory holds it), each a task with its budget and hotel;
    trip number -> (task id, budget memory id, hotel memory id)."""
    out = {}
    for i, (who, city) in enumerate(zip(EN_PEOPLE, EN_CITIES, strict=True)):
        n = str(4100 + 37 * i)
        task = mem.add(f"Trip TRV-{n} for {who} to {city}", type="task", parent=ROOT)
        budget = mem.add(f"Budget for TRV-{n} approved: {1200 + 150 * i:,} USD for flights and hotel",
                         type="fact", parent=task)
        hotel = mem.add(f"Hotel for TRV-{n}: booked near the conference centre, {2 + i % 3} nights",
                        type="fact", parent=task)
        out[n] = (task.id, budget.id, hotel.id)
    for i, (who, city) in enumerate(zip(ZH_PEOPLE, ZH_CITIES, strict=True)):
        n = str(8200 + 41 * i)
        task = mem.add(f"出差 TRV-{n}：{who}去{city}参会", type="task", parent=ROOT)
        budget = mem.add(f"TRV-{n} 的预算已批：机票和酒店共 {3000 + 200 * i:,} 元", type="fact", parent=task)
        hotel = mem.add(f"TRV-{n} 的酒店订在会场附近，住 {2 + i % 3} 晚", type="fact", parent=task)
        out[n] = (task.id, budget.id, hotel.id)
    return out


@pytest.mark.parametrize(("question", "trip", "asked"), [
    ("Which hotel nights for TRV-8364?", "8364", 2),  # English, about a Chinese task
    ("出差 TRV-4211 批了多少预算？", "4211", 1),  # Chinese, about an English task
])
def test_a_question_finds_a_task_written_in_the_other_language(tmp_path: Path, question: str,
                                                               trip: str, asked: int) -> None:
    """Without the levelling, both questions locate a task of their own language
    (TRV-4285 and TRV-8651): every memory of that language scores higher on the
    dense channel than the right one."""
    with MemoryTree.open(tmp_path / "mem") as mem:
        trips = _write(mem)
        recall = mem.retrieve(question, k=2, reinforce=False)
        assert recall.branches[0].branch_id == trips[trip][0]
        assert trips[trip][asked] in [s.node.id for s in recall.nodes if s.reason == "hit"]
