"""Plain data: nodes, scored results, checkpoints and reports. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal


class NodeType(str, Enum):
    """What a memory is. ``task`` nodes delimit branches; ``state`` records where a task stands."""

    TASK = "task"
    STATE = "state"
    EVENT = "event"
    FACT = "fact"
    PREFERENCE = "preference"
    DECISION = "decision"
    SUMMARY = "summary"


#: The kinds of memory a later one of the same kind can update ("the approver is now
#: Lee" after "Chen approves"): what holds, not what happened.
SUPERSEDING: frozenset[NodeType] = frozenset({NodeType.FACT, NodeType.PREFERENCE, NodeType.DECISION})


class Status(str, Enum):
    LIVE = "live"
    ARCHIVED = "archived"


#: How a memory was placed: under the branch it reads closest to, or under the
#: active node because no branch was close enough.
PlacedBy = Literal["branch", "active"]

@dataclass(frozen=True)
class Placement:
    """Where a memory written with ``parent=AUTO`` goes, and why.

    ``parent_id`` is the node it goes under (None: the top); ``by`` is ``"branch"``
    when the located branch was close enough (its head is the parent), ``"active"``
    when it was not and the memory went under the active node. ``branch_id`` and
    ``score`` are the best branch located whether or not it was taken (None and 0
    when no branch holds a candidate); ``runner_up_id`` and ``runner_up_score`` the
    second; ``threshold`` the ``write.place_min`` it was held to.
    """

    parent_id: str | None
    by: PlacedBy
    branch_id: str | None
    score: float
    runner_up_id: str | None
    runner_up_score: float
    threshold: float

    @property
    def margin(self) -> float:
        """How far the best branch scored above the runner-up (0 with one branch or none)."""
        return self.score - self.runner_up_score if self.runner_up_id is not None else 0.0

    def explain(self) -> str:
        """One line a person can read: where the memory goes and why."""
        if self.branch_id is None:
            why = "no branch holds a candidate"
        else:
            why = f"best branch {self.branch_id} score={self.score:.3f} (place_min {self.threshold:.3f})"
            if self.runner_up_id is not None:
                why += f", runner-up {self.runner_up_id} score={self.runner_up_score:.3f}"
        where = self.parent_id if self.parent_id is not None else "the top"
        return f"placed by {self.by} under {where}: {why}"

    def as_dict(self) -> dict[str, Any]:
        """The placement as JSON-ready values (the command line, HTTP and MCP answers)."""
        return {"parent_id": self.parent_id, "by": self.by, "branch_id": self.branch_id,
                "score": round(self.score, 6), "runner_up_id": self.runner_up_id,
                "runner_up_score": round(self.runner_up_score, 6), "threshold": self.threshold}


@dataclass(frozen=True)
class Node:
    """One memory as stored. Weights are inputs; ``MemoryTree.weight`` computes the weight."""

    id: str
    namespace: str
    parent_id: str | None
    type: NodeType
    content: str
    meta: Mapping[str, Any]
    importance: float
    confidence: float
    access_count: int
    pinned: bool
    status: Status
    version: int
    depth: int
    #: Materialised path from the root: "rootid/.../thisid/".
    path: str
    #: The node that heads this node's branch (its nearest task, by default).
    branch_id: str
    created_at: float
    updated_at: float
    accessed_at: float
    active_at: float
    #: True when ``add`` found a near-identical live node and reinforced it instead
    #: of creating a twin; this node is then the existing one.
    merged: bool = False
    #: Where a memory written with ``parent=AUTO`` went and why (None otherwise;
    #: not stored: the answer of the write that placed it).
    placement: Placement | None = field(default=None, compare=False)

    @property
    def written_at(self) -> float:
        """The last time the node was written (added, updated, merged with a twin, given
        feedback) or had activity below it: where its recency counts from."""
        return max(self.created_at, self.updated_at, self.active_at)

    @property
    def touched_at(self) -> float:
        """The last time the node was written, read, or had activity below it: where the
        recency of its weight counts from (``MemoryTree.weight``, forgetting; ranking
        too with ``retrieval.rank_reads`` on)."""
        return max(self.written_at, self.accessed_at)

    @property
    def ancestor_ids(self) -> list[str]:
        """Ids from the root down to the parent."""
        return path_ids(self.path)[:-1]

    @property
    def live(self) -> bool:
        return self.status is Status.LIVE


@dataclass(frozen=True)
class ScoredNode:
    """A node in a ``Recall`` with every number that put it there."""

    node: Node
    #: Why it is in the context: "hit" (matched the query), "standing" (a high-weight
    #: state/preference/decision of the branch), "ancestor" (on a chosen node's path
    #: to the root), "top" (top by weight in the active task, for a query-less recall)
    #: or "summary" (a finished task's summary, shown in place of the details picked
    #: under it that did not all fit the token budget).
    reason: str
    #: The dense and lexical similarities blended, times ``superseded_factor``.
    similarity: float
    dense: float
    lexical: float
    weight: float
    branch_score: float
    score: float
    tokens: int
    #: What the score was multiplied by for the node's branch: 1 in the located
    #: branch, less the further its branch falls behind (see retrieval.branch_factor).
    branch_factor: float = 1.0
    #: What the weight part of the score was multiplied by for how late the node was
    #: written in the focused family (1 elsewhere; see retrieval.rank.NEWEST_GAIN).
    newest_factor: float = 1.0
    #: What the similarity was multiplied by because a later state of the node's
    #: branch supersedes it, or a later memory restates it (1 for any other node; see
    #: retrieval.rank.SUPERSEDED_SIMILARITY).
    superseded_factor: float = 1.0
    #: The (start, stop) span of ``node.content`` the context shows: the passage of
    #: a long memory that best answers the query (None: the whole content).
    passage: tuple[int, int] | None = None


@dataclass(frozen=True)
class BranchScore:
    """A branch a retrieval opened: its score and how many of its own memories it
    counted as hits (the first stage's candidates for a query; the top memories of
    the active context, leaving out those of subtasks that head branches of their own)."""

    branch_id: str
    score: float
    hits: int
    title: str


@dataclass(frozen=True)
class Recall:
    """What ``retrieve`` returns: the chosen nodes in tree order and their rendered context."""

    query: str | None
    nodes: tuple[ScoredNode, ...]
    context: str
    tokens: int
    branches: tuple[BranchScore, ...]
    budget_tokens: int
    #: Nodes that scored well enough but did not fit the token budget.
    dropped: int = 0
    #: (stage, note) of each stage the retrieval ran, in order: "query", "candidates",
    #: "locate", "expand", "rank", "select" (a query-less recall: "select" alone).
    stages: tuple[tuple[str, str], ...] = ()

    @property
    def ids(self) -> list[str]:
        return [s.node.id for s in self.nodes]

    def explain(self) -> str:
        """A human-readable account of why each node was chosen."""
        lines = []
        if self.query is not None:
            lines.append(f"query: {self.query}")
        for b in self.branches:
            lines.append(f"branch {b.branch_id} score={b.score:.3f} hits={b.hits}  {b.title}")
        for stage, note in self.stages:
            lines.append(f"stage {stage}: {note}")
        lines.append(
            f"{'reason':<9} {'score':>6} {'sim':>6} {'dense':>6} {'lex':>6} {'weight':>6} {'newest':>6} "
            f"{'supers':>6} {'branch':>6}  node"
        )
        for s in self.nodes:
            lines.append(
                f"{s.reason:<9} {s.score:6.3f} {s.similarity:6.3f} {s.dense:6.3f} "
                f"{s.lexical:6.3f} {s.weight:6.3f} {s.newest_factor:6.3f} "
                f"{s.superseded_factor:6.3f} {s.branch_factor:6.3f}  "
                f"[{s.node.type.value}] {s.node.id} "
                f"{_clip(s.node.content, 60)}"
            )
        lines.append(f"tokens: {self.tokens}/{self.budget_tokens}, dropped for budget: {self.dropped}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Checkpoint:
    id: int
    namespace: str
    session: str
    active_id: str | None
    log_seq: int
    ts: float
    note: str | None


@dataclass(frozen=True)
class RecoveryState:
    """Where things stand after an open: what ``recover()`` returns."""

    active: Node | None
    #: The active node's path from its root, root first, active last.
    path: tuple[Node, ...]
    #: The most recent ``state`` node in the active node's branch, if any.
    state: Node | None
    last_checkpoint: Checkpoint | None
    #: Index operations left over by a crash and replayed at open.
    replayed: int
    live_nodes: int
    #: What the open found wrong and could not fix by itself (a missing index
    #: folder, a corrupt log entry, an unreachable index). ``admin.repair()`` fixes them.
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Drift:
    """How far the vector index is from the relational truth (``admin.verify()``)."""

    #: Live nodes without a vector.
    missing: tuple[str, ...] = ()
    #: Vectors of nodes that are archived or gone.
    extra: tuple[str, ...] = ()
    #: Vectors that differ from the node's stored embedding (a lost content update).
    stale: tuple[str, ...] = ()
    #: Index operations committed but not yet applied.
    pending: int = 0
    #: Nodes whose vector was read with a path that has changed since (an ancestor
    #: renamed, the subtree moved) and waits to be read again with the current one.
    out_of_context: tuple[str, ...] = ()
    #: Operation-log entries whose payload cannot be read.
    corrupt_log: tuple[int, ...] = ()
    #: Lexical terms whose kept document frequency differs from their postings
    #: counted (a store written by a version that did not keep the counts).
    term_counts: int = 0

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.stale or self.pending or self.out_of_context or self.corrupt_log
                    or self.term_counts)


@dataclass(frozen=True)
class Stats:
    namespace: str
    live: int
    archived: int
    depth: int
    by_type: Mapping[str, int]
    active_path: tuple[str, ...]
    last_checkpoint_at: float | None
    #: Bytes of the memory's folder (the whole store, every namespace in it); None on a
    #: handle below the admin role, or with no folder.
    disk_bytes: int | None
    log_seq: int


@dataclass(frozen=True)
class ForgetReport:
    archived: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    live_before: int = 0
    live_after: int = 0
    dry_run: bool = False
    considered: int = 0
    details: tuple[tuple[str, float], ...] = field(default=())


def path_ids(path: str) -> list[str]:
    """The ids of a materialised path ("rootid/.../thisid/"), root first."""
    return path.rstrip("/").split("/")


def root_of(path: str) -> str:
    """The id of the root (top-level task) a materialised path starts at."""
    return path.split("/", 1)[0]


def tree_order(nodes: Sequence[Node]) -> list[Node]:
    """Parents before children, siblings oldest first: the order contexts are rendered in.
    Ancestors missing from ``nodes`` sort by id."""
    created = {n.id: (n.created_at, n.id) for n in nodes}

    def key(n: Node) -> tuple[tuple[float, str], ...]:
        return tuple(created.get(i, (0.0, i)) for i in path_ids(n.path))

    return sorted(nodes, key=key)


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
