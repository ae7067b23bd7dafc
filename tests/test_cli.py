"""The command line, run in-process (sharing the loaded model) and once as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid_memory import MemoryTree, ids
from hybrid_memory.cli import build_parser, main
from hybrid_memory.ids import short_id


def run(capsys: pytest.CaptureFixture[str], folder: Path, *args: str, ns: str = "cli") -> tuple[int, str, str]:
    code = main(["--path", str(folder), "--namespace", ns, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_command_has_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    names = set(sub.choices)  # type: ignore[arg-type]
    assert {"add", "retrieve", "tree", "stats", "recover", "forget"} <= names
    helps = {a.dest: a.help for a in sub._choices_actions}  # type: ignore[attr-defined]
    for name, sp in sub.choices.items():  # type: ignore[union-attr]
        assert helps.get(name), f"{name} has no help line"
        assert sp.description, f"{name} has no description"


def test_add_tree_retrieve_stats_recover(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "m"
    code, out, _ = run(capsys, folder, "add", "Expense claim for Zhang San", "--type", "task")
    assert code == 0 and out.startswith("added ")
    task_id = out.split()[1]
    assert run(capsys, folder, "add", "Finance returned the claim: the invoice is unreadable", "-t", "event", "--importance", "0.9")[0] == 0
    assert run(capsys, folder, "add", "Prefers SMS notifications", "-t", "preference")[0] == 0
    assert run(capsys, folder, "add", "Migrate the order database", "-t", "task", "--root")[0] == 0
    assert run(capsys, folder, "add", "Window is Saturday 02:00", "-t", "decision")[0] == 0

    code, out, _ = run(capsys, folder, "tree")
    assert code == 0
    lines = out.splitlines()
    claim = next(i for i, line in enumerate(lines) if "Expense claim" in line)
    assert "├── " in lines[claim + 1] and "invoice is unreadable" in lines[claim + 1]
    assert "w=0." in lines[claim]
    # The second task is active (a new task becomes the active node).
    assert next(line for line in lines if "Migrate the order" in line).startswith("*")

    code, out, _ = run(capsys, folder, "retrieve", "why was the claim sent back?", "--explain")
    assert code == 0
    assert f"branch {task_id}" in out.splitlines()[1]
    assert "invoice is unreadable" in out and "score" in out

    code, out, _ = run(capsys, folder, "--json", "retrieve", "why was the claim sent back?")
    recall = json.loads(out)
    assert recall["branches"][0]["branch_id"] == task_id
    assert all(0 <= n["score"] <= 1 for n in recall["nodes"])

    code, out, _ = run(capsys, folder, "stats")
    assert code == 0 and "5 live, 0 archived" in out

    code, out, _ = run(capsys, folder, "focus", short_id(task_id))
    assert code == 0 and task_id in out
    code, out, _ = run(capsys, folder, "recover")
    assert code == 0 and f"active node                {task_id}" in out

    code, out, _ = run(capsys, folder, "forget", "--threshold", "1.0", "--dry-run")
    assert code == 0 and out.startswith("would forget")
    code, out, _ = run(capsys, folder, "stats")
    assert "5 live" in out  # dry run changed nothing


def test_short_ids_are_the_tails_and_a_node_is_named_by_a_unique_prefix_or_suffix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ids' clock held still: the memories are written in one millisecond, as a
    # batch is (and as every memory of a minute shares its first eight digits).
    frozen = time.time_ns()
    monkeypatch.setattr(ids, "_now_ns", lambda: frozen)
    folder = tmp_path / "m"
    made = []
    for content, kind in (("报销张三的差旅费", "task"), ("发票看不清，被财务退回", "event"), ("Prefers SMS", "preference")):
        code, out, _ = run(capsys, folder, "add", content, "-t", kind)
        assert code == 0
        made.append(out.split()[1])
    # The three ids share their leading digits (the time) ...
    assert len({i[:12] for i in made}) == 1
    # ... so the tree shows each one's last digits, which differ.
    code, out, _ = run(capsys, folder, "tree")
    assert code == 0 and all(f"{short_id(i)} [" in out for i in made)
    assert len({short_id(i) for i in made}) == 3
    for node_id in made:
        for ref in (short_id(node_id), node_id[-5:], node_id):
            code, out, _ = run(capsys, folder, "focus", ref)
            assert code == 0 and node_id in out, ref
    # A prefix every node shares names none of them: an error, and nothing changes.
    before = run(capsys, folder, "recover")[1]
    code, _, err = run(capsys, folder, "focus", made[0][:8])
    assert code == 3 and "not_found" in err
    assert run(capsys, folder, "recover")[1] == before


def test_errors_map_to_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "m"
    code, _, err = run(capsys, folder, "add", "   ", "-t", "event")
    assert code == 2 and "invalid_content" in err
    code, _, err = run(capsys, folder, "add", "x", "-t", "bogus")
    assert code == 2 and "invalid_type" in err
    code, _, err = run(capsys, folder, "add", "x", "-t", "event", "--parent", "ffffffffffffffff")
    assert code == 3 and "not_found" in err
    code, out, _ = run(capsys, folder, "add", "A task of tenant a", "-t", "task", ns="a")
    node_id = out.split()[1]
    code, _, err = run(capsys, folder, "focus", node_id, ns="b")
    assert code == 4 and "namespace_mismatch" in err
    code, _, err = run(capsys, folder, "add", "x", "-t", "event", "--importance", "nan")
    assert code == 2 and "invalid_weight" in err
    with MemoryTree.open(folder, namespace="b") as mem:
        assert mem.admin.stats().live == 0  # nothing written by the failed calls


def test_cli_as_a_process(tmp_path: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    folder = tmp_path / "m"
    add = subprocess.run(
        [sys.executable, "-m", "hybrid_memory", "--path", str(folder), "add", "用户偏好：结果通知使用短信", "--type", "preference"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert add.returncode == 0, add.stderr
    stats = subprocess.run(
        [sys.executable, "-m", "hybrid_memory", "--path", str(folder), "--json", "stats"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["by_type"] == {"preference": 1}


def test_verify_repair_reindex(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "m"
    assert run(capsys, folder, "add", "Support ticket: printer offline", "-t", "task")[0] == 0
    assert run(capsys, folder, "add", "Technician booked for Monday", "-t", "event")[0] == 0
    code, out, _ = run(capsys, folder, "verify")
    assert code == 0 and "matches" in out
    with MemoryTree.open(folder, namespace="cli") as mem:
        lost = [n.id for n in mem.nodes()][:1]
        mem.index.delete("cli", lost)
    code, out, _ = run(capsys, folder, "verify")
    assert code == 1 and "missing vectors      1" in out
    code, out, _ = run(capsys, folder, "repair")
    assert code == 0 and "repaired" in out
    code, out, _ = run(capsys, folder, "reindex")
    assert code == 0 and "reindexed 2 live nodes" in out
    assert run(capsys, folder, "verify")[0] == 0
