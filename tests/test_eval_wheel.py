"""``hybrid-memory eval --trace FILE`` from a built wheel, away from the source tree.

The project is built into a wheel and installed into a new virtualenv, outside the
checkout; the virtualenv borrows only the already installed dependencies (a path
file naming the test's own site-packages, which adds that folder without running
its editable-install hooks), so the package it imports is the wheel's. The command
then runs in an empty folder, where no ``eval/`` folder can help it."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TRACE = [
    {"op": "add", "id": "t1", "parent": None, "type": "task", "content": "Expense claim for Zhang San", "ts": 1.0},
    {"op": "add", "id": "e1", "parent": "t1", "type": "event",
     "content": "Finance returned the claim: the invoice is unreadable", "ts": 2.0},
    {"op": "add", "id": "t2", "parent": None, "type": "task", "content": "服务器迁移到新机房", "ts": 3.0},
    {"op": "add", "id": "d1", "parent": "t2", "type": "decision", "content": "迁移窗口定在周六凌晨两点", "ts": 4.0},
    {"op": "query", "id": "q1", "text": "Why was the claim sent back?", "gold": ["e1"], "task": ["t1"], "ts": 5.0},
    {"op": "query", "id": "q2", "text": "迁移什么时候做？", "gold": ["d1"], "task": ["t2"], "ts": 6.0},
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a new virtualenv holding the project's wheel."""
    base = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    if built.returncode != 0 and "hatchling" in built.stderr:
        pytest.skip(f"the build backend cannot be installed here: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((base / "dist").glob("hybrid_memory-*.whl"))
    env = base / "env"
    venv.create(env, with_pip=False)
    bin_dir = env / ("Scripts" if sys.platform == "win32" else "bin")
    site = Path(subprocess.run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--no-deps",
                           "--no-compile", "-q", str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return bin_dir


def test_the_package_comes_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run([str(installed / "python"), "-c", "import hybrid_memory.evaluation, sys; "
                            "print(hybrid_memory.evaluation.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert Path(where.strip()).is_relative_to(installed.parent) and not Path(where.strip()).is_relative_to(ROOT)


def test_eval_runs_a_trace_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in TRACE), encoding="utf-8")
    out = tmp_path / "out"
    done = subprocess.run([str(installed / "hybrid-memory"), "eval", "--trace", str(trace), "--k", "10",
                           "--systems", "hybrid,bm25", "--forget-cap", "0", "--no-control", "--no-cache",
                           "--no-plots", "--quiet", "--out", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "PATH": str(installed)})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results["systems"]) == {"hybrid", "bm25"}
    assert results["systems"]["hybrid"]["recall_all@10"] == 1.0  # two tasks, one memory each: both found
    assert (out / "report.md").is_file() and "hybrid" in done.stdout


def test_eval_without_a_trace_says_what_it_needs(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(installed / "hybrid-memory"), "eval", "--generate", "100"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--trace" in done.stderr
