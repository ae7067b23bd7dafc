"""Node ids: 24 hex digits that increase with every id a process makes (so new rows
land at the right edge of the B-trees keyed by id), unique across threads and across
a fork, and increasing even when the clock steps back."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import ids
from hybrid_memory.ids import ID_LENGTH, new_node_id

HEX = re.compile(f"[0-9a-f]{{{ID_LENGTH}}}")


def test_ids_are_hex_of_fixed_length_and_increase_strictly() -> None:
    made = [new_node_id() for _ in range(50_000)]
    assert all(HEX.fullmatch(i) for i in made)
    assert all(a < b for a, b in zip(made, made[1:], strict=False))


def test_ids_lead_with_the_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    made = new_node_id()
    after = time.time_ns() // 1_000_000
    assert before <= int(made[:12], 16) <= after


def test_ids_keep_increasing_when_the_clock_steps_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # Held at the real time, so the ids made after this test go on from it as usual.
    now = [time.time_ns()]
    monkeypatch.setattr(ids, "_now_ns", lambda: now[0])
    made = [new_node_id()]
    for step in (0, -5_000_000_000, 1_000_000, -1, 0):  # never past the first reading
        now[0] += step
        made.append(new_node_id())
    assert made == sorted(made) and len(set(made)) == len(made)
    assert len({i[:12] for i in made}) == 1  # the clock never passed its first reading again


def test_threads_never_share_an_id() -> None:
    out: list[list[str]] = [[] for _ in range(4)]

    def work(slot: list[str]) -> None:
        slot.extend(new_node_id() for _ in range(5_000))

    threads = [threading.Thread(target=work, args=(slot,)) for slot in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for slot in out for i in slot]
    assert len(set(every)) == len(every) == 20_000
    assert all(slot == sorted(slot) for slot in out)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_repeat_its_parents_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    # A frozen clock keeps parent and child in one millisecond: a child that went on
    # counting from its parent's state would make exactly the parent's next ids.
    frozen = time.time_ns()
    monkeypatch.setattr(ids, "_now_ns", lambda: frozen)
    new_node_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its ids and leave without running pytest's exit
        try:
            os.write(write, ",".join(new_node_id() for _ in range(200)).encode("ascii"))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode("ascii").split(",")
    os.waitpid(pid, 0)
    parent = [new_node_id() for _ in range(200)]
    assert len(child) == 200
    assert not set(child) & set(parent)


def test_memories_get_ids_in_the_order_they_were_written(open_memory: Callable[..., Any], tmp_path: Path) -> None:
    with open_memory() as mem:
        task = mem.add("Reimburse the Lisbon trip", type="task")
        one = mem.add("The hotel invoice is 412 euros", type="fact", parent=task)
        batch = mem.add_many(
            [{"content": f"报销单第{i}项：出租车费用{10 + i}欧元", "type": "event", "parent": task.id} for i in range(20)]
        )
        last = mem.add("The manager approved the claim", type="decision", parent=task)
        written = [task.id, one.id, *(n.id for n in batch), last.id]
        assert written == sorted(written) and len(set(written)) == len(written)
        assert all(HEX.fullmatch(i) for i in written)
        # The materialised path still names each ancestor by its id.
        assert mem.get(last.id).path == f"{task.id}/{last.id}/"
