"""The ONNX embedding backend (``embedding.backend = "onnx"`` / ``"auto"``) against
sentence-transformers, both running the real bundled all-MiniLM-L6-v2: the same
vectors, rankings and coverage; the cached export; the refusals.

The export is cached in the test session's folder (conftest's ``onnx_cache``), never in
``~/.cache``; tests that need a cache of their own pass ``cache_dir``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX backend needs onnxruntime")

from hybrid_memory import Config, ConfigError, MemoryTree, NodeType, SentenceTransformerEmbedder  # noqa: E402
from hybrid_memory.embed import bundled_model_path, make_embedder  # noqa: E402
from hybrid_memory.embed.onnx_model import RETRY_AFTER_S, OnnxEmbedder, failed_marker, read_pipeline  # noqa: E402

ENGLISH = [
    "Expense claim for Zhang San (R&D), submitted on March 3rd.",
    "Finance returned the claim: the invoice is unreadable.",
    "Zhang San wants results by SMS, not by email.",
    "Migrate the order database to the new data centre.",
    "Migration window: Saturday 02:00 to 04:00, approved by ops.",
    "Ticket #4821: the login page times out for users in Brazil.",
    "The deploy to staging failed because the database migration timed out.",
    "Hotel booked in Chengdu for the trip on the 14th, 480 CNY per night.",
    "The user prefers short answers that start with the conclusion.",
    "Quarterly budget review moved to Thursday afternoon.",
    "Taxi receipts over 200 CNY need a manager's signature.",
    "The vendor raised the price of the annual licence by 12 percent.",
    "Batch 7 of the import finished with 3 warnings.",
    "Reminder: renew the passport before the Singapore conference.",
    "The customer asked for a refund because the parcel arrived damaged.",
    "Alice is allergic to peanuts; avoid them when ordering lunch.",
    "Decision: we keep PostgreSQL and drop the MongoDB experiment.",
    "The flight to Berlin was delayed by three hours.",
    "Per diem for domestic travel is 100 CNY a day.",
    "Bob will review the pull request tomorrow morning.",
    "The staging cluster runs out of disk every Friday.",
    "Invoice 2024-118 was paid twice; ask the bank to reverse one payment.",
    "The user likes dark mode and larger fonts.",
    "Meeting with the auditors postponed until the report is final.",
    "State: waiting for the finance team to re-check the scanned invoice.",
    "Train tickets to Shanghai cost 553 CNY in second class.",
    "The API rate limit is 600 requests per minute per key.",
    "Customer support escalated ticket #5120 to the second line.",
    "The new laptop arrives next week; keep the old one until then.",
    "She prefers window seats on long flights.",
    "Rollback plan: restore last night's snapshot and replay the queue.",
    "The conference hotel has no free cancellation after June 1st.",
    "Lunch expenses are not reimbursed for internal meetings.",
    "The error rate doubled after the cache was disabled.",
    "Remember to CC the project manager on every approval email.",
    "The contract with the cleaning company ends in September.",
    "Our on-call rotation changes every Monday at 09:00.",
    "The printer on the third floor jams with recycled paper.",
    "The release notes must mention the breaking change in the export format.",
    "Paid 36.50 USD for a taxi from the airport; receipt attached.",
]

CHINESE = [
    "报销单被财务退回了，发票看不清。",
    "财务因为发票模糊把报销退了。",
    "明天去成都出差，需要订酒店。",
    "用户偏好：回答尽量简短，先给结论。",
    "会议改到周四下午三点，地点在二楼会议室。",
    "数据库迁移窗口定在周六凌晨两点。",
    "客户投诉工单已经升级到二线支持。",
    "张三希望通过短信接收审批结果。",
    "出租车费超过两百元需要经理签字。",
    "供应商把年度许可证的价格提高了百分之十二。",
    "第七批数据导入完成，有三个警告。",
    "提醒：去新加坡开会之前要续签护照。",
    "客户因为包裹破损要求退款。",
    "李四对花生过敏，点午餐时要注意。",
    "决定：继续使用PostgreSQL，放弃MongoDB试验。",
    "去柏林的航班延误了三个小时。",
    "国内出差每天的补贴是一百元。",
    "王五明天上午会审核代码合并请求。",
    "测试集群每周五都会磁盘空间不足。",
    "发票2024-118被重复支付，请银行撤回一笔。",
    "用户喜欢深色模式和大号字体。",
    "与审计师的会议推迟到报告定稿之后。",
    "状态：等待财务重新核对扫描的发票。",
    "去上海的二等座火车票是五百五十三元。",
    "接口限流是每个密钥每分钟六百次请求。",
    "新电脑下周到货，旧电脑先留着。",
    "她长途飞行时喜欢靠窗的座位。",
    "回滚方案：恢复昨晚的快照并重放队列。",
    "会议酒店六月一日之后不能免费取消。",
    "内部会议的午餐费用不予报销。",
    "关闭缓存之后错误率翻了一倍。",
    "每封审批邮件都要抄送项目经理。",
    "保洁公司的合同九月份到期。",
    "值班轮换每周一上午九点交接。",
    "三楼的打印机用再生纸会卡纸。",
    "发布说明必须提到导出格式的不兼容变更。",
    "机场打车花了三十六块五，收据已附上。",
    "下周一之前提交季度预算。",
    "请把差旅报销的截止日期告诉团队。",
    "孩子的家长会定在周三晚上七点。",
]

SPECIAL = [
    " ",
    "",
    "\n\t ",
    "x",
    "😀🎉🚀",
    "Deploy done ✅ 🎉",
    "报销 claim #4821 被 finance 退回, invoice 看不清",
    "明天 fly to Chengdu, hotel 480 CNY/晚",
    "Café déjà vu — naïve façade, ÀÉÎÕÜ",
    # Far beyond 256 tokens: truncated the same way by both.
    " ".join(ENGLISH) * 3,
    "".join(CHINESE) * 2,
    "Ticket " + " ".join(str(n) for n in range(600)),
]

TEXTS = ENGLISH + CHINESE + SPECIAL

QUERIES = [
    "why was the expense claim sent back?",
    "when is the database migration?",
    "what does the user prefer for answers?",
    "how much was the hotel in Chengdu?",
    "which ticket was escalated?",
    "报销为什么被退回？",
    "数据库什么时候迁移？",
    "用户喜欢什么样的回答？",
    "出差补贴多少钱？",
    "refund 包裹 damaged",
]


@pytest.fixture(scope="module")
def onnx(onnx_cache: Path) -> OnnxEmbedder:
    e = OnnxEmbedder(cache_dir=onnx_cache)
    e.embed(["warm up"])  # exports into the session's cache on first use
    assert e.backend == "onnx"
    return e


@pytest.fixture(scope="module")
def vectors(onnx: OnnxEmbedder, embedder: SentenceTransformerEmbedder) -> tuple[np.ndarray, np.ndarray]:
    return onnx.embed(TEXTS), embedder.embed(TEXTS)


def test_vectors_match_sentence_transformers(vectors: tuple[np.ndarray, np.ndarray]) -> None:
    got, want = vectors
    assert got.shape == want.shape == (len(TEXTS), 384)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    worst = np.abs(got - want).max(axis=1)
    assert worst.max() <= 1e-4, [TEXTS[i][:40] for i in np.flatnonzero(worst > 1e-4)]
    assert (np.sum(got * want, axis=1) >= 0.9999).all()


def test_rankings_match_sentence_transformers(onnx: OnnxEmbedder, embedder: SentenceTransformerEmbedder, vectors: tuple[np.ndarray, np.ndarray]) -> None:
    # Whitespace-only texts are all "[CLS] [SEP]": one of them, or the order among
    # exact ties would be compared.
    docs = [i for i, t in enumerate(TEXTS) if t.strip() or i == TEXTS.index(" ")]
    docs_onnx, docs_torch = vectors[0][docs], vectors[1][docs]
    q_onnx, q_torch = onnx.embed(QUERIES), embedder.embed(QUERIES)
    for i, query in enumerate(QUERIES):
        top_onnx = np.argsort(-(docs_onnx @ q_onnx[i]), kind="stable")[:10]
        top_torch = np.argsort(-(docs_torch @ q_torch[i]), kind="stable")[:10]
        assert top_onnx.tolist() == top_torch.tolist(), query


def test_coverage_matches_sentence_transformers(onnx: OnnxEmbedder, embedder: SentenceTransformerEmbedder) -> None:
    for text in [*TEXTS, *QUERIES]:
        assert onnx.coverage(text) == embedder.coverage(text), text
    assert onnx.coverage("Finance returned the claim") == 1.0
    assert onnx.coverage("😀") == 0.0
    assert onnx.coverage("") == 1.0


def test_a_batch_embeds_as_its_items_do(onnx: OnnxEmbedder) -> None:
    batch = onnx.embed(TEXTS)
    single = np.vstack([onnx.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(batch, single, atol=1e-5)
    small = OnnxEmbedder(cache_dir=onnx.export_path.parent, batch_size=3)
    np.testing.assert_allclose(small.embed(TEXTS), batch, atol=1e-5)
    assert onnx.embed([]).shape == (0, 384)


def test_name_and_dim_are_the_torch_embedders(onnx: OnnxEmbedder, embedder: SentenceTransformerEmbedder) -> None:
    assert onnx.name == embedder.name == "all-MiniLM-L6-v2"
    assert onnx.dim == embedder.dim == 384


def test_threads_share_one_load(onnx: OnnxEmbedder) -> None:
    fresh = OnnxEmbedder(cache_dir=onnx.export_path.parent)
    want = onnx.embed(ENGLISH[:8])
    results: list[np.ndarray] = []
    workers = [threading.Thread(target=lambda: results.append(fresh.embed(ENGLISH[:8]))) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(results) == 6
    for got in results:
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_cached_export_is_reused(onnx: OnnxEmbedder) -> None:
    path = onnx.export_path
    before = path.stat()
    # Another thread count is another session, loaded from the file (not re-exported).
    again = OnnxEmbedder(cache_dir=path.parent, threads=2)
    np.testing.assert_allclose(again.embed(ENGLISH[:5]), onnx.embed(ENGLISH[:5]), atol=1e-5)
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files, no failure marker


def test_embedding_imports_neither_torch_nor_transformers(onnx: OnnxEmbedder) -> None:
    """A fresh process with the export cached: ``auto`` embeds without torch, and does not export."""
    path = onnx.export_path
    before = path.stat()
    code = (
        "import json, sys\n"
        "from hybrid_memory import Config\n"
        "from hybrid_memory.embed import make_embedder\n"
        "e = make_embedder(Config.load(overrides={'embedding': {'model': 'bundled'}}).embedding)\n"
        "v = e.embed(['why was the claim sent back?', '报销为什么被退回'])\n"
        "c = e.coverage('报销 claim')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'sentence_transformers'))\n"
        "print(json.dumps({'backend': e.backend, 'name': e.name, 'shape': list(v.shape), 'heavy': heavy}))\n"
    )
    env = dict(os.environ, HYBRID_MEMORY_CACHE=str(path.parent.parent), HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report == {"backend": "onnx", "name": "all-MiniLM-L6-v2", "shape": [2, 384], "heavy": []}
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_two_processes_exporting_at_once_leave_one_good_file(onnx: OnnxEmbedder, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from hybrid_memory.embed.onnx_model import OnnxEmbedder\n"
        "e = OnnxEmbedder(cache_dir=sys.argv[1])\n"
        "print(e.embed(['why was the claim sent back?'])[0, :4].tolist())\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    want = onnx.embed(["why was the claim sent back?"])[0, :4]
    for out, _ in outs:
        np.testing.assert_allclose(json.loads(out), want, atol=1e-5)
    assert [p.name for p in tmp_path.iterdir()] == [onnx.export_path.name]
    np.testing.assert_allclose(OnnxEmbedder(cache_dir=tmp_path, threads=3).embed(ENGLISH[:3]), onnx.embed(ENGLISH[:3]), atol=1e-5)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "weights"])
def test_a_damaged_export_is_exported_again(onnx: OnnxEmbedder, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    path = cache / onnx.export_path.name
    data = bytearray(onnx.export_path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytearray(b"not an onnx file\n" * 100)
    else:
        # Parses, but NaN in the encoder's weights (the last part of the file): only the probe notices.
        at = int(len(data) * 0.8)
        data[at : at + (1 << 20)] = b"\xff" * (1 << 20)
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="hybrid_memory.embed.onnx_model"):
        fixed = OnnxEmbedder(cache_dir=cache)
        got = fixed.embed(ENGLISH[:5])
    assert "unusable" in caplog.text
    assert ("probe does not match" in caplog.text) == (damage == "weights")
    np.testing.assert_allclose(got, onnx.embed(ENGLISH[:5]), atol=1e-5)
    assert path.stat().st_size == onnx.export_path.stat().st_size
    assert sorted(p.name for p in cache.iterdir()) == [path.name]


def test_a_recorded_failure_is_not_retried(onnx: OnnxEmbedder, tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    marker = failed_marker(tmp_path / onnx.export_path.name)
    marker.write_text("cannot export: the tracer gave up\n")
    with pytest.raises(ConfigError, match="tracer gave up"):
        OnnxEmbedder(cache_dir=tmp_path).embed(["x"])
    auto = OnnxEmbedder(cache_dir=tmp_path, fallback=embedder)
    np.testing.assert_allclose(auto.embed(["x"]), embedder.embed(["x"]))
    assert auto.backend == "fallback"
    # An old record is tried again: the export works now, and the record goes.
    old = marker.stat().st_mtime - RETRY_AFTER_S - 60
    os.utime(marker, (old, old))
    again = OnnxEmbedder(cache_dir=tmp_path)
    np.testing.assert_allclose(again.embed(["x"]), embedder.embed(["x"]), atol=1e-5)
    assert not marker.exists() and again.export_path.is_file()


def _model_copy(tmp_path: Path, name: str) -> Path:
    """The bundled model's files linked into a folder of its own, to edit its pipeline."""
    src = Path(bundled_model_path())
    dst = tmp_path / name
    for f in src.rglob("*"):
        if f.is_file():
            (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / f.relative_to(src)).symlink_to(f)
    return dst


