"""`make demo` end to end: a writer process killed with SIGKILL, then a recovery."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_recovers_after_sigkill(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "expense_demo.py")],
        capture_output=True, text=True, encoding="utf-8", timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1", HYBRID_MEMORY_DEMO_DIR=str(tmp_path / "demo")),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "退出码 -9" in out  # the writer really died by SIGKILL
    assert "✗" not in out
    assert out.count("✓") == 6
    assert "报销单状态：发票已重新上传，等待财务复审" in out


def test_the_agent_loop_example_resumes_after_a_crash_without_redoing_a_step(tmp_path: Path) -> None:
    """examples/agent_loop.py: retrieve -> act -> write -> checkpoint, killed by SIGKILL
    between a step's write and its checkpoint; the second process resumes from the
    memory, does not redo the written step, and finishes every step exactly once."""
    import json

    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent_loop.py")],
        capture_output=True, text=True, encoding="utf-8", timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1", HYBRID_MEMORY_LOOP_DIR=str(tmp_path / "loop")),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["first_run"]["killed_by"] == 9
    assert out["first_run"]["executed"] == ["search_flights", "choose_flight", "book_hotel"]
    # The crash came after book_hotel's write, before its checkpoint: the resume starts
    # from the checkpoint before it but finds book_hotel done in the memory.
    assert out["second_run"]["resumed_from_checkpoint"] == "after choose_flight"
    assert out["second_run"]["executed"] == ["book_dinner", "send_itinerary"]
    assert out["every_step_once"] is True
    assert out["second_run"]["latest_state"].startswith("Trip state: send_itinerary done")
