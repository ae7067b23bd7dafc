"""The routes that end or keep a memory's life: archive, unarchive, delete, erase,
forget, checkpoint."""

from __future__ import annotations

from fastapi import APIRouter

from .deps import Asker, Asks
from .models import CheckpointIn, CheckpointOut, CountOut, ForgetIn, ForgetOut, IdsOut, NodeOut

router = APIRouter()


@router.post("/v1/{namespace}/nodes/{node_id}/archive", response_model=IdsOut, tags=["write"])
def archive(namespace: str, node_id: str, ask: Asker = Asks) -> IdsOut:
    with ask.memory() as mem:
        return IdsOut(ids=mem.archive(node_id))


@router.post("/v1/{namespace}/nodes/{node_id}/unarchive", response_model=NodeOut, tags=["write"])
def unarchive(namespace: str, node_id: str, ask: Asker = Asks) -> NodeOut:
    """Bring an archived node back, with its archived ancestors and what was archived with it."""
    with ask.memory() as mem:
        return NodeOut.of(mem.unarchive(node_id))


@router.post("/v1/{namespace}/nodes/{node_id}/restore", response_model=NodeOut, tags=["write"],
             deprecated=True)
def restore(namespace: str, node_id: str, ask: Asker = Asks) -> NodeOut:
    """Deprecated: ``POST .../nodes/{node_id}/unarchive``, which this does."""
    return unarchive(namespace, node_id, ask)


@router.delete("/v1/{namespace}/nodes/{node_id}", response_model=IdsOut, tags=["write"])
def delete(namespace: str, node_id: str, ask: Asker = Asks) -> IdsOut:
    """Delete a subtree (rows, index, the content kept in the log)."""
    with ask.memory() as mem:
        return IdsOut(ids=mem.delete(node_id))


@router.post("/v1/{namespace}/nodes/{node_id}/erase", response_model=IdsOut, tags=["admin"])
def erase(namespace: str, node_id: str, ask: Asker = Asks) -> IdsOut:
    """Erase a subtree everywhere and compact the store (admin)."""
    with ask.memory() as mem:
        return IdsOut(ids=mem.admin.erase(node_id))


@router.post("/v1/{namespace}/erase", response_model=CountOut, tags=["admin"])
def erase_namespace(namespace: str, ask: Asker = Asks) -> CountOut:
    """Erase the whole namespace everywhere (admin)."""
    with ask.memory() as mem:
        return CountOut(nodes=mem.admin.erase_namespace())


@router.post("/v1/{namespace}/forget", response_model=ForgetOut, tags=["write"])
def forget(namespace: str, body: ForgetIn, ask: Asker = Asks) -> ForgetOut:
    """Prune low-weight leaves (archive by default; ``dry_run`` to see the plan)."""
    with ask.memory() as mem:
        return ForgetOut.of(mem.forget(**body.model_dump(exclude_none=True)))


@router.post("/v1/{namespace}/checkpoint", response_model=CheckpointOut, status_code=201, tags=["write"])
def checkpoint(namespace: str, body: CheckpointIn, ask: Asker = Asks) -> CheckpointOut:
    with ask.memory() as mem:
        return CheckpointOut.of(mem.checkpoint(body.note))
