"""A sentence-transformers model run by onnxruntime, without torch at run time.

Selected with ``[embedding] backend = "onnx"`` (or ``"auto"``, the default, when it
can). Importing torch and sentence-transformers costs seconds; a process that only
needs to embed a query (``hybrid-memory retrieve``) spends most of its life on that.
This module reproduces the model's sentence-transformers pipeline instead:

1. the tokenizer of the model folder (``tokenizer.json``, read by the ``tokenizers``
   package), truncated to ``max_seq_length`` of ``sentence_bert_config.json``;
2. the transformer, exported once to ONNX with torch and cached on disk;
3. the pooling ``1_Pooling/config.json`` declares (mean or CLS), then L2 norm.

A folder whose ``modules.json`` holds anything else (a Dense layer, a prompt, another
pooling) is refused with :class:`~hybrid_memory.errors.ConfigError`, so ``"auto"``
falls back to sentence-transformers rather than embed differently. Reading the folder
and the tokenizer is :mod:`.onnx_pipeline`'s part; this module exports, checks and runs
the graph.

The export is cached in ``$HYBRID_MEMORY_CACHE/onnx`` (default
``~/.cache/hybrid_memory/onnx``), under a name keyed by the model's config and the
path, size and mtime of its weight files: another model, or new weights in the same
folder, never reuse a stale export. Exporting needs torch, transformers and onnx
(``pip install 'hybrid-memory[model]'``); running the export does not.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from .base import BUNDLED, Embedder, Vectors, bundled_model_path, check_cpu_settings
from .onnx_pipeline import WEIGHTS, Pipeline, Tokenizer, read_pipeline

__all__ = ["EXPORT_VERSION", "OPSET", "RETRY_AFTER_S", "OnnxEmbedder", "Pipeline", "cache_key",
           "default_cache_dir", "export_onnx", "failed_marker", "read_pipeline"]

log = logging.getLogger(__name__)

#: Part of the cache key: bump it when the exported graph changes, so old files are not reused.
EXPORT_VERSION = 1
OPSET = 17

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

# The exported graph is checked at every load: its mean-pooled output for these
# token ids (no tokenizer involved), stored in the file when it was exported, must
# come out again. A file that parses but was damaged (or made from other weights)
# fails the check.
_PROBE = np.arange(1000, 1024, dtype=np.int64)[None, :]
_PROBE_KEY = "hybrid_memory.probe"
_KEY_KEY = "hybrid_memory.key"

IntArray = npt.NDArray[np.int64]


def default_cache_dir() -> Path:
    """``$HYBRID_MEMORY_CACHE/onnx``, else ``$XDG_CACHE_HOME/hybrid_memory/onnx``, else
    ``~/.cache/hybrid_memory/onnx``. Read when an embedder loads, never at import."""
    root = os.environ.get("HYBRID_MEMORY_CACHE")
    if root:
        return Path(root) / "onnx"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "hybrid_memory" / "onnx"


def cache_key(pipeline: Pipeline) -> str:
    """A hash of what the exported graph depends on: the model's config.json, and the
    resolved path, size and mtime of each weight file (cheap to take at every load)."""
    h = hashlib.sha256(f"hybrid_memory onnx export {EXPORT_VERSION} opset {OPSET}\n".encode())
    h.update((pipeline.folder / "config.json").read_bytes())
    for name in WEIGHTS:
        path = pipeline.folder / name
        if path.is_file():
            real = path.resolve()
            st = real.stat()
            h.update(f"\n{real}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]



# -- the ONNX graph --------------------------------------------------------------------


class _Runtime:
    """A loaded tokenizer and onnxruntime session; shared by every embedder of the model."""

    def __init__(self, pipeline: Pipeline, tokenizer: Tokenizer, session: Any) -> None:
        self.pipeline = pipeline
        self.tokenizer = tokenizer
        self.session = session
        self.inputs = [i.name for i in session.get_inputs()]
        if not {"input_ids", "attention_mask"} <= set(self.inputs) <= set(_INPUTS):
            raise ConfigError(f"the exported model takes {self.inputs}, expected {list(_INPUTS)}")

    def token_embeddings(self, ids: IntArray, mask: IntArray, types: IntArray) -> npt.NDArray[np.float32]:
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out = self.session.run(None, {name: feeds[name] for name in self.inputs})[0]
        return np.asarray(out, dtype=np.float32)

    def embed(self, texts: Sequence[str], batch_size: int) -> Vectors:
        encoded = self.tokenizer.encode(texts)
        out = np.empty((len(texts), self.pipeline.dim), dtype=np.float32)
        for chunk in _passes([len(ids) for ids, _ in encoded], batch_size):
            width = len(encoded[chunk[0]][0])
            ids = np.full((len(chunk), width), self.tokenizer.pad_id, dtype=np.int64)
            types = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                tids, ttypes = encoded[i]
                ids[row, : len(tids)] = tids
                types[row, : len(tids)] = ttypes
                mask[row, : len(tids)] = 1
            hidden = self.token_embeddings(ids, mask, types)
            if self.pipeline.pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                m = mask[:, :, None].astype(np.float32)
                pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), np.float32(1e-9))
            out[chunk] = pooled
        # torch.nn.functional.normalize's eps, as sentence-transformers uses.
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out

    def probe(self) -> npt.NDArray[np.float32]:
        """The graph's mean-pooled output for the probe ids: a property of the graph
        alone, whatever the tokenizer and the pooling of the pipeline."""
        hidden = self.token_embeddings(_PROBE, np.ones_like(_PROBE), np.zeros_like(_PROBE))
        return np.asarray(hidden[0].mean(axis=0), dtype=np.float32)


def _passes(lengths: list[int], batch_size: int, *, fill: float = 0.7) -> list[list[int]]:
    """The indices of each forward pass: longest first, at most ``batch_size`` texts,
    and a new pass as soon as a text is shorter than ``fill`` of the pass's width.

    Padding is wasted work, more than in proportion (attention is quadratic in the
    width): 500 memory-like texts in calls of 64 ran 4x faster in passes cut this way
    than in one padded pass per call (and 1.4x faster than fixed passes of 16). The
    attention mask makes the vectors independent of the cut, to float rounding.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    passes: list[list[int]] = []
    for i in order:
        current = passes[-1] if passes else None
        if current is None or len(current) >= batch_size or lengths[i] < fill * lengths[current[0]]:
            passes.append([i])
        else:
            current.append(i)
    return passes


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no optimiser chatter in a CLI
    # Idle intra-op threads would busy-wait between calls; on a small machine they
    # steal the cores the rest of the process (or another process) needs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _ort_errors() -> tuple[type[Exception], ...]:
    """onnxruntime's exceptions (they derive from Exception, not from one base of their own)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as s

    return (s.Fail, s.InvalidProtobuf, s.InvalidGraph, s.NoSuchFile, s.InvalidArgument, s.RuntimeException, s.NotImplemented)


def _load_checked(path: Path, pipeline: Pipeline, tokenizer: Tokenizer, key: str, threads: int) -> _Runtime | None:
    """The cached export at ``path``, or None when it is missing, unreadable, or fails the probe."""
    if not path.is_file():
        return None
    unusable: tuple[type[Exception], ...] = (*_ort_errors(), ConfigError, KeyError, ValueError, TypeError)
    try:
        session = _session(path, threads)
        meta = session.get_modelmeta().custom_metadata_map
        runtime = _Runtime(pipeline, tokenizer, session)
        expected = np.asarray(json.loads(meta[_PROBE_KEY]), dtype=np.float32)
        if meta.get(_KEY_KEY) != key or not np.allclose(runtime.probe(), expected, rtol=1e-4, atol=1e-4):
            raise ValueError("the probe does not match")
    except unusable as exc:
        log.warning("the cached ONNX export %s is unusable (%s); exporting it again", path, exc)
        return None
    return runtime


#: A recorded export failure is trusted this long; then the export is tried again
#: (a failure may have been passing: a full disk, a package installed since).
RETRY_AFTER_S = 3600.0


def failed_marker(target: Path) -> Path:
    """Where a failed export of ``target`` is recorded, so that later processes do not
    pay for the same failure again for :data:`RETRY_AFTER_S` (the key changes with
    the weights; delete it to retry at once)."""
    return target.with_suffix(".failed")


def export_onnx(pipeline: Pipeline, target: Path, key: str, tokenizer: Tokenizer) -> None:
    """Export the pipeline's transformer to ``target`` with torch, check it against
    torch on a probe batch, and move it into place atomically. Needs torch,
    transformers and onnx; raises ConfigError when it cannot, and records a failure
    of the export itself (not a missing package) in :func:`failed_marker`."""
    try:
        import onnx  # noqa: F401  # needed by torch's exporter; checked first, it is the cheapest
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"exporting the embedding model to ONNX needs torch, transformers and onnx ({exc.name} is missing; "
            "pip install 'hybrid-memory[model]'), or set embedding.backend = 'torch'"
        ) from None
    try:
        _export(pipeline, target, key, tokenizer)
    except ConfigError as exc:
        log.warning("%s (recorded in %s)", exc, failed_marker(target))
        with contextlib.suppress(OSError):
            failed_marker(target).write_text(f"{exc}\n", encoding="utf-8")
        raise


def _export(pipeline: Pipeline, target: Path, key: str, tokenizer: Tokenizer) -> None:
    model, names = _torch_model(pipeline)
    # Traced with padding in the batch, so that the masked path is the one recorded.
    # What tracing an unsupported model, writing the file or loading it can raise
    # (torch's OnnxExporterError is a RuntimeError).
    failures: tuple[type[Exception], ...] = (RuntimeError, TypeError, ValueError, AttributeError, OSError, *_ort_errors())
    sample = _torch_batch(tokenizer, names, ["an example for tracing the export, longer than the other", "short"])
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _trace(model, names, sample, tmp)
        session = _compare(pipeline, model, names, tokenizer, tmp)
        _stamp(tmp, _Runtime(pipeline, tokenizer, session), key)
        os.chmod(tmp, 0o644)  # mkstemp made it private; it is a cache, like the model it came from
        os.replace(tmp, target)  # atomic: a reader sees the old file or the whole new one
    except failures as exc:
        raise ConfigError(f"cannot export {pipeline.folder} to ONNX: {exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _torch_model(pipeline: Pipeline) -> tuple[Any, list[str]]:
    """The transformer loaded by transformers, and the names of the inputs its forward takes."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        # Eager attention: a plain graph of MatMul/Softmax, no kernel-selection branches
        # that tracing would freeze.
        model = AutoModel.from_pretrained(str(pipeline.folder), attn_implementation="eager").eval()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load {pipeline.folder} for the ONNX export: {exc}") from None
    names = [n for n in _INPUTS if n in inspect.signature(model.forward).parameters]
    if names[:2] != ["input_ids", "attention_mask"]:
        raise ConfigError(f"{pipeline.folder}: the model's forward takes {names}; the ONNX backend needs input_ids and attention_mask")
    return model, names


