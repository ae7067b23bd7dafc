"""The evaluation harness end to end: real model, SQLite, Chroma, every system.

The contract other tools rely on: ``hybrid-memory eval --trace FILE --k 10 --out DIR``
writes ``DIR/results.json`` with ``systems.NAME.recall_all@10`` etc. for ``hybrid``
and the baselines, and ``queries``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from eval import forget_replay
from eval.datasets import default_data_dir, load
from eval.generate import generate
from hybrid_memory.cli import main as cli_main
from hybrid_memory.config import Config
from hybrid_memory.evaluation import harness
from hybrid_memory.evaluation.report import markdown
from hybrid_memory.evaluation.systems import CachedEmbedder, HybridSystem, RecoveryError
from hybrid_memory.evaluation.trace import TraceError, write_trace

CONTRACT_KEYS = ("recall_all@10", "recall_any@10", "ndcg@10", "branch_acc@1", "tokens_mean",
                 "latency_ms_p50", "latency_ms_p95", "compression")
SYSTEMS = ("hybrid", "flat_vector", "bm25", "recent", "full_history", "article_minimal")

EXPENSE = [
    {"op": "add", "id": "t1", "parent": None, "type": "task", "content": "Expense claim for Zhang San's Shanghai trip", "ts": 1719800000},
    {"op": "add", "id": "e1", "parent": "t1", "type": "event", "content": "Finance returned the claim: the hotel invoice is unreadable", "ts": 1719800100},
    {"op": "add", "id": "p1", "type": "preference", "content": "Zhang San wants the refund paid to his ICBC card", "ts": 1719800200},
    {"op": "add", "id": "t2", "parent": None, "type": "task", "content": "Fix the login timeout bug in the mobile app", "ts": 1719800300},
    {"op": "add", "id": "e2", "type": "event", "content": "The session token expires after 5 minutes instead of 30", "ts": 1719800400},
    {"op": "add", "id": "d2", "type": "decision", "content": "Raise the token lifetime to 30 minutes and add a refresh call", "ts": 1719800500},
    {"op": "focus", "id": "t1"},
    {"op": "restart"},
    {"op": "query", "id": "q1", "text": "why was the expense claim sent back?", "gold": ["e1"], "task": "t1", "ts": 1719900000, "category": "claims"},
    {"op": "query", "id": "q2", "text": "what did we decide about the token lifetime?", "gold": ["d2"], "task": ["t2"], "ts": 1719900100, "category": "bugs"},
]


def test_prepare_makes_implicit_parents_and_times_explicit() -> None:
    p = harness.prepare(EXPENSE)
    by_id = {e.get("id"): e for e in p.events if e["op"] == "add"}
    assert by_id["p1"]["parent"] == "t1"  # no parent given: the active task
    assert by_id["e2"]["parent"] == "t2"  # a new task became the active node
    restart = next(e for e in p.events if e["op"] == "restart")
    assert restart["expected_active"] == "t1"  # the focus before the restart
    assert restart["ts"] == 1719800500  # no ts: the previous one
    assert [q.id for q in p.queries] == ["q1", "q2"]
    assert p.queries[1].task == frozenset({"t2"}) and p.queries[0].after_restart
    assert p.nodes == 6 and p.restarts == 1 and p.namespaces == 1


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"op": "delete", "id": "x"}, "op"),
        ({"op": "add", "id": "t1", "parent": None, "content": "again"}, "added before"),
        ({"op": "add", "id": "z", "parent": "nope", "content": "orphan"}, "has not been added"),
        ({"op": "query", "id": "q9", "text": "?", "gold": ["later"]}, "gold not yet added"),
        ({"op": "query", "id": "q9", "text": "?", "gold": []}, "no gold"),
        ({"op": "focus", "id": "ghost"}, "has not been added"),
        ({"op": "add", "id": "y", "parent": None, "content": "x", "ts": "noon"}, "ts must be a number"),
    ],
)
def test_prepare_names_the_bad_event(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        harness.prepare([EXPENSE[0], bad])


def test_a_trace_without_questions_is_refused(embedder: Any) -> None:
    with pytest.raises(TraceError, match="no query"):
        harness.evaluate(EXPENSE[:6], harness.Options(progress=False), embedder=embedder)


def test_cli_contract_on_a_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(EXPENSE, trace)
    out = tmp_path / "out"
    assert cli_main(["eval", "--trace", str(trace), "--k", "10", "--out", str(out), "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["queries"] == 2
    for name in SYSTEMS:
        for key in CONTRACT_KEYS:
            assert key in results["systems"][name], (name, key)
    # Both questions are easy; the token ceiling holds everything.
    assert results["systems"]["hybrid"]["recall_all@10"] == 1.0
    assert results["systems"]["full_history"]["tokens_mean"] > results["systems"]["hybrid"]["tokens_mean"]
    assert results["recovery"]["recovery_acc"] == 1.0
    assert (out / "report.md").read_text(encoding="utf-8").startswith("# hybrid_memory evaluation")
    assert (out / "recall_at_k.png").stat().st_size > 1000
    assert (out / "tokens_vs_recall.png").stat().st_size > 1000


def test_cli_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(EXPENSE, trace)
    assert cli_main(["eval", "--trace", str(trace), "--k", "0", "--out", str(tmp_path / "o")]) == 2
    assert cli_main(["eval", "--trace", str(trace), "--systems", "hybrid,magic", "--out", str(tmp_path / "o")]) == 2
    assert "magic" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[retrieval]\nfamily_rarity = -1\n", encoding="utf-8")
    assert cli_main(["eval", "--trace", str(trace), "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "family_rarity" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_generated_trace_hybrid_beats_flat_vector(lang: str, tmp_path: Path, embedder: Any,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    events = generate(600, lang=lang, seed=3)
    kept = tmp_path / "memories"
    results = harness.evaluate(events, harness.Options(progress=False, keep=kept), embedder=embedder,
                               source=f"generated {lang}")
    systems = results["systems"]
    assert set(SYSTEMS) <= set(systems)
    hybrid, flat = systems["hybrid"], systems["flat_vector"]
    assert results["queries"] >= 8
    assert hybrid["recall_all@10"] > flat["recall_all@10"]
    assert hybrid["branch_acc@1"] >= flat["branch_acc@1"]
    assert systems["full_history"]["recall_all@10"] == 1.0
    assert results["recovery"]["recovery_acc"] == 1.0
    # Answers after a restart equal an uninterrupted run's (a second memory with other
    # random ids: ties are never broken by id).
    assert results["recovery"]["answers_equal"] == 1.0
    forgetting = results["forgetting"]
    assert 0.0 <= forgetting["wrongly_forgotten"] <= 1.0
    # Which gold memories were forgotten is listed (trace ids), one per count.
    gold = {g for e in events if e["op"] == "query" for g in e["gold"]}
    assert len(forgetting["forgotten_gold"]) == forgetting["gold_forgotten"] == sum(forgetting["forgotten_by_type"].values())
    assert set(forgetting["forgotten_gold"]) <= gold
    curve = hybrid["recall_all@k"]
    assert len(curve) == 20 and curve == sorted(curve)  # recall@k never falls as k grows

    # The forgetting run was kept; replayed offline under the same configuration, its
    # op log gives the same decisions: the same memories archived, node for node, and
    # the same gold memories lost.
    assert {p.name for p in kept.iterdir()} >= {"hybrid", "control", "forget"}
    db = sqlite3.connect(kept / "forget" / "memory.db")
    (namespace,) = db.execute("SELECT DISTINCT namespace FROM hm_nodes").fetchone()
    archived = {i for (i,) in db.execute("SELECT id FROM hm_nodes WHERE status = 'archived'")}
    db.close()
    assert archived  # the cap bit
    cfg = Config.load()
    replayed = forget_replay.replay(events, forget_replay.read_log(kept / "forget", namespace),
                                    forget_replay.library_policy(cfg),
                                    cap=forgetting["cap_live_nodes"], threshold=cfg.forgetting.threshold,
                                    last_in_task=cfg.forgetting.last_in_task)
    assert replayed.archived == archived
    assert sorted(replayed.lost) == sorted(forgetting["forgotten_gold"])
    assert replayed.checked == forgetting["gold_checked"]
    trace = tmp_path / "trace.jsonl"
    write_trace(events, trace)
    assert forget_replay.main(["--trace", str(trace), "--memory", str(kept / "forget"), "--namespace", namespace]) == 0
    assert f"{len(replayed.lost)} of {replayed.checked} gold memories" in capsys.readouterr().out
    assert forget_replay.main(["--trace", str(trace), "--memory", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not empty"):
        harness.evaluate(events, harness.Options(progress=False, keep=kept), embedder=embedder)


def test_locomo_slice(tmp_path: Path, embedder: Any) -> None:
    data = default_data_dir()
    if not (data / "locomo").is_dir():
        pytest.skip(f"LoCoMo is not at {data} (set {'HYBRID_MEMORY_EVAL_DATA'})")
    events = load("locomo", data, limit=1)
    results = harness.evaluate(events, harness.Options(progress=False, forget_cap=None, control=False),
                               embedder=embedder, source="locomo slice")
    systems = results["systems"]
    assert results["queries"] > 50
    assert set(results["systems"]["hybrid"]["by_category"]) >= {"1-multi-hop", "2-temporal", "4-single-hop"}
    # By how many gold memories a question has: each group's figure is the mean of its questions'.
    by_gold = results["systems"]["hybrid"]["by_gold"]
    assert list(by_gold)[:2] == ["1", "2"] and sum(g["n"] for g in by_gold.values()) == results["queries"]
    for group, figures in by_gold.items():
        own = [q["systems"]["hybrid"]["recall_all"] for q in results["per_question"]
               if harness.gold_group(len(q["gold"])) == group]
        assert figures["n"] == len(own) and figures["recall_all@10"] == pytest.approx(sum(own) / len(own))
    assert "## recall_all@10 by how many gold memories a question has" in markdown(results)
    # Not a target, a sanity floor: meaning-based retrieval finds real evidence.
    assert systems["hybrid"]["recall_any@10"] > systems["recent"]["recall_any@10"]
    assert systems["hybrid"]["recall_all@10"] >= systems["flat_vector"]["recall_all@10"]
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_embedding_cache_round_trip_skips_the_model(tmp_path: Path, embedder: Any) -> None:
    """Saved vectors come back for the same texts (long ones too) and the model is
    not asked again; a text it has not seen is still embedded."""
    calls: list[int] = []

    class Counting:
        name, dim = embedder.name, embedder.dim

        def embed(self, texts: Any) -> Any:
            calls.append(len(texts))
            return embedder.embed(texts)

        def coverage(self, text: str) -> float:
            return float(embedder.coverage(text))

    texts = ["the invoice was paid", "发票已经付款了", "long " * 5000]
    first = CachedEmbedder(Counting())  # type: ignore[arg-type]
    first.warm(texts)
    path = tmp_path / "cache" / "model.npz"
    first.save(path)
    assert path.stat().st_size < 100_000  # keyed by digest: the long text costs nothing
    second = CachedEmbedder(Counting())  # type: ignore[arg-type]
    assert second.load(path) == 3
    calls.clear()
    got = second.embed(texts)
    assert calls == []
    assert np.allclose(got, first.embed(texts))
    second.embed(["a text never seen"])
    assert calls == [1]


def test_a_cache_file_keeps_what_a_parallel_run_saved(tmp_path: Path, embedder: Any) -> None:
    """Two runs that loaded the same (empty) file and each saved their own texts: the
    file holds both, not only the last run's."""
    path = tmp_path / "model.npz"
    one, two = CachedEmbedder(embedder), CachedEmbedder(embedder)
    one.load(path), two.load(path)
    one.warm(["the invoice was paid"])
    two.warm(["发票已经付款了"])
    one.save(path)
    two.save(path)
    assert CachedEmbedder(embedder).load(path) == 2


