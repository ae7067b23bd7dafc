"""Text helpers: the lexical terms and the question forms retrieval reads."""

from __future__ import annotations

import pytest

from hybrid_memory import text


@pytest.mark.parametrize("question", [
    "How many tickets did the customer open this month?",
    "How much did I spend on hotels in total?",
    "Which did I book first, the hotel or the flight?",
    "Was the refund issued before or after the invoice was corrected?",
    "How many days passed between the dry run and the cutover?",
    "What is the difference between the two quotes?",
    "How often do I go to the gym?",
    "这个月一共报销了多少钱？",
    "酒店和机票哪个先订的，还是同一天？",
    "两次演练之间隔了几天？",
    "我去了几次健身房？",
    "提交报销单和迁移演练，哪个先发生？",
])
def test_counting_ordering_and_comparing_questions_spread(question: str) -> None:
    assert text.aggregate_question(question)


@pytest.mark.parametrize("question", [
    "Where am I staying in Tokyo?",
    "What did finance ask for?",
    "Which airline did we choose for the trip?",
    "What is the maintenance window for the migration?",
    "报销进度到哪一步了？",
    "How much was the hotel bill?",
    "报销的总额是多少钱？",
    "迁移的维护窗口是什么时候？",
    "用户喜欢靠走道的座位吗？",
])
def test_questions_about_one_thing_do_not(question: str) -> None:
    assert not text.aggregate_question(question)


def test_terms_split_latin_words_and_cjk_bigrams() -> None:
    assert text.terms("The Hotel bill, 860 euros") == ["hotel", "bill", "860", "euros"]
    assert text.terms("报销进度") == ["报销", "销进", "进度"]
    assert text.terms("好") == ["好"]


def test_what_follows_an_apostrophe_is_not_a_term() -> None:
    # A possessive or a contraction leaves a letter or two behind; as terms they
    # are rare enough to decide a match ("Zhang's" against "Zhang's licence").
    assert text.terms("Mark Zhang's trip") == ["mark", "zhang", "trip"]
    assert text.terms("Zhang\u2019s visa, we'll see, don't") == ["zhang", "visa", "see", "don"]
    # A letter standing alone is still a term: vitamin D, plan B, a lone "s".
    assert text.terms("vitamin D, plan B, s") == ["vitamin", "d", "plan", "b", "s"]
    # The apostrophe cuts only what English writes after it.
    assert text.terms("O'Brien l'hotel") == ["o", "brien", "l", "hotel"]


@pytest.mark.parametrize(("asked", "written"), [
    ("reproduce", "reproduced"),
    ("reproduced", "reproduce"),
    ("switch", "switched"),
    ("switch", "switches"),
    ("switches", "switching"),
    ("promise", "promises"),
    ("copies", "copy"),
    ("copy", "copied"),
    ("stopped", "stop"),
    ("moving", "moved"),
    ("bookings", "booking"),
])
def test_a_word_is_looked_up_in_its_regular_inflections(asked: str, written: str) -> None:
    assert written in text.word_forms(asked)
    assert asked in text.word_forms(asked)


@pytest.mark.parametrize("term", ["3924", "p3", "news", "bus", "class", "报销", "审批", "v5", "2f"])
def test_numbers_ids_short_stems_and_cjk_terms_stand_alone(term: str) -> None:
    forms = text.word_forms(term)
    assert term in forms
    # no form of another, shorter word: "news" is not "new", "class" not "clas"
    assert all(f.startswith(term) for f in forms)
    if not term.isalpha() or not term.isascii() or len(term) < 4:
        assert forms == {term}


def test_a_pair_holding_de_is_a_particle_pair() -> None:
    assert [t for t in text.terms("曹华的杭州之行") if text.is_particle_pair(t)] == ["华的", "的杭"]
    assert text.is_particle_pair("的")
    assert not any(text.is_particle_pair(t) for t in ("杭州", "之行", "de", "TKT-1", ""))


def test_is_cjk_tells_chinese_terms_from_latin_ones() -> None:
    assert text.is_cjk("领事") and text.is_cjk("馆")
    assert not text.is_cjk("offer") and not text.is_cjk("4009") and not text.is_cjk("")
    assert not text.is_cjk("trv领事")  # a term is one or the other; a mixed string is not a CJK term
    assert all(text.is_cjk(t) for t in text.terms("领事馆要什么照片")) and not any(
        text.is_cjk(t) for t in text.terms("Who signed off the offer for REQ-4009?"))


@pytest.mark.parametrize("question", [
    "Who owns ticket TKT-1049 now?",
    "Which supplier is purchase order PO-3924 with after the switch?",
    "What is my current address?",
    "Who is the latest approver on EXP-2201?",
    "出差单 TRV-2782 现在坐哪班飞机？",
    "更正之后，EXP-8442 这笔报销的金额是多少？",
    "交接以后工单 TKT-1295 归谁负责？",
    "目前这个 bug 排在哪个版本？",
])
def test_questions_about_how_things_stand_now(question: str) -> None:
    assert text.latest_question(question)


