"""Which leaves to forget. Pure: the facade applies the plan in one transaction."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence, Set

from .model import Node, NodeType


def plan_forget(
    nodes: Sequence[Node],
    weights: Mapping[str, float],
    protected: Set[str],
    *,
    threshold: float,
    max_nodes: int,
) -> list[tuple[str, float]]:
    """The (id, weight) pairs to prune, in pruning order.

    Only leaves go (nodes without live children), lowest weight first; a parent
    becomes a candidate once its last child is gone, so a subtree is never
    orphaned. A leaf is taken while its weight is under ``threshold``, or while
    more than ``max_nodes`` (when > 0) live nodes remain. Pinned and protected
    nodes (the active path) stay.
    """
    by_id = {n.id: n for n in nodes}
    children = Counter(n.parent_id for n in nodes if n.parent_id is not None)

    def eligible(n: Node) -> bool:
        return children[n.id] == 0 and not n.pinned and n.id not in protected

    heap = [(weights[n.id], n.id) for n in nodes if eligible(n)]
    heapq.heapify(heap)
    live = len(nodes)
    plan: list[tuple[str, float]] = []
    while heap:
        w, node_id = heap[0]
        over_cap = max_nodes > 0 and live > max_nodes
        if w >= threshold and not over_cap:
            break
        heapq.heappop(heap)
        plan.append((node_id, w))
        live -= 1
        parent_id = by_id[node_id].parent_id
        if parent_id is not None and parent_id in by_id:
            children[parent_id] -= 1
            parent = by_id[parent_id]
            if eligible(parent):
                heapq.heappush(heap, (weights[parent_id], parent_id))
    return plan


def superseded_states(nodes: Sequence[Node]) -> set[str]:
    """The ids of the state nodes that a later state of the same branch supersedes."""
    latest: dict[str, Node] = {}
    states = [n for n in nodes if n.type is NodeType.STATE]
    for n in states:
        cur = latest.get(n.branch_id)
        if cur is None or (n.created_at, n.id) > (cur.created_at, cur.id):
            latest[n.branch_id] = n
    return {n.id for n in states if latest[n.branch_id].id != n.id}
