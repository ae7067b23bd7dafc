"""eval.locate_replay: stage 1 of every question recorded during a real harness run
(real model, SQLite, Chroma), then re-scored offline.

The recording is only useful if re-scoring it under the run's own settings gives the
run's located branch for every question; that is what these tests hold it to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval import harness, locate_replay
from eval.generate import generate
from eval.trace import write_trace
from hybrid_memory import text
from hybrid_memory.config import Config


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_rescoring_a_recording_gives_the_runs_located_branch(lang: str, tmp_path: Path, embedder: Any,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    events = generate(1200, lang=lang, seed=1)
    records, results = locate_replay.record(events, harness.Options(progress=False))
    per_question = {q["id"]: q for q in results["per_question"]}
    assert len(records) == results["queries"] == len(per_question)
    config = Config.load()
    for rec in records:
        out = locate_replay.rescore(rec, config.retrieval)
        located = rec["branches"][out[0][1]]
        # The run's own answer, as the harness saw it.
        assert located == rec["located"] == per_question[rec["id"]]["systems"]["hybrid"]["branch"]
        assert rec["gold_branch"] == per_question[rec["id"]]["task"]
    scored = locate_replay.score(records, config)
    assert scored["branch_acc@1"] == pytest.approx(results["systems"]["hybrid"]["branch_acc@1"])
    assert len(scored["misses"]) == sum(scored["by_kind"].values())
    assert set(scored["by_kind"]) <= set(locate_replay.MISS_KINDS)

    # The settings are read: scoring branch by branch (no families) moves some question.
    flat = Config.load(overrides={"retrieval": {"by_family": False}})
    assert any(locate_replay.rescore(r, flat.retrieval) != locate_replay.rescore(r, config.retrieval) for r in records)

    # The command line reads what record wrote.
    path = tmp_path / "rec.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert locate_replay.main(["score", str(path)]) == 0
    assert f"branch_acc@1 {scored['branch_acc@1']:.3f} over {len(records)} questions" in capsys.readouterr().out
    assert locate_replay.main(["score", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_record_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(generate(300, lang="en", seed=2), trace)
    out = tmp_path / "rec.jsonl"
    args = ["record", "--trace", str(trace), "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet"]
    assert locate_replay.main(args) == 0
    printed = capsys.readouterr().out
    records = locate_replay.read_records(out)
    assert records and f"{len(records)} questions recorded" in printed
    acc = locate_replay.score(records, Config.load())["branch_acc@1"]
    assert f"the run's branch_acc@1 {acc:.3f}" in printed
    # A configuration that does not load changes nothing and says why.
    bad = tmp_path / "bad.toml"
    bad.write_text("[retrieval]\nfamily_rarity = -1\n", encoding="utf-8")
    assert locate_replay.main(["score", str(out), "--config", str(bad)]) == 2
    assert "family_rarity" in capsys.readouterr().err


def _record(located_path: str, gold_path: str | None) -> dict[str, Any]:
    """A hand-made recording: two candidates, one in the located branch and (when
    ``gold_path`` is given) one in the gold branch."""
    cands = {"a": {"branch": located_path.split("/")[-1], "path": located_path + "/a", "dense": 0.9, "lexical": 0.5}}
    branches = {located_path.split("/")[-1]: ["L"]}
    gold_paths = []
    if gold_path is not None:
        cands["g"] = {"branch": gold_path.split("/")[-1], "path": gold_path + "/g", "dense": 0.2, "lexical": 0.1}
        branches[gold_path.split("/")[-1]] = ["G"]
        gold_paths = [gold_path]
    return {"id": "q", "text": "?", "gold_branch": ["G"], "cands": cands, "branches": branches,
            "gold_paths": gold_paths, "gold_in_memory": [], "postings": [], "dense_mix": 0.7,
            "by_family": True, "named": [], "idf": {}}


@pytest.mark.parametrize(("located", "gold", "kind"), [
    ("r", "r/s", "parent located, gold in a subtask"),
    ("r/s/t", "r/s", "subtask located, gold in the parent"),
    ("r/s", "r/u", "another branch of the family"),
    ("r", "v", "another family"),
    ("r", None, "gold branch not a candidate"),
])
def test_miss_kinds(located: str, gold: str | None, kind: str) -> None:
    rec = _record(located, gold)
    assert locate_replay.miss_kind(rec, located.split("/")[-1]) == kind
    if gold is not None:
        assert locate_replay.miss_kind(rec, gold.split("/")[-1]) is None


def test_the_duration_word_follows_the_settings() -> None:
    """A recording made with retrieval.answer_type keeps the duration word it gave a
    candidate; re-scored with the setting off, the word is not there."""
    rec = _record("r", "r/s")
    rec["cands"]["a"]["dense"], rec["cands"]["g"]["dense"] = 0.55, 0.5  # the parent reads closer
    rec["postings"] = [["4281", "a", 1], ["4281", "g", 1], [text.ANSWER_TERMS["duration"], "g", 1]]
    on = Config.load()
    off = Config.load(overrides={"retrieval": {"answer_type": False}})
    assert on.retrieval.answer_type
    assert locate_replay.miss_kind(rec, locate_replay.rescore(rec, on.retrieval)[0][1]) is None
    assert locate_replay.miss_kind(rec, locate_replay.rescore(rec, off.retrieval)[0][1]) == \
        "parent located, gold in a subtask"


def test_a_recorded_move_to_the_answering_branch_is_replayed() -> None:
    """The family's answer check moved the question from the parent (r) to a subtask
    (u) that had no stage-1 candidate. Re-scored, stage 1 locates r again and the move
    is made again (and is not, with retrieval.answer_type off); the moved-to branch
    is read from what the recording kept of it."""
    rec = _record("r", "r/s")
    rec["cands"]["a"]["dense"] = 0.9  # stage 1 locates r
    rec["gold_branch"] = ["U"]
    rec["branches"]["u"] = ["U"]
    rec["answer_branch"] = {"from": "r", "to": "u", "path": "r/u/m/"}
    on = Config.load()
    off = Config.load(overrides={"retrieval": {"answer_type": False}})
    assert locate_replay.rescore(rec, off.retrieval)[0][1] == "r"
    out = locate_replay.rescore(rec, on.retrieval)
    assert out[0][1] == "u" and out[0][0] == locate_replay.rescore(rec, off.retrieval)[0][0]
    assert locate_replay.miss_kind(rec, "u") is None
    assert locate_replay.miss_kind(rec, "r") == "parent located, gold in a subtask"
    assert locate_replay.score([rec], on)["branch_acc@1"] == 1.0
    assert locate_replay.score([rec], off)["branch_acc@1"] == 0.0


def test_a_recorded_move_to_the_branch_recording_a_state_follows_its_own_setting() -> None:
    """A move made for a question asking where a task stands (retrieval.status_state)
    is replayed with that setting on, whatever retrieval.answer_type says, and not
    with it off."""
    rec = _record("r", "r/s")
    rec["cands"]["a"]["dense"] = 0.9  # stage 1 locates r
    rec["gold_branch"] = ["U"]
    rec["branches"]["u"] = ["U"]
    rec["answer_branch"] = {"from": "r", "to": "u", "path": "r/u/m/", "by": "status_state"}
    plain = {"answer_type": False}
    on = Config.load(overrides={"retrieval": {**plain, "status_state": True}})
    off = Config.load(overrides={"retrieval": {"answer_type": True, "status_state": False}})
    assert locate_replay.rescore(rec, on.retrieval)[0][1] == "u"
    assert locate_replay.rescore(rec, off.retrieval)[0][1] == "r"