def _hidden(model: Any, names: list[str]) -> Any:
    """A new torch module of the transformer that takes the inputs by position and
    returns the token embeddings, in eval mode (a new module starts in training mode,
    dropout on)."""
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(names, args, strict=True))).last_hidden_state  # type: ignore[no-any-return]

    return Hidden().eval()


def _torch_batch(tokenizer: Tokenizer, names: list[str], texts: list[str]) -> tuple[Any, ...]:
    """The model's inputs for ``texts``, as torch tensors in the order of ``names``."""
    import torch

    encoded = tokenizer.encode(texts)
    width = max(len(ids) for ids, _ in encoded)
    ids = torch.full((len(texts), width), tokenizer.pad_id, dtype=torch.int64)
    mask = torch.zeros((len(texts), width), dtype=torch.int64)
    types = torch.zeros((len(texts), width), dtype=torch.int64)
    for row, (tids, ttypes) in enumerate(encoded):
        ids[row, : len(tids)] = torch.tensor(tids)
        mask[row, : len(tids)] = 1
        types[row, : len(tids)] = torch.tensor(ttypes)
    return tuple({"input_ids": ids, "attention_mask": mask, "token_type_ids": types}[n] for n in names)


def _trace(model: Any, names: list[str], sample: tuple[Any, ...], tmp: Path) -> None:
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer and deprecation warnings: the check below decides
        torch.onnx.export(
            _hidden(model, names), sample, str(tmp), input_names=names, output_names=["token_embeddings"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "token_embeddings"]},
            opset_version=OPSET, do_constant_folding=True, dynamo=False,
        )


