"""The lexical terms' document frequencies, kept beside the postings.

Retrieval weighs each query word by how many memories hold it; that count is kept
in ``hm_term_df`` in the same transactions as the postings, so a query never counts
a common word's postings. These tests hold the kept counts against the postings
counted after every kind of write, rebuild them for a store made before they were
kept, and let verify/repair find and fix counts that drifted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select, update

from hybrid_memory import ROOT, MemoryTree, text
from hybrid_memory.cli import main as cli
from hybrid_memory.store.schema import term_counts, terms


def _counts(mem: MemoryTree) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """(kept, counted): every namespace's document frequencies as kept, and as the
    postings give them."""
    with mem.store.reading() as conn:
        kept = {(a, t): n for a, t, n in conn.execute(
            select(term_counts.c.namespace, term_counts.c.term, term_counts.c.n))}
        counted = {(a, t): n for a, t, n in conn.execute(
            select(terms.c.namespace, terms.c.term, func.count()).group_by(terms.c.namespace, terms.c.term))}
    return kept, counted


def _agree(mem: MemoryTree) -> dict[tuple[str, str], int]:
    kept, counted = _counts(mem)
    assert kept == counted
    return kept


def _answer(mem: MemoryTree, query: str) -> list[tuple[str, float]]:
    return [(s.node.content, round(s.score, 9)) for s in mem.retrieve(query, k=5, reinforce=False).nodes]


def test_the_counts_follow_every_kind_of_write(open_memory: Any, tmp_path: Path) -> None:
    """Adds one by one and in batches, a content update, archive and restore, delete,
    erasure of a subtree, forget, an import and a time travel back: after each the kept
    counts are the postings counted, in English and Chinese."""
    mem = open_memory(dedup={"enabled": False})
    task = mem.add("Support ticket TKT-7 printer offline on floor 3", type="task", parent=ROOT)
    with mem.store.reading() as conn:
        first = mem.store.log.last_seq(conn, mem.namespace)
    one = mem.add("Reinstalled the printer driver", type="event", parent=task)
    mem.add_many([{"content": f"Printer note {i}: toner and paper checked", "type": "event", "parent": task.id}
                  for i in range(6)])
    zh = mem.add("报销单：出租车发票已上传", type="task", parent=ROOT)
    zh_note = mem.add("财务要求补充酒店发票", type="event", parent=zh)
    before = _agree(mem)
    assert before[(mem.namespace, "printer")] == 8  # the task, the event, six notes
    mem.update(one, content="Replaced the fuser unit")
    after = _agree(mem)
    assert after[(mem.namespace, "printer")] == 7
    assert after[(mem.namespace, "fuser")] == 1
    mem.archive(zh_note)
    assert (mem.namespace, "酒店") not in _agree(mem)  # its only holder is archived
    mem.unarchive(zh_note)
    assert _agree(mem)[(mem.namespace, "酒店")] == 1
    mem.delete(one)
    assert (mem.namespace, "fuser") not in _agree(mem)
    mem.admin.erase(zh)
    kept = _agree(mem)
    assert not any(t in ("报销", "酒店") or "发票" in t for _, t in kept)
    mem.forget(max_nodes=4)
    _agree(mem)
    snapshot = tmp_path / "snap.jsonl"
    mem.admin.export(snapshot)
    copy = open_memory(namespace="copy", folder=tmp_path / "copy")
    copy.admin.import_(snapshot)
    assert _agree(copy) == {("copy", t): n for (_, t), n in _agree(mem).items()}
    mem.rewind(seq=first)  # back to the first write: the ticket alone
    kept = _agree(mem)
    assert kept[(mem.namespace, "printer")] == 1


def test_a_store_made_before_the_counts_rebuilds_them_on_open(open_memory: Any, tmp_path: Path) -> None:
    """Opening a store whose counts table is empty (what an older version left)
    counts its postings once; the answers are those of the store as it was."""
    folder = tmp_path / "m"
    mem = open_memory(folder=folder)
    task = mem.add("Expense claim EXP-3187 for a hotel in Mumbai", type="task", parent=ROOT)
    for content in ("Asked the hotel front desk for the folio", "The folio lists two nights",
                    "出差酒店的发票已经补交"):
        mem.add(content, type="event", parent=task)
    kept = _agree(mem)
    queries = ["Which hotel folio was asked for?", "酒店发票补交了吗？"]
    answers = [_answer(mem, q) for q in queries]
    mem.store.write(lambda conn: conn.execute(delete(term_counts)))
    mem.close()
    again = open_memory(folder=folder)
    assert _agree(again) == kept
    assert [_answer(again, q) for q in queries] == answers


def test_verify_finds_miscounted_terms_and_repair_recounts_them(open_memory: Any, tmp_path: Path,
                                                                capsys: Any) -> None:
    folder = tmp_path / "m"
    mem = open_memory(folder=folder)
    task = mem.add("Code change: retry the upload on timeout", type="task", parent=ROOT)
    mem.add("The upload retries three times", type="decision", parent=task)
    assert mem.admin.verify().clean
    mem.store.write(lambda conn: conn.execute(
        update(term_counts).where(term_counts.c.term == "upload").values(n=term_counts.c.n + 5)))
    drift = mem.admin.verify()
    assert drift.term_counts == 1 and not drift.clean
    assert mem.admin.repair().term_counts == 1
    assert mem.admin.verify().clean
    _agree(mem)
    if mem.store.is_sqlite:  # the command line reports them too
        mem.store.write(lambda conn: conn.execute(delete(term_counts).where(term_counts.c.term == text.stem("retry"))))
        mem.close()
        assert cli(["--path", str(folder), "--namespace", mem.namespace, "verify"]) == 1
        assert "miscounted terms     1" in capsys.readouterr().out
