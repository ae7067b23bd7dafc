"""The memory as an MCP server: ``hybrid-memory mcp`` (or ``python -m hybrid_memory.mcp_server``).

One open :class:`MemoryTree` (one namespace, one session, one role) is served over
stdio to an MCP client (an IDE, a desktop assistant, an agent framework) as eleven
tools: ``remember``, ``recall``, ``focus``, ``feedback``, ``summarize``, ``finish``,
``ingest``, ``forget``, ``checkpoint``, ``recover`` and ``stats``. A handle opened with the
``read`` role serves only ``recall``, ``recover`` and ``stats``.

Every tool returns structured content (its output schema is published) and the same
JSON as text. A library error comes back as a tool error (``isError``) whose text is
``error [code]: message`` and whose structured content is
``{"error": {"code": ..., "message": ...}}``; the memory is unchanged and the server
keeps serving. The input schemas advertise the library's limits (``k >= 1``,
importance in [0, 1], the node types); the library enforces them, so a call past
one is answered with its error code rather than a schema-validation message.

This module needs the ``mcp`` extra (``pip install 'hybrid-memory[mcp]'``);
``import hybrid_memory`` never imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Concatenate, ParamSpec

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from . import __version__
from .config import Config
from .crypto import Keyring
from .errors import HybridMemoryError, InvalidInputError
from .items import ROOT, parent_named
from .model import Checkpoint, Node, NodeType
from .tree import MemoryTree

__all__ = ["build_server", "main", "serve_stdio"]

P = ParamSpec("P")

INSTRUCTIONS = """\
A long-term memory kept as a tree: tasks, and under each task its events, facts,
states (where the task stands), preferences and decisions. One node is active; new
memories hang under it. Start of a conversation: call recover to learn the active
task and where it stands. New piece of work: remember it with type "task" and
root=true (it becomes active). While working: remember what happens (event), what is
true (fact), where things stand (state), what the user wants (preference) and what
was decided (decision). Before answering from memory: recall with a query (no query:
the active task's context). Switch tasks with focus; mark what the user stresses or
confirms with feedback; checkpoint at milestones; when a task is done, finish it (its
memories are summarized). Node ids come back from every tool."""

PREVIEW_CHARS = 80


# -- what the tools return ---------------------------------------------------------------


class NodeOut(BaseModel):
    """One memory as stored."""

    id: str = Field(description="The node id: pass it to focus, feedback or remember(parent=...).")
    type: str = Field(description="task, state, event, fact, preference, decision or summary.")
    parent_id: str | None = Field(description="The parent node's id; null for a top-level node.")
    content: str
    importance: float = Field(description="0..1; feedback(important=true) raises it.")
    confidence: float = Field(description="0..1; feedback(confirmed=true) raises it.")
    pinned: bool = Field(description="A pinned memory is never forgotten.")
    merged: bool = Field(
        description="True when remember found a near-identical memory in the same branch and "
        "reinforced it instead of writing a twin: this is then the existing node."
    )
    placement: str | None = Field(default=None, description='With parent="auto": which branch it went '
                                  "under and why (its score, the runner-up's); null otherwise.")


class RecallNode(BaseModel):
    """A node of a recall, in the order of the rendered context (tree order)."""

    id: str
    type: str
    parent_id: str | None
    reason: str = Field(
        description="hit (matched the query), standing (a state, preference or decision of the "
        "branch), ancestor (on a chosen node's path) or top (top by weight, for a recall without query)."
    )
    score: float
    preview: str = Field(description=f"The content's first {PREVIEW_CHARS} characters.")
    # Only with explain=true:
    similarity: float | None = Field(default=None, description="explain: dense and lexical similarity blended.")
    dense: float | None = Field(default=None, description="explain: embedding similarity.")
    lexical: float | None = Field(default=None, description="explain: word (or CJK bigram) overlap.")
    weight: float | None = Field(default=None, description="explain: importance, recency, confidence and usage.")
    branch_score: float | None = Field(default=None, description="explain: the score of the node's branch.")
    branch_factor: float | None = Field(default=None, description="explain: what the score was multiplied by for its branch.")
    newest_factor: float | None = Field(default=None, description=(
        "explain: what the weight part was multiplied by for how late the node was written in the focused family."))
    superseded_factor: float | None = Field(default=None, description=(
        "explain: what the similarity was multiplied by because a later state of its branch supersedes it, "
        "or a later memory restates it."))
    tokens: int | None = Field(default=None, description="explain: the node's tokens in the context.")


class BranchOut(BaseModel):
    id: str = Field(description="The node heading the branch (its task).")
    score: float
    hits: int
    title: str


class RecallOut(BaseModel):
    query: str | None
    context: str = Field(description="The chosen memories rendered in tree order, within the token budget.")
    tokens: int
    budget_tokens: int
    dropped: int = Field(description="Memories that scored well enough but did not fit the budget.")
    nodes: list[RecallNode]
    branches: list[BranchOut] | None = Field(default=None, description="explain: the located branches and their scores.")


class ForgetItem(BaseModel):
    id: str
    weight: float


class ForgetOut(BaseModel):
    dry_run: bool = Field(description="True: nothing was archived; forgotten lists what would be.")
    forgotten: list[ForgetItem] = Field(description="The low-weight leaves chosen, with their weights.")
    live_before: int
    live_after: int


class IngestOut(BaseModel):
    format: str = Field(description="How the text was read: messages, sessions or text.")
    sessions: int
    messages: int
    written: int = Field(description="New memories written now (sessions' tasks and messages).")
    merged: int = Field(description="Messages merged into a near-twin already in the memory, not written as new.")
    skipped: int = Field(description="Sessions and messages already in the memory, not written again.")
    dry_run: bool
    tree: str = Field(description="The sessions and their first messages, a line each.")
    session_ids: list[str] = Field(description="The node id of each session's task (none on a dry run).")


class CheckpointOut(BaseModel):
    id: int
    active_id: str | None
    log_seq: int = Field(description="The operation-log position recorded.")
    ts: float = Field(description="Seconds since the epoch.")
    note: str | None


class PathNode(BaseModel):
    id: str
    type: str
    preview: str


class RecoverOut(BaseModel):
    active: NodeOut | None = Field(description="The active node, or null when there is none.")
    path: list[PathNode] = Field(description="The active node's path from its root, root first.")
    state: NodeOut | None = Field(description="The latest state memory in the active node's branch.")
    last_checkpoint: CheckpointOut | None
    replayed: int = Field(description="Index operations left by a crash and replayed at open.")
    live_nodes: int
    problems: list[str] = Field(description="What the open found wrong and could not fix by itself.")


class StatsOut(BaseModel):
    namespace: str
    live: int
    archived: int
    depth: int
    by_type: dict[str, int]
    active_path: list[str] = Field(description="Ids from the root to the active node.")
    last_checkpoint_at: float | None
    disk_bytes: int | None = Field(description="Bytes of the whole store on disk; null below the admin role.")
    log_seq: int


def _clip(text: str, n: int = PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _num(x: float) -> float:
    """Scores to four places: more digits are noise to a model and cost tokens."""
    return round(float(x), 4)


def _node(n: Node) -> NodeOut:
    return NodeOut(id=n.id, type=n.type.value, parent_id=n.parent_id, content=n.content,
                   importance=n.importance, confidence=n.confidence, pinned=n.pinned, merged=n.merged,
                   placement=None if n.placement is None else n.placement.explain())


def _checkpoint(c: Checkpoint) -> CheckpointOut:
    return CheckpointOut(id=c.id, active_id=c.active_id, log_seq=c.log_seq, ts=c.ts, note=c.note)


# -- calling the library ----------------------------------------------------------------------


def _as_text(data: dict[str, Any]) -> list[ContentBlock]:
    return [TextContent(type="text", text=json.dumps(data, ensure_ascii=False))]


def _error(exc: HybridMemoryError) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=f"error [{exc.code}]: {exc}")],
        structured_content={"error": {"code": exc.code, "message": str(exc)}},
        is_error=True,
    )


def _tool(fn: Callable[Concatenate[_Tools, P], BaseModel]) -> Callable[Concatenate[_Tools, P], Any]:
    """One call at a time into the memory (the SDK runs each call on a worker thread);
    a library error becomes a tool error carrying its code. Unset optional fields are
    left out of the result (a recall without explain carries no explain fields)."""

    @functools.wraps(fn)
    def call(self: _Tools, /, *args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        with self.lock:
            try:
                out = fn(self, *args, **kwargs)
            except HybridMemoryError as exc:
                return _error(exc)
        data = out.model_dump(mode="json", exclude_unset=True)
        return CallToolResult(content=_as_text(data), structured_content=data)

    return call


# The input schemas advertise the library's limits without enforcing them here: the
# library checks them and answers with its own error code.
_TYPES = [t.value for t in NodeType]
_UNIT: dict[str, Any] = {"minimum": 0, "maximum": 1}
NodeId = Annotated[str, Field(description="A node id, as returned by remember, recall or recover.")]
SummaryBudget = Annotated[int | None, Field(description="The summary's token budget; default from the "
                                                        "configuration.", json_schema_extra={"minimum": 1})]


class _Tools:
    """The tools over one MemoryTree. Docstrings are the descriptions clients show the model."""

    def __init__(self, mem: MemoryTree) -> None:
        self.mem = mem
        self.lock = threading.Lock()

    @_tool
    def remember(
        self,
        content: Annotated[str, Field(description="The memory, in the user's language (by default at most 8000 characters).")],
        type: Annotated[str, Field(description="What kind of memory: a task starts a branch; a state records "
                                               "where its task stands.", json_schema_extra={"enum": _TYPES})] = "event",
        parent: Annotated[str | None, Field(description='Hang it under this node id instead of the active node; '
                                                      '"auto": under the task it belongs to, found by meaning '
                                                      "(for a memory about another task than the active one).")] = None,
        root: Annotated[bool, Field(description="Start a new top-level tree (an unrelated task) instead of "
                                                "hanging it under the active node.")] = False,
        importance: Annotated[float | None, Field(description="0..1; default by type.", json_schema_extra=_UNIT)] = None,
        pinned: Annotated[bool, Field(description="Never forget this memory.")] = False,
    ) -> NodeOut:
        """Write a memory under the active node (or under parent, or as a new top-level tree).

        A new task becomes the active node, so what follows hangs under it. A near-identical
        memory of the same type in the same branch is reinforced instead of duplicated
        (merged=true). Returns the node written."""
        if root and parent is not None:
            raise InvalidInputError("give parent or root=true, not both")
        node = self.mem.add(content, type=type, parent=ROOT if root else parent_named(parent),
                            importance=importance, pinned=pinned)
        return _node(node)

    @_tool
    def recall(
        self,
        query: Annotated[str | None, Field(description="What to look for, in any language. Omit it for the "
                                                       "active task's context.")] = None,
        k: Annotated[int | None, Field(description="How many memories to choose (before ancestors and standing "
                                                   "memories are added); default from the configuration.",
                                       json_schema_extra={"minimum": 1})] = None,
        budget_tokens: Annotated[int | None, Field(description="The context's token budget; default from the "
                                                               "configuration.", json_schema_extra={"minimum": 1})] = None,
        explain: Annotated[bool, Field(description="Add every node's score components and the branch scores.")] = False,
    ) -> RecallOut:
        """Find what the memory holds about a query: it locates the task branch by meaning and
        words, ranks its memories by similarity and weight, adds the branch's standing memories
        (latest state, preferences, decisions) and each chosen node's ancestors, and cuts to the
        token budget. Returns the rendered context and, per node, its id, type, score and reason."""
        r = self.mem.retrieve(query, k=k, budget_tokens=budget_tokens)
        nodes = []
        for s in r.nodes:
            numbers: dict[str, Any] = dict(
                similarity=_num(s.similarity), dense=_num(s.dense), lexical=_num(s.lexical),
                weight=_num(s.weight), branch_score=_num(s.branch_score),
                branch_factor=_num(s.branch_factor), newest_factor=_num(s.newest_factor),
                superseded_factor=_num(s.superseded_factor), tokens=s.tokens,
            ) if explain else {}
            nodes.append(RecallNode(id=s.node.id, type=s.node.type.value, parent_id=s.node.parent_id,
                                    reason=s.reason, score=_num(s.score), preview=_clip(s.node.content),
                                    **numbers))
        out = RecallOut(query=r.query, context=r.context, tokens=r.tokens, budget_tokens=r.budget_tokens,
                        dropped=r.dropped, nodes=nodes)
        if explain:
            out.branches = [BranchOut(id=b.branch_id, score=_num(b.score), hits=b.hits, title=b.title)
                            for b in r.branches]
        return out

    @_tool
    def focus(self, node_id: NodeId) -> NodeOut:
        """Make a live node the active one: new memories hang under it, and recall without a query
        returns its task's context. Use it to switch between tasks."""
        return _node(self.mem.focus(node_id))

    @_tool
    def feedback(
        self,
        node_id: NodeId,
        important: Annotated[bool, Field(description="The user said it matters: raise its importance.")] = False,
        confirmed: Annotated[bool, Field(description="The user confirmed it is right: raise its confidence.")] = False,
        importance: Annotated[float | None, Field(description="Set the importance (0..1) instead.",
                                                  json_schema_extra=_UNIT)] = None,
        confidence: Annotated[float | None, Field(description="Set the confidence (0..1) instead.",
                                                  json_schema_extra=_UNIT)] = None,
    ) -> NodeOut:
        """Tell the memory that a memory matters (important) or is right (confirmed), or set its
        importance or confidence. Heavier memories are recalled first and forgotten last."""
        return _node(self.mem.feedback(node_id, important=important, confirmed=confirmed,
                                       importance=importance, confidence=confidence))

    @_tool
    def summarize(
        self,
        node_id: NodeId,
        budget_tokens: SummaryBudget = None,
    ) -> NodeOut:
        """Write a summary of the live memories under a node, as a new memory of type summary under
        it: their weightiest, least redundant sentences within the token budget. A new summary of
        the same node archives the one before. Returns the summary written."""
        return _node(self.mem.summarize(node_id, budget_tokens=budget_tokens))

    @_tool
    def finish(
        self,
        task_id: Annotated[str, Field(description="The id of the task that is done, as returned by remember, "
                                                  "recall or recover.")],
        budget_tokens: SummaryBudget = None,
    ) -> NodeOut:
        """Mark a task finished and summarize what is under it (as summarize does). Later, a recall
        that cannot fit what it picked under the finished task shows its summary instead, and
        forgetting takes the summarized memories first. Returns the summary written."""
        return _node(self.mem.finish(task_id, budget_tokens=budget_tokens))

    @_tool
    def ingest(
        self,
        text: Annotated[str, Field(description="A chat transcript or document: OpenAI-style messages as JSON or "
                                               "JSON Lines, sessions with dates as JSON, or plain text.")],
        name: Annotated[str, Field(description="A name for it, such as its file name: the same name and messages "
                                               "again write nothing twice; .json, .jsonl or .txt says how to read "
                                               "it.")] = "upload",
        parent: Annotated[str | None, Field(description='Put the sessions under this node id; "auto": under the '
                                                      "task each reads closest to; none: at the top.")] = None,
        dry_run: Annotated[bool, Field(description="Only report the tree it would write.")] = False,
    ) -> IngestOut:
        """Write a past conversation or a document into the memory: each session a task, each
        message an event under it at its original time, with its speaker. A text that cannot be
        read is refused with the line at fault and nothing of it is written. Returns what was
        written (or, with dry_run, what would be) as a tree."""
        r = self.mem.ingest(text=text, name=name, parent=parent_named(parent), dry_run=dry_run)
        return IngestOut(format=r.format, sessions=r.sessions, messages=r.messages, written=r.written,
                         merged=r.merged, skipped=r.skipped, dry_run=r.dry_run, tree=r.tree, session_ids=list(r.session_ids))

    @_tool
    def forget(
        self,
        max_nodes: Annotated[int | None, Field(description="Keep at most this many live memories (0: no cap); "
                                                           "default from the configuration.",
                                               json_schema_extra={"minimum": 0})] = None,
        threshold: Annotated[float | None, Field(description="Forget leaves whose weight is below this (0..1); "
                                                             "default from the configuration.",
                                                 json_schema_extra=_UNIT)] = None,
        dry_run: Annotated[bool, Field(description="Only report what would be forgotten (the default). "
                                                   "Pass false to archive.")] = True,
    ) -> ForgetOut:
        """Prune low-weight memories: leaves whose weight is below the threshold, then the lightest
        leaves while more than max_nodes remain. Never a pinned memory, the active node or its
        ancestors, or a memory with live children. Forgotten memories are archived, not erased.
        By default this only reports (dry_run=true): call again with dry_run=false to archive."""
        report = self.mem.forget(threshold=threshold, max_nodes=max_nodes, dry_run=dry_run)
        return ForgetOut(dry_run=report.dry_run,
                         forgotten=[ForgetItem(id=i, weight=_num(w)) for i, w in report.details],
                         live_before=report.live_before, live_after=report.live_after)

    @_tool
    def checkpoint(
        self, note: Annotated[str | None, Field(description="A short note: what was just achieved.")] = None,
    ) -> CheckpointOut:
        """Record where this session stands (the active node and the log position), with a note.
        recover returns the last checkpoint."""
        return _checkpoint(self.mem.checkpoint(note))

    @_tool
    def recover(self) -> RecoverOut:
        """Where this session stands: the active node, its path from the root, the latest state of
        its task, the last checkpoint, and what the open repaired or found wrong. Call it first."""
        r = self.mem.recover()
        return RecoverOut(
            active=None if r.active is None else _node(r.active),
            path=[PathNode(id=n.id, type=n.type.value, preview=_clip(n.content)) for n in r.path],
            state=None if r.state is None else _node(r.state),
            last_checkpoint=None if r.last_checkpoint is None else _checkpoint(r.last_checkpoint),
            replayed=r.replayed, live_nodes=r.live_nodes, problems=list(r.problems),
        )

    @_tool
    def stats(self) -> StatsOut:
        """Sizes and shape of the memory: live and archived memories, depth, counts by type, the
        active path, the last checkpoint's time and the operation count."""
        s = self.mem.admin.stats()
        return StatsOut(namespace=s.namespace, live=s.live, archived=s.archived, depth=s.depth,
                        by_type=dict(s.by_type), active_path=list(s.active_path),
                        last_checkpoint_at=s.last_checkpoint_at, disk_bytes=s.disk_bytes, log_seq=s.log_seq)


_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_TOOLS: dict[str, tuple[str, ToolAnnotations]] = {
    # name: (the role it needs, its hints)
    "remember": ("write", _WRITE),
    "recall": ("read", _READ),  # counts as a use of what it returns (weights), nothing else
    "focus": ("write", ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                       open_world_hint=False)),
    "feedback": ("write", _WRITE),
    "summarize": ("write", _WRITE),  # archives the node's previous summary, if any
    "finish": ("write", _WRITE),
    "ingest": ("write", _WRITE),  # resumable: the same text again writes nothing
    "forget": ("write", ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)),
    "checkpoint": ("write", _WRITE),
    "recover": ("read", _READ),
    "stats": ("read", _READ),
}