def _compare(pipeline: Pipeline, model: Any, names: list[str], tokenizer: Tokenizer, tmp: Path) -> Any:
    """The session of the graph at ``tmp``, checked against torch on another batch size
    and other lengths than it was traced with; ConfigError when they differ."""
    import torch

    check = ["Quarterly budget review moved to Thursday.", "报销单被退回", "x", "a third, middling text"]
    args = _torch_batch(tokenizer, names, check)
    with torch.no_grad():
        # A new wrapper, in eval mode: the exporter restores the traced wrapper's
        # training mode after tracing.
        want = _hidden(model, names)(*args).numpy()
    session = _session(tmp, 1)
    got = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})[0]
    mask = args[1].numpy()[:, :, None].astype(bool)
    diff = float(np.abs(np.where(mask, got - want, 0.0)).max() / max(1.0, np.abs(want).max()))
    if diff > 1e-4:
        raise ConfigError(f"{pipeline.folder}: the ONNX export differs from torch by {diff:.2g}; set embedding.backend = 'torch'")
    return session


def _stamp(tmp: Path, runtime: _Runtime, key: str) -> None:
    """Store the graph's probe output and the cache key in the file's metadata."""
    import onnx

    proto = onnx.load(str(tmp))
    for k, v in ((_PROBE_KEY, json.dumps(runtime.probe().tolist())), (_KEY_KEY, key)):
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save(proto, str(tmp))


