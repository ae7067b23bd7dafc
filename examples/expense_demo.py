"""The article's scenario, with a real crash.

One process writes an agent's memories (an expense claim for 张三 of 研发部, and an
unrelated server migration), then is killed with SIGKILL. A new process recovers:
where the task stands, what a question about it needs, and the whole tree.

    python examples/expense_demo.py            # what `make demo` runs
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
FOLDER = Path(os.environ.get("HYBRID_MEMORY_DEMO_DIR", HERE.parent / "demo-memory"))
NAMESPACE = "zhangsan"
QUESTION = "报销进度到哪一步了？"
OTHER_QUESTION = "数据库迁移定在什么时候？"


def write_phase(folder: Path) -> None:
    """Child process: write the memories, report each acknowledged id, then hang."""
    from hybrid_memory import ROOT, MemoryTree

    def ack(node, label: str) -> None:  # type: ignore[no-untyped-def]
        print(json.dumps({"id": node.id, "label": label, "merged": node.merged}, ensure_ascii=False), flush=True)

    with MemoryTree.open(folder, namespace=NAMESPACE) as mem:
        claim = mem.add("企业报销任务：张三（研发部）7月差旅费报销", type="task")
        ack(claim, "expense_task")
        ack(mem.add("用户张三，部门：研发部，报销额度 5000 元", type="fact"), "fact")
        ack(mem.add("报销单状态：7月1日已提交，等待财务审批", type="state"), "state_submitted")
        returned = mem.add("7月2日财务退回报销单，原因是发票信息不清晰", type="event", importance=0.9)
        ack(returned, "returned")
        ack(mem.add("用户偏好：审批结果优先用短信通知", type="preference"), "preference")

        # The agent switches to another task for a while.
        migration = mem.add("服务器迁移任务：把订单数据库迁到新机房", type="task", parent=ROOT)
        ack(migration, "migration_task")
        ack(mem.add("决定：迁移窗口定在周六凌晨两点", type="decision"), "window")
        ack(mem.add("新机房的数据库是 PostgreSQL 15", type="fact"), "pg")
        ack(mem.add("迁移状态：演练完成，等待正式窗口", type="state"), "migration_state")

        # ... and comes back to the claim.
        mem.focus(claim)
        ack(mem.add("用户已重新上传清晰的发票", type="event", parent=returned), "reuploaded")
        ack(mem.add("报销单状态：发票已重新上传，等待财务复审", type="state"), "state_resubmitted")
        # The same observation twice: it reinforces the first instead of a twin.
        ack(mem.add("用户已重新上传清晰的发票", type="event", parent=returned), "reuploaded_again")
        mem.checkpoint("等待财务复审")
        print("READY", flush=True)
        signal.pause()  # the parent kills us here, with the memory still open


def recover_phase(folder: Path, acked: list[dict[str, str]]) -> int:
    """A fresh process: recover, ask, show the tree, check nothing was lost."""
    from hybrid_memory import MemoryTree, NotFoundError
    from hybrid_memory.cli import main as cli

    by_label = {a["label"]: a["id"] for a in acked}
    with MemoryTree.open(folder, namespace=NAMESPACE) as mem:
        state = mem.recover()
        print("===== 重启后恢复 (recover) =====")
        print("活动任务路径:", " > ".join(n.content for n in state.path))
        print("最新任务状态:", state.state.content if state.state else "-")
        print("最近检查点:  ", state.last_checkpoint.note if state.last_checkpoint else "-")
        print("补做的索引操作:", state.replayed)

        print(f"\n===== 检索：{QUESTION} =====")
        recall = mem.retrieve(QUESTION, k=6, budget_tokens=300)
        print(recall.explain())
        print("\n--- 交给模型的上下文 ---")
        print(recall.context)

        other = mem.retrieve(OTHER_QUESTION, k=3, budget_tokens=200)
        print(f"\n===== 检索：{OTHER_QUESTION} =====")
        print(other.context)

        missing = []
        for a in acked:
            try:
                mem.get(a["id"])
            except NotFoundError:
                missing.append(a["label"])
        right_branch = bool(recall.branches) and recall.branches[0].branch_id == by_label["expense_task"]
        other_branch = bool(other.branches) and other.branches[0].branch_id == by_label["migration_task"]
        latest = state.state is not None and state.state.id == by_label["state_resubmitted"]
        active_ok = state.active is not None and state.active.id == by_label["expense_task"]
        merged = next(a for a in acked if a["label"] == "reuploaded_again")

    print("\n===== 记忆树 (hybrid-memory tree) =====", flush=True)
    cli(["--path", str(folder), "--namespace", NAMESPACE, "tree"])

    unique = len({a["id"] for a in acked})
    checks = [
        (active_ok, "恢复出崩溃前的活动任务（报销）"),
        (latest, "恢复出最新的报销单状态"),
        (right_branch, f"「{QUESTION}」先定位到报销分支"),
        (other_branch, f"「{OTHER_QUESTION}」定位到迁移分支"),
        (merged["merged"] and merged["id"] == by_label["reuploaded"], "重复写入被合并，没有产生孪生节点"),
        (not missing, f"没有丢失任何已确认的写入（{unique - len(missing)}/{unique}）"),
    ]
    print()
    for ok, label in checks:
        print(("✓ " if ok else "✗ ") + label)
    return 0 if all(ok for ok, _ in checks) else 1


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--write":
        write_phase(Path(sys.argv[2]))
        return 0
    if len(sys.argv) > 3 and sys.argv[1] == "--recover":
        return recover_phase(Path(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text("utf-8")))

    shutil.rmtree(FOLDER, ignore_errors=True)
    print("===== 第一个进程：写入记忆 =====", flush=True)
    writer = subprocess.Popen(
        [sys.executable, __file__, "--write", str(FOLDER)], stdout=subprocess.PIPE, text=True, encoding="utf-8"
    )
    from hybrid_memory.ids import short_id

    acked: list[dict[str, str]] = []
    assert writer.stdout is not None
    for line in writer.stdout:
        if line.strip() == "READY":
            break
        item = json.loads(line)
        acked.append(item)
        print(f"  写入 {short_id(item['id'])}  {item['label']}{'（合并）' if item['merged'] else ''}")
    else:
        print("writer exited before it was ready", file=sys.stderr)
        return 1
    writer.send_signal(signal.SIGKILL)
    code = writer.wait()
    print(f"===== 用 SIGKILL 杀掉写入进程（退出码 {code}）=====\n", flush=True)

    acked_file = FOLDER / "acked.json"
    acked_file.write_text(json.dumps(acked, ensure_ascii=False), "utf-8")
    return subprocess.call([sys.executable, __file__, "--recover", str(FOLDER), str(acked_file)])


if __name__ == "__main__":
    sys.exit(main())
