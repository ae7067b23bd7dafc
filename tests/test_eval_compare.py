"""eval.compare: two real evaluation runs (real model, SQLite, Chroma) of the same
generated trace under two settings, compared question by question."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval import compare
from eval.generate import generate
from hybrid_memory.config import Config
from hybrid_memory.evaluation import harness
from hybrid_memory.evaluation.report import write_all


def _run(events: list[dict[str, Any]], out: Path, embedder: Any, config: Config | None = None) -> None:
    options = harness.Options(systems=("hybrid", "bm25"), forget_cap=None, control=False, progress=False, config=config)
    write_all(harness.evaluate(events, options, embedder=embedder), out, plots=False)


def test_compare_lists_exactly_the_questions_that_changed(tmp_path: Path, embedder: Any,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    events = generate(500, lang="en", seed=4)
    a, b = tmp_path / "a", tmp_path / "b"
    _run(events, a, embedder)
    # Lexical only: a setting that surely moves some questions.
    _run(events, b, embedder, Config.load(overrides={"retrieval": {"dense_share": 0.0}}))

    (ra, qa), (rb, qb) = compare.read_run(a), compare.read_run(b)
    changed = compare.flips(qa, qb, "hybrid", "recall_all")
    expected = {i for i in qa if qa[i]["systems"]["hybrid"]["recall_all"] != qb[i]["systems"]["hybrid"]["recall_all"]}
    assert expected  # the setting mattered
    assert {q["id"] for q in changed["won"] + changed["lost"]} == expected
    for q in changed["won"]:
        assert q["b"] > q["a"] == qa[q["id"]]["systems"]["hybrid"]["recall_all"]
    for q in changed["lost"]:
        assert q["b"] < q["a"]
    # The summary's recall moves by the flips, question for question.
    (row,) = [r for r in compare.summary(ra, rb) if r[:2] == ("hybrid", "recall_all@10")]
    assert row[3] - row[2] == pytest.approx(sum(q["b"] - q["a"] for q in changed["won"] + changed["lost"]) / len(qa))
    # BM25 ignores hybrid's settings: nothing flips for it.
    assert compare.flips(qa, qb, "bm25", "recall_all") == {"won": [], "lost": []}

    assert compare.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"{len(changed['won'])} won, {len(changed['lost'])} lost" in out
    assert "| hybrid | recall_all@10 |" in out
    assert compare.main([str(a), str(a), "--metric", "branch"]) == 0
    assert "0 won, 0 lost" in capsys.readouterr().out


def test_compare_refuses_what_it_cannot_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def fake(folder: Path, ids: list[str]) -> Path:
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({"systems": {"hybrid": {"recall_all@10": 0.5}}}))
        (folder / "questions.jsonl").write_text(
            "".join(json.dumps({"id": i, "systems": {"hybrid": {"recall_all": 1.0}}}) + "\n" for i in ids))
        return folder

    a, b = fake(tmp_path / "a", ["q1", "q2"]), fake(tmp_path / "b", ["q1", "q3"])
    assert compare.main([str(a), str(b)]) == 2
    assert "different questions (1 only in A, 1 only in B)" in capsys.readouterr().err
    assert compare.main([str(a), str(tmp_path / "nowhere")]) == 2
    assert "results.json does not exist" in capsys.readouterr().err
    (tmp_path / "a" / "results.json").write_text("{not json")
    assert compare.main([str(a), str(a)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