def test_a_combination_is_cached_model_by_model(tmp_path: Path, embedder: Any) -> None:
    """evaluate() keeps a combined embedder's vectors per model as well, so another
    combination of the same models asks them nothing again."""
    from hybrid_memory.embed.combined import CombinedEmbedder

    calls: list[str] = []

    class Named:
        def __init__(self, name: str) -> None:
            self.name, self.dim = name, embedder.dim

        def embed(self, texts: Any) -> Any:
            calls.extend(texts)
            return embedder.embed(texts)

        def coverage(self, text: str) -> float:
            return 1.0

    trace = [e for e in EXPENSE if e["op"] != "restart"]
    options = harness.Options(systems=("flat_vector",), progress=False, forget_cap=None, control=False,
                              cache=tmp_path)
    harness.evaluate(trace, options, embedder=CombinedEmbedder(Named("a"), Named("b")))
    assert {p.name for p in tmp_path.iterdir()} == {"a.npz", "b.npz", "a_b.npz"}
    calls.clear()
    harness.evaluate(trace, options, embedder=CombinedEmbedder(Named("b"), Named("a")))
    assert calls == []


def test_finish_events_summarize_and_a_summary_shows_what_it_holds(embedder: Any) -> None:
    """hybrid_finished finishes a task at a ``finish`` event and forgets its details; a
    question about a detail the summary holds whole counts it found through the summary,
    and the plain hybrid system ignores the event."""
    from hybrid_memory.evaluation.trace import finish_sessions

    trace = finish_sessions([e for e in EXPENSE if e["op"] != "restart"])
    assert [e["id"] for e in trace if e["op"] == "finish"] == ["t1"]  # t2 began after it
    results = harness.evaluate(trace, harness.Options(systems=("hybrid", "hybrid_finished"), progress=False,
                                                      forget_cap=None, control=False), embedder=embedder)
    finished = results["finished"]
    assert (finished["tasks"], finished["covered"], finished["forgotten"]) == (1, 2, 2)
    assert 0 < finished["summary_tokens"] <= finished["covered_tokens"]
    for system in ("hybrid", "hybrid_finished"):
        assert results["systems"][system]["recall_all@10"] == 1.0, system


