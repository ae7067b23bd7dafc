"""The real data sets as traces (eval.datasets) and traces on disk (hybrid_memory.evaluation.trace).

Each loader runs on a tiny fixture written in its data set's schema, so the
expected events can be spelled out. When the real data folder is there
($HYBRID_MEMORY_EVAL_DATA, else ../shared/data) each data set is also loaded in
full and its trace checked for referential integrity; nothing is copied from it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from eval.datasets import (
    ASSISTANT_IMPORTANCE,
    DATA_ENV,
    DATASETS,
    DatasetError,
    default_data_dir,
    load,
    load_with_report,
    main,
)
from hybrid_memory.config import Config
from hybrid_memory.evaluation.trace import TraceError, read_trace, write_trace

Event = dict[str, Any]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=timezone.utc).timestamp()


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def write_json_lines(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def of(events: list[Event], op: str) -> list[Event]:
    return [e for e in events if e["op"] == op]


def by_id(events: list[Event], op: str = "query") -> dict[str, Event]:
    return {e["id"]: e for e in of(events, op)}


# -- LoCoMo -------------------------------------------------------------------------------


def turn(session: int, position: int, speaker: str) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": f"D{session}:{position}", "text": f"line {session}.{position}"}


def qa(evidence: list[str], category: int) -> dict[str, Any]:
    return {"question": f"q {evidence}", "answer": 7, "evidence": evidence, "category": category}


def locomo_sample(sample_id: str) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                turn(1, 1, "Ann"),
                {**turn(1, 2, "Bob"), "blip_caption": "a photo of a dog", "img_url": ["x"]},
                turn(1, 3, "Ann"),
            ],
            # keys in no particular order; session 10 sorts after session 2
            "session_10_date_time": "9:05 AM on 1 January, 2024",
            "session_10": [turn(10, 1, "Bob")],
            "session_2_date_time": "12:09 am on 13 September, 2023",
            "session_2": [turn(2, 1, "Bob"), turn(2, 2, "Ann")],
            "session_3_date_time": "10:00 am on 14 September, 2023",  # a date with no turns
            "session_4_date_time": "11:00 am on 15 September, 2023",
            "session_4": [],
        },
        "qa": [
            qa(["D1:3"], 4),
            qa(["D1:2; D2:1"], 1),  # one string, two ids
            qa(["D:2:02"], 2),  # stray colon and a leading zero
            qa(["D", "D1:1"], 3),  # a piece that is no id
            {"question": "adversarial", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
            qa(["D9:9"], 4),  # names no turn: no gold left
            qa([], 3),  # no evidence at all
            qa(["D2:1", "D2:1", "D1:1"], 1),  # repeats; tasks keep first-seen order
        ],
        "observation": {},
        "session_summary": {},
        "event_summary": {},
    }


@pytest.fixture
def locomo_dir(tmp_path: Path) -> Path:
    write_json(tmp_path / "locomo" / "locomo_dev.json", [locomo_sample("conv-1"), locomo_sample("conv-2")])
    return tmp_path


def test_locomo_sessions_become_branches_in_order(locomo_dir: Path) -> None:
    events = load("locomo", locomo_dir, limit=1)
    t1, t2, t10 = utc(2023, 5, 8, 13, 56), utc(2023, 9, 13, 0, 9), utc(2024, 1, 1, 9, 5)
    s1, s2, s10 = "conv-1/session_1", "conv-1/session_2", "conv-1/session_10"
    assert events[:8] == [
        {"op": "namespace", "name": "conv-1"},
        {"op": "add", "id": s1, "parent": None, "type": "task", "content": "Session 1 of Ann and Bob, 1:56 pm on 8 May, 2023", "ts": t1},
        {"op": "add", "id": "conv-1/D1:1", "parent": s1, "type": "event", "content": "Ann: line 1.1", "ts": t1 + 1},
        {"op": "add", "id": "conv-1/D1:2", "parent": s1, "type": "event", "content": "Bob: line 1.2 [shares an image: a photo of a dog]", "ts": t1 + 2},
        {"op": "add", "id": "conv-1/D1:3", "parent": s1, "type": "event", "content": "Ann: line 1.3", "ts": t1 + 3},
        {"op": "add", "id": s2, "parent": None, "type": "task", "content": "Session 2 of Ann and Bob, 12:09 am on 13 September, 2023", "ts": t2},
        {"op": "add", "id": "conv-1/D2:1", "parent": s2, "type": "event", "content": "Bob: line 2.1", "ts": t2 + 1},
        {"op": "add", "id": "conv-1/D2:2", "parent": s2, "type": "event", "content": "Ann: line 2.2", "ts": t2 + 2},
    ]
    assert [e["id"] for e in of(events, "add")][-2:] == [s10, "conv-1/D10:1"]
    assert of(events, "add")[-1]["ts"] == t10 + 1
    assert {e["name"] for e in of(events, "namespace")} == {"conv-1"}  # limit counts conversations


def test_locomo_questions_normalise_evidence_and_skip_the_unanswerable(locomo_dir: Path) -> None:
    events, report = load_with_report("locomo", locomo_dir, limit=1)
    queries = by_id(events)
    assert list(queries) == ["conv-1/q0", "conv-1/q1", "conv-1/q2", "conv-1/q3", "conv-1/q7"]
    assert events[-len(queries):] == list(queries.values())  # queries follow every add
    last_add = of(events, "add")[-1]["ts"]
    q0 = queries["conv-1/q0"]
    assert q0 == {"op": "query", "id": "conv-1/q0", "text": "q ['D1:3']", "gold": ["conv-1/D1:3"], "task": ["conv-1/session_1"], "ts": last_add + 1, "category": "4-single-hop", "answer": "7"}
    assert queries["conv-1/q1"]["gold"] == ["conv-1/D1:2", "conv-1/D2:1"]
    assert queries["conv-1/q1"]["task"] == ["conv-1/session_1", "conv-1/session_2"]
    assert queries["conv-1/q1"]["category"] == "1-multi-hop"
    assert queries["conv-1/q2"]["gold"] == ["conv-1/D2:2"]
    assert queries["conv-1/q2"]["category"] == "2-temporal"
    assert queries["conv-1/q3"]["gold"] == ["conv-1/D1:1"]
    assert queries["conv-1/q3"]["category"] == "3-open-domain"
    assert queries["conv-1/q7"]["gold"] == ["conv-1/D2:1", "conv-1/D1:1"]
    assert queries["conv-1/q7"]["task"] == ["conv-1/session_2", "conv-1/session_1"]
    assert dict(report.counts) == {
        "session_empty": 2,
        "evidence_split": 1,
        "evidence_reformatted": 1,
        "evidence_malformed": 1,
        "question_adversarial": 1,
        "evidence_unknown": 1,
        "question_no_gold": 2,
    }
    assert report.examples["evidence_reformatted"] == ["conv-1/q2: 'D:2:02' -> 'D2:2'"]
    assert report.examples["session_empty"] == ["conv-1/session_3", "conv-1/session_4"]


def test_locomo_without_limit_loads_every_conversation(locomo_dir: Path) -> None:
    events = load("locomo", locomo_dir)
    assert [e["name"] for e in of(events, "namespace")] == ["conv-1", "conv-2"]
    assert len({e["id"] for e in of(events, "add")}) == len(of(events, "add"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("qa"), "missing field 'qa'"),
        (lambda s: s["conversation"].pop("session_1_date_time"), "missing field 'session_1_date_time'"),
        (lambda s: s["conversation"].update(session_1_date_time="8 May 2023"), "unreadable date '8 May 2023'"),
        (lambda s: s["conversation"].update(session_1_date_time="1:56 pm on 31 February, 2023"), "impossible date"),
        (lambda s: s["qa"][0].update(category=9), "conv-1/q0: unknown category 9"),
    ],
)
def test_locomo_schema_errors_name_the_field(tmp_path: Path, change: Any, message: str) -> None:
    sample = locomo_sample("conv-1")
    change(sample)
    write_json(tmp_path / "locomo" / "locomo_dev.json", [sample])
    with pytest.raises(DatasetError, match=message):
        load("locomo", tmp_path)


# -- LongMemEval --------------------------------------------------------------------------


def longmemeval_question(qid: str, *, answered: bool = True) -> dict[str, Any]:
    return {
        "question_id": qid,
        "question_type": "multi-session",
        "question": f"what about {qid}?",
        "answer": "blue",
        "question_date": "2023/05/22 (Mon) 09:00",
        # listed out of date order: the loader adds them oldest first
        "haystack_session_ids": ["answer_b", "answer_a"],
        "haystack_dates": ["2023/05/21 (Sun) 10:00", "2023/05/20 (Sat) 02:21"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "my car is blue", "has_answer": answered},
                {"role": "assistant", "content": "nice", "has_answer": False},
            ],
            [{"role": "user", "content": "hello", "has_answer": False}],
        ],
        "answer_session_ids": ["answer_b"],
    }


@pytest.fixture
def longmemeval_dir(tmp_path: Path) -> Path:
    questions = [
        longmemeval_question("q1"),
        longmemeval_question("q2_abs"),
        longmemeval_question("q3", answered=False),
        longmemeval_question("q4"),
    ]
    write_json(tmp_path / "longmemeval" / "longmemeval_oracle_dev.json", questions)
    return tmp_path


def test_longmemeval_one_memory_per_question(longmemeval_dir: Path) -> None:
    events, report = load_with_report("longmemeval", longmemeval_dir)
    assert [e["name"] for e in of(events, "namespace")] == ["q1", "q4"]
    ta, tb = utc(2023, 5, 20, 2, 21), utc(2023, 5, 21, 10, 0)
    assert events[:6] == [
        {"op": "namespace", "name": "q1"},
        {"op": "add", "id": "q1/answer_a", "parent": None, "type": "task", "content": "Chat session, 2023/05/20 (Sat) 02:21", "ts": ta},
        {"op": "add", "id": "q1/answer_a:1", "parent": "q1/answer_a", "type": "event", "content": "user: hello", "ts": ta + 1},
        {"op": "add", "id": "q1/answer_b", "parent": None, "type": "task", "content": "Chat session, 2023/05/21 (Sun) 10:00", "ts": tb},
        {"op": "add", "id": "q1/answer_b:1", "parent": "q1/answer_b", "type": "event", "content": "user: my car is blue", "ts": tb + 1},
        # the assistant's replies rank below what the user says
        {"op": "add", "id": "q1/answer_b:2", "parent": "q1/answer_b", "type": "event", "content": "assistant: nice", "ts": tb + 2,
         "importance": ASSISTANT_IMPORTANCE},
    ]
    assert Config.load().weights.importance_by_type["event"] > ASSISTANT_IMPORTANCE
    assert events[6] == {"op": "query", "id": "q1", "text": "what about q1?", "gold": ["q1/answer_b:1"], "task": ["q1/answer_b"], "ts": utc(2023, 5, 22, 9, 0), "category": "multi-session", "answer": "blue"}
    assert report.counts == {"question_abstention": 1, "question_no_gold": 1, "sessions_reordered": 3}


def test_longmemeval_limit_counts_kept_questions(longmemeval_dir: Path) -> None:
    events = load("longmemeval", longmemeval_dir, limit=1)
    assert [e["name"] for e in of(events, "namespace")] == ["q1"]
    assert list(by_id(events)) == ["q1"]


def test_longmemeval_notes_a_question_dated_before_its_sessions(tmp_path: Path) -> None:
    question = longmemeval_question("q1") | {"question_date": "2023/05/21 (Sun) 09:00"}
    write_json(tmp_path / "longmemeval" / "longmemeval_oracle_dev.json", [question])
    events, report = load_with_report("longmemeval", tmp_path)
    assert by_id(events)["q1"]["ts"] == utc(2023, 5, 21, 9, 0)  # kept as the data says
    assert report.examples["query_before_last_add"] == ["q1"]


def test_longmemeval_columns_of_different_length_are_an_error(tmp_path: Path) -> None:
    question = longmemeval_question("q1")
    question["haystack_dates"].pop()
    write_json(tmp_path / "longmemeval" / "longmemeval_oracle_dev.json", [question])
    with pytest.raises(DatasetError, match="q1: haystack_session_ids, haystack_dates, haystack_sessions differ in length"):
        load("longmemeval", tmp_path)


# -- MemDaily -----------------------------------------------------------------------------


def message(mid: int, text: str, time: str) -> dict[str, Any]:
    return {"mid": mid, "message": text, "time": time, "place": "上海"}


def memdaily_trajectory(tid: int, targets: list[int]) -> dict[str, Any]:
    return {
        "tid": tid,
        "message_list": [
            message(0, "我同事的电话是123。", "2024年04月01日 周一 08:30"),
            message(1, "我同事今年39岁。", "2024年04月02日 周二 18:17"),
            message(2, "我叔叔的电话是456。", "2024年04月02日 周二 07:00"),  # earlier than mid 1
        ],
        "question_list": [
            {
                "qid": 0,
                "question": "39岁的人电话是多少？",
                "answer": "123",
                "choices": {"A": "123", "B": "456"},
                "ground_truth": "A",
                "target_step_id": targets,
                "time": "2024年04月03日 周三 07:44",
            }
        ],
    }


@pytest.fixture
def memdaily_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "memdaily"
    write_json(folder / "01_simple_roles.json", [memdaily_trajectory(0, [1, 0]), memdaily_trajectory(5, [9])])
    write_json(folder / "05_post_processing_events.json", [memdaily_trajectory(0, [2])])
    return tmp_path


def test_memdaily_every_trajectory_in_one_memory(memdaily_dir: Path) -> None:
    events, report = load_with_report("memdaily", memdaily_dir)
    assert of(events, "namespace") == [{"op": "namespace", "name": "memdaily"}] == events[:1]
    adds = of(events, "add")
    assert [e["id"] for e in adds if e["parent"] is None] == ["01_simple_roles/t0", "01_simple_roles/t5", "05_post_processing_events/t0"]
    assert adds[:4] == [
        {"op": "add", "id": "01_simple_roles/t0", "parent": None, "type": "task", "content": "日常记录（上海，2024年04月01日起）", "ts": utc(2024, 4, 1, 8, 30)},
        {"op": "add", "id": "01_simple_roles/t0/m0", "parent": "01_simple_roles/t0", "type": "event", "content": "我同事的电话是123。", "ts": utc(2024, 4, 1, 8, 30)},
        {"op": "add", "id": "01_simple_roles/t0/m1", "parent": "01_simple_roles/t0", "type": "event", "content": "我同事今年39岁。", "ts": utc(2024, 4, 2, 18, 17)},
        {"op": "add", "id": "01_simple_roles/t0/m2", "parent": "01_simple_roles/t0", "type": "event", "content": "我叔叔的电话是456。", "ts": utc(2024, 4, 2, 7, 0)},
    ]
    queries = by_id(events)
    assert events[-len(queries):] == list(queries.values())
    assert list(queries) == ["01_simple_roles/t0/q0", "05_post_processing_events/t0/q0"]
    assert queries["01_simple_roles/t0/q0"] == {"op": "query", "id": "01_simple_roles/t0/q0", "text": "39岁的人电话是多少？", "gold": ["01_simple_roles/t0/m1", "01_simple_roles/t0/m0"], "task": ["01_simple_roles/t0"], "ts": utc(2024, 4, 3, 7, 44), "category": "simple", "subcategory": "roles", "answer": "123"}
    post = queries["05_post_processing_events/t0/q0"]
    assert (post["category"], post["subcategory"], post["gold"]) == ("post_processing", "events", ["05_post_processing_events/t0/m2"])
    assert report.counts["target_step_unknown"] == 1
    assert report.counts["question_no_gold"] == 1
    assert report.counts["messages_out_of_time_order"] == 3


def test_memdaily_limit_counts_trajectories_per_file(memdaily_dir: Path) -> None:
    events = load("memdaily", memdaily_dir, limit=1)
    assert [e["id"] for e in of(events, "add") if e["parent"] is None] == ["01_simple_roles/t0", "05_post_processing_events/t0"]


def test_memdaily_file_names_carry_the_category(memdaily_dir: Path) -> None:
    write_json(memdaily_dir / "memdaily" / "simple.json", [memdaily_trajectory(0, [0])])
    with pytest.raises(DatasetError, match="simple.json: expected a name like 01_simple_events.json"):
        load("memdaily", memdaily_dir)


def test_memdaily_schema_error_names_the_file(memdaily_dir: Path) -> None:
    write_json(memdaily_dir / "memdaily" / "02_conditional_items.json", [{"tid": 0, "message_list": []}])
    with pytest.raises(DatasetError, match="02_conditional_items.json: trajectory 0 has no messages"):
        load("memdaily", memdaily_dir)
    write_json(memdaily_dir / "memdaily" / "02_conditional_items.json", [{"tid": 0}])
    with pytest.raises(DatasetError, match="02_conditional_items.json: missing field 'message_list'"):
        load("memdaily", memdaily_dir)


# -- MADial-Bench -------------------------------------------------------------------------


def memory(time: str, scene: str, event: str) -> dict[str, str]:
    return {"time": time, "scene": scene, "emotion": "Happy", "event": event}


@pytest.fixture
def madial_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "madial_bench" / "en"
    write_json_lines(folder / "MADial-Bench-en-memory.json", [
        {"1": memory("2023-12-25", "Activity", "Bart danced at the Christmas party.")},
        {"2": memory("2023-01-01", "Preferences", "Bart loves mango ice cream.")},
        {"3": memory("2023-06-01", "Activity", "Bart flew a kite.")},
    ])
    lines = [
        "<BOD>\n",
        '<Bart>: "I will do a magic trick!"\n',
        '<Assistant>: "Fantastic!"\n',
        '<Bart>:"What should I wear?"\n',
        "<Assistant>: \"Do you remember dancing at last year's party?\"\n",  # the test turn
        '"Oh, I remember!"\n',
        "<EOD>\n",
    ]
    write_json_lines(folder / "MADial-Bench-en-dialogue.json", [
        {"dialogue": lines, "test-turn": [4, 6], "relevant-id": [3, 1, 3], "user-id": 1},
        {"dialogue": lines, "test-turn": [2], "relevant-id": [99], "user-id": 1},
        {"dialogue": lines, "test-turn": [2], "relevant-id": [2, 98], "user-id": 1},
    ])
    return tmp_path


def test_madial_memories_by_scene_and_dialogues_as_queries(madial_dir: Path) -> None:
    events, report = load_with_report("madial", madial_dir)
    t1, t2, t3 = utc(2023, 12, 25), utc(2023, 1, 1), utc(2023, 6, 1)
    assert events[:6] == [
        {"op": "namespace", "name": "madial"},
        {"op": "add", "id": "madial/scene:Preferences", "parent": None, "type": "task", "content": "Memories: Preferences", "ts": t2},
        {"op": "add", "id": "madial/m2", "parent": "madial/scene:Preferences", "type": "event", "content": "Bart loves mango ice cream.", "ts": t2},
        {"op": "add", "id": "madial/scene:Activity", "parent": None, "type": "task", "content": "Memories: Activity", "ts": t3},
        {"op": "add", "id": "madial/m3", "parent": "madial/scene:Activity", "type": "event", "content": "Bart flew a kite.", "ts": t3},
        {"op": "add", "id": "madial/m1", "parent": "madial/scene:Activity", "type": "event", "content": "Bart danced at the Christmas party.", "ts": t1},
    ]
    queries = by_id(events)
    assert list(queries) == ["madial/d1", "madial/d3"]
    assert queries["madial/d1"] == {
        "op": "query",
        "id": "madial/d1",
        "text": "Bart: I will do a magic trick!\nAssistant: Fantastic!\nBart: What should I wear?",
        "gold": ["madial/m3", "madial/m1"],
        "task": ["madial/scene:Activity"],
        "ts": t1 + 1,
        "category": "memory-recall",
    }
    assert queries["madial/d3"]["text"] == "Bart: I will do a magic trick!"
    assert queries["madial/d3"]["gold"] == ["madial/m2"]
    assert report.examples == {"relevant_id_unknown": ["madial/d2: 99", "madial/d3: 98"], "question_no_gold": ["madial/d2"]}
    assert list(by_id(load("madial", madial_dir, limit=1))) == ["madial/d1"]


def test_madial_test_turn_outside_the_dialogue_is_an_error(madial_dir: Path) -> None:
    path = madial_dir / "madial_bench" / "en" / "MADial-Bench-en-dialogue.json"
    write_json_lines(path, [{"dialogue": ["<BOD>\n", "<EOD>\n"], "test-turn": [5], "relevant-id": [1]}])
    with pytest.raises(DatasetError, match=r"MADial-Bench-en-dialogue.json:1: test-turn 5 is outside"):
        load("madial", madial_dir)


# -- RealMem ------------------------------------------------------------------------------


def realmem_turns(*turns: tuple[str, str, bool, list[tuple[str, Any]]]) -> list[dict[str, Any]]:
    """(speaker, content, is_query, memory_used as (session uuid, content)) -> dialogue turns."""
    return [{"speaker": who, "content": text, "is_query": asked, "query_id": "x" if asked else None,
             "category_name": "Dynamic Updating" if asked else None,
             "memory_used": [{"session_uuid": u, "content": c} for u, c in used]}
            for who, text, asked, used in turns]


def realmem_persona() -> dict[str, Any]:
    itinerary = {"trip_name": "Chengdu to Lhasa", "days": 26}
    return {"_metadata": {"person_name": "Ann_Lee"}, "dialogues": [
        {"session_identifier": "Travel_Planning_5:S1_01", "session_uuid": "u1", "current_time": "2025-12-19 (Friday)",
         "dialogue_turns": realmem_turns(("User", "Plan a bike trip", False, []), ("Assistant", "Sure", False, [])),
         "extracted_memory": [
             {"index": "T-1", "type": "Dynamic", "content": "【Route】 Start in Chengdu"},
             {"index": "T-2", "type": "Static", "content": "User has a son."},
             {"index": "T-3", "type": "Dynamic", "content": itinerary}]},
        {"session_identifier": "Enhanced:S10063", "session_uuid": "u2", "current_time": "2025-12-20 (Saturday)",
         "dialogue_turns": realmem_turns(("User", "Nice weather", False, [])), "extracted_memory": []},
        {"session_identifier": "Fitness_2:S3_01", "session_uuid": "u3", "current_time": "2025-12-22 (Monday)",
         "dialogue_turns": realmem_turns(
             ("User", "Where did my trip start again?", True, []),
             ("Assistant", "In Chengdu", False, [("u1", "【Route】 Start in Chengdu"), ("u1", itinerary)]),
             ("User", "And what did I just say?", True, []),
             ("Assistant", "That", False, [("u3", "User runs 5 km")])),
         "extracted_memory": [{"index": "F-1", "type": "Schedule", "content": "User runs 5 km"}]},
    ]}


@pytest.fixture
def realmem_dir(tmp_path: Path) -> Path:
    write_json(tmp_path / "realmem" / "Ann_Lee_dialogues_256k.json", realmem_persona())
    write_json(tmp_path / "realmem" / "topic_goal_attr.json", {"topics": []})
    return tmp_path


def test_realmem_projects_and_stages_become_a_tree(realmem_dir: Path) -> None:
    events, report = load_with_report("realmem", realmem_dir)
    assert events[0] == {"op": "namespace", "name": "realmem/Ann_Lee"}
    adds = by_id(events, "add")
    assert adds["realmem/Ann_Lee/Travel_Planning_5"]["content"] == "Travel Planning"
    assert adds["realmem/Ann_Lee/Travel_Planning_5"]["parent"] is None
    stage = adds["realmem/Ann_Lee/Travel_Planning_5/S1"]
    assert (stage["parent"], stage["type"], stage["content"]) == (
        "realmem/Ann_Lee/Travel_Planning_5", "task", "Travel Planning, stage 1")
    points = [e for e in of(events, "add") if e["parent"] == stage["id"]]
    assert [(e["type"], e["ts"]) for e in points] == [
        ("event", utc(2025, 12, 19) + 3), ("fact", utc(2025, 12, 19) + 4), ("event", utc(2025, 12, 19) + 5)]
    assert points[2]["content"] == json.dumps({"days": 26, "trip_name": "Chengdu to Lhasa"}, ensure_ascii=False,
                                              sort_keys=True)
    # each project session focuses its stage; the small talk between them changes nothing
    focus = [e["id"] for e in of(events, "focus")]
    assert focus == ["realmem/Ann_Lee/Travel_Planning_5/S1", "realmem/Ann_Lee/Fitness_2/S3"]
    check_trace(events)
    assert report.counts == {"gold_not_yet_written": 1, "question_no_gold": 1}


def test_realmem_questions_resolve_gold_by_session_and_content(realmem_dir: Path) -> None:
    events = load("realmem", realmem_dir)
    (query,) = of(events, "query")
    assert query["text"] == "Where did my trip start again?"
    assert query["gold"] == ["realmem/Ann_Lee/u1/m0", "realmem/Ann_Lee/u1/m2"]
    assert query["task"] == ["realmem/Ann_Lee/Travel_Planning_5/S1"]
    assert query["category"] == "Dynamic Updating"
    assert query["ts"] == utc(2025, 12, 22) + 1
    # the question comes before its own session's memory points are written
    order = [e.get("id") for e in events]
    assert order.index(query["id"]) < order.index("realmem/Ann_Lee/u3/m0")


def test_realmem_limit_counts_personas_and_bad_dates_name_the_file(realmem_dir: Path) -> None:
    persona = realmem_persona()
    persona["_metadata"]["person_name"] = "Bo_Wu"
    write_json(realmem_dir / "realmem" / "Bo_Wu_dialogues_256k.json", persona)
    assert [e["name"] for e in of(load("realmem", realmem_dir), "namespace")] == ["realmem/Ann_Lee", "realmem/Bo_Wu"]
    assert [e["name"] for e in of(load("realmem", realmem_dir, limit=1), "namespace")] == ["realmem/Ann_Lee"]
    persona["dialogues"][0]["current_time"] = "next Friday"
    write_json(realmem_dir / "realmem" / "Bo_Wu_dialogues_256k.json", persona)
    with pytest.raises(DatasetError, match=r"Bo_Wu_dialogues_256k.json dialogue 0: unreadable date 'next Friday'"):
        load("realmem", realmem_dir)
    del persona["dialogues"]
    write_json(realmem_dir / "realmem" / "Bo_Wu_dialogues_256k.json", persona)
    with pytest.raises(DatasetError, match=r"Bo_Wu_dialogues_256k.json: missing field 'dialogues'"):
        load("realmem", realmem_dir)


# -- the facade ---------------------------------------------------------------------------


def test_unknown_name_and_bad_limit(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="unknown data set 'nope'; expected one of locomo, longmemeval, madial, memdaily, realmem"):
        load("nope", tmp_path)
    with pytest.raises(DatasetError, match="limit must be a positive"):
        load("locomo", tmp_path, limit=0)


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        ("locomo", "locomo/locomo_dev.json"),
        ("longmemeval", "longmemeval/longmemeval_oracle_dev.json"),
        ("madial", "madial_bench/en/MADial-Bench-en-memory.json"),
        ("memdaily", "memdaily"),
        ("realmem", "realmem"),
    ],
)
def test_missing_files_name_the_path(tmp_path: Path, name: str, missing: str) -> None:
    with pytest.raises(DatasetError) as error:
        load(name, tmp_path)
    assert str(tmp_path / missing) in str(error.value)


def test_not_json_is_a_dataset_error(tmp_path: Path) -> None:
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo_dev.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(DatasetError, match="locomo_dev.json: not JSON"):
        load("locomo", tmp_path)
    (tmp_path / "locomo" / "locomo_dev.json").write_text("{}", encoding="utf-8")
    with pytest.raises(DatasetError, match="expected a JSON list"):
        load("locomo", tmp_path)


def test_the_data_folder_comes_from_the_environment(locomo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(locomo_dir))
    assert default_data_dir() == locomo_dir
    assert load("locomo", limit=1) == load("locomo", locomo_dir, limit=1)
    monkeypatch.delenv(DATA_ENV)
    assert default_data_dir() == Path(__file__).resolve().parents[2] / "shared" / "data"


def test_command_line_summarises_and_writes_the_trace(
    locomo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "locomo.jsonl"
    main(["locomo", "--data", str(locomo_dir), "--limit", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed.startswith("locomo: 1 namespaces, 9 adds, 5 queries\n")
    assert "  evidence_split: 1  e.g. conv-1/q1: 'D1:2; D2:1'" in printed
    assert read_trace(out) == load("locomo", locomo_dir, limit=1)


# -- traces on disk -----------------------------------------------------------------------


def test_trace_round_trip_keeps_text_readable(tmp_path: Path) -> None:
    events: list[Event] = [
        {"op": "namespace", "name": "memdaily"},
        {"op": "add", "id": "t", "parent": None, "type": "task", "content": "日常记录", "ts": 1.5, "extra": [1]},
        {"op": "focus", "id": "t"},
        {"op": "restart"},
        {"op": "query", "id": "q", "text": "什么？", "gold": ["t"], "task": ["t"], "ts": 2.0},
    ]
    path = tmp_path / "trace.jsonl"
    write_trace(events, path)
    assert "日常记录" in path.read_text(encoding="utf-8")
    assert read_trace(path) == events


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"op": "restart"}', "{oops"], r"trace.jsonl:2: not JSON"),
        (['["op", "add"]'], r"trace.jsonl:1: expected a JSON object, got list"),
        (['{"op": "restart"}', "", '{"op": "delete", "id": "x"}'], r"trace.jsonl:3: unknown op 'delete'"),
        (['{"id": "x"}'], r"trace.jsonl:1: unknown op None"),
        (['{"op": "add", "id": "x"}'], r"trace.jsonl:1: add event lacks content"),
        (['{"op": "query", "id": "q"}'], r"trace.jsonl:1: query event lacks text, gold"),
    ],
)
def test_read_trace_names_the_bad_line(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=message):
        read_trace(path)


def test_write_trace_refuses_an_event_it_could_not_read_back(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="event 1: unknown op 'nope'"):
        write_trace([{"op": "restart"}, {"op": "nope"}], tmp_path / "trace.jsonl")
    assert not (tmp_path / "trace.jsonl").exists()


# -- the real data, when it is there ------------------------------------------------------


def check_trace(events: list[Event]) -> None:
    """Every add's parent and every query's gold came earlier in the same namespace, ids are
    unique across the trace, each gold lies under one of the query's tasks and each task
    holds some gold."""
    assert events and events[0]["op"] == "namespace"
    parents: dict[str, str | None] = {}
    every_id: set[str] = set()
    for event in events:
        if event["op"] == "namespace":
            parents = {}
        elif event["op"] == "add":
            assert event["id"] not in every_id, event["id"]
            assert event["parent"] is None or event["parent"] in parents, event
            assert isinstance(event["ts"], float) and event["content"].strip()
            every_id.add(event["id"])
            parents[event["id"]] = event["parent"]
        elif event["op"] == "focus":
            assert event["id"] in parents, event
        else:
            assert event["op"] == "query", event
            assert event["gold"] and event["task"] and event["text"].strip(), event
            ancestors = {gold: set(lineage(gold, parents)) for gold in event["gold"]}
            assert all(ancestors[g] & set(event["task"]) for g in event["gold"]), event
            assert all(any(t in a for a in ancestors.values()) for t in event["task"]), event


def lineage(node: str, parents: dict[str, str | None]) -> list[str]:
    """The node's ancestors, nearest first; KeyError when the node was never added."""
    chain = []
    parent = parents[node]
    while parent is not None:
        chain.append(parent)
        parent = parents[parent]
    return chain


REAL_DATA = default_data_dir()


@pytest.mark.skipif(not REAL_DATA.is_dir(), reason=f"no real data folder at {REAL_DATA} (set {DATA_ENV})")
@pytest.mark.parametrize("name", DATASETS)
def test_real_data_set_loads_into_a_consistent_trace(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    events, report = load_with_report(name, REAL_DATA)
    assert capsys.readouterr() == ("", "")
    assert of(events, "namespace") and of(events, "add") and of(events, "query")
    check_trace(events)
    assert sum(report.counts.values()) < len(events)  # a few notes, not a broken schema
