"""Text helpers: the lexical terms (stems, ids, CJK bigrams and words)."""

from __future__ import annotations

import threading

import pytest

from hybrid_memory import text


def test_terms_stem_latin_words_and_keep_numbers_and_ids_whole() -> None:
    assert text.terms("The Hotel bills, 860 euros for TKT-4854") == ["hotel", "bill", "860", "euro", "tkt", "4854"]
    assert text.terms("好") == ["好"]


def test_chinese_gets_bigrams_and_beside_them_the_words_jieba_finds() -> None:
    got = text.terms("报销进度")
    assert got[:3] == ["报销", "销进", "进度"]  # every pair of characters, in order
    assert set(got[3:]) == {"报销", "进度"}  # and the dictionary's words: "销进" is no word
    # A pair across a word boundary is a bigram only; the words are counted twice.
    counts = text.term_counts("曹华的杭州之行订了西湖边的酒店")
    assert counts["杭州"] == 2 and counts["酒店"] == 2 and counts["的杭"] == 1


def test_what_follows_an_apostrophe_is_not_a_term() -> None:
    # A possessive or a contraction leaves a letter or two behind; as terms they
    # are rare enough to decide a match ("Zhang's" against "Zhang's licence").
    assert text.terms("Mark Zhang's trip") == ["mark", "zhang", "trip"]
    assert text.terms("Zhang\u2019s visa, we'll see, don't") == ["zhang", "visa", "see", "don"]
    # A letter standing alone is still a term: vitamin D, plan B, a lone "s".
    assert text.terms("vitamin D, plan B, s") == ["vitamin", "d", "plan", "b", "s"]
    # The apostrophe cuts only what English writes after it.
    assert text.terms("O'Brien l'hotel") == ["o", "brien", "l", "hotel"]


@pytest.mark.parametrize(("asked", "written"), [
    ("reproduce", "reproduced"),
    ("switch", "switched"),
    ("switches", "switching"),
    ("promise", "promises"),
    ("copies", "copy"),
    ("copy", "copied"),
    ("stopped", "stop"),
    ("moving", "moved"),
    ("bookings", "booking"),
    ("studies", "studying"),
])
def test_a_word_and_its_inflections_are_one_term(asked: str, written: str) -> None:
    assert text.terms(asked) == text.terms(written)


@pytest.mark.parametrize(("one", "other"), [("news", "new"), ("class", "clas"), ("3924", "392"), ("p3", "p")])
def test_different_words_and_numbers_stay_apart(one: str, other: str) -> None:
    assert text.terms(one) != text.terms(other)


def test_stemming_is_safe_from_several_threads() -> None:
    words = ["reproduced", "switching", "promises", "copied", "bookings"] * 200
    want = [text.stem(w) for w in words]
    got: list[list[str]] = []

    def run() -> None:
        got.append([text.stem(w) for w in words])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 4


def test_is_cjk_tells_chinese_terms_from_latin_ones() -> None:
    assert text.is_cjk("领事") and text.is_cjk("馆")
    assert not text.is_cjk("offer") and not text.is_cjk("4009") and not text.is_cjk("")
    assert not text.is_cjk("trv领事")  # a term is one or the other; a mixed string is not a CJK term
    assert all(text.is_cjk(t) for t in text.terms("领事馆要什么照片")) and not any(
        text.is_cjk(t) for t in text.terms("Who signed off the offer for REQ-4009?"))
