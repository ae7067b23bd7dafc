"""Request and response models of the HTTP service, kept apart from the library's
dataclasses: the wire format can stay stable while the core changes. Values are
checked by the library (one set of rules); these models fix shapes and types."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..model import (
    BranchScore,
    Checkpoint,
    ForgetReport,
    Node,
    Placement,
    Recall,
    RecoveryState,
    ScoredNode,
    Stats,
)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddIn(_In):
    content: str = Field(description="What to remember.")
    type: str = Field(description="task, state, event, fact, preference, decision or summary")
    parent: str | None = Field(default=None, description="Parent node id, or \"auto\": under the task branch "
                                                         "the memory reads closest to; none: under the active node.")
    root: bool = Field(default=False, description="Start a new tree (ignore the active node).")
    importance: float | None = None
    confidence: float | None = None
    meta: dict[str, Any] | None = None
    pinned: bool = False
    ts: float | None = Field(default=None, description="The event's time in seconds (default: now).")


class BatchIn(_In):
    items: list[AddIn]


class UpdateIn(_In):
    content: str | None = None
    importance: float | None = None
    confidence: float | None = None
    meta: dict[str, Any] | None = None
    expected_version: int | None = Field(default=None, description="Refuse (409) if the node moved past it.")


class MoveIn(_In):
    parent: str | None = Field(description="The new parent's id; null: the root.")


class FeedbackIn(_In):
    important: bool | None = None
    confirmed: bool | None = None
    importance: float | None = None
    confidence: float | None = None


class RetrieveIn(_In):
    query: str | None = Field(default=None, description="None: the active task's context.")
    k: int | None = None
    budget_tokens: int | None = None
    branches: int | None = None
    explain: bool = Field(default=False, description="Add the explanation text.")


class ForgetIn(_In):
    threshold: float | None = None
    max_nodes: int | None = None
    delete: bool = False
    dry_run: bool = False


class CheckpointIn(_In):
    note: str | None = None


class PlaceIn(_In):
    content: str = Field(description="The memory to place.")


class SummarizeIn(_In):
    budget_tokens: int | None = Field(default=None, description="The summary's token budget (>= 1; default: "
                                                                "write.summary_tokens).")


class IngestIn(_In):
    text: str = Field(description="The transcript or document: the file's contents (JSON, JSON Lines or text).")
    name: str = Field(default="upload", description="The file's name: it keys what is written (the same name and "
                                                    "messages again write nothing twice), and .json / .jsonl / .txt "
                                                    "choose how it is read.")
    format: str = Field(default="auto", description="auto, messages, sessions or text.")
    parent: str | None = Field(default=None, description="Node id to put the sessions under, or \"auto\": under "
                                                         "the task branch each reads closest to; none: the top.")
    dry_run: bool = Field(default=False, description="Report the tree it would write; write nothing.")


class IngestOut(BaseModel):
    name: str
    format: str = Field(description="How the text was read: messages, sessions or text.")
    sessions: int
    messages: int
    written: int = Field(description="New memories written now (sessions' tasks and messages).")
    merged: int = Field(description="Messages merged into a near-twin already in the memory, not written as new.")
    skipped: int = Field(description="Sessions and messages already in the memory, not written again.")
    empty: int = Field(description="Messages without text, left out.")
    dry_run: bool
    tree: str = Field(description="The sessions and their first messages, a line each.")
    session_ids: list[str] = Field(description="The node id of each session's task (none on a dry run).")

    @classmethod
    def of(cls, report: Any) -> IngestOut:
        return cls(**{**dataclasses.asdict(report), "session_ids": list(report.session_ids)})


class PlacementOut(BaseModel):
    parent_id: str | None = Field(description="Where the memory goes; null: the top.")
    by: str = Field(description="\"branch\": the closest branch's head; \"active\": none was close enough.")
    branch_id: str | None = Field(description="The closest branch, taken or not.")
    score: float
    runner_up_id: str | None
    runner_up_score: float
    threshold: float = Field(description="write.place_min")

    @classmethod
    def of(cls, p: Placement) -> PlacementOut:
        return cls(**p.as_dict())


class NodeOut(BaseModel):
    id: str
    namespace: str
    parent_id: str | None
    type: str
    content: str
    meta: dict[str, Any]
    importance: float
    confidence: float
    access_count: int
    pinned: bool
    status: str
    version: int
    depth: int
    branch_id: str
    created_at: float
    updated_at: float
    accessed_at: float
    active_at: float
    merged: bool
    weight: float | None = Field(default=None, description="The weight now (tree and inspector views).")
    placement: PlacementOut | None = Field(default=None, description="Where parent \"auto\" put it, and why.")

    @classmethod
    def of(cls, n: Node, weight: float | None = None) -> NodeOut:
        return cls(
            id=n.id, namespace=n.namespace, parent_id=n.parent_id, type=n.type.value, content=n.content,
            meta=dict(n.meta), importance=n.importance, confidence=n.confidence, access_count=n.access_count,
            pinned=n.pinned, status=n.status.value, version=n.version, depth=n.depth, branch_id=n.branch_id,
            created_at=n.created_at, updated_at=n.updated_at, accessed_at=n.accessed_at, active_at=n.active_at,
            merged=n.merged, weight=weight, placement=None if n.placement is None else PlacementOut.of(n.placement),
        )


class IdsOut(BaseModel):
    ids: list[str]


class CountOut(BaseModel):
    nodes: int


class ScoredOut(BaseModel):
    node: NodeOut
    reason: str
    score: float
    similarity: float
    dense: float
    lexical: float
    weight: float
    branch_score: float
    tokens: int
    #: What the score was multiplied by for the node's branch.
    branch_factor: float = 1.0
    #: What the weight part was multiplied by for how late the node was written in
    #: the focused family.
    newest_factor: float = 1.0
    #: What the similarity was multiplied by because a later state of the node's
    #: branch supersedes it, or a later memory restates it.
    superseded_factor: float = 1.0

    @classmethod
    def of(cls, s: ScoredNode) -> ScoredOut:
        return cls(node=NodeOut.of(s.node), reason=s.reason, score=s.score, similarity=s.similarity, dense=s.dense,
                   lexical=s.lexical, weight=s.weight, branch_score=s.branch_score, tokens=s.tokens,
                   branch_factor=s.branch_factor, newest_factor=s.newest_factor,
                   superseded_factor=s.superseded_factor)


class BranchOut(BaseModel):
    branch_id: str
    score: float
    hits: int
    title: str

    @classmethod
    def of(cls, b: BranchScore) -> BranchOut:
        return cls(branch_id=b.branch_id, score=b.score, hits=b.hits, title=b.title)


class RecallOut(BaseModel):
    query: str | None
    context: str
    tokens: int
    budget_tokens: int
    dropped: int
    nodes: list[ScoredOut]
    branches: list[BranchOut]
    explanation: str | None = None

    @classmethod
    def of(cls, r: Recall, explain: bool) -> RecallOut:
        return cls(query=r.query, context=r.context, tokens=r.tokens, budget_tokens=r.budget_tokens,
                   dropped=r.dropped, nodes=[ScoredOut.of(s) for s in r.nodes],
                   branches=[BranchOut.of(b) for b in r.branches], explanation=r.explain() if explain else None)


class ForgetOut(BaseModel):
    archived: list[str]
    deleted: list[str]
    live_before: int
    live_after: int
    dry_run: bool
    planned: list[tuple[str, float]]

    @classmethod
    def of(cls, f: ForgetReport) -> ForgetOut:
        return cls(archived=list(f.archived), deleted=list(f.deleted), live_before=f.live_before,
                   live_after=f.live_after, dry_run=f.dry_run, planned=[(i, w) for i, w in f.details])


class CheckpointOut(BaseModel):
    id: int
    session: str
    active_id: str | None
    log_seq: int
    ts: float
    note: str | None

    @classmethod
    def of(cls, c: Checkpoint) -> CheckpointOut:
        return cls(id=c.id, session=c.session, active_id=c.active_id, log_seq=c.log_seq, ts=c.ts, note=c.note)


class RecoverOut(BaseModel):
    active: NodeOut | None
    path: list[NodeOut]
    state: NodeOut | None
    last_checkpoint: CheckpointOut | None
    replayed: int
    live_nodes: int
    problems: list[str]

    @classmethod
    def of(cls, r: RecoveryState) -> RecoverOut:
        return cls(active=None if r.active is None else NodeOut.of(r.active), path=[NodeOut.of(n) for n in r.path],
                   state=None if r.state is None else NodeOut.of(r.state),
                   last_checkpoint=None if r.last_checkpoint is None else CheckpointOut.of(r.last_checkpoint),
                   replayed=r.replayed, live_nodes=r.live_nodes, problems=list(r.problems))


class StatsOut(BaseModel):
    namespace: str
    live: int
    archived: int
    depth: int
    by_type: dict[str, int]
    active_path: list[str]
    last_checkpoint_at: float | None
    log_seq: int

    @classmethod
    def of(cls, s: Stats) -> StatsOut:
        return cls(namespace=s.namespace, live=s.live, archived=s.archived, depth=s.depth, by_type=dict(s.by_type),
                   active_path=list(s.active_path), last_checkpoint_at=s.last_checkpoint_at, log_seq=s.log_seq)


class TreeOut(BaseModel):
    nodes: list[NodeOut]
    active_path: list[str]


class ErrorOut(BaseModel):
    error: str = Field(description="A stable error name (the library's error code).")
    message: str
