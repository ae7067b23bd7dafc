"""The routes that read: get a node, retrieve, recover, stats, the tree, export."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from .deps import Asker, Asks, finite, node_out
from .models import NodeOut, RecallOut, RecoverOut, RetrieveIn, StatsOut, TreeOut

router = APIRouter(tags=["read"])


@router.get("/v1/{namespace}/nodes/{node_id}", response_model=NodeOut)
def get(namespace: str, node_id: str, ask: Asker = Asks) -> NodeOut:
    with ask.memory() as mem:
        return node_out(mem, node_id)


@router.post("/v1/{namespace}/retrieve", response_model=RecallOut)
def retrieve(namespace: str, body: RetrieveIn, ask: Asker = Asks) -> RecallOut:
    """Locate the branch by meaning, rank inside it, return the context within the budget;
    every node carries its scores (``explain`` adds the explanation text)."""
    start = time.perf_counter()
    with ask.memory() as mem:
        recall = mem.retrieve(body.query, k=body.k, budget_tokens=body.budget_tokens, branches=body.branches)
    took = time.perf_counter() - start
    ask.service.metrics.retrieval(namespace, took)
    ask.service.event(event="retrieve", namespace=namespace, session=ask.session, ids=recall.ids,
                      tokens=recall.tokens, ms=round(took * 1000, 2))
    return RecallOut.of(recall, body.explain)


@router.get("/v1/{namespace}/recover", response_model=RecoverOut)
def recover(namespace: str, ask: Asker = Asks) -> RecoverOut:
    with ask.memory() as mem:
        return RecoverOut.of(mem.recover())


@router.get("/v1/{namespace}/stats", response_model=StatsOut)
def stats(namespace: str, ask: Asker = Asks) -> StatsOut:
    with ask.memory() as mem:
        return StatsOut.of(mem.admin.stats())


@router.get("/v1/{namespace}/tree", response_model=TreeOut)
def tree(namespace: str, archived: bool = False, ask: Asker = Asks) -> TreeOut:
    """Every node in tree order with its weight now (archived ones with ``archived``)."""
    with ask.memory() as mem:
        now = time.time()
        nodes = mem.nodes(include_archived=archived)
        active = mem.active
        path = [] if active is None else [n.id for n in mem.path(active)]
        return TreeOut(nodes=[NodeOut.of(n, finite(mem.weight(n, now))) for n in nodes], active_path=path)


@router.get("/v1/{namespace}/export", response_class=FileResponse,
            responses={200: {"content": {"application/x-ndjson": {}}}})
def export(namespace: str, include_log: bool = False, ask: Asker = Asks) -> FileResponse:
    """The namespace as a JSON Lines snapshot (sealed when the memory is encrypted)."""
    fd, name = tempfile.mkstemp(prefix="hm-export-", suffix=".jsonl")
    os.close(fd)
    target = Path(name)
    try:
        with ask.memory() as mem:
            mem.admin.export(target, include_log=include_log)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return FileResponse(target, media_type="application/x-ndjson", filename=f"{namespace}.jsonl",
                        background=BackgroundTask(target.unlink, missing_ok=True))
