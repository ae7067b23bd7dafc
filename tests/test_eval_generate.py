"""The synthetic trace generator: shape, determinism, and that each feature the
evaluation relies on is really in the history (not only named in a label)."""

from __future__ import annotations

import hashlib
import json
import re
import string
import time
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eval import generate_heldout as heldout
from eval import generate_templates as tables
from eval.generate import CATEGORIES, SPLITS, default_queries, generate, main, overlap, terms
from eval.generate_templates import FRESH, Domain, Line, domains
from hybrid_memory.evaluation.trace import read_trace

#: The languages a trace is written in ("mixed": tasks in both, see test_a_mixed_trace_...).
LANGS = ("en", "zh", "mixed")
#: The languages templates are written in.
TEXT_LANGS = ("en", "zh")
Event = dict[str, Any]
_ID = re.compile(r"\b(?:EXP|TKT|BUG|TRV|PO|REQ|MOV|MIG|EVT)-\d+")
_CJK = re.compile(r"[\u4e00-\u9fff]")


@cache
def trace(lang: str, nodes: int = 2000, seed: int = 7, split: str = "dev") -> tuple[Event, ...]:
    return tuple(generate(nodes, lang=lang, seed=seed, split=split))


def adds(events: tuple[Event, ...]) -> dict[str, Event]:
    return {e["id"]: e for e in events if e["op"] == "add"}


def queries(events: tuple[Event, ...]) -> list[Event]:
    return [e for e in events if e["op"] == "query"]


def nearest_task(nodes: dict[str, Event], node_id: str) -> Event:
    node = nodes[node_id]
    while node["type"] != "task":
        node = nodes[node["parent"]]
    return node


def root(nodes: dict[str, Event], node_id: str) -> Event:
    node = nodes[node_id]
    while node["parent"] is not None:
        node = nodes[node["parent"]]
    return node


# ---------------------------------------------------------------- arguments and size


@pytest.mark.parametrize("lang", LANGS)
def test_same_seed_same_trace_other_seed_other_trace(lang: str) -> None:
    assert generate(1000, lang=lang, seed=3) == generate(1000, lang=lang, seed=3)
    assert generate(1000, lang=lang, seed=3) != generate(1000, lang=lang, seed=4)


