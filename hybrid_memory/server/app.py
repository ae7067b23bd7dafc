"""The FastAPI application of ``hybrid-memory serve``.

Every route but ``/healthz`` and the inspector's static files takes an API key
(``Authorization: Bearer <key>`` or ``X-API-Key``), bound to one namespace and one
role: a request for another namespace is refused (403 ``namespace_forbidden``), and
the key's role is the handle's role, so the library refuses what the role does not
allow (403 ``access_denied``). ``X-Session`` names the agent session (default
``main``). Library errors map to stable statuses (see ``STATUS``); their ``code`` is
the response's ``error``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.background import BackgroundTask

from .. import _validate as check
from ..config import Config
from ..crypto import Keyring
from ..embed import Embedder, make_embedder
from ..errors import HybridMemoryError, InvalidInputError
from ..tree import MemoryTree
from ..writing import ROOT
from .keys import ApiKey, KeyFile
from .models import (
    AddIn,
    BatchIn,
    CheckpointIn,
    CheckpointOut,
    CountOut,
    ErrorOut,
    FeedbackIn,
    ForgetIn,
    ForgetOut,
    IdsOut,
    MoveIn,
    NodeOut,
    RecallOut,
    RecoverOut,
    RetrieveIn,
    StatsOut,
    TreeOut,
    UpdateIn,
)

T = TypeVar("T")
log = logging.getLogger("hybrid_memory.service")

#: HTTP status of each library error code (anything else of the library: 500).
STATUS = {
    "invalid_input": 400, "invalid_content": 400, "invalid_weight": 400, "invalid_type": 400, "cycle": 400,
    "bad_snapshot": 400, "not_found": 404, "namespace_mismatch": 403, "access_denied": 403, "conflict": 409,
    "closed": 503, "storage": 503, "config": 500, "encryption_key": 500,
}
#: Upper bounds (seconds) of the retrieval latency histogram's buckets.
BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
STATIC = Path(__file__).resolve().parent / "static"


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


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


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


def create_app(
    *,
    keys: KeyFile,
    path: str | os.PathLike[str] | None = None,
    store: str | None = None,
    chroma_url: str | None = None,
    config: Config | None = None,
    key: Keyring | None = None,
    embedder: Embedder | None = None,
    log_json: bool = False,
) -> FastAPI:
    """The service over the memory at ``path`` (or ``store`` / ``chroma_url``)."""
    cfg = config or Config.load()
    shared: dict[str, Embedder] = {}
    if embedder is not None:
        shared["e"] = embedder

    def opener(namespace: str, role: str, session: str) -> MemoryTree:
        if "e" not in shared:
            shared["e"] = make_embedder(cfg.embedding)
        return MemoryTree.open(path, namespace=namespace, session=session, role=role, config=cfg,
                               store=store, chroma_url=chroma_url, key=key, embedder=shared["e"],
                               actor=f"{role}:{session}")

    handles = Handles(opener)
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        yield
        handles.close()

    app = FastAPI(
        title="hybrid_memory", version="1",
        description="A weighted memory tree for long-running agents, over HTTP. Every /v1 route takes an API key "
                    "bound to one namespace and one role.",
        lifespan=lifespan,
        responses={400: {"model": ErrorOut}, 401: {"model": ErrorOut}, 403: {"model": ErrorOut},
                   404: {"model": ErrorOut}, 409: {"model": ErrorOut}, 422: {"model": ErrorOut}},
    )
    app.state.handles = handles
    app.state.metrics = metrics

    def event(**fields: Any) -> None:
        if log_json:
            log.info(json.dumps(fields, ensure_ascii=False, sort_keys=True))

    # -- errors -------------------------------------------------------------------

    @app.exception_handler(HybridMemoryError)
    async def library_error(request: Request, exc: HybridMemoryError) -> JSONResponse:
        code = getattr(exc, "code", "hybrid_memory_error")
        return JSONResponse({"error": code, "message": str(exc)}, status_code=STATUS.get(code, 500))

    @app.exception_handler(HttpError)
    async def http_error(request: Request, exc: HttpError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"error": exc.error, "message": exc.message}, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors())
        return JSONResponse({"error": "invalid_request", "message": detail[:2000]}, status_code=422)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response: Response = await call_next(request)
        route = request.scope.get("route")
        metrics.request(getattr(route, "path", "unmatched"), response.status_code)
        return response

    # -- who is asking ------------------------------------------------------------

    def holder(authorization: str | None = Header(default=None),
               x_api_key: str | None = Header(default=None)) -> ApiKey:
        """The key presented, whatever namespace the route names."""
        token = x_api_key
        if token is None and authorization is not None:
            scheme, _, value = authorization.partition(" ")
            token = value.strip() if scheme.lower() == "bearer" else None
        if not token:
            raise HttpError(401, "unauthenticated", "give an API key: Authorization: Bearer <key> or X-API-Key")
        who = keys.lookup(token)
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

    @contextmanager
    def memory(who: ApiKey, session: str) -> Iterator[MemoryTree]:
        with handles.use(who.namespace, who.role, session) as mem:
            yield mem

    Who = Depends(caller)
    Session = Depends(session_of)

    def node_out(mem: MemoryTree, node_id: str) -> NodeOut:
        return NodeOut.of(mem.get(node_id))

    # -- writes -------------------------------------------------------------------

    @app.post("/v1/{namespace}/nodes", response_model=NodeOut, status_code=201, tags=["write"])
    def add(namespace: str, body: AddIn, who: ApiKey = Who, session: str = Session) -> NodeOut:
        """Write one memory (under ``parent``, or the active node; ``root`` starts a new tree)."""
        with memory(who, session) as mem:
            parent: Any = ROOT if body.root else body.parent
            node = mem.add(body.content, type=body.type, parent=parent, importance=body.importance,
                           confidence=body.confidence, meta=body.meta, ts=body.ts, pinned=body.pinned)
            return NodeOut.of(node)

    @app.post("/v1/{namespace}/nodes/batch", response_model=list[NodeOut], status_code=201, tags=["write"])
    def add_many(namespace: str, body: BatchIn, who: ApiKey = Who, session: str = Session) -> list[NodeOut]:
        """Write several memories in one transaction (all or none)."""
        items = []
        for it in body.items:
            item = it.model_dump(exclude_none=True)
            if item.pop("root", False):
                item["parent"] = ROOT
            items.append(item)
        with memory(who, session) as mem:
            return [NodeOut.of(n) for n in mem.add_many(items)]

    @app.patch("/v1/{namespace}/nodes/{node_id}", response_model=NodeOut, tags=["write"])
    def update(namespace: str, node_id: str, body: UpdateIn, who: ApiKey = Who, session: str = Session) -> NodeOut:
        """Change a node's content, weights or meta (409 with a stale ``expected_version``)."""
        with memory(who, session) as mem:
            node = NodeOut.of(mem.update(node_id, **body.model_dump(exclude_none=True)))
            event(event="weights", namespace=namespace, id=node.id, importance=node.importance,
                  confidence=node.confidence, via="update")
            return node

    @app.post("/v1/{namespace}/nodes/{node_id}/move", response_model=NodeOut, tags=["write"])
    def move(namespace: str, node_id: str, body: MoveIn, who: ApiKey = Who, session: str = Session) -> NodeOut:
        with memory(who, session) as mem:
            return NodeOut.of(mem.move(node_id, ROOT if body.parent is None else body.parent))

    @app.post("/v1/{namespace}/nodes/{node_id}/focus", response_model=NodeOut, tags=["write"])
    def focus(namespace: str, node_id: str, who: ApiKey = Who, session: str = Session) -> NodeOut:
        """Make the node the session's active one."""
        with memory(who, session) as mem:
            return NodeOut.of(mem.focus(node_id))

    @app.post("/v1/{namespace}/nodes/{node_id}/feedback", response_model=NodeOut, tags=["write"])
    def feedback(namespace: str, node_id: str, body: FeedbackIn, who: ApiKey = Who,
                 session: str = Session) -> NodeOut:
        """Raise (or set) a node's importance and confidence."""
        args = body.model_dump(exclude_none=True)
        with memory(who, session) as mem:
            node = NodeOut.of(mem.feedback(node_id, **args))
            event(event="weights", namespace=namespace, id=node.id, importance=node.importance,
                  confidence=node.confidence, via="feedback")
            return node

    @app.post("/v1/{namespace}/nodes/{node_id}/archive", response_model=IdsOut, tags=["write"])
    def archive(namespace: str, node_id: str, who: ApiKey = Who, session: str = Session) -> IdsOut:
        with memory(who, session) as mem:
            return IdsOut(ids=mem.archive(node_id))

    @app.post("/v1/{namespace}/nodes/{node_id}/restore", response_model=NodeOut, tags=["write"])
    def restore(namespace: str, node_id: str, who: ApiKey = Who, session: str = Session) -> NodeOut:
        with memory(who, session) as mem:
            return NodeOut.of(mem.unarchive(node_id))

    @app.delete("/v1/{namespace}/nodes/{node_id}", response_model=IdsOut, tags=["write"])
    def delete(namespace: str, node_id: str, who: ApiKey = Who, session: str = Session) -> IdsOut:
        """Delete a subtree (rows, index, the content kept in the log)."""
        with memory(who, session) as mem:
            return IdsOut(ids=mem.delete(node_id))

    @app.post("/v1/{namespace}/nodes/{node_id}/erase", response_model=IdsOut, tags=["admin"])
    def erase(namespace: str, node_id: str, who: ApiKey = Who, session: str = Session) -> IdsOut:
        """Erase a subtree everywhere and compact the store (admin)."""
        with memory(who, session) as mem:
            return IdsOut(ids=mem.erase(node_id))

    @app.post("/v1/{namespace}/erase", response_model=CountOut, tags=["admin"])
    def erase_namespace(namespace: str, who: ApiKey = Who, session: str = Session) -> CountOut:
        """Erase the whole namespace everywhere (admin)."""
        with memory(who, session) as mem:
            return CountOut(nodes=mem.erase_namespace())

    @app.post("/v1/{namespace}/forget", response_model=ForgetOut, tags=["write"])
    def forget(namespace: str, body: ForgetIn, who: ApiKey = Who, session: str = Session) -> ForgetOut:
        """Prune low-weight leaves (archive by default; ``dry_run`` to see the plan)."""
        with memory(who, session) as mem:
            return ForgetOut.of(mem.forget(**body.model_dump(exclude_none=True)))

    @app.post("/v1/{namespace}/checkpoint", response_model=CheckpointOut, status_code=201, tags=["write"])
    def checkpoint(namespace: str, body: CheckpointIn, who: ApiKey = Who, session: str = Session) -> CheckpointOut:
        with memory(who, session) as mem:
            return CheckpointOut.of(mem.checkpoint(body.note))

    # -- reads --------------------------------------------------------------------

    @app.get("/v1/{namespace}/nodes/{node_id}", response_model=NodeOut, tags=["read"])
    def get(namespace: str, node_id: str, who: ApiKey = Who, session: str = Session) -> NodeOut:
        with memory(who, session) as mem:
            return node_out(mem, node_id)

    @app.post("/v1/{namespace}/retrieve", response_model=RecallOut, tags=["read"])
    def retrieve(namespace: str, body: RetrieveIn, who: ApiKey = Who, session: str = Session) -> RecallOut:
        """Locate the branch by meaning, rank inside it, return the context within the budget;
        every node carries its scores (``explain`` adds the explanation text)."""
        start = time.perf_counter()
        with memory(who, session) as mem:
            recall = mem.retrieve(body.query, k=body.k, budget_tokens=body.budget_tokens, branches=body.branches)
        took = time.perf_counter() - start
        metrics.retrieval(namespace, took)
        event(event="retrieve", namespace=namespace, session=session, ids=recall.ids, tokens=recall.tokens,
              ms=round(took * 1000, 2))
        return RecallOut.of(recall, body.explain)

    @app.get("/v1/{namespace}/recover", response_model=RecoverOut, tags=["read"])
    def recover(namespace: str, who: ApiKey = Who, session: str = Session) -> RecoverOut:
        with memory(who, session) as mem:
            return RecoverOut.of(mem.recover())

    @app.get("/v1/{namespace}/stats", response_model=StatsOut, tags=["read"])
    def stats(namespace: str, who: ApiKey = Who, session: str = Session) -> StatsOut:
        with memory(who, session) as mem:
            return StatsOut.of(mem.stats())

    @app.get("/v1/{namespace}/tree", response_model=TreeOut, tags=["read"])
    def tree(namespace: str, archived: bool = False, who: ApiKey = Who, session: str = Session) -> TreeOut:
        """Every node in tree order with its weight now (archived ones with ``archived``)."""
        with memory(who, session) as mem:
            now = time.time()
            nodes = mem.nodes(include_archived=archived)
            active = mem.active
            path = [] if active is None else [n.id for n in mem.path(active)]
            return TreeOut(nodes=[NodeOut.of(n, _finite(mem.weight(n, now))) for n in nodes], active_path=path)

    @app.get("/v1/{namespace}/export", tags=["read"], response_class=FileResponse,
             responses={200: {"content": {"application/x-ndjson": {}}}})
    def export(namespace: str, include_log: bool = False, who: ApiKey = Who, session: str = Session) -> FileResponse:
        """The namespace as a JSON Lines snapshot (sealed when the memory is encrypted)."""
        fd, name = tempfile.mkstemp(prefix="hm-export-", suffix=".jsonl")
        os.close(fd)
        target = Path(name)
        try:
            with memory(who, session) as mem:
                mem.export(target, include_log=include_log)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        return FileResponse(target, media_type="application/x-ndjson", filename=f"{namespace}.jsonl",
                            background=BackgroundTask(target.unlink, missing_ok=True))

    # -- operations ---------------------------------------------------------------

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["ops"])
    def prometheus(who: ApiKey = Depends(holder), session: str = Session) -> PlainTextResponse:  # noqa: B008
        """Prometheus text format for the key's namespace: node counts, depth, outbox
        backlog, age of the last checkpoint, retrieval latency, requests by route."""
        namespace = who.namespace
        with memory(who, session) as mem:
            s = mem.stats()
            with mem.store.reading() as conn:
                pending = mem.store.outbox.pending_count(conn, mem.namespace)
        ns = _label(namespace)
        lines = [
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
            "# HELP hm_retrieve_seconds Retrieval latency, query embedding included.",
            "# TYPE hm_retrieve_seconds histogram",
        ]
        counts = metrics.retrieve_counts.get(namespace, [0] * (len(BUCKETS) + 1))
        for bound, n in zip(BUCKETS, counts, strict=False):
            lines.append(f'hm_retrieve_seconds_bucket{{namespace="{ns}",le="{bound}"}} {n}')
        lines += [f'hm_retrieve_seconds_bucket{{namespace="{ns}",le="+Inf"}} {counts[-1]}',
                  f'hm_retrieve_seconds_sum{{namespace="{ns}"}} {metrics.retrieve_sum.get(namespace, 0.0):.6f}',
                  f'hm_retrieve_seconds_count{{namespace="{ns}"}} {counts[-1]}',
                  "# HELP hm_http_requests_total Requests by route and status.", "# TYPE hm_http_requests_total counter"]
        for (route, status), n in sorted(metrics.requests.items()):
            lines.append(f'hm_http_requests_total{{route="{_label(route)}",status="{status}"}} {n}')
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    if STATIC.is_dir():
        app.mount("/", StaticFiles(directory=STATIC, html=True), name="inspector")
    return app


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