@pytest.mark.parametrize("question", [
    "Who was first assigned ticket TKT-1049?",
    "What happened after the meeting with Caroline?",
    "Why was expense claim EXP-2080 sent back?",
    "报销单 EXP-2545 为什么被退回？",
    "Nowhere in the notes does it say who approved it?",
])
def test_questions_not_about_now(question: str) -> None:
    assert not text.latest_question(question)


@pytest.mark.parametrize(("content", "place"), [
    ("Reproduced TKT-7525 on Android 14 with a test account; it fails at the third step", True),
    ("Booked room 8.03 for Steven Patel's onsite; visitor badge requested", True),
    ("Booked Wei Smith at the Hilton in Sydney for 3 nights", True),
    ("The new test for BUG-1142 is flaky on ARM runners; marked it xfail there", True),
    ("已为郑伟的现场面试订好 8.03 会议室，访客证已申请", True),
    ("BUG-1142 的新用例在 ARM 构建机上不稳定，先在那边标成 xfail", True),
    ("给王明订了深圳的希尔顿酒店，住 3 晚", True),
    ("Reproduced TKT-6910 on iPadOS with a test account", True),
    ("Ticket TKT-7525: reproduced and handed to engineering", False),
    ("Acme Health is on the Standard plan: first response due within 24 hours", False),
    ("Onsite interview with Steven Patel for REQ-7293 on April 12 at 20:05", False),
    ("Synced with Elena Wilson on REQ-7293 at 17:45", False),
    ("Linked TKT-7525 to the known issue TKT-5096", False),
    ("I went to a support group on Monday", False),
    ("TRV-5803 的展位号是 4.21，3月13日布展", True),
    ("世界人工智能大会的参会证要在3月13日前到会场领取", True),
    ("报销单 EXP-4565：已提交，等待王明审批", False),
    ("出差 TRV-5803：机票已预留，酒店还没订", False),
    ("许军希望酒店离会场走路就能到", False),
    ("缺陷 BUG-3247：现在还在排查中，正在复现里", False),
])
def test_what_names_a_place(content: str, place: bool) -> None:
    assert text.holds_place(content) is place


@pytest.mark.parametrize(("question", "kind"), [
    ("Where will Steven Patel's onsite take place?", "place"),
    ("Where did Caroline move from?", "place"),
    ("郑伟在哪里面试？", "place"),
    ("王明这趟出差住哪儿？", "place"),
    ("Where does claim EXP-4565 stand now?", None),
    ("报销单 EXP-4565 现在走到哪一步了？", None),
])
def test_a_question_asking_where_asks_for_a_place_unless_it_asks_how_a_task_stands(question: str,
                                                                                  kind: str | None) -> None:
    assert text.answer_kind(question) == kind


@pytest.mark.parametrize("question", [
    "Where does claim EXP-4565 stand now?",
    "Where do the arrangements for trip TRV-2091 stand?",
    "What is still open on trip TRV-2091?",
    "What is the status of the checkout bug BUG-4857?",
    "How far along is requisition REQ-7293?",
    "What's the latest on ticket TKT-1420?",
    "Is TKT-1420 resolved, and if not, what is it waiting for?",
    "Has purchase order PO-2550 gone through yet?",
    "报销单 EXP-4565 现在走到哪一步了？",
    "工单 TKT-1420 目前什么状态？",
    "采购单 PO-2550 还卡在哪个环节？",
    "BUG-4857 现在处理到哪了？",
    "TKT-1420 解决了吗？还在等什么？",
    "出差单 TRV-9422 安排得怎么样了？",
    "出差单 TRV-9422 还有什么没落实？",
    "采购单 PO-2550 批下来了吗？",
    "How is the migration going?",
])
def test_questions_asking_where_a_task_stands(question: str) -> None:
    assert text.status_question(question)


@pytest.mark.parametrize("question", [
    "Where will Steven Patel's onsite take place?",
    "Where is Wei Smith staying during the trip?",
    "Who owns ticket TKT-1049 now?",
    "Which standing desk did I order?",
    "Where did Caroline move from?",
    "这批货要送到哪里？",
    "王明住在哪儿？",
    "How is Caroline related to Mel?",
    "Which status code does the webhook endpoint return?",
    "接口返回的状态码是多少？",
    "这家酒店怎么样？",
    "报销单 EXP-2545 为什么被退回？",
])
def test_questions_not_asking_where_a_task_stands(question: str) -> None:
    assert not text.status_question(question)


