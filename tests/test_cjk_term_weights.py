"""A Chinese question's words weigh as words, not as the pieces they are read in.

The lexical channel reads a CJK run twice, as overlapping character bigrams and as
jieba's words, so a Chinese phrase gives about three terms per word where the same
phrase in English gives one. Counted term by term, the phrase a question shares
with many tasks ("高级后端工程师") outweighed the identifier that names the one it
asks about ("REQ-1228"). ``text.term_weights`` gives each term of a run its part of
the run's words, and a CJK word ``CJK_WORD_WEIGHT``; a Latin word weighs its rarity
in English (tests/test_language_rarity.py).

The unit tests read the tokenizer alone; the others write real SQLite files (and
PostgreSQL), Chroma and the model, in English, Chinese, and a Chinese question about
a task written in English.
"""

from __future__ import annotations

from typing import Any

import jieba
import pytest

from hybrid_memory import ROOT, MemoryTree, Recall
from hybrid_memory.text import CJK_WORD_WEIGHT, is_cjk, language_rarity, term_weights, terms

NO_FLUSH = {"usage": {"flush_every": 1_000_000}}


def test_latin_terms_weigh_their_rarity_and_keep_the_order_of_terms() -> None:
    query = "How is ticket TKT-2801 going? Zhang's laptop was reproduced"
    weights = term_weights(query)
    assert list(weights) == list(dict.fromkeys(terms(query)))
    assert weights == {"ticket": language_rarity("ticket"), "tkt": 1.0, "2801": 1.0, "go": language_rarity("going"),
                       "zhang": language_rarity("zhang"), "laptop": language_rarity("laptop"),
                       "reproduc": language_rarity("reproduced")}


@pytest.mark.parametrize("query", ["高级后端工程师岗位 REQ-1228 现在什么状态？", "这笔报销为什么被退回来了", "EXP-6587 报销"])
def test_a_cjk_run_weighs_its_words(query: str) -> None:
    weights = term_weights(query)
    assert list(weights) == list(dict.fromkeys(terms(query)))
    # (each query's Latin words are an identifier's: they weigh 1)
    assert all(weights[t] == 1.0 for t in weights if not is_cjk(t))
    assert all(0.0 < weights[t] <= CJK_WORD_WEIGHT for t in weights if is_cjk(t))
    # The first run's terms together weigh its words, each a CJK word's weight (no
    # term of it is counted more than a whole word).
    run = query.split()[0] if is_cjk(query[0]) else query.split()[-1]
    own = list(dict.fromkeys(terms(run)))
    assert sum(weights[t] for t in own) == pytest.approx(CJK_WORD_WEIGHT * len(jieba.lcut(run)))


def test_a_word_both_readings_give_weighs_more_than_a_pair_across_two_words() -> None:
    weights = term_weights("高级后端工程师岗位")
    assert weights["高级"] > weights["级后"]
    assert weights["岗位"] > weights["师岗"]


