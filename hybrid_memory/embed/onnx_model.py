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
falls back to sentence-transformers rather than embed differently.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError
from .base import BUNDLED, Embedder, Vectors, bundled_model_path

log = logging.getLogger(__name__)

#: Part of the cache key: bump it when the exported graph changes, so old files are not reused.
EXPORT_VERSION = 1
OPSET = 17

_TRANSFORMER = {"sentence_transformers.models.Transformer", "sentence_transformers.base.modules.transformer.Transformer"}
_POOLING = {"sentence_transformers.models.Pooling", "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}
_NORMALIZE = {"sentence_transformers.models.Normalize", "sentence_transformers.base.modules.normalize.Normalize"}
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

# The exported graph is checked at every load: its mean-pooled output for these
# token ids (no tokenizer involved), stored in the file when it was exported, must
# come out again. A file that parses but was damaged (or made from other weights)
# fails the check.
_PROBE = np.arange(1000, 1024, dtype=np.int64)[None, :]
_PROBE_KEY = "hybrid_memory.probe"
_KEY_KEY = "hybrid_memory.key"

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Pipeline:
    """What a sentence-transformers folder declares, reduced to what this module runs."""

    folder: Path  # the transformer's folder: config.json, tokenizer.json, the weights
    max_seq_length: int
    do_lower_case: bool
    pooling: str  # "mean" or "cls"
    dim: int


def read_pipeline(folder: str | Path) -> Pipeline:
    """The pipeline of a sentence-transformers model folder, or ConfigError when this
    module cannot reproduce it exactly."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"the ONNX backend needs a local model folder; {str(folder)!r} is not one")
    modules = _json(root / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise ConfigError(f"{root}: modules.json lists no modules")
    kinds = [str(m.get("type", "")) for m in modules]
    first, rest = modules[0], modules[1:]
    if kinds[0] not in _TRANSFORMER or len(rest) < 1 or kinds[1] not in _POOLING:
        raise ConfigError(f"{root}: the ONNX backend runs Transformer + Pooling (+ Normalize), not {kinds}")
    if any(k not in _NORMALIZE for k in kinds[2:]):
        raise ConfigError(f"{root}: the ONNX backend cannot run the modules {kinds[2:]} (only Normalize)")
    folder_ = root / str(first.get("path", ""))
    st_config = _json(folder_ / "sentence_bert_config.json", default={})
    extra = {
        k: v for k, v in st_config.items()
        if k not in ("max_seq_length", "do_lower_case") and v not in (None, {}, [], "feature-extraction")
    }
    if extra:
        raise ConfigError(f"{folder_}: sentence_bert_config.json sets {sorted(extra)}, which the ONNX backend does not reproduce")
    model_config = _json(folder_ / "config.json")
    max_len = st_config.get("max_seq_length")
    if max_len is None:
        tok_config = _json(folder_ / "tokenizer_config.json", default={})
        limits = [v for v in (tok_config.get("model_max_length"), model_config.get("max_position_embeddings")) if isinstance(v, int) and v > 0]
        if not limits:
            raise ConfigError(f"{folder_}: no max_seq_length, model_max_length or max_position_embeddings")
        max_len = min(limits)
    st_root = _json(root / "config_sentence_transformers.json", default={})
    if st_root.get("default_prompt_name"):
        raise ConfigError(f"{root}: a default prompt is not reproduced by the ONNX backend")
    pooling_config = _json(root / str(rest[0].get("path", "")) / "config.json")
    mode = pooling_config.get("pooling_mode")
    if mode is None:
        modes = [m for k, m in _LEGACY_POOLING.items() if pooling_config.get(k)] or ["mean"]
    else:
        modes = [mode] if isinstance(mode, str) else list(mode)
    if len(modes) != 1 or modes[0] not in ("mean", "cls"):
        raise ConfigError(f"{root}: the ONNX backend pools by mean or CLS, not {modes}")
    dim = pooling_config.get("embedding_dimension", pooling_config.get("word_embedding_dimension"))
    if not isinstance(dim, int) or dim != model_config.get("hidden_size", dim):
        raise ConfigError(f"{root}: cannot tell the embedding dimension from 1_Pooling/config.json")
    if not (folder_ / "tokenizer.json").is_file():
        raise ConfigError(f"{folder_}: the ONNX backend needs tokenizer.json (a fast tokenizer)")
    if not any((folder_ / w).is_file() for w in _WEIGHTS):
        raise ConfigError(f"{folder_}: no weights ({', '.join(_WEIGHTS)})")
    return Pipeline(
        folder=folder_, max_seq_length=int(max_len), do_lower_case=bool(st_config.get("do_lower_case", False)),
        pooling=modes[0], dim=dim,
    )


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
    for name in _WEIGHTS:
        path = pipeline.folder / name
        if path.is_file():
            real = path.resolve()
            st = real.stat()
            h.update(f"\n{real}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


# -- the tokenizer ---------------------------------------------------------------------


class _Tokenizer:
    """The model's fast tokenizer with sentence-transformers' settings: truncated to
    max_seq_length (special tokens included), padded on the right per batch."""

    def __init__(self, pipeline: Pipeline) -> None:
        from tokenizers import Tokenizer, normalizers

        folder = pipeline.folder
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        padding = tok.padding or {}
        # tokenizer.json may carry its own truncation and padding (MiniLM's: fixed 128);
        # sentence-transformers overrides both, and so do we (truncation by hand below,
        # so that coverage() sees the whole text through the same object).
        tok.no_truncation()
        tok.no_padding()
        normalizer = json.loads(tok.normalizer.__getstate__()) if tok.normalizer is not None else None
        config = {**_json(folder / "special_tokens_map.json", default={}), **_json(folder / "tokenizer_config.json", default={})}
        for side in ("truncation_side", "padding_side"):
            if config.get(side, "right") != "right":
                raise ConfigError(f"{folder}: {side} = {config[side]!r}; the ONNX backend pads and truncates on the right")
        if pipeline.do_lower_case and not _lowercases(normalizer):
            tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), *([tok.normalizer] if tok.normalizer else [])])
        self._tok = tok
        self._content = pipeline.max_seq_length - tok.num_special_tokens_to_add(False)
        if self._content < 1:
            raise ConfigError(f"{folder}: max_seq_length {pipeline.max_seq_length} leaves no room for text")
        self.unk_id = _token_id(tok, config.get("unk_token"))
        pad_id = _token_id(tok, config.get("pad_token"))
        if pad_id is None:
            pad_id = padding.get("pad_id")
        if pad_id is None:
            raise ConfigError(f"{folder}: the tokenizer has no padding token")
        self.pad_id = int(pad_id)

    def pieces(self, text: str) -> list[int]:
        """The ids of the text without special tokens and without truncation."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode(self, texts: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """(ids, type ids) of each text as the model sees it: truncated, with special tokens."""
        out = []
        for enc in self._tok.encode_batch(list(texts), add_special_tokens=False):
            if len(enc.ids) > self._content:
                enc.truncate(self._content)
            full = self._tok.post_process(enc)
            out.append((full.ids, full.type_ids))
        return out


def _lowercases(normalizer: Any) -> bool:
    if not isinstance(normalizer, dict):
        return False
    kind = normalizer.get("type")
    if kind == "Lowercase" or (kind == "BertNormalizer" and normalizer.get("lowercase")):
        return True
    return kind == "Sequence" and any(_lowercases(n) for n in normalizer.get("normalizers", []))


def _token_id(tok: Any, token: Any) -> int | None:
    if isinstance(token, dict):
        token = token.get("content")
    if not isinstance(token, str):
        return None
    found = tok.token_to_id(token)
    return None if found is None else int(found)


# -- the ONNX graph --------------------------------------------------------------------


class _Runtime:
    """A loaded tokenizer and onnxruntime session; shared by every embedder of the model."""

    def __init__(self, pipeline: Pipeline, tokenizer: _Tokenizer, session: Any) -> None:
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


def _load_checked(path: Path, pipeline: Pipeline, tokenizer: _Tokenizer, key: str, threads: int) -> _Runtime | None:
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


def export_onnx(pipeline: Pipeline, target: Path, key: str, tokenizer: _Tokenizer) -> None:
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


def _export(pipeline: Pipeline, target: Path, key: str, tokenizer: _Tokenizer) -> None:
    import onnx
    import torch
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

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(names, args, strict=True))).last_hidden_state  # type: ignore[no-any-return]

    def batch(texts: list[str]) -> tuple[torch.Tensor, ...]:
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

    # Traced with padding in the batch, so that the masked path is the one recorded.
    # What tracing an unsupported model, writing the file or loading it can raise
    # (torch's OnnxExporterError is a RuntimeError).
    failures: tuple[type[Exception], ...] = (RuntimeError, TypeError, ValueError, AttributeError, OSError, *_ort_errors())
    sample = batch(["an example for tracing the export, longer than the other", "short"])
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings: the check below decides
            torch.onnx.export(
                Hidden().eval(), sample, str(tmp), input_names=names, output_names=["token_embeddings"],
                dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "token_embeddings"]},
                opset_version=OPSET, do_constant_folding=True, dynamo=False,
            )
        # Check the graph on another batch size and other lengths than it was traced with.
        check = ["Quarterly budget review moved to Thursday.", "报销单被退回", "x", "a third, middling text"]
        args = batch(check)
        with torch.no_grad():
            # eval() again: the exporter restores the wrapper's training mode after
            # tracing, and a new module starts in training mode (dropout on).
            want = Hidden().eval()(*args).numpy()
        session = _session(tmp, 1)
        got = session.run(None, {n: a.numpy() for n, a in zip(names, args, strict=True)})[0]
        mask = args[1].numpy()[:, :, None].astype(bool)
        diff = float(np.abs(np.where(mask, got - want, 0.0)).max() / max(1.0, np.abs(want).max()))
        if diff > 1e-4:
            raise ConfigError(f"{pipeline.folder}: the ONNX export differs from torch by {diff:.2g}; set embedding.backend = 'torch'")
        proto = onnx.load(str(tmp))
        runtime = _Runtime(pipeline, tokenizer, session)
        for k, v in ((_PROBE_KEY, json.dumps(runtime.probe().tolist())), (_KEY_KEY, key)):
            entry = proto.metadata_props.add()
            entry.key, entry.value = k, v
        onnx.save(proto, str(tmp))
        os.chmod(tmp, 0o644)  # mkstemp made it private; it is a cache, like the model it came from
        os.replace(tmp, target)  # atomic: a reader sees the old file or the whole new one
    except failures as exc:
        raise ConfigError(f"cannot export {pipeline.folder} to ONNX: {exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


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
        if device != "cpu":
            raise ConfigError(f"the ONNX embedding backend runs on the CPU; set embedding.device to 'cpu', got {device!r}")
        if batch_size < 1:
            raise ConfigError(f"embedding.batch_size must be >= 1, got {batch_size}")
        if threads < 1:
            raise ConfigError(f"threads must be >= 1, got {threads}")
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
        tokenizer = _Tokenizer(pipeline)
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


def _json(path: Path, *, default: dict[str, Any] | None = None) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        if default is not None:
            return default
        raise ConfigError(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
