"""Every source at once (eval.suite): the table, the comparison with an earlier run,
and one real run over a small slice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import suite
from eval.datasets import DATA_ENV, default_data_dir


def figures(recall: float) -> dict[str, dict[str, float | None]]:
    return {"hybrid": {"recall_all@10": recall, "ndcg@10": 0.5, "branch_acc@1": None, "tokens_mean": 300.0}}


def test_compare_names_only_the_sources_that_dropped_past_the_tolerance() -> None:
    before = {"locomo": figures(0.650), "madial": figures(0.520), "realmem": figures(0.300)}
    now = {"locomo": figures(0.641), "madial": figures(0.508), "realmem": figures(0.350), "memdaily": figures(0.2)}
    text, dropped = suite.compare(now, before, 0.01)
    assert dropped == ["madial"]
    assert "| locomo | 0.650 | 0.641 | -0.009 |" in text
    assert "| madial | 0.520 | 0.508 | -0.012 (dropped) |" in text
    assert "| realmem | 0.300 | 0.350 | +0.050 |" in text
    assert "| memdaily | - | 0.200 | - |" in text  # nothing to compare with


def test_table_has_a_row_per_source_and_system() -> None:
    text = suite.table({"locomo": {**figures(0.654), "bm25": figures(0.541)["hybrid"]}})
    assert text.splitlines()[2:] == ["| locomo | hybrid | 0.654 | 0.500 | - | 300 |",
                                     "| locomo | bm25 | 0.541 | 0.500 | - | 300 |"]


def test_table_shows_placement_when_hybrid_auto_ran() -> None:
    auto = {**figures(0.7)["hybrid"], "placement": 0.963}
    text = suite.table({"gen-en": {**figures(0.7), "hybrid_auto": auto}})
    assert text.splitlines()[0].endswith("| placement |")
    assert text.splitlines()[2:] == ["| gen-en | hybrid | 0.700 | 0.500 | - | 300 | - |",
                                     "| gen-en | hybrid_auto | 0.700 | 0.500 | - | 300 | 0.963 |"]


def test_unknown_source_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert suite.main(["--sources", "locomo,nope", "--out", str(tmp_path)]) == 2
    assert "unknown source(s) ['nope']" in capsys.readouterr().err
    assert not (tmp_path / "suite.json").exists()


@pytest.mark.skipif(not default_data_dir().is_dir(), reason=f"no real data folder (set {DATA_ENV})")
def test_a_small_run_writes_its_figures_and_compares_with_itself(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--sources", "realmem,gen-zh", "--limit", "1", "--generate", "300", "--cache", str(tmp_path / "cache")]
    assert suite.main([*args, "--out", str(tmp_path / "a")]) == 0
    doc = json.loads((tmp_path / "a" / "suite.json").read_text(encoding="utf-8"))
    assert list(doc["sources"]) == ["realmem", "gen-zh"]
    for name in ("realmem", "gen-zh"):
        hybrid = doc["sources"][name]["hybrid"]
        assert 0.0 < hybrid["recall_all@10"] <= 1.0 and hybrid["tokens_mean"] > 0
        assert (tmp_path / "a" / name / "results.json").is_file()
    capsys.readouterr()
    # the same configuration again: every source within the tolerance of itself
    assert suite.main([*args, "--out", str(tmp_path / "b"), "--baseline", str(tmp_path / "a" / "suite.json")]) == 0
    printed = capsys.readouterr().out
    assert "| realmem |" in printed and "+0.000 |" in printed and "dropped" not in printed


# -- fitting one setting (eval.fit) ---------------------------------------------------------


def test_fit_chooses_the_best_mean_that_drops_no_source() -> None:
    from eval import fit

    by_value = {
        "0": {"a": 0.50, "b": 0.60, "c": 0.30},
        "0.1": {"a": 0.52, "b": 0.60, "c": 0.31},  # small gains everywhere
        "0.4": {"a": 0.70, "b": 0.55, "c": 0.40},  # best mean, but b drops by 0.05
    }
    assert fit.choose(by_value, ["a", "b", "c"], 0.01) == "0.1"
    assert fit.choose(by_value, ["a", "c"], 0.01) == "0.4"  # without b nothing drops
    assert fit.choose({"0": {"a": 0.5}, "1": {"a": 0.4}}, ["a"], 0.01) == "0"  # the reference always qualifies
    held = {h: (v, before, after) for h, v, before, after in fit.leave_one_out(by_value, 0.01)}
    # b held out: chosen on a and c alone (0.4), under which b itself drops: the fit shows it
    assert held["b"] == ("0.4", 0.60, 0.55)
    assert held["a"] == ("0.1", 0.50, 0.52) and held["c"] == ("0.1", 0.30, 0.31)
    text = fit.report("retrieval.x", by_value, 0.01)
    assert "| 0.1 (chosen) | 0.520 | 0.600 | 0.310 | 0.477 |" in text
    assert "| b | 0.4 | 0.600 | 0.550 | -0.050 |" in text