# -- the embedder ----------------------------------------------------------------------

_LOCK = threading.Lock()
_LOADED: dict[tuple[str, int, Pipeline], _Runtime] = {}


class OnnxEmbedder:
    """A sentence-transformers model run by onnxruntime, loaded on first use and shared
    within the process (per exported file and thread count).

    ``batch_size`` bounds the texts of one forward pass (passes are also cut by length).
    ``threads`` is onnxruntime's intra-op thread count. The default is 1: on a busy
    2-core machine, 2 threads were no faster at batch 1 (a query, ~15-30 ms either way)
    nor at batch 64 (45-67 texts/s against 49-57), and took ~20% more CPU time; one
    thread leaves a core to the rest of the process and to other processes.

    ``fallback``: an embedder to use instead when the model cannot run here (no
    onnxruntime, a pipeline this module does not reproduce, a failed export); without
    one those raise ConfigError. ``[embedding] backend = "auto"`` passes the
    sentence-transformers embedder of the same model.
    """

    def __init__(
        self,
        model: str = BUNDLED,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        threads: int = 1,
        cache_dir: str | Path | None = None,
        fallback: Embedder | None = None,
    ) -> None:
        check_cpu_settings("the ONNX embedding backend runs on the CPU", device, batch_size, threads)
        self._spec = model
        self._batch_size = batch_size
        self._threads = threads
        self._cache_dir = None if cache_dir is None else Path(cache_dir)
        self._fallback = fallback
        self._runtime: _Runtime | None = None
        self._delegate: Embedder | None = None

    @property
    def name(self) -> str:
        # The same name as SentenceTransformerEmbedder's: the vectors are the same, so a
        # memory must not see a change of backend as a change of model.
        return "all-MiniLM-L6-v2" if self._spec == BUNDLED else self._spec

    @property
    def releases_gil(self) -> bool:
        """onnxruntime runs a whole batch without the interpreter lock; the fallback
        says for itself (sentence-transformers does not). Loads the model."""
        if self._load() is not None:
            return True
        return bool(getattr(self._delegate, "releases_gil", True))

    @property
    def backend(self) -> str:
        """``"onnx"``, or ``"fallback"`` when the fallback embedder runs instead (loads the model)."""
        return "onnx" if self._load() is not None else "fallback"

    @property
    def export_path(self) -> Path:
        """Where the export of this model is cached (reads the model's config, loads nothing)."""
        pipeline = read_pipeline(self._folder())
        return self._path(pipeline, cache_key(pipeline))

    def _folder(self) -> str:
        return bundled_model_path() if self._spec == BUNDLED else self._spec

    def _path(self, pipeline: Pipeline, key: str) -> Path:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(self.name).name or "model").strip("._") or "model"
        return (self._cache_dir or default_cache_dir()) / f"{slug}-{key}.onnx"

    def _load(self) -> _Runtime | None:
        """The runtime, or None when the fallback runs instead."""
        if self._runtime is not None or self._delegate is not None:
            return self._runtime
        with _LOCK:
            if self._runtime is None and self._delegate is None:
                try:
                    self._runtime = self._open()
                except ConfigError as exc:
                    if self._fallback is None:
                        raise
                    log.info("embedding with the fallback embedder instead of onnxruntime: %s", exc)
                    self._delegate = self._fallback
        return self._runtime

    def _open(self) -> _Runtime:
        try:
            import onnxruntime  # noqa: F401
            import tokenizers  # noqa: F401
        except ImportError as exc:
            raise ConfigError(f"embedding.backend = 'onnx' needs the packages onnxruntime and tokenizers ({exc.name} is missing)") from None
        pipeline = read_pipeline(self._folder())
        key = cache_key(pipeline)
        path = self._path(pipeline, key)
        loaded = _LOADED.get((str(path), self._threads, pipeline))
        if loaded is not None:
            return loaded
        failed = failed_marker(path)
        if failed.is_file() and not path.is_file() and time.time() - failed.stat().st_mtime < RETRY_AFTER_S:
            reason = failed.read_text(encoding="utf-8", errors="replace").strip()
            raise ConfigError(f"{reason} (recorded in {failed}; delete it to try the export again)")
        tokenizer = Tokenizer(pipeline)
        runtime = _load_checked(path, pipeline, tokenizer, key, self._threads)
        if runtime is None:
            log.info("exporting %s to ONNX at %s (once)", pipeline.folder, path)
            export_onnx(pipeline, path, key, tokenizer)
            with contextlib.suppress(FileNotFoundError):
                failed.unlink()
            runtime = _load_checked(path, pipeline, tokenizer, key, self._threads)
            if runtime is None:
                raise ConfigError(f"the fresh ONNX export {path} does not load")
        _LOADED[(str(path), self._threads, pipeline)] = runtime
        return runtime

    @property
    def dim(self) -> int:
        runtime = self._load()
        if runtime is None:
            assert self._delegate is not None
            return self._delegate.dim
        return runtime.pipeline.dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        runtime = self._load()
        if runtime is None:
            assert self._delegate is not None
            return self._delegate.embed(texts)
        if not texts:
            return np.zeros((0, runtime.pipeline.dim), dtype=np.float32)
        return runtime.embed(texts, self._batch_size)

    def coverage(self, text: str) -> float:
        """The share of the text's tokens that are not the unknown token (1.0 for none)."""
        runtime = self._load()
        if runtime is None:
            assert self._delegate is not None
            return self._delegate.coverage(text)
        unk = runtime.tokenizer.unk_id
        ids = runtime.tokenizer.pieces(text)
        if unk is None or not ids:
            return 1.0
        return 1.0 - sum(1 for i in ids if i == unk) / len(ids)
