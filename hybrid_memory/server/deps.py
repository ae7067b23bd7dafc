"""What every route of the service shares: the service's state (open handles,
metrics, keys), and the dependencies that say who asks (an API key, checked against
the route's namespace) and in which session (``X-Session``, default ``main``).

The routers (``routes_*.py``) take an :class:`Asker` and open the memory with
``ask.memory()``; :func:`~hybrid_memory.server.app.create_app` puts the
:class:`Service` on ``app.state.service``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Header, Request

from .. import _validate as check
from ..errors import InvalidInputError
from ..tree import MemoryTree
from .keys import ApiKey, KeyFile
from .models import NodeOut

#: Upper bounds (seconds) of the retrieval latency histogram's buckets.
BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
log = logging.getLogger("hybrid_memory.service")


class HttpError(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


class Metrics:
    """Counters and the retrieval histogram, in Prometheus' text format."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.retrieve_counts: dict[str, list[int]] = {}
        self.retrieve_sum: dict[str, float] = {}

    def request(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[(route, status)] = self.requests.get((route, status), 0) + 1

    def retrieval(self, namespace: str, seconds: float) -> None:
        with self._lock:
            counts = self.retrieve_counts.setdefault(namespace, [0] * (len(BUCKETS) + 1))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            counts[-1] += 1
            self.retrieve_sum[namespace] = self.retrieve_sum.get(namespace, 0.0) + seconds


class Handles:
    """One MemoryTree per (namespace, role, session), opened on first use and shared by
    requests (one at a time each: a handle buffers reads and index writes)."""

    def __init__(self, opener: Callable[[str, str, str], MemoryTree]) -> None:
        self._opener = opener
        self._open: dict[tuple[str, str, str], tuple[MemoryTree, threading.Lock]] = {}
        self._lock = threading.Lock()

    @contextmanager
    def use(self, namespace: str, role: str, session: str) -> Iterator[MemoryTree]:
        key = (namespace, role, session)
        with self._lock:
            got = self._open.get(key)
            if got is None:
                got = (self._opener(namespace, role, session), threading.Lock())
                self._open[key] = got
        mem, lock = got
        with lock:
            yield mem

    def namespaces(self) -> set[str]:
        with self._lock:
            return {ns for ns, _, _ in self._open}

    def close(self) -> None:
        with self._lock:
            for mem, lock in self._open.values():
                with lock:
                    mem.close()
            self._open.clear()


@dataclass(frozen=True)
class Service:
    """The state of one app: its keys, open handles and metrics."""

    keys: KeyFile
    handles: Handles
    metrics: Metrics
    log_json: bool = False

    @contextmanager
    def memory(self, who: ApiKey, session: str) -> Iterator[MemoryTree]:
        with self.handles.use(who.namespace, who.role, session) as mem:
            yield mem

    def event(self, **fields: Any) -> None:
        """Log one event as a JSON line (with ``serve --log-json``)."""
        if self.log_json:
            log.info(json.dumps(fields, ensure_ascii=False, sort_keys=True))


def service(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc


def holder(request: Request, authorization: str | None = Header(default=None),
           x_api_key: str | None = Header(default=None)) -> ApiKey:
    """The key presented, whatever namespace the route names."""
    token = x_api_key
    if token is None and authorization is not None:
        scheme, _, value = authorization.partition(" ")
        token = value.strip() if scheme.lower() == "bearer" else None
    if not token:
        raise HttpError(401, "unauthenticated", "give an API key: Authorization: Bearer <key> or X-API-Key")
    who = service(request).keys.lookup(token)
    if who is None:
        raise HttpError(401, "unauthenticated", "unknown API key")
    return who


def caller(namespace: str, who: ApiKey = Depends(holder)) -> ApiKey:  # noqa: B008
    """The key presented, checked to be bound to the route's namespace."""
    try:
        check.namespace(namespace)
    except InvalidInputError as exc:
        raise HttpError(400, "invalid_input", str(exc)) from None
    if who.namespace != namespace:
        raise HttpError(403, "namespace_forbidden", "this key is bound to another namespace")
    return who


def session_of(x_session: str | None = Header(default=None)) -> str:
    value = x_session or "main"
    try:
        return check.namespace(value, "session")
    except InvalidInputError as exc:
        raise HttpError(400, "invalid_input", str(exc)) from None


Who = Depends(caller)
Session = Depends(session_of)
Svc = Depends(service)


@dataclass(frozen=True)
class Asker:
    """Who asks a ``/v1/{namespace}`` route (their key), in which session, of which service."""

    who: ApiKey
    session: str
    service: Service

    @contextmanager
    def memory(self) -> Iterator[MemoryTree]:
        """The asker's handle on the memory, held (alone) for the ``with`` block."""
        with self.service.memory(self.who, self.session) as mem:
            yield mem


def asker(who: ApiKey = Who, session: str = Session, svc: Service = Svc) -> Asker:
    return Asker(who, session, svc)


Asks = Depends(asker)


def node_out(mem: MemoryTree, node_id: str) -> NodeOut:
    return NodeOut.of(mem.get(node_id))


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
