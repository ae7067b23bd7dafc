"""Changes to memories already written, each as the steps of one transaction: update,
feedback, pin, focus, checkpoint, move, archive, unarchive, delete, erasing a
namespace, and forget's pruning. The facade
checks the arguments, runs these in ``store.write``, and does what follows a commit
(the outbox drain, vectors read again, passages).

Invariants: every change is logged in the same transaction (portability: replay
makes the same tree); a node's subtree moves, archives and goes with it (no orphan);
what the index must learn waits in the outbox, never written here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy.engine import Connection, Row

from . import context, passages, portability, safety, summaries, text
from .config import Config
from .embed import Embedder
from .errors import ConflictError, CycleError, HybridMemoryError, InvalidInputError
from .forgetting import LiveColumns, choose
from .items import NodeRef, Root
from .model import Checkpoint, ForgetReport, Node, NodeType, Status, path_ids
from .store.schema import EMBED, FORGET_COLUMNS, node_from_row, to_blob
from .store.sql import SqlStore
from .writing import Writer, branch_info_for


class Updated(NamedTuple):
    """What :meth:`Editor.update` committed, and what it left to do after the commit."""

    node: Node
    #: The node's vector waits: its path changed after its content was embedded.
    vector_left: bool = False
    #: Vectors below it were read with its earlier content: read them again.
    below_left: bool = False


class Editor:
    """The in-transaction steps of the changes of one handle (namespace and session)."""

    def __init__(self, *, store: SqlStore, writer: Writer, embedder: Embedder, config: Config, namespace: str,
                 session: str, forget_reads: Callable[[Sequence[str]], None]) -> None:
        self.store, self.writer, self.embedder, self.config = store, writer, embedder, config
        self.namespace, self.session = namespace, session
        #: Drops the buffered reads of deleted nodes.
        self._forget_reads = forget_reads

    def _fresh(self, conn: Connection, node_id: str) -> Node:
        return node_from_row(self.store.nodes.get(conn, node_id))  # type: ignore[arg-type]

    def update(self, conn: Connection, node: NodeRef, values: Mapping[str, Any], *, now: float,
               expected_version: int | None, vec: np.ndarray[Any, Any] | None, above: context.Path) -> Updated:
        """Apply ``values`` (checked) to a live node; ``vec``: its new content's vector,
        read with the path ``above``."""
        row = self.writer.row(conn, node, live=True, lock=True)
        if expected_version is not None and row.version != expected_version:
            raise ConflictError(f"node {row.id} is at version {row.version}, not {expected_version}")
        changes = dict(values, version=row.version + 1, updated_at=now)
        moved = False
        below: list[str] = []
        if vec is not None:
            # Read in another path than the node's now: stored later, as a late vector.
            moved = context.above(self.store, conn, row.path) != above
            changes.update(
                content_hash=self.store.content_hash(values["content"]), tokens=text.count_tokens(values["content"]),
                embedding=b"" if moved else to_blob(vec), embed_model=self.embedder.name,
            )
            self.store.terms.unindex(conn, [row.id])
            self.store.terms.index(conn, self.namespace, row.id, text.term_counts(values["content"]))
            self.store.outbox.enqueue(conn, self.namespace, [row.id], EMBED if moved else "upsert")
            below = context.below(conn, self.namespace, row.path, inclusive=False)
            context.mark(self.store, conn, self.namespace, below)
            passages.drop(conn, [row.id])
        self.store.nodes.update(conn, row.id, **changes)
        self.store.log.append(conn, self.namespace, self.session, now, "update", row.id,
                              dict(values, version=row.version + 1))
        return Updated(self._fresh(conn, row.id), vector_left=moved, below_left=bool(below))

    def feedback(self, conn: Connection, node: NodeRef, *, important: bool, confirmed: bool,
                 importance: float | None, confidence: float | None, now: float) -> Node:
        """Raise a live node's importance or confidence by the configured step, or set them."""
        f = self.config.feedback
        row = self.writer.row(conn, node, live=True, lock=True)
        imp = importance if importance is not None else row.importance
        conf = confidence if confidence is not None else row.confidence
        if important:
            imp = min(1.0, imp + f.important_step)
        if confirmed:
            conf = min(1.0, conf + f.confirmed_step)
        self.store.nodes.update(conn, row.id, importance=imp, confidence=conf, version=row.version + 1,
                                accessed_at=max(row.accessed_at, now), updated_at=max(row.updated_at, now))
        self.store.log.append(conn, self.namespace, self.session, now, "feedback", row.id,
                              {"importance": imp, "confidence": conf})
        return self._fresh(conn, row.id)

    def pin(self, conn: Connection, node: NodeRef, pinned: bool, now: float) -> Node:
        row = self.writer.row(conn, node, lock=True)
        self.store.nodes.update(conn, row.id, pinned=pinned, version=row.version + 1)
        self.store.log.append(conn, self.namespace, self.session, now, "pin", row.id, {"pinned": pinned})
        return self._fresh(conn, row.id)

    def focus(self, conn: Connection, node: NodeRef, now: float) -> Node:
        row = self.writer.row(conn, node, live=True, lock=True)
        seq = self.store.log.append(conn, self.namespace, self.session, now, "focus", row.id, {})
        self.writer.set_active(conn, row.id, now, seq)
        return node_from_row(row)

    def checkpoint(self, conn: Connection, note: str | None, now: float) -> Checkpoint:
        active = self.store.sessions.get_cursor(conn, self.namespace, self.session)
        seq = self.store.log.append(conn, self.namespace, self.session, now, "checkpoint", active, {"note": note})
        return self.store.sessions.add_checkpoint(conn, self.namespace, self.session, active, seq, now, note)

    def above(self, node: NodeRef) -> context.Path:
        """The contents above ``node`` now, root first (none when it is not found: the
        write that asks raises it). Read in a transaction of its own."""
        with self.store.reading() as conn:
            try:
                row = self.writer.row(conn, node)
            except HybridMemoryError:
                return ()
            return context.above(self.store, conn, row.path)

    def move(self, conn: Connection, node: NodeRef, new_parent: Node | str | Root, now: float) -> Node:
        """Hang a live node and its subtree under ``new_parent``, regrouped in branches."""
        mode = self.config.write.branch_by
        row = self.writer.row(conn, node, live=True, ancestors=True)
        if isinstance(new_parent, Root):
            parent = None
        else:
            parent = self.writer.row(conn, new_parent, live=True, ancestors=True)
            if parent.path.startswith(row.path):
                raise CycleError(f"cannot move {row.id} under {parent.id}: that is inside its own subtree")
        sub = sorted(self.store.tree.lock_subtree(conn, self.namespace, row.path), key=lambda r: r.depth)
        self._check_move(conn, row, parent, sub)
        new_path = f"{row.id}/" if parent is None else f"{parent.path}{row.id}/"
        info: dict[str, tuple[str, bool]] = {}
        if parent is not None:
            info[parent.id] = self.writer.branch_info(conn, parent._mapping)
        old_prefix = row.path
        for r in sub:
            path = new_path + r.path[len(old_prefix):]
            pinfo = info.get(r.parent_id) if r.id != row.id else (info.get(parent.id) if parent is not None else None)
            branch, is_task = branch_info_for(r.id, NodeType(r.type), pinfo, mode)
            info[r.id] = (branch, is_task)
            self.store.nodes.update(
                conn, r.id, path=path, depth=path.count("/") - 1, branch_id=branch,
                **({"parent_id": None if parent is None else parent.id, "version": r.version + 1, "updated_at": now} if r.id == row.id else {}),
            )
        if parent is not None:
            self.store.nodes.touch(conn, path_ids(parent.path), "active_at", now)
        if parent is not None or row.parent_id is not None:
            context.mark(self.store, conn, self.namespace, [r.id for r in sub])
        self.store.log.append(conn, self.namespace, self.session, now, "move", row.id,
                              {"parent": None if parent is None else parent.id, "branch_by": mode})  # portability: replay regroups
        return self._fresh(conn, row.id)

    def _check_move(self, conn: Connection, row: Row[Any], parent: Row[Any] | None, sub: Sequence[Row[Any]]) -> None:
        """``write.max_depth`` and ``write.max_children`` at the subtree's new place."""
        lim = self.config.write
        deepest = (0 if parent is None else parent.depth + 1) + (sub[-1].depth - row.depth)
        if deepest > self.writer.max_depth:
            raise InvalidInputError(f"the move would put a node at depth {deepest}; "
                                    f"the limit is {self.writer.max_depth} (write.max_depth)")
        if row.parent_id != (None if parent is None else parent.id) and self.store.tree.child_count(
                conn, self.namespace, None if parent is None else parent.id, lim.max_children) >= lim.max_children:
            raise InvalidInputError(f"the new parent has {lim.max_children} children already (write.max_children)")

    def archive(self, conn: Connection, node: NodeRef, now: float) -> list[str]:
        """Archive a live node and its live subtree; the ids."""
        row = self.writer.row(conn, node, live=True, ancestors=True)
        ids = [r.id for r in self.store.tree.lock_subtree(conn, self.namespace, row.path) if r.status == Status.LIVE.value]
        self.archive_ids(conn, ids, row.parent_id, now, "archive", row.id)
        return ids

    def delete(self, conn: Connection, node: NodeRef, now: float) -> list[str]:
        """Erase a node and its whole subtree; the ids."""
        row = self.writer.row(conn, node, ancestors=True)
        ids = [r.id for r in self.store.tree.lock_subtree(conn, self.namespace, row.path)]
        self.delete_ids(conn, ids, row.parent_id, now, row.id)
        return ids

    def erase_namespace(self, conn: Connection, now: float) -> int:
        """Erase the rows of the whole namespace (:func:`safety.erase_namespace_rows`);
        how many nodes."""
        ids = safety.erase_namespace_rows(self.store, conn, self.namespace)
        self.store.outbox.enqueue(conn, self.namespace, ids, "delete")
        if self.store.audit.on:
            self.store.audit.append(conn, self.namespace, self.session, [(now, "erase_ns", [], {"nodes": len(ids)})])
        return len(ids)

    def archive_ids(self, conn: Connection, ids: Sequence[str], fallback: str | None, now: float, op: str,
                    head: str | None) -> int:
        """Archive ``ids`` (logged as ``op`` of ``head``); cursors on them go to ``fallback``."""
        seq = self.store.log.append(conn, self.namespace, self.session, now, op, head, {"ids": list(ids)})
        self.store.nodes.set_status(conn, ids, status=Status.ARCHIVED.value, archived_op=seq)
        self.store.terms.unindex(conn, ids)
        self.store.outbox.enqueue(conn, self.namespace, ids, "delete")
        self.store.sessions.repoint_cursors(conn, self.namespace, ids, fallback, now)
        return seq

    def delete_ids(self, conn: Connection, ids: Sequence[str], fallback: str | None, now: float,
                   head: str | None) -> None:
        """Erase ``ids`` with what the log kept of them; cursors on them go to ``fallback``."""
        # portability: what replay needs of the purged entries, without what they said.
        skeletons = portability.skeletons(conn, self.namespace, ids)
        self.store.log.purge(conn, self.namespace, ids)
        self.store.nodes.delete(conn, ids)
        self.store.outbox.enqueue(conn, self.namespace, ids, "delete")
        self.store.sessions.repoint_cursors(conn, self.namespace, ids, fallback, now)
        self.store.log.append(conn, self.namespace, self.session, now, "delete", head,
                              {"ids": list(ids), "skeletons": skeletons})
        self._forget_reads(ids)

    def restore(self, conn: Connection, node: NodeRef, now: float) -> Node:
        """Bring an archived node back, with its archived ancestors and what was archived with it."""
        row = self.writer.row(conn, node, ancestors=True)
        if row.status == Status.LIVE.value:
            return node_from_row(row)
        ancestors = self.store.nodes.get_many(conn, path_ids(row.path)[:-1])
        ids = [a.id for a in ancestors.values() if a.status != Status.LIVE.value]
        ids += [
            r.id for r in self.store.tree.lock_subtree(conn, self.namespace, row.path)
            if r.status == Status.ARCHIVED.value and (r.id == row.id or r.archived_op == row.archived_op)
        ]
        for node_id in ids:
            self.store.nodes.update(conn, node_id, status=Status.LIVE.value, archived_op=None)
        for r in self.store.nodes.get_many(conn, ids).values():
            self.store.terms.index(conn, self.namespace, r.id, text.term_counts(r.content))
        self.store.outbox.enqueue(conn, self.namespace, ids, "upsert")
        self.store.log.append(conn, self.namespace, self.session, now, "restore", row.id, {"ids": ids})
        return self._fresh(conn, row.id)

    def forget(self, conn: Connection, *, threshold: float, max_nodes: int, delete: bool, dry_run: bool,
               at: float) -> ForgetReport:
        """Prune the leaves :func:`forgetting.choose` picks: archive or delete them."""
        rows = self.store.tree.lock_live_rows(conn, self.namespace, FORGET_COLUMNS)
        protected: set[str] = set()
        active = self.store.sessions.get_cursor(conn, self.namespace, self.session)
        arow = self.store.nodes.get(conn, active) if active else None
        if arow is not None:
            protected.update(path_ids(arow.path))
        # Reads buffered in this handle are in the rows already: the facade wrote them
        # in this transaction, before this runs.
        cols = LiveColumns.of(rows)
        covered: set[str] = set()
        if self.config.forgetting.summarized < 1:  # (off: the summaries' rows are not read)
            summary_ids = [i for i, t in zip(cols.ids, cols.types, strict=True) if t == NodeType.SUMMARY.value]
            covered = summaries.covered_by(node_from_row(r) for r in self.store.nodes.get_many(conn, summary_ids).values())
        plan = choose(cols, now=at, config=self.config, threshold=threshold, max_nodes=max_nodes,
                      protected=protected, with_children=lambda ids: self.store.tree.with_children(conn, self.namespace, ids),
                      covered=covered)
        picked = [i for i, _ in plan]
        erased: list[str] = []
        if picked and not dry_run:
            if delete:
                # A forgotten leaf has no live children but may have archived ones:
                # as with delete(), they go with it rather than be left orphaned.
                path_of = {i: row.path for i, row in self.store.nodes.get_many(conn, picked).items()}
                erased = list(dict.fromkeys(
                    r.id for i in picked for r in self.store.tree.subtree(conn, self.namespace, path_of[i])
                ))
                self.delete_ids(conn, erased, None, at, None)
            else:
                self.archive_ids(conn, picked, None, at, "forget", None)
        return ForgetReport(
            archived=() if delete or dry_run else tuple(picked),
            deleted=tuple(erased),
            live_before=len(cols.ids),
            live_after=len(cols.ids) - (0 if dry_run else len(picked)),
            dry_run=dry_run,
            considered=len(cols.ids),
            details=tuple(plan),
        )
