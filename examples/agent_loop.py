"""An agent loop on hybrid_memory, with a crash in the middle and a resume.

No LLM: a scripted policy plays the agent. Each step is the loop an agent runs:

    retrieve  -> what the memory says about the task (the active task's context)
    act       -> the policy picks the next step the memory does not show as done
    write     -> the step's outcome (an event) and the task's new state
    checkpoint

A first process runs the loop and is killed with SIGKILL right after a step's write,
before its checkpoint. A second process opens the same memory, recovers the active
task and its latest state, and goes on: the step that was written is not redone
(the write was durable before the crash), nothing is lost, and the loop finishes.

    python examples/agent_loop.py             # prints a JSON summary of both runs
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

HERE = Path(__file__).resolve().parent
FOLDER = Path(os.environ.get("HYBRID_MEMORY_LOOP_DIR", HERE.parent / "agent-loop-memory"))
NAMESPACE = "traveller"
TASK = "Book the team's trip to the Lisbon offsite (4 people, May 4-8)"
#: The script: each step's name and what "doing" it yields.
STEPS = [
    ("search_flights", "Found three direct flights to Lisbon on May 4; TAP 1357 at 09:40 is cheapest"),
    ("choose_flight", "Chose TAP 1357 on May 4, returning TAP 1358 on May 8"),
    ("book_hotel", "Booked four rooms at Hotel Alfama Patio, May 4-8, breakfast included"),
    ("book_dinner", "Reserved a table for four at Taberna da Rua das Flores on May 5"),
    ("send_itinerary", "Sent the itinerary and the booking references to the team"),
]


def done_steps(mem: object, task_id: str) -> list[str]:
    """The steps the memory shows as done: events under the task that carry a step name."""
    from hybrid_memory import MemoryTree

    assert isinstance(mem, MemoryTree)
    return [n.meta["step"] for n in mem.children(task_id) if n.type.value == "event" and "step" in n.meta]


def run_loop(folder: Path, crash_after: str | None) -> dict[str, object]:
    """The agent: resume from the memory (or start the task), then run the steps left."""
    from hybrid_memory import ROOT, MemoryTree

    with MemoryTree.open(folder, namespace=NAMESPACE) as mem:
        state = mem.recover()
        if state.active is None:  # a fresh start: the task becomes the active node
            task = mem.add(TASK, type="task", parent=ROOT)
            mem.add("The team prefers aisle seats and hotels within walking distance of the venue",
                    type="preference", parent=task)
            mem.checkpoint("task started")
            resumed_from = None
        else:
            task = state.path[0]
            resumed_from = state.last_checkpoint.note if state.last_checkpoint else None
        executed = []
        while True:
            context = mem.retrieve(None, budget_tokens=600)  # retrieve: the active task's context
            done = done_steps(mem, task.id)
            todo = [s for s in STEPS if s[0] not in done]
            if not todo:
                break
            name, outcome = todo[0]  # act: the scripted policy's choice, given what is done
            assert TASK in context.context
            mem.add(outcome, type="event", parent=task, meta={"step": name}, importance=0.7)  # write
            left = [s[0] for s in todo[1:]]
            mem.add(f"Trip state: {name} done; next: {left[0] if left else 'nothing, all booked'}",
                    type="state", parent=task)
            executed.append(name)
            if name == crash_after:
                print(json.dumps({"executed": executed}), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # a crash between the write and its checkpoint
            mem.checkpoint(f"after {name}")
        final = mem.recover()
        return {
            "resumed_from_checkpoint": resumed_from,
            "executed": executed,
            "done": done_steps(mem, task.id),
            "latest_state": final.state.content if final.state else None,
        }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        summary = run_loop(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
        print(json.dumps(summary, ensure_ascii=False), flush=True)
        return 0
    shutil.rmtree(FOLDER, ignore_errors=True)
    crash_at = STEPS[2][0]
    first = subprocess.run([sys.executable, __file__, "--child", str(FOLDER), crash_at],
                           capture_output=True, text=True, env=dict(os.environ))
    before = json.loads(first.stdout.strip().splitlines()[-1])
    second = subprocess.run([sys.executable, __file__, "--child", str(FOLDER)],
                            capture_output=True, text=True, env=dict(os.environ), check=True)
    after = json.loads(second.stdout.strip().splitlines()[-1])
    print(json.dumps({
        "first_run": {"killed_by": -first.returncode, "executed": before["executed"]},
        "second_run": after,
        "every_step_once": sorted(after["done"]) == sorted(s[0] for s in STEPS)
        and len(after["done"]) == len(STEPS),
    }, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
