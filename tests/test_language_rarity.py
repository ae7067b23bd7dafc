"""A query's Latin words weigh by how rare they are in English, not only in the memory.

The lexical channel weighs a query word by its rarity among the memory's texts
(idf). A memory of a few thousand texts cannot tell a word every text may hold from
a word that names one thing: in a memory where "after" and "own" are written a few
times ("may stay one extra night after PyCon at own cost"), they weighed as much as
the ticket id a question names, and a memory of another task holding two such words
came before the one that answers. ``text.language_rarity`` (1 minus the word's Zipf
frequency in English over 8, from wordfreq's lists) multiplies each Latin query
word's idf, but a token holding a digit (an identifier, "TKT-1049") weighs 1; CJK
words keep their weights (``CJK_WORD_WEIGHT``).

The unit tests read the tokenizer alone; the others write real SQLite files (and
PostgreSQL), Chroma and the model, in English, and in Chinese with the English words
a Chinese team writes ("这个 case 归哪个 team").
"""

from __future__ import annotations

from typing import Any

import pytest

from hybrid_memory import ROOT, MemoryTree, Recall
from hybrid_memory.text import CJK_WORD_WEIGHT, is_cjk, language_rarity, term_weights, terms

NO_FLUSH = {"usage": {"flush_every": 1_000_000}}


def test_common_english_words_weigh_least_and_unknown_ones_most() -> None:
    order = ["the", "after", "ticket", "handover", "tkt"]
    rarity = [language_rarity(w) for w in order]
    assert rarity == sorted(rarity)
    assert 0.0 < rarity[0] < 0.1
    assert language_rarity("qzxv") == 1.0


def test_a_latin_term_weighs_the_rarity_of_the_word_first_written() -> None:
    query = "Who owns ticket TKT-1049 after the handover? Who is the owner?"
    weights = term_weights(query)
    assert list(weights) == list(dict.fromkeys(terms(query)))
    assert weights["own"] == language_rarity("owns")
    assert weights["handov"] == language_rarity("handover")
    assert weights["after"] < weights["ticket"] < weights["handov"] < 1.0


def test_a_token_holding_a_digit_weighs_one() -> None:
    # An identifier, a version, a year: it names one thing, whatever wordfreq says
    # of numbers of its shape or of its letters ("po", "exp" are English words).
    weights = term_weights("Is PO-3924 on v2 of the 2025 plan? The po box is closed")
    assert weights["po"] == weights["3924"] == weights["v2"] == weights["2025"] == 1.0
    assert weights["plan"] == language_rarity("plan") < 1.0


def test_cjk_terms_keep_their_weights_beside_latin_ones() -> None:
    weights = term_weights("TKT-1049 这个 case 现在归哪个 team？")
    assert all(0.0 < w <= CJK_WORD_WEIGHT for t, w in weights.items() if is_cjk(t))
    assert weights["case"] == language_rarity("case") < weights["tkt"] == 1.0


# A ticket, handed over from one engineer to another; and trips and tickets whose
# memories hold the question's common words and nothing of what it asks about.
MEMORY = {
    "en": [
        ("Support ticket TKT-1049: Vandelay Imports reports SSO login failing on Chrome", [
            ("state", "Ticket TKT-1049: reproduced and handed to engineering"),
            ("fact", "Ticket TKT-1049 is assigned to Mark Novak"),
            ("fact", "Reassigned TKT-1049 to William Kim (from Mark Novak), who knows the SSO login code"),
            ("event", "Mei Lee called about TKT-1049, upset: it blocks their month-end close"),
            ("fact", "Raised TKT-1049 to P3 (was P2) after the payroll run failed"),
        ]),
        ("Business trip TRV-1523: Lukas Smith to Mumbai for PyCon", [
            ("decision", "Agreed Lukas Smith may stay one extra night after PyCon at own cost"),
            ("event", "Booked the Mumbai hotel for TRV-1523, four nights"),
        ]),
        ("Business trip TRV-9487: James Jackson to Berlin for the annual audit", [
            ("decision", "Agreed James Jackson may stay one extra night after the audit at own cost"),
            ("event", "Booked the Berlin hotel for TRV-9487, three nights"),
        ]),
        ("Business trip TRV-3310: Mei Chen to Austin for the partner summit", [
            ("decision", "Agreed Mei Chen may fly back a day after the summit at own cost"),
            ("event", "Booked the Austin hotel for TRV-3310, two nights"),
        ]),
    ],
    "zh": [
        ("工单 TKT-1049：Vandelay 反馈 Chrome 上 SSO 登录失败", [
            ("state", "TKT-1049 已复现，转给研发处理"),
            ("fact", "TKT-1049 原来由 Mark Novak 负责"),
            ("fact", "TKT-1049 转给了 William Kim，他熟悉 SSO 登录代码"),
        ]),
        ("出差 TRV-1523：Lukas Smith 去孟买参加 PyCon", [
            ("decision", "Lukas Smith 的签证 case 交给 travel team 处理"),
            ("event", "孟买的酒店已订好，住四晚"),
        ]),
        ("出差 TRV-9487：James Jackson 去柏林参加年度审计", [
            ("decision", "James Jackson 的报销 case 由 finance team 审核"),
            ("event", "柏林的酒店已订好，住三晚"),
        ]),
    ],
}
# More tasks, so that the memory is not a small one (whose every branch a question opens).
OTHERS = [(f"Purchase order PO-{4000 + n}: {item} for the {team} team", [("event", f"PO-{4000 + n}: {line}")])
          for n, (item, team, line) in enumerate([
              ("laptops", "design", "quote received from two suppliers"),
              ("monitors", "support", "delivery slipped by a week"),
              ("desks", "sales", "placed with the supplier"),
              ("headsets", "finance", "budget approved"),
              ("server racks", "platform", "counted at the dock"),
              ("chairs", "legal", "returned two damaged ones"),
              ("phones", "marketing", "waiting for the invoice"),
          ])]
QUESTIONS = {
    "en": ("Who owns ticket TKT-1049 after the handover?", "William Kim"),
    "zh": ("TKT-1049 这个 case 现在归哪个 team？", "William Kim"),
}


def build(mem: MemoryTree, clock: Any, tasks: list[tuple[str, list[tuple[str, str]]]]) -> None:
    for title, lines in tasks:
        task = mem.add(title, type="task", parent=ROOT)
        for kind, content in lines:
            clock.advance(600)
            mem.add(content, type=kind, parent=task)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_common_words_of_another_task_do_not_outrank_the_answer(open_memory: Any, clock: Any, lang: str) -> None:
    mem = open_memory(namespace=f"rarity{lang}", **NO_FLUSH)
    build(mem, clock, MEMORY[lang] + OTHERS)
    query, answer = QUESTIONS[lang]
    recall: Recall = mem.retrieve(query, k=3, reinforce=False)
    hits = [s.node.content for s in sorted(recall.nodes, key=lambda s: -s.score) if s.reason == "hit"]
    # The other tasks' decisions share only the question's common words.
    assert any(answer in h for h in hits), hits
    assert not any(h.startswith(("Agreed", "Lukas", "James")) for h in hits), hits