def test_languages_differ_and_bad_arguments_raise() -> None:
    assert trace("en")[0]["content"] != trace("zh")[0]["content"]
    for bad in (
        dict(nodes=49),
        dict(nodes=True),
        dict(lang="fr"),
        dict(queries=-1),
        dict(queries=1000 // 5 + 1),
    ):
        with pytest.raises(ValueError):
            generate(**{"nodes": 1000, **bad})  # type: ignore[arg-type]


@pytest.mark.parametrize("split", SPLITS)
def test_a_mixed_trace_writes_tasks_in_both_languages_and_names_across_them(split: str) -> None:
    """Each task of a mixed trace is written in one language, and now and then a
    person or a named thing of the other language appears in it: Chinese notes
    naming "Susan Harris", English ones naming a Chinese hotel. A quarter of the
    questions ask in the other language ("How much did 马婷 spend on EXP-8964?")."""
    events = trace("mixed", 3000, split=split)
    nodes = adds(events)
    chinese = {i: n["lang"] == "zh" for i, n in nodes.items() if n["parent"] is None}
    assert 0.3 < sum(chinese.values()) / len(chinese) < 0.7  # tasks in both languages
    mixed_lines = 0
    for n in nodes.values():
        in_zh = chinese[root(nodes, n["id"])["id"]]
        text = _ID.sub("", n["content"])
        if in_zh:
            assert _CJK.search(text), n  # a Chinese task's memories are Chinese ...
            mixed_lines += bool(re.search(r"[A-Z][a-z]+ [A-Z][a-z]+", text))  # ... naming "Susan Harris"
        else:
            assert re.search(r"[A-Za-z]{3,}", text), n
            mixed_lines += bool(_CJK.search(text))
        assert "  " not in n["content"] and n["content"] == n["content"].strip(), n
    assert mixed_lines >= 0.05 * len(nodes)
    crossed = 0  # questions asked in the other language than their task's
    for q in queries(events):
        if q["lang"] == "zh":
            assert len(_CJK.findall(q["text"])) >= 2, q
        else:
            assert len(re.findall(r"\b[A-Za-z]{3,}\b", _ID.sub("", q["text"]))) >= 2, q
        crossed += (q["lang"] == "zh") != chinese[root(nodes, q["gold"][0])["id"]]
    assert 0.1 < crossed / len(queries(events)) < 0.4
    assert generate(300, lang="mixed", seed=1) == generate(300, lang="mixed", seed=1)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("nodes", [50, 1000, 2000])
def test_exactly_the_asked_number_of_nodes_and_queries(lang: str, nodes: int) -> None:
    events = trace(lang, nodes)
    assert len(adds(events)) == nodes
    assert len(queries(events)) == default_queries(nodes)
    assert {e["category"] for e in queries(events)} <= set(CATEGORIES)


def test_queries_override_and_restarts_off() -> None:
    events = generate(1000, seed=1, queries=120, restarts=False)
    assert len(queries(events)) == 120
    assert not any(e["op"] == "restart" for e in events)
    assert not queries(generate(1000, seed=1, queries=0))
    assert default_queries(100_000) == 2000


def test_a_100k_trace_is_quick() -> None:
    started = time.perf_counter()
    events = generate(100_000, seed=0)
    elapsed = time.perf_counter() - started
    assert len(adds(tuple(events))) == 100_000 and len(queries(tuple(events))) == 2000
    assert elapsed < 15, f"{elapsed:.1f} s"  # about 3 s on a laptop; generous for slow CI


# ---------------------------------------------------------------- structure


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_ids_unique_parents_earlier_time_moves_forward_in_working_hours(
    lang: str, split: str
) -> None:
    seen: dict[str, Event] = {}
    last = 0.0
    for e in trace(lang, split=split):
        if e["op"] == "add":
            assert e["id"] not in seen
            assert e["parent"] is None or e["parent"] in seen
            assert e["type"] in {
                "task",
                "event",
                "fact",
                "preference",
                "decision",
                "state",
                "summary",
            }
            assert 0.0 < e["importance"] <= 1.0
            seen[e["id"]] = e
        elif e["op"] in ("focus", "feedback"):
            assert e["id"] in seen
            if e["op"] == "focus":
                assert seen[e["id"]]["type"] == "task"
        if "ts" in e:
            assert e["ts"] >= last
            last = e["ts"]
            moment = time.gmtime(e["ts"])
            assert moment.tm_wday < 5 and 9 <= moment.tm_hour < 18
    span_days = (last - trace(lang, split=split)[0]["ts"]) / 86400
    assert 14 <= span_days <= 60  # weeks of work for 2k nodes


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_every_gold_exists_earlier_and_its_task_is_the_nearest_task_ancestor(
    lang: str, split: str
) -> None:
    seen: dict[str, Event] = {}
    for e in trace(lang, split=split):
        if e["op"] == "add":
            seen[e["id"]] = e
        elif e["op"] == "query":
            assert e["gold"] and all(g in seen for g in e["gold"])
            assert e["task"] == sorted({nearest_task(seen, g)["id"] for g in e["gold"]})
            assert all(s in seen for s in e.get("stale", []))
            assert e["lag"] >= 0


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_gold_is_unambiguous(lang: str, split: str) -> None:
    """No gold is re-recorded (before or after its question), and none reads like
    another node of its type under the same parent."""
    events = trace(lang, split=split)
    nodes = adds(events)
    copied = {e["dup_of"] for e in nodes.values() if "dup_of" in e} | {
        e["id"] for e in nodes.values() if "dup_of" in e
    }
    siblings: dict[str | None, list[Event]] = defaultdict(list)
    for n in nodes.values():
        siblings[n["parent"]].append(n)
    for q in queries(events):
        for g in q["gold"]:
            assert g not in copied
            node = nodes[g]
            for other in siblings[node["parent"]]:
                if other["id"] != g and other["type"] == node["type"]:
                    assert overlap(other["content"], node["content"]) < 0.7, (
                        node["content"],
                        other["content"],
                    )


# ---------------------------------------------------------------- the features


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_tasks_interleave_with_switches_returns_subtasks_and_restarts(
    lang: str, split: str
) -> None:
    events = trace(lang, split=split)
    nodes = adds(events)
    roots = [n for n in nodes.values() if n["parent"] is None]
    assert len(roots) >= 60 and all(n["type"] == "task" for n in roots)
    assert sum(1 for n in nodes.values() if n["type"] == "task" and n["parent"] is not None) >= 30
    # A return: a root gets adds, others get adds, then it gets adds again.
    runs = []
    for e in events:
        if e["op"] == "add" and (not runs or runs[-1] != root(nodes, e["id"])["id"]):
            runs.append(root(nodes, e["id"])["id"])
    returns = [r for i, r in enumerate(runs) if r in runs[:i]]
    assert len(returns) >= 100
    assert sum(1 for e in events if e["op"] == "focus") >= 200
    assert 3 <= sum(1 for e in events if e["op"] == "restart") <= 10
    assert any(e["op"] == "feedback" for e in events)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_knowledge_updates_supersede_and_are_the_gold(lang: str, split: str) -> None:
    events = trace(lang, split=split)
    nodes = adds(events)
    order = {node_id: i for i, node_id in enumerate(nodes)}
    updates = [n for n in nodes.values() if n["type"] == "fact" and "supersedes" in n]
    assert len(updates) >= 40
    latest = [q for q in queries(events) if q["category"] == "latest-update"]
    assert len(latest) >= 5
    for q in latest:
        (gold,) = q["gold"]
        assert nodes[gold].get("supersedes") in q["stale"]
        assert all(order[s] < order[gold] for s in q["stale"])
    for q in (q for q in queries(events) if q["category"] == "state"):
        (gold,) = q["gold"]
        assert nodes[gold]["type"] == "state"
        later = [n for n in nodes.values() if n.get("supersedes") == gold and n["type"] == "state"]
        assert not later or float(later[0]["ts"]) > q["ts"]  # the newest state when asked


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_near_duplicates_repeat_and_reword_within_their_task(lang: str, split: str) -> None:
    nodes = adds(trace(lang, split=split))
    dups = [n for n in nodes.values() if "dup_of" in n]
    kinds = Counter(n["dup"] for n in dups)
    assert len(dups) >= 40 and kinds["repeat"] and kinds["light"]
    for d in dups:
        original = nodes[d["dup_of"]]
        assert d["parent"] == original["parent"] and d["type"] == original["type"]
        if d["dup"] in ("repeat", "light"):
            assert overlap(d["content"], original["content"]) >= 0.85


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_distractor_tasks_share_their_domain_words(lang: str, split: str) -> None:
    """Dozens of tasks per domain, and the domain's common words in many of them: a
    question has to be told apart by its entity (the test split has more domains: more nodes)."""
    size = (2000 if split == "dev" else 3000) * (2 if lang == "mixed" else 1)  # two languages' tasks
    nodes = adds(trace(lang, size, split=split))
    roots = [n for n in nodes.values() if n["parent"] is None]
    per_domain = Counter(n["domain"] for n in roots)
    langs = TEXT_LANGS if lang == "mixed" else (lang,)
    assert set(per_domain) == {d.name for lg in langs for d in domains(lg, split)}
    assert min(per_domain.values()) >= 10
    tasks_with: dict[str, set[str]] = defaultdict(set)
    for n in nodes.values():
        for term in terms(n["content"]):
            if not any(ch.isdigit() for ch in term):
                tasks_with[term].add(root(nodes, n["id"])["id"])
    shared = [t for t, owners in tasks_with.items() if len(owners) >= 10]
    assert len(shared) >= 50


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", LANGS)
def test_queries_paraphrase_name_their_task_and_come_after_their_gold(
    lang: str, split: str
) -> None:
    events = trace(lang, split=split)
    nodes = adds(events)
    qs = queries(events)
    similarity = [max(overlap(q["text"], nodes[g]["content"]) for g in q["gold"]) for q in qs]
    assert sum(similarity) / len(similarity) < 0.3
    assert max(similarity) < 0.7
    for q in qs:
        assert all(nodes[g]["content"] not in q["text"] for g in q["gold"])
        ids = set(_ID.findall(root(nodes, q["gold"][0])["content"]))
        assert ids & set(_ID.findall(q["text"])), q["text"]
    lags = sorted(q["lag"] for q in qs)
    assert lags[len(lags) // 2] >= 50 and lags[-1] >= 1000  # mostly later, some much later


@pytest.mark.parametrize("split", SPLITS)
def test_every_category_is_asked_and_after_return_follows_a_return(split: str) -> None:
    for lang in LANGS:
        events = trace(lang, 3000, seed=1, split=split)
        nodes = adds(events)
        assert {q["category"] for q in queries(events)} == set(CATEGORIES)
        for i, q in enumerate(events):
            if q["op"] == "query" and q["category"] == "after-return":
                focus = events[i - 1]
                home = root(nodes, q["gold"][0])["id"]
                assert focus["op"] == "focus" and focus["id"] == home
                before = next(e for e in reversed(events[: i - 1]) if e["op"] == "add")
                assert root(nodes, before["id"])["id"] != home  # it was away
            if q["op"] == "query" and q["category"] == "multi-fact":
                assert len(q["gold"]) == 2 and len(set(q["gold"])) == 2


@pytest.mark.parametrize("split", SPLITS)
def test_chinese_content_is_chinese(split: str) -> None:
    zh, en = trace("zh", split=split), trace("en", split=split)
    texts = [n["content"] for n in adds(zh).values()] + [q["text"] for q in queries(zh)]
    assert all(_CJK.search(t) for t in texts)
    letters = "".join(ch for t in texts for ch in t if ch.isalpha())
    assert len(_CJK.findall(letters)) / len(letters) > 0.6
    english = [n["content"] for n in adds(en).values()] + [q["text"] for q in queries(en)]
    assert not any(_CJK.search(t) for t in english)


# ---------------------------------------------------------------- templates and CLI


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("lang", TEXT_LANGS)
def test_templates_never_give_the_answer_away(lang: str, split: str) -> None:
    """Slots an update redraws appear in no question or ref (the question would hold the
    answer, or a stale value); the fact an update supersedes names that slot; a line with a
    rewording draws nothing afresh (a rewording must carry the same information)."""
    for dom in domains(lang, split):
        mutable = {"{" + k + "}" for k in dom.updates}
        lines = [*dom.items, *dom.updates.values(), *(i for s in dom.subs for i in s.items)]
        asked = [
            *dom.refs,
            *dom.asks,
            *(q for line in lines for q in line.questions),
            *(s.ref for s in dom.subs),
        ]
        assert not [q for q in asked if any(m in q for m in mutable)], dom.name
        facts = {i.key: i for i in dom.items if i.kind == "fact"}
        assert all("{" + k + "}" in facts[k].contents[0] for k in dom.updates), dom.name
        reworded = [c for line in lines if len(line.contents) > 1 for c in line.contents]
        assert not [c for c in reworded if re.search(r"\{(n|time|dtime)\}", c)], dom.name
    assert set(tables.DOMAINS["en"]) == set(tables.DOMAINS["zh"])


def test_cli_writes_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.jsonl"
    assert main(["--nodes", "300", "--lang", "zh", "--seed", "2", "--out", str(out)]) == 0
    assert read_trace(out) == generate(300, lang="zh", seed=2)
    assert "报销" in out.read_text(encoding="utf-8") or "工单" in out.read_text(encoding="utf-8")
    assert "add 300" in capsys.readouterr().err


def test_cli_writes_the_test_split(tmp_path: Path) -> None:
    out = tmp_path / "test.jsonl"
    argv = ["--nodes", "300", "--lang", "en", "--seed", "2", "--split", "test", "--out", str(out)]
    assert main(argv) == 0
    assert read_trace(out) == generate(300, lang="en", seed=2, split="test")
    with pytest.raises(ValueError):
        generate(300, split="train")


# ---------------------------------------------------------------- the held-out test split

# sha256 of generate(500, lang=..., seed=0) as JSON (sort_keys, ensure_ascii=False), and of
# the JSON list of its query texts, computed before the split existed: dev must not move.
_DEV_TRACE_SHA256 = {
    "en": "87cac9dc00246d632d47b1983c12d1b155e845b99e24356b3d38981fe0295e68",
    "zh": "3731357305a12122008e94a13f69772a3041bfdc2134f999a0276cfb694e6a38",
}
_DEV_QUERIES_SHA256 = {
    "en": "15a04262ca34d833ccfb7555846fd6834bccc6628277476a27dcf8fdc3962e51",
    "zh": "05d6cdf5383b9f8d458ad75796442a046cc7e4d5c27a7d85ab47f8416e8a62a6",
}
_NEW_DOMAINS = {"move", "migration", "event"}


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()


def _slots(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _asked_lines(dom: Domain) -> list[tuple[str, Line]]:
    """(sub key or "", line) of every line of ``dom`` that has questions, in order."""
    lines = [("", i) for i in (*dom.items, *dom.updates.values())]
    lines += [(s.key, i) for s in dom.subs for i in s.items]
    return [(sub, line) for sub, line in lines if line.questions]


def _phrasings(doms: tuple[Domain, ...]) -> set[str]:
    """Every question, ref and ask template of ``doms``."""
    out: set[str] = set()
    for d in doms:
        out |= {*d.refs, *d.asks, *(s.ref for s in d.subs)}
        out |= {q for _, line in _asked_lines(d) for q in line.questions}
    return out


@pytest.mark.parametrize("lang", TEXT_LANGS)
def test_dev_split_is_unchanged(lang: str) -> None:
    for events in (generate(500, lang=lang, seed=0), generate(500, lang=lang, seed=0, split="dev")):
        assert _sha256([q["text"] for q in queries(tuple(events))]) == _DEV_QUERIES_SHA256[lang]
        # (the finish events came later: they draw nothing from the generator's randomness)
        text = json.dumps([e for e in events if e["op"] != "finish"], ensure_ascii=False, sort_keys=True)
        assert hashlib.sha256(text.encode()).hexdigest() == _DEV_TRACE_SHA256[lang]


@pytest.mark.parametrize("lang", LANGS)
def test_a_task_is_finished_once_its_script_is_done_and_never_written_after(lang: str) -> None:
    events = trace(lang, 3000, 0, "dev")
    nodes = adds(events)
    finished: set[str] = set()
    for e in events:
        if e["op"] == "finish":
            assert nodes[e["id"]]["parent"] is None and e["id"] not in finished
            finished.add(e["id"])
        elif e["op"] == "add" and e["parent"] is not None:
            assert root(nodes, e["id"])["id"] not in finished
    assert len(finished) >= 10


@pytest.mark.parametrize("lang", TEXT_LANGS)
def test_test_split_has_new_domains_and_no_dev_question(lang: str) -> None:
    dev, test = domains(lang), domains(lang, "test")
    old = {d.name for d in dev}
    assert [d.name for d in test[: len(dev)]] == [d.name for d in dev]
    assert {d.name for d in test} == old | _NEW_DOMAINS
    # No held-out template of an old domain is a dev template of any domain.
    assert not _phrasings(test[: len(dev)]) & _phrasings(dev)
    assert not set(heldout.MULTI[lang]) & set(tables.MULTI[lang])
    # Nor is any question text of a test trace a question text of a dev trace.
    test_events, dev_events = trace(lang, 3000, 0, "test"), trace(lang, 3000, 0, "dev")
    nodes = adds(test_events)
    asked = Counter(root(nodes, q["gold"][0])["domain"] for q in queries(test_events))
    assert set(asked) == old | _NEW_DOMAINS, asked
    assert sum(asked[d] for d in _NEW_DOMAINS) >= 10
    dev_texts = {q["text"] for q in queries(dev_events)}
    assert not {q["text"] for q in queries(test_events)} & dev_texts


@pytest.mark.parametrize("lang", TEXT_LANGS)
def test_heldout_phrasings_keep_the_memories_and_ask_the_same(lang: str) -> None:
    """Every line with questions gets held-out ones; contents stay as they are; a held-out
    question uses only placeholders the dev question of its line or the domain's refs use
    (plus {ref}), and names the task; refs use title slots only."""
    for dev, test in zip(domains(lang), domains(lang, "test")[: len(domains(lang))], strict=True):
        same = ("kinds", "titles", "states", "routines", "summaries")
        assert all(getattr(dev, f) == getattr(test, f) for f in same), dev.name
        assert [s.title for s in dev.subs] == [s.title for s in test.subs], dev.name
        title = set().union(*map(_slots, dev.titles))
        ids = {slot for slot, kind in dev.kinds.items() if kind.startswith("@") and slot in title}
        ref_slots = set().union(*map(_slots, dev.refs))
        assert all(_slots(r) <= title and _slots(r) & ids for r in test.refs), dev.name
        assert all(_slots(s.ref) & ids for s in test.subs), dev.name
        pairs = list(zip(_asked_lines(dev), _asked_lines(test), strict=True))
        pairs.append(
            (("", Line("ask", "", (), dev.asks, "")), ("", Line("ask", "", (), test.asks, "")))
        )
        for (sub, a), (sub_t, b) in pairs:
            assert (sub, a.kind, a.key, a.contents) == (sub_t, b.kind, b.key, b.contents)
            assert b.questions and not set(b.questions) & set(a.questions), (dev.name, a.key)
            allowed = set().union(*map(_slots, a.questions)) | ref_slots | {"ref"}
            for q in b.questions:
                assert _slots(q) <= allowed, (dev.name, q)
                assert _slots(q) & (ids | {"ref"}), (dev.name, q)
            assert a.kind == "ask" or (b.np and (b.np != a.np)), (dev.name, a.key)


@pytest.mark.parametrize("lang", TEXT_LANGS)
def test_new_domains_parse_and_fill_every_slot(lang: str) -> None:
    assert set(heldout.NEW_DOMAINS["en"]) == set(heldout.NEW_DOMAINS["zh"]) == _NEW_DOMAINS
    assert set(heldout.QUESTIONS["en"]) == set(heldout.QUESTIONS["zh"]) == set(tables.DOMAINS["en"])
    for dom in heldout.new_domains(lang):
        kinds = Counter(i.kind for i in dom.items)
        assert all(kinds[k] >= 2 for k in ("fact", "event", "decision", "pref")), dom.name
        assert len(dom.updates) >= 2 and len(dom.subs) >= 2 and len(dom.states) >= 4, dom.name
        assert all(s.items and all(i.questions and i.np for i in s.items) for s in dom.subs)
        title = set().union(*map(_slots, dom.titles))
        first_state = _slots(dom.states[0])
        assert all(_slots(r) <= title for r in dom.refs), dom.name
        assert all(_slots(a) <= title | first_state | {"ref"} for a in dom.asks), dom.name
        for sub, line in _asked_lines(dom):
            sub_title = next((_slots(s.title) for s in dom.subs if s.key == sub), set())
            drawn = title | first_state | sub_title | _slots(line.contents[0]) | {"ref"}
            for q in line.questions:  # a question draws nothing: its slots exist when asked
                assert _slots(q) <= drawn - FRESH, (dom.name, q)
    # Every slot of every node and question of a test trace is filled.
    events = trace(lang, 3000, 0, "test")
    texts = [n["content"] for n in adds(events).values()] + [q["text"] for q in queries(events)]
    assert not [t for t in texts if "{" in t or "}" in t]
    new_roots = [n for n in adds(events).values() if n.get("domain") in _NEW_DOMAINS]
    assert {n["domain"] for n in new_roots} == _NEW_DOMAINS
