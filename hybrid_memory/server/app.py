"""The FastAPI application of ``hybrid-memory serve``.

Every route but ``/healthz`` and the inspector's static files takes an API key
(``Authorization: Bearer <key>`` or ``X-API-Key``), bound to one namespace and one
role: a request for another namespace is refused (403 ``namespace_forbidden``), and
the key's role is the handle's role, so the library refuses what the role does not
allow (403 ``access_denied``). ``X-Session`` names the agent session (default
``main``). Library errors map to stable statuses (see ``STATUS``); their ``code`` is
the response's ``error``.

The routes live in routers by concern (``routes_write``, ``routes_lifecycle``,
``routes_read``, ``routes_ops``); what they share is in :mod:`.deps`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from ..config import Config
from ..crypto import Keyring
from ..embed import Embedder, make_embedder
from ..errors import HybridMemoryError
from ..tree import MemoryTree
from . import routes_lifecycle, routes_ops, routes_read, routes_write
from .deps import BUCKETS, Handles, HttpError, Metrics, Service
from .keys import KeyFile
from .models import ErrorOut

__all__ = ["BUCKETS", "STATIC", "STATUS", "Handles", "HttpError", "Metrics", "create_app"]

#: HTTP status of each library error code (anything else of the library: 500).
STATUS = {
    "invalid_input": 400, "invalid_content": 400, "invalid_transcript": 400, "invalid_weight": 400,
    "invalid_type": 400, "cycle": 400, "bad_snapshot": 400, "not_found": 404, "namespace_mismatch": 403, "access_denied": 403, "conflict": 409,
    "closed": 503, "storage": 503, "config": 500, "encryption_key": 500,
}
STATIC = Path(__file__).resolve().parent / "static"
ROUTERS = (routes_write.router, routes_lifecycle.router, routes_read.router, routes_ops.router)


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

    service = Service(keys=keys, handles=Handles(opener), metrics=Metrics(), log_json=log_json)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        service.handles.close()

    app = FastAPI(
        title="hybrid_memory", version="1",
        description="A weighted memory tree for long-running agents, over HTTP. Every /v1 route takes an API key "
                    "bound to one namespace and one role.",
        lifespan=lifespan,
        responses={400: {"model": ErrorOut}, 401: {"model": ErrorOut}, 403: {"model": ErrorOut},
                   404: {"model": ErrorOut}, 409: {"model": ErrorOut}, 422: {"model": ErrorOut}},
    )
    app.state.service = service
    app.state.handles = service.handles
    app.state.metrics = service.metrics
    _handle_errors(app)
    _count_requests(app, service.metrics)
    for router in ROUTERS:
        app.include_router(router)
    if STATIC.is_dir():
        app.mount("/", StaticFiles(directory=STATIC, html=True), name="inspector")
    return app


def _handle_errors(app: FastAPI) -> None:
    """Library errors, the service's own and malformed requests, as ``{"error", "message"}``."""

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


def _count_requests(app: FastAPI, metrics: Metrics) -> None:
    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response: Response = await call_next(request)
        route = request.scope.get("route")
        metrics.request(getattr(route, "path", "unmatched"), response.status_code)
        return response