# Two openings for the same role, told apart by their requisition id, city and
# manager; each with what has happened. The question names one opening's id and
# the role the two share.
OPENINGS = {
    "en": [("Hiring REQ-1228: senior backend engineer in Wuhan, hiring manager Zheng Hao", [
        "REQ-1228: offer sent to Feng Fei, waiting for her answer",
        "Feng Fei asked to start in June, after her notice period",
    ]), ("Hiring REQ-4145: senior backend engineer in Shanghai, hiring manager Yang Jiaqi", [
        "Senior backend engineer candidates in Shanghai: first-round interviews this week",
        "Posted the opening on two job boards",
    ])],
    "zh": [("招聘 REQ-1228：武汉的高级后端工程师，用人经理郑浩", [
        "REQ-1228：已给冯飞发 offer，等回复",
        "冯飞希望离职期满后六月入职",
    ]), ("招聘 REQ-4145：上海的高级后端工程师，用人经理杨佳琪", [
        "上海高级后端工程师岗位的候选人本周进行第一轮面试",
        "岗位已发布到两个招聘网站",
    ])],
}
# More openings, so that the memory is not a small one (whose every branch a
# question opens): the two above are located among ten.
OTHERS = {
    "en": [(f"Hiring REQ-{3000 + n}: {role} in {city}", [f"REQ-{3000 + n}: {line}"])
           for n, (role, city, line) in enumerate([
               ("data analyst", "Suzhou", "two candidates passed the case study"),
               ("product designer", "Xi'an", "portfolio review scheduled for Friday"),
               ("QA engineer", "Shenzhen", "the hiring manager wants one more onsite"),
               ("finance lead", "Beijing", "offer approved by the CFO"),
               ("frontend engineer", "Chengdu", "referral from the mobile team"),
               ("site reliability engineer", "Hangzhou", "take-home exercise sent"),
               ("technical writer", "Nanjing", "writing sample received"),
               ("sales manager", "Guangzhou", "reference checks under way"),
           ])],
    "zh": [(f"招聘 REQ-{3000 + n}：{city}的{role}", [f"REQ-{3000 + n}：{line}"])
           for n, (role, city, line) in enumerate([
               ("数据分析师", "苏州", "两位候选人通过了案例分析"),
               ("产品设计师", "西安", "作品集评审定在周五"),
               ("测试工程师", "深圳", "用人经理还想再加一轮现场面试"),
               ("财务主管", "北京", "offer 已由财务总监批准"),
               ("前端工程师", "成都", "移动团队内推了一位候选人"),
               ("运维开发工程师", "杭州", "已发出笔试题"),
               ("技术文档工程师", "南京", "已收到写作样稿"),
               ("销售经理", "广州", "正在做背景调查"),
           ])],
}
QUESTIONS = {
    "en": "What is the status of the senior backend engineer opening REQ-1228?",
    "zh": "高级后端工程师岗位 REQ-1228 现在什么状态？",
}


def build(mem: MemoryTree, clock: Any, openings: list[tuple[str, list[str]]]) -> list[str]:
    """The openings with their lines; the task ids, in order."""
    tasks = []
    for title, lines in openings:
        task = mem.add(title, type="task", parent=ROOT)
        tasks.append(task.id)
        for content in lines:
            clock.advance(600)
            mem.add(content, type="event", parent=task)
    return tasks


def ask(mem: MemoryTree, query: str) -> Recall:
    return mem.retrieve(query, k=3, reinforce=False)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_identifier_a_question_names_locates_its_task(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"openings{lang}", **NO_FLUSH)
    named = build(mem, clock, OPENINGS[lang] + OTHERS[lang])[0]
    recall = ask(mem, QUESTIONS[lang])
    assert recall.branches[0].branch_id == named
    best = max((s for s in recall.nodes if s.reason == "hit"), key=lambda s: s.score)
    assert "REQ-1228" in best.node.content
    query_note = dict(recall.stages)["query"]
    assert ("CJK terms" in query_note) == (lang == "zh")


def test_a_chinese_question_finds_a_task_written_in_english(open_memory: Any, clock: Any) -> None:
    # An English task and a Chinese one: the question is in Chinese and shares only
    # the trip's identifier with the English task, and its other words with the Chinese one.
    mem = open_memory(namespace="crosslang", **NO_FLUSH)
    english = build(mem, clock, [
        ("Business trip TRV-1280: Chen Jing to Zhengzhou for the autumn trade fair", [
            "Conference badges for TRV-1280 are collected at the north hall desk on March 14",
            "Booked the Zhengzhou hotel for TRV-1280, three nights",
        ]),
        ("出差 TRV-5531：李玲去武汉参加年度审计", [
            "TRV-5531 的参会证在会场前台领取，需要带身份证",
            "什么时候领参会证要看主办方的通知",
            "已订好武汉的酒店，住三晚",
        ]),
    ] + OTHERS["zh"] + OTHERS["en"])[0]
    recall = ask(mem, "出差单 TRV-1280 的参会证什么时候领？")
    assert recall.branches[0].branch_id == english
    assert "CJK terms" in dict(recall.stages)["query"]
