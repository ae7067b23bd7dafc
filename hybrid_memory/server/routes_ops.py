"""The routes for operators: ``/healthz`` (no key) and ``/metrics`` (Prometheus text)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from ..model import Stats
from .deps import BUCKETS, Metrics, Service, Session, Svc, holder
from .keys import ApiKey

router = APIRouter(tags=["ops"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus(who: ApiKey = Depends(holder), session: str = Session,  # noqa: B008
               svc: Service = Svc) -> PlainTextResponse:
    """Prometheus text format for the key's namespace: node counts, depth, outbox
    backlog, age of the last checkpoint, retrieval latency, requests by route."""
    with svc.memory(who, session) as mem:
        s = mem.admin.stats()
        with mem.store.reading() as conn:
            pending = mem.store.outbox.pending_count(conn, mem.namespace)
    lines = _gauges(who.namespace, s, pending) + _traffic(who.namespace, svc.metrics)
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


def _gauges(namespace: str, s: Stats, pending: int) -> list[str]:
    ns = _label(namespace)
    return [
        "# HELP hm_nodes Nodes of the namespace by status.", "# TYPE hm_nodes gauge",
        f'hm_nodes{{namespace="{ns}",status="live"}} {s.live}',
        f'hm_nodes{{namespace="{ns}",status="archived"}} {s.archived}',
        "# HELP hm_tree_depth Depth of the deepest live node.", "# TYPE hm_tree_depth gauge",
        f'hm_tree_depth{{namespace="{ns}"}} {s.depth}',
        "# HELP hm_outbox_pending Index writes waiting in the outbox.", "# TYPE hm_outbox_pending gauge",
        f'hm_outbox_pending{{namespace="{ns}"}} {pending}',
        "# HELP hm_last_checkpoint_age_seconds Seconds since the session's last checkpoint (-1: none).",
        "# TYPE hm_last_checkpoint_age_seconds gauge",
        f'hm_last_checkpoint_age_seconds{{namespace="{ns}"}} '
        f"{-1 if s.last_checkpoint_at is None else round(max(0.0, time.time() - s.last_checkpoint_at), 3)}",
    ]


def _traffic(namespace: str, metrics: Metrics) -> list[str]:
    """The retrieval latency histogram of the namespace, and requests by route."""
    ns = _label(namespace)
    lines = ["# HELP hm_retrieve_seconds Retrieval latency, query embedding included.",
             "# TYPE hm_retrieve_seconds histogram"]
    counts = metrics.retrieve_counts.get(namespace, [0] * (len(BUCKETS) + 1))
    for bound, n in zip(BUCKETS, counts, strict=False):
        lines.append(f'hm_retrieve_seconds_bucket{{namespace="{ns}",le="{bound}"}} {n}')
    lines += [f'hm_retrieve_seconds_bucket{{namespace="{ns}",le="+Inf"}} {counts[-1]}',
              f'hm_retrieve_seconds_sum{{namespace="{ns}"}} {metrics.retrieve_sum.get(namespace, 0.0):.6f}',
              f'hm_retrieve_seconds_count{{namespace="{ns}"}} {counts[-1]}',
              "# HELP hm_http_requests_total Requests by route and status.", "# TYPE hm_http_requests_total counter"]
    for (route, status), n in sorted(metrics.requests.items()):
        lines.append(f'hm_http_requests_total{{route="{_label(route)}",status="{status}"}} {n}')
    return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
