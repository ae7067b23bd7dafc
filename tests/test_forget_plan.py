"""The forget planner (forgetting.plan_forget) against its plain definition: one
heap of every leaf, the lowest weight first, a parent joining once its last child
is gone. The planner is written for a million nodes (a sorted start and a small
heap); on random forests it must choose exactly what the definition chooses."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from hybrid_memory.forgetting import alone_shares, heading_factors, plan_forget, superseded_ids


def reference(ids, parents, weights, keep, *, threshold, max_nodes):
    by_id = dict(zip(ids, range(len(ids)), strict=True))
    children = {i: 0 for i in ids}
    for p in parents:
        if p is not None and p in by_id:
            children[p] += 1
    heap = [(weights[k], i) for k, i in enumerate(ids) if children[i] == 0 and not keep[k]]
    heapq.heapify(heap)
    live, plan = len(ids), []
    while heap:
        w, i = heap[0]
        if w >= threshold and not (max_nodes > 0 and live > max_nodes):
            break
        heapq.heappop(heap)
        plan.append((i, w))
        live -= 1
        p = parents[by_id[i]]
        if p is not None and p in by_id:
            children[p] -= 1
            if children[p] == 0 and not keep[by_id[p]]:
                heapq.heappush(heap, (weights[by_id[p]], p))
    return plan


def forest(rng: random.Random, n: int):
    ids = [f"{rng.getrandbits(32):08x}{k:04d}" for k in range(n)]
    parents = [None if k == 0 or rng.random() < 0.1 else ids[rng.randrange(k)] for k in range(n)]
    # Coarse weights make ties, which the id must break the same way.
    weights = [round(rng.random(), 1) for _ in range(n)]
    keep = [rng.random() < 0.1 for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)  # the store returns rows in any order
    return ([ids[k] for k in order], [parents[k] for k in order], [weights[k] for k in order],
            [keep[k] for k in order])


@pytest.mark.parametrize("seed", range(40))
def test_the_planner_chooses_what_the_definition_chooses(seed: int) -> None:
    rng = random.Random(seed)
    ids, parents, weights, keep = forest(rng, rng.randrange(1, 300))
    for threshold, cap in ((0.35, 0), (0.0, len(ids) // 2), (0.5, len(ids) // 3), (1.1, 0), (0.0, 1)):
        got = plan_forget(ids, parents, weights, keep, threshold=threshold, max_nodes=cap)
        assert got == reference(ids, parents, weights, keep, threshold=threshold, max_nodes=cap)
        gone = {i for i, _ in got}
        # Never a kept node, never a parent before its children.
        assert not {ids[k] for k, kept in enumerate(keep) if kept} & gone
        position = {i: n for n, (i, _) in enumerate(got)}
        for i, p in zip(ids, parents, strict=True):
            if p in position:
                assert i in position and position[i] < position[p]


def test_a_parent_freed_on_the_way_goes_before_heavier_leaves() -> None:
    ids = ["root", "leaf", "heavy"]
    parents = [None, "root", None]
    plan = plan_forget(ids, parents, [0.05, 0.1, 0.3], [False, False, False], threshold=1.0, max_nodes=0)
    assert [i for i, _ in plan] == ["leaf", "root", "heavy"]


def test_the_latest_state_of_a_branch_supersedes_the_others() -> None:
    rows = [("a", "b1", 1.0), ("b", "b1", 3.0), ("c", "b1", 2.0), ("d", "b2", 1.0), ("e", "b3", 5.0), ("f", "b3", 5.0)]
    assert superseded_ids(rows) == {"a", "c", "e"}


def test_heading_factors_weigh_an_empty_task_and_a_task_s_last_memory() -> None:
    # rows: 0 task (two children), 1 fact under 0, 2 event under 0, 3 task (one child),
    # 4 fact under 3, 5 task whose memories were forgotten, 6 new task (nothing under it
    # yet), 7 event (one child), 8 fact under 7 (its parent is no task), 9 fact whose
    # parent is not live (-1).
    parent_row = np.array([-1, 0, 0, -1, 3, -1, -1, 7, -1, -1])
    is_task = np.array([True, False, False, True, False, True, True, False, False, False])
    live_children = np.bincount(parent_row[parent_row >= 0], minlength=len(parent_row))
    is_empty = is_task & ((live_children > 0) | (np.arange(10) == 5))
    out = heading_factors(np.arange(10), parent_row, live_children, is_empty, is_task,
                          empty_task=0.5, last_in_task=0.9)
    assert out.tolist() == pytest.approx([0.5, 1.0, 1.0, 0.5, 0.9, 0.5, 1.0, 1.0, 1.0, 1.0])
    # A subset of rows gets its own shares; shares of 1 change nothing.
    assert heading_factors(np.array([4, 1, 6]), parent_row, live_children, is_empty, is_task,
                           empty_task=0.5, last_in_task=0.9).tolist() == pytest.approx([0.9, 1.0, 1.0])
    assert heading_factors(np.arange(10), parent_row, live_children, is_empty, is_task,
                           empty_task=1.0, last_in_task=1.0).tolist() == [1.0] * 10
    # A task that is the last child of a task takes both shares.
    nested = np.array([-1, 0])
    both = heading_factors(np.arange(2), nested, np.bincount(nested[nested >= 0], minlength=2),
                           np.array([True, True]), np.array([True, True]), empty_task=0.5, last_in_task=0.9)
    assert both.tolist() == pytest.approx([0.5, 0.45])


def test_a_memory_the_pass_leaves_alone_under_its_task_drops_and_may_go() -> None:
    # A task with two memories under a threshold of 0.7: the light one goes; the
    # other (0.75) is then the task's last memory, weighs 0.75 * 0.9 = 0.675 and goes
    # too, at that weight; the task, empty, follows at the weight it was given.
    ids = ["task", "light", "heavy", "other"]
    parents = [None, "task", "task", None]
    weights = [0.3, 0.5, 0.75, 0.8]
    keep = [False] * 4
    is_task = np.array([True, False, False, False])
    parent_row = np.array([-1, 0, 0, -1])
    alone = alone_shares(parent_row, is_task, 0.9)
    assert alone.tolist() == [1.0, 0.9, 0.9, 1.0]
    plan = plan_forget(ids, parents, weights, keep, threshold=0.7, max_nodes=0, alone=alone)
    assert [i for i, _ in plan] == ["light", "heavy", "task"]
    assert [w for _, w in plan] == pytest.approx([0.5, 0.675, 0.3])
    # Without the shares, or under a task the heavy memory does not fall under: it stays.
    assert [i for i, _ in plan_forget(ids, parents, weights, keep, threshold=0.7, max_nodes=0)] == ["light"]
    assert [i for i, _ in plan_forget(ids, parents, [0.3, 0.5, 0.8, 0.8], keep, threshold=0.7, max_nodes=0,
                                      alone=alone)] == ["light"]
    # Under a node that is no task nothing changes.
    plain = alone_shares(parent_row, np.zeros(4, dtype=bool), 0.9)
    assert [i for i, _ in plan_forget(ids, parents, weights, keep, threshold=0.7, max_nodes=0, alone=plain)] == ["light"]
    # A pass to a cap counts the dropped weight in its order: heavy now goes before other.
    capped = plan_forget(ids, parents, [0.3, 0.5, 0.75, 0.72], keep, threshold=0.0, max_nodes=1, alone=alone)
    assert [i for i, _ in capped] == ["light", "heavy", "task"]
