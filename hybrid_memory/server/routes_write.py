"""The routes that write memories: add, add many, place, update, move, focus, feedback,
summarize, finish, ingest."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..items import ROOT, parent_named
from .deps import Asker, Asks
from .models import (
    AddIn,
    BatchIn,
    FeedbackIn,
    IngestIn,
    IngestOut,
    MoveIn,
    NodeOut,
    PlaceIn,
    PlacementOut,
    SummarizeIn,
    UpdateIn,
)

router = APIRouter(tags=["write"])


@router.post("/v1/{namespace}/nodes", response_model=NodeOut, status_code=201)
def add(namespace: str, body: AddIn, ask: Asker = Asks) -> NodeOut:
    """Write one memory (under ``parent``, or the active node; ``root`` starts a new tree;
    ``parent: "auto"`` places it under the task branch it reads closest to)."""
    with ask.memory() as mem:
        parent: Any = ROOT if body.root else parent_named(body.parent)
        node = mem.add(body.content, type=body.type, parent=parent, importance=body.importance,
                       confidence=body.confidence, meta=body.meta, ts=body.ts, pinned=body.pinned)
        return NodeOut.of(node)


@router.post("/v1/{namespace}/nodes/batch", response_model=list[NodeOut], status_code=201)
def add_many(namespace: str, body: BatchIn, ask: Asker = Asks) -> list[NodeOut]:
    """Write several memories in one transaction (all or none)."""
    items = []
    for it in body.items:
        item = it.model_dump(exclude_none=True)
        if item.pop("root", False):
            item["parent"] = ROOT
        elif "parent" in item:
            item["parent"] = parent_named(item["parent"])
        items.append(item)
    with ask.memory() as mem:
        return [NodeOut.of(n) for n in mem.add_many(items)]


@router.post("/v1/{namespace}/place", response_model=PlacementOut)
def place(namespace: str, body: PlaceIn, ask: Asker = Asks) -> PlacementOut:
    """Where a memory would go with ``parent: "auto"``, and why. Writes nothing."""
    with ask.memory() as mem:
        return PlacementOut.of(mem.place(body.content))


@router.patch("/v1/{namespace}/nodes/{node_id}", response_model=NodeOut)
def update(namespace: str, node_id: str, body: UpdateIn, ask: Asker = Asks) -> NodeOut:
    """Change a node's content, weights or meta (409 with a stale ``expected_version``)."""
    with ask.memory() as mem:
        node = NodeOut.of(mem.update(node_id, **body.model_dump(exclude_none=True)))
        ask.service.event(event="weights", namespace=namespace, id=node.id, importance=node.importance,
                          confidence=node.confidence, via="update")
        return node


@router.post("/v1/{namespace}/nodes/{node_id}/move", response_model=NodeOut)
def move(namespace: str, node_id: str, body: MoveIn, ask: Asker = Asks) -> NodeOut:
    with ask.memory() as mem:
        return NodeOut.of(mem.move(node_id, ROOT if body.parent is None else body.parent))


@router.post("/v1/{namespace}/nodes/{node_id}/focus", response_model=NodeOut)
def focus(namespace: str, node_id: str, ask: Asker = Asks) -> NodeOut:
    """Make the node the session's active one."""
    with ask.memory() as mem:
        return NodeOut.of(mem.focus(node_id))


@router.post("/v1/{namespace}/nodes/{node_id}/feedback", response_model=NodeOut)
def feedback(namespace: str, node_id: str, body: FeedbackIn, ask: Asker = Asks) -> NodeOut:
    """Raise (or set) a node's importance and confidence."""
    args = body.model_dump(exclude_none=True)
    with ask.memory() as mem:
        node = NodeOut.of(mem.feedback(node_id, **args))
        ask.service.event(event="weights", namespace=namespace, id=node.id, importance=node.importance,
                          confidence=node.confidence, via="feedback")
        return node


@router.post("/v1/{namespace}/nodes/{node_id}/summarize", response_model=NodeOut, status_code=201)
def summarize(namespace: str, node_id: str, body: SummarizeIn | None = None, ask: Asker = Asks) -> NodeOut:
    """Write a ``summary`` node under the node of the live memories below it (the default
    extractive summarizer, within ``budget_tokens``) and return it. Its meta lists what it
    ``covers``; a new summary of the node archives the one before."""
    with ask.memory() as mem:
        return NodeOut.of(mem.summarize(node_id, budget_tokens=None if body is None else body.budget_tokens))


@router.post("/v1/{namespace}/nodes/{node_id}/finish", response_model=NodeOut, status_code=201)
def finish(namespace: str, node_id: str, body: SummarizeIn | None = None, ask: Asker = Asks) -> NodeOut:
    """Mark a task finished (its meta gets ``finished_at`` and ``summary_id``) and summarize
    it; returns the summary. A node that is not a task is refused (400 ``invalid_input``)."""
    with ask.memory() as mem:
        return NodeOut.of(mem.finish(node_id, budget_tokens=None if body is None else body.budget_tokens))


@router.post("/v1/{namespace}/ingest", response_model=IngestOut)
def ingest(namespace: str, body: IngestIn, ask: Asker = Asks) -> IngestOut:
    """Write a chat transcript or document: each session a task, each message an event
    under it at its original time. A transcript that cannot be read is refused (400
    ``invalid_transcript``, naming the line) and nothing of it is written; what an
    earlier ingest of the same name wrote is not written again."""
    with ask.memory() as mem:
        return IngestOut.of(mem.ingest(text=body.text, name=body.name, format=body.format,
                                       parent=parent_named(body.parent), dry_run=body.dry_run))
