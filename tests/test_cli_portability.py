"""The export, import, restore and log commands, run in-process (sharing the loaded model)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from hybrid_memory import MemoryTree, Status
from hybrid_memory.cli import build_parser, main
from hybrid_memory.ids import short_id


def run(capsys: pytest.CaptureFixture[str], folder: Path, *args: str, ns: str = "cli") -> tuple[int, str, str]:
    code = main(["--path", str(folder), "--namespace", ns, *args])
    out, err = capsys.readouterr()
    return code, out, err


def added_id(out: str) -> str:
    assert out.startswith("added "), out
    return out.split()[1]


def test_the_new_commands_have_help_and_a_description() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    helps = {a.dest: a.help for a in sub._choices_actions}  # type: ignore[attr-defined]
    for name in ("export", "import", "restore", "log"):
        assert name in sub.choices, name  # type: ignore[operator]
        assert helps.get(name), f"{name} has no help line"
        sp = sub.choices[name]  # type: ignore[index]
        assert sp.description, f"{name} has no description"
        for action in sp._actions:
            if action.dest != "help":
                assert action.help, f"{name} {action.dest} has no help"


def test_export_import_log_restore(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "m"
    task = added_id(run(capsys, folder, "add", "报销柏林会议的差旅费用", "--type", "task")[1])
    ev = added_id(run(capsys, folder, "add", "Finance returned the claim: the invoice is unreadable", "-t", "event")[1])
    run(capsys, folder, "add", "Prefers SMS notifications", "-t", "preference", "--meta", '{"来源": "电话"}')

    # log: recent operations, human-readable.
    code, out, _ = run(capsys, folder, "log")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("#1 ") and " add " in lines[0] and short_id(task) in lines[0]
    assert "[task] 报销柏林会议的差旅费用 (now active)" in lines[0]
    assert "[event] Finance returned the claim" in lines[1]
    assert len(run(capsys, folder, "log", "-n", "2")[1].splitlines()) == 2
    code, out, _ = run(capsys, folder, "--json", "log", "-n", "1")
    entry = json.loads(out)[0]
    assert entry["op"] == "add" and entry["payload"]["meta"] == '{"来源": "电话"}' and entry["summary"]

    # export, then import into a fresh folder.
    snap = tmp_path / "snap.jsonl"
    code, out, _ = run(capsys, folder, "export", str(snap), "--include-log")
    assert code == 0 and out.startswith("exported 3 nodes") and "3 log entries" in out
    other = tmp_path / "other"
    code, out, _ = run(capsys, other, "import", str(snap))
    assert code == 0 and out.startswith("imported 3 nodes")
    code, tree_a, _ = run(capsys, folder, "tree")
    code, tree_b, _ = run(capsys, other, "tree")
    assert tree_a == tree_b
    # A second import refuses: the memory is not empty.
    code, _, err = run(capsys, other, "import", str(snap))
    assert code == 5 and "not empty" in err

    # A bad line: refused with its number, nothing written.
    lines = snap.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace('"importance": ', '"importance": "very", "x": ', 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run(capsys, tmp_path / "third", "import", str(bad))
    assert code == 2 and "line 3:" in err and "importance" in err
    code, out, _ = run(capsys, tmp_path / "third", "stats")
    assert "0 live" in out

    # Bad writes, then time travel back to #3 (the three adds).
    run(capsys, folder, "add", "Invented memory", "-t", "fact")
    with MemoryTree.open(folder, namespace="cli") as mem:
        mem.update(ev, content="The claim was approved")
        mem.archive(task)
    code, out, _ = run(capsys, folder, "rewind", "--seq", "3")
    assert code == 0 and out.startswith("restored the memory to log #3")
    undo = out.splitlines()[-1]
    assert undo.startswith("undo with: rewind --seq ")
    code, out, _ = run(capsys, folder, "tree")
    assert out == tree_a
    code, out, _ = run(capsys, folder, "log", "-n", "1")
    assert "time_travel" in out and "back to #3" in out

    # Undo it (restore --seq: the older spelling of rewind).
    code, out, _ = run(capsys, folder, "restore", "--seq", undo.split()[-1])
    assert code == 0
    with MemoryTree.open(folder, namespace="cli") as mem:
        assert mem.get(task).status is Status.ARCHIVED
        assert mem.get(ev).content == "The claim was approved"

    # unarchive NODE (restore NODE does the same).
    code, out, _ = run(capsys, folder, "unarchive", short_id(task))
    assert code == 0 and out.startswith(f"restored {task}")
    with MemoryTree.open(folder, namespace="cli") as mem:
        assert mem.get(task).live

    # --as-of: seconds or an ISO date-time; far in the past is the empty memory.
    code, out, _ = run(capsys, folder, "restore", "--as-of", datetime(2000, 1, 1).isoformat())
    assert code == 0 and out.startswith("restored the memory to log #0")
    assert "(empty)" in run(capsys, folder, "tree")[1]
    code, out, _ = run(capsys, folder, "--json", "restore", "--as-of", "4102444800")  # 2100: now
    assert code == 0 and json.loads(out)["seq"] == json.loads(out)["previous_seq"]


def test_restore_argument_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "m"
    task = added_id(run(capsys, folder, "add", "Plan the offsite", "--type", "task")[1])
    code, _, err = run(capsys, folder, "restore")
    assert code == 2 and "exactly one" in err
    code, _, err = run(capsys, folder, "restore", task, "--seq", "1")
    assert code == 2 and "not several" in err
    code, _, err = run(capsys, folder, "restore", "--seq", "99")
    assert code == 2 and "past the end" in err
    code, _, err = run(capsys, folder, "restore", "--as-of", "yesterday")
    assert code == 2 and "ISO date-time" in err
    code, _, err = run(capsys, folder, "rewind", "--as-of", "yesterday")
    assert code == 2 and "ISO date-time" in err
    for args in (["rewind"], ["unarchive"], ["rewind", "--seq", "1", "--as-of", "0"]):
        with pytest.raises(SystemExit):
            run(capsys, folder, *args)
    with pytest.raises(SystemExit):
        run(capsys, folder, "restore", "--seq", "1", "--as-of", "5")
    capsys.readouterr()
    code, _, err = run(capsys, folder, "import", str(tmp_path / "absent.jsonl"))
    assert code == 2 and "no such file" in err
    code, out, _ = run(capsys, tmp_path / "empty", "log")
    assert code == 0 and out.strip() == "(no operations)"