def test_cls_pooling_matches_sentence_transformers(tmp_path: Path) -> None:
    folder = _model_copy(tmp_path, "minilm-cls")
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.unlink()
    pooling.write_text(json.dumps({**config, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    assert read_pipeline(folder).pooling == "cls"
    onnx = OnnxEmbedder(str(folder), cache_dir=tmp_path / "cache")
    torch = SentenceTransformerEmbedder(str(folder))
    texts = ENGLISH[:10] + CHINESE[:10] + SPECIAL
    got, want = onnx.embed(texts), torch.embed(texts)
    assert np.abs(got - want).max() <= 1e-4
    assert onnx.name == torch.name == str(folder)


@pytest.fixture(scope="module")
def dense_model(tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder) -> Path:
    """A real sentence-transformers model with a Dense layer after the pooling (384 -> 128)."""
    from sentence_transformers import SentenceTransformer, models

    base = SentenceTransformer(bundled_model_path(), device="cpu")
    dense = models.Dense(in_features=384, out_features=128)
    model = SentenceTransformer(modules=[base[0], base[1], dense, models.Normalize()], device="cpu")
    folder = tmp_path_factory.mktemp("dense") / "minilm-dense"
    model.save(str(folder))
    return folder


def test_onnx_refuses_a_pipeline_it_cannot_reproduce(dense_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Dense"):
        read_pipeline(dense_model)
    strict = make_embedder(Config.load(overrides={"embedding": {"model": str(dense_model), "backend": "onnx"}}).embedding)
    assert isinstance(strict, OnnxEmbedder)
    with pytest.raises(ConfigError, match="Dense"):
        strict.embed(["x"])
    with pytest.raises(ConfigError, match="local model folder"):
        OnnxEmbedder("sentence-transformers/not-a-folder", cache_dir=tmp_path).embed(["x"])
    assert not list(tmp_path.iterdir())  # nothing exported


def test_auto_falls_back_to_sentence_transformers(dense_model: Path) -> None:
    auto = make_embedder(Config.load(overrides={"embedding": {"model": str(dense_model)}}).embedding)
    torch = SentenceTransformerEmbedder(str(dense_model))
    texts = ENGLISH[:5]
    np.testing.assert_allclose(auto.embed(texts), torch.embed(texts), atol=1e-6)
    assert auto.dim == 128
    assert isinstance(auto, OnnxEmbedder) and auto.backend == "fallback"
    assert auto.coverage("报销 claim") == torch.coverage("报销 claim")


def test_the_setting_selects_the_backend() -> None:
    assert Config.load().embedding.backend == "auto"
    auto = make_embedder(Config.load(overrides={"embedding": {"model": "bundled"}}).embedding)
    assert isinstance(auto, OnnxEmbedder) and auto.name == "all-MiniLM-L6-v2"
    onnx = make_embedder(Config.load(overrides={"embedding": {"model": "bundled", "backend": "onnx"}}).embedding)
    assert isinstance(onnx, OnnxEmbedder)
    torch = make_embedder(Config.load(overrides={"embedding": {"model": "bundled", "backend": "torch"}}).embedding)
    assert isinstance(torch, SentenceTransformerEmbedder) and torch.name == "all-MiniLM-L6-v2"
    # Another device is sentence-transformers' business: auto leaves it to it, onnx refuses.
    cuda = make_embedder(Config.load(overrides={"embedding": {"model": "bundled", "device": "cuda"}}).embedding)
    assert isinstance(cuda, SentenceTransformerEmbedder)
    with pytest.raises(ConfigError, match="cpu"):
        make_embedder(Config.load(overrides={"embedding": {"model": "bundled", "backend": "onnx", "device": "cuda"}}).embedding)


@pytest.mark.parametrize("value", ["tensorflow", "ONNX", "", 1])
def test_a_bad_backend_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="embedding.backend"):
        Config.load(overrides={"embedding": {"backend": value}})


def test_switching_backend_keeps_the_memory(tmp_path: Path, onnx: OnnxEmbedder, embedder: SentenceTransformerEmbedder, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "mem"
    with MemoryTree.open(folder, namespace="t", embedder=embedder) as mem:
        task = mem.add("Expense claim for Zhang San", type=NodeType.TASK)
        mem.add("Finance returned the claim: the invoice is unreadable", type=NodeType.EVENT, parent=task)
        mem.add("Zhang San wants results by SMS", type=NodeType.PREFERENCE, parent=task)
        want = mem.retrieve("why was the claim sent back?").ids
    with caplog.at_level(logging.WARNING), MemoryTree.open(folder, namespace="t", embedder=onnx) as mem:
        got = mem.retrieve("why was the claim sent back?").ids
    assert got == want
    assert "embedded by" not in caplog.text


def test_the_model_folder_is_left_alone(onnx: OnnxEmbedder) -> None:
    assert onnx.export_path.is_file()
    assert not any(p.suffix in (".onnx", ".tmp", ".failed") for p in Path(bundled_model_path()).rglob("*"))
