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