def build_server(mem: MemoryTree) -> MCPServer:
    """An MCP server over ``mem`` (not yet running). Tools the handle's role does not
    allow are not offered. The caller keeps ``mem`` open while it serves and closes it."""
    server: MCPServer = MCPServer(
        name="hybrid-memory", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
    )
    tools = _Tools(mem)
    writes = mem.role != "read"
    for name, (needs, hints) in _TOOLS.items():
        if needs == "write" and not writes:
            continue
        fn = getattr(tools, name)
        server.add_tool(fn, name=name, description=inspect.getdoc(fn), annotations=hints)
    return server


def serve_stdio(mem: MemoryTree) -> None:
    """Serve ``mem`` over stdin and stdout until the client closes stdin (blocking)."""
    build_server(mem).run("stdio")


# -- the command -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hybrid-memory mcp",
        description="Serve a memory to an MCP client over stdio (tools: remember, recall, focus, "
                    "feedback, summarize, finish, forget, checkpoint, recover, stats).",
    )
    p.add_argument("--path", default=os.environ.get("HYBRID_MEMORY_PATH", "./memory"),
                   help="memory folder (default: $HYBRID_MEMORY_PATH or ./memory)")
    p.add_argument("--namespace", "-n", default=os.environ.get("HYBRID_MEMORY_NAMESPACE", "default"),
                   help="tenant namespace (default: $HYBRID_MEMORY_NAMESPACE or 'default')")
    p.add_argument("--session", default="main", help="agent session whose active node is used (default: main)")
    p.add_argument("--role", default="write", choices=["read", "write", "admin"],
                   help="what the client may do: read (recall, recover, stats) or write (all tools; "
                        "the default). No tool needs admin.")
    p.add_argument("--config", default=None, help="a TOML file merged over configs/default.toml")
    p.add_argument("--model", default=None, help="embedding model (overrides [embedding] model)")
    p.add_argument("--db-url", default=os.environ.get("HYBRID_MEMORY_DB_URL"),
                   help="SQLAlchemy URL of the relational store instead of the folder's SQLite file")
    p.add_argument("--chroma-url", default=os.environ.get("HYBRID_MEMORY_CHROMA_URL"),
                   help="URL of a Chroma server instead of the folder's embedded index")
    p.add_argument("--key-file", default=None, help="file holding the encryption key of an encrypted memory")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Open the memory, serve it over stdio until the client disconnects, close it.
    Returns the exit code (a library error at open: its ``exit_code``)."""
    args = build_parser().parse_args(argv)
    try:
        # stdout is the protocol's channel: whatever opening prints goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            config: Config | str | None = (
                Config.load(args.config, overrides={"embedding": {"model": args.model}}) if args.model else args.config
            )
            mem = MemoryTree.open(
                args.path, namespace=args.namespace, session=args.session, role=args.role, config=config,
                store=args.db_url or None, chroma_url=args.chroma_url or None,
                key=Keyring.from_file(args.key_file) if args.key_file else None,
            )
    except HybridMemoryError as exc:
        print(f"error [{exc.code}]: {exc}", file=sys.stderr)
        return exc.exit_code
    with mem:
        serve_stdio(mem)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