@pytest.mark.parametrize("question", [
    "How long did the outage from the BUG-4281 issue last?",
    "how long will the visa take?",
    "How soon could Kevin Miller start on the Data Analyst hire?",
    "How many days did the trip to Paris take?",
    "缺陷 BUG-3247 造成的故障持续了多久？",
    "签证办下来要多长时间？",
    "这次出差要几天？",
    "试用期有几个月？",
])
def test_questions_asking_how_long(question: str) -> None:
    assert text.duration_question(question)


@pytest.mark.parametrize("question", [
    "How long ago did I buy the dog bed?",  # the time between two things
    "How long before the trip did I book the hotel?",
    "When was the outage?",
    "What is the status of BUG-4281?",
    "几天前买的狗窝？",
    "故障是什么时候开始的？",
    "几月几号交货？",  # which date
])
def test_questions_not_asking_how_long(question: str) -> None:
    assert not text.duration_question(question)


@pytest.mark.parametrize("content", [
    "Postmortem for BUG-4281: 84 minutes of degraded checkout",
    "Lukas Kim wants the take-home task kept under two hours",
    "Kevin Miller's notice period is 4 weeks",
    "A 3-day pass, valid for 1.5 years",
    "BUG-3247 复盘：结算功能降级 28 分钟，约 3517 名用户受影响",
    "同意每周可以远程三天",
    "试用期 3个月",
])
def test_memories_stating_a_duration(content: str) -> None:
    assert text.holds_duration(content)


@pytest.mark.parametrize("content", [
    "Since BUG-4281, p99 latency is up to 1138 ms",  # a latency, not how long anything lasted
    "Chased the supplier at 12:59: no delivery date yet",
    "The fix is planned for release v2.23.0",
    "EXP-5612 缺少3月26日的出租车票",  # a date: March 26
    "2024年的预算",
    "两个月后再看",  # a time to come, not a length
])
def test_memories_stating_no_duration(content: str) -> None:
    assert not text.holds_duration(content)


@pytest.mark.parametrize(("question", "kind"), [
    ("How long did the outage from BUG-4281 last?", "duration"),
    ("How many days did the trip to Paris take?", "duration"),  # a length of time, not a count
    ("How many boxes showed up for order PO-5273?", "count"),
    ("How many test cases guard against BUG-8981 coming back?", "count"),
    ("采购单 PO-4196 到了几箱？", "count"),
    ("防止缺陷 BUG-3673 复发的用例有多少个？", "count"),
    ("缺陷 BUG-3247 造成的故障持续了多久？", "duration"),
    ("How much did the hotel cost?", None),  # an amount of money
    ("吴佳琪这次在 EXP-6228 里花了多少钱？", None),
    ("几点开会？", None),
    ("Who owns ticket TKT-1049 now?", None),
])
def test_the_kind_of_answer_a_question_asks_for(question: str, kind: str | None) -> None:
    assert text.answer_kind(question) == kind


@pytest.mark.parametrize(("content", "counts"), [
    ("Counted the laptops for PO-5273 at the dock: 8 boxes, labels match", True),
    ("Postmortem: 84 minutes of degraded checkout, about 954 users affected", True),
    ("The regression suite for BUG-8981 has 5 cases", True),
    ("在仓库清点 PO-4196 的标签打印机：共 4 箱，标签一致", True),
    ("防止复发的用例共三个", True),
    ("PO-1632 is promised for delivery on March 25 to the lab", False),  # a date
    ("Chased the supplier about PO-5273 at 12:59: no delivery date yet", False),  # a time
    ("Orders above $10,000 such as PO-1613 need the CFO's signature", False),  # an amount, an id
    ("The fix is planned for release v2.23.0", False),
    ("BUG-8981 pushed errors to 32% of requests", False),
    ("EXP-5612 缺少3月26日的出租车票", False),
    ("PO-4196 拿到第二份报价", False),  # an ordinal
])
def test_memories_that_count(content: str, counts: bool) -> None:
    assert text.holds_count(content) is counts
    assert text.holds_answer("count", content) is counts


def test_a_chinese_count_counts_in_the_measure_word_the_question_names() -> None:
    assert text.count_measures("采购单 PO-4196 到了几箱？") == "箱"
    assert text.count_measures("用例有多少个？") == ""  # 个: any measure word
    assert text.count_measures("How many boxes showed up?") == ""
    split = "决定 PO-4196 分两批到货，市场部先拿一半"
    assert text.holds_count(split)  # two batches: a count
    assert not text.holds_answer("count", split, "采购单 PO-4196 到了几箱？")  # but not of boxes
    assert text.holds_answer("count", "在仓库清点 PO-4196：共 4 箱，标签一致", "采购单 PO-4196 到了几箱？")
    with pytest.raises(ValueError):
        text.holds_answer("colour", "red")