def test_a_finish_of_an_unknown_task_is_refused() -> None:
    with pytest.raises(TraceError, match="finish"):
        harness.prepare(EXPENSE[:2] + [{"op": "finish", "id": "t9"}])


def test_the_ingest_command_gives_a_locomo_conversation_the_loaders_figures(tmp_path: Path) -> None:
    from eval import ingest_check

    data = default_data_dir()
    if not (data / "locomo").is_dir():
        pytest.skip(f"LoCoMo is not at {data} (set {'HYBRID_MEMORY_EVAL_DATA'})")
    assert ingest_check.main(["--dataset", "locomo", "--limit", "1", "--data-dir", str(data),
                              "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]) == 0
    result = json.loads((tmp_path / "out" / "ingest_check.json").read_text())
    assert result["ingested"]["memories_differing"] == 0 and result["ingested"]["questions"] > 50
    for figure in ("recall_all@10", "tokens_mean"):
        assert result["ingested"][figure] == pytest.approx(result["harness"][figure])


def test_a_recovery_that_fails_in_its_own_process_says_why(tmp_path: Path, embedder: Any) -> None:
    """A restart recovers in a fresh process; when that process fails, the error
    carries what it wrote to stderr (here: a configuration file that is not there),
    not only its exit status."""
    missing = tmp_path / "missing.toml"
    system = HybridSystem("hybrid", tmp_path / "h", CachedEmbedder(embedder), lambda: 1.0e9,
                          recover_args=["--config", str(missing)])
    system.start("default")
    try:
        system.add([{"_key": "t", "content": "Move the deploy to Thursday", "type": "task", "parent": None}])
        with pytest.raises(RecoveryError, match=r"recover exited 6 .*configuration file not found: .*missing\.toml"):
            system.restart()
    finally:
        system.close()
    # Without the bad option the same memory recovers in its own process.
    ok = HybridSystem("hybrid", tmp_path / "h", CachedEmbedder(embedder), lambda: 1.0e9)
    ok.start("other")
    try:
        ok.add([{"_key": "t", "content": "把部署改到周四", "type": "task", "parent": None}])
        ok.restart()
        assert ok.mem is not None
    finally:
        ok.close()


def test_questions_are_grouped_by_how_many_gold_memories_they_have() -> None:
    assert [harness.gold_group(n) for n in (1, 2, 3, 4, 5, 20)] == ["1", "2", "3", "4+", "4+", "4+"]
