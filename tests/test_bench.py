"""The benchmark suite (eval/bench.py) at a tiny size: every figure is there and
sane, the files are written, bad options are refused. It measures nothing here:
figures come from `make bench`, never from a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import bench
from hybrid_memory.cli import main as cli_main
from hybrid_memory.config import Config


def test_one_size_reports_every_figure(tmp_path: Path) -> None:
    out = bench.bench_size(160, lang="zh", seed=2, config=Config.load(), workdir=tmp_path, queries=6, progress=False,
                           rss_retrievals=30, cold_runs=1)
    assert out["nodes"] == 160 and 1 <= out["queries"] <= 6
    assert out["embedding"]["batch_texts_per_s"] > 0 and out["add_many_nodes_per_s"] > 0
    # One embedding call beside each single add: the floor the add is compared with.
    beside = out["embedding"]["beside_add_ms"]
    assert 0 < beside["p50"] <= beside["p95"]
    assert out["add_over_embed_p50"] == pytest.approx(out["add_ms"]["p50"] / beside["p50"], rel=1e-2)
    for key in ("add_ms", "chroma_upsert_1_ms", "retrieve_ms", "retrieve_no_embedding_ms", "flat_vector_ms"):
        lat = out[key]
        assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"], key
    for name in ("hybrid", "flat_vector"):
        assert 0.0 <= out["recall_all@10"][name] <= 1.0
    # Dedup may merge near-duplicates, so the live tree is at most the trace.
    assert 0 < out["live_nodes"] <= 160
    assert 0 < out["forget_would_archive"] <= out["live_nodes"]
    assert out["open_recover_ms"] > 0 and out["forget_dry_run_ms"] > 0
    assert out["disk_bytes_per_node"] > 0 and out["rss_mb_after_retrievals"] > 0
    own = out["rss_mb_own_process"]  # a process of its own that opened the memory and retrieved
    assert set(own) == {"after_open", "after_retrievals"} and 0 < own["after_open"] <= own["after_retrievals"] * 1.05
    assert out["export_ms"] > 0 and out["import_ms"] > 0
    assert out["imported_live_nodes"] == out["live_nodes"]
    assert set(out["cold_start_ms"]) == {"stats", "recover", "retrieve"}
    assert all(ms > 0 for ms in out["cold_start_ms"].values())


def test_a_relational_size_reports_every_figure(tmp_path: Path) -> None:
    out = bench.bench_relational(400, lang="en", seed=1, config=Config.load(), workdir=tmp_path, progress=False,
                                 cold_runs=1)
    assert out["nodes"] == 400 and 0 < out["live_nodes"] <= 400
    assert out["add_many_sql_nodes_per_s"] > 0 and out["open_recover_ms"] > 0
    assert out["forget_dry_run_ms"] > 0 and out["forget_ms"] > 0
    live = out["live_nodes"]
    assert out["forget_routine_ms"] > 0 and out["forget_routine_archived"] == live // 100
    # The two real passes take what the dry run planned: half of the live tree.
    assert out["forget_routine_archived"] + out["forget_archived"] == out["forget_would_archive"] == live - live // 2
    assert set(out["cold_start_ms"]) == {"stats", "recover"} and all(ms > 0 for ms in out["cold_start_ms"].values())
    assert out["disk_bytes_per_node"] > 0


def test_the_safety_figures_cover_every_setup(tmp_path: Path) -> None:
    out = bench.bench_safety(150, lang="zh", seed=3, config=Config.load(), workdir=tmp_path, queries=4, progress=False)
    assert out["nodes"] == 150 and list(out["setups"]) == [name for name, _, _ in bench.SAFETY_SETUPS]
    for r in out["setups"].values():
        assert r["add_many_nodes_per_s"] > 0 and r["export_ms"] > 0
        assert 0 < r["retrieve_no_embedding_ms"]["p50"] <= r["retrieve_no_embedding_ms"]["p95"]
    # The sealed setups really sealed: their exports hold no plain line.
    sealed = sorted(tmp_path.glob("safety-150-encrypted*.jsonl"))
    assert len(sealed) == 2
    for f in sealed:
        assert all('"sealed"' in line for line in f.read_text(encoding="utf-8").splitlines()[1:])


def test_filler_vectors_are_unit_length_and_stable() -> None:
    filler = bench.FillerEmbedder("some-model", 16)
    a = filler.embed(["报销单已提交", "the build is green", "报销单已提交"])
    assert a.shape == (3, 16) and a.dtype.name == "float32"
    assert abs(float((a * a).sum(axis=1).max()) - 1.0) < 1e-5
    assert (a[0] == a[2]).all() and not (a[0] == a[1]).all()
    assert (filler.embed(["the build is green"])[0] == a[1]).all()


def test_the_command_writes_results_and_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["bench", "--sizes", "120", "--relational-sizes", "150", "--safety-size", "0", "--queries", "3",
                     "--rss-retrievals", "10", "--cold-runs", "1", "--quiet", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert list(results["sizes"]) == ["120"] and list(results["relational"]) == ["150"]
    table = (tmp_path / "table.md").read_text(encoding="utf-8")
    lines = table.splitlines()
    assert lines[2].startswith("| 120 |")
    assert any(line.startswith("| 150 |") for line in lines[3:])
    assert table in capsys.readouterr().out


@pytest.mark.parametrize("sizes", [["--sizes", "ten"], ["--sizes", "10"], ["--sizes", ""],
                                   ["--sizes", "100", "--relational-sizes", "1e6"],
                                   ["--sizes", "100", "--relational-sizes", "20"],
                                   ["--sizes", "100", "--cold-runs", "0"], ["--sizes", "100", "--rss-retrievals", "-1"]])
def test_bad_sizes_are_refused(sizes: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main([*sizes, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert not (tmp_path / "out").exists()



def test_plots_of_latency_against_size(tmp_path: Path) -> None:
    def size(n: int, ms: float) -> dict[str, object]:
        lat = {"p50": ms, "p95": 2 * ms, "p99": 3 * ms}
        return {"nodes": n, "retrieve_ms": lat, "retrieve_no_embedding_ms": lat, "flat_vector_ms": lat,
                "add_ms": lat, "embedding": {"single_ms": lat}}

    assert bench.plot({"sizes": {"1000": size(1000, 5.0)}}, tmp_path) == []  # one size: no curve
    files = bench.plot({"sizes": {"1000": size(1000, 5.0), "10000": size(10000, 9.0)}}, tmp_path)
    assert sorted(f.name for f in files) == ["bench_retrieve_latency.png", "bench_write_latency.png"]
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000
