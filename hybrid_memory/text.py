"""Text helpers shared by the lexical index, deduplication and the token budget.

Terms: Latin words and numbers are lower-cased whole words; CJK text, which has
no spaces, becomes overlapping character bigrams (a lone character stands for
itself). This is what makes Chinese retrievable even with an English embedder.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable

_CJK = (
    "\u3040-\u30ff"  # kana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul
)
# A Latin "word" is a run of word characters that are not CJK.
_WORD = rf"(?:(?![{_CJK}])[^\W_])+"
_PIECES = re.compile(rf"[{_CJK}]+|{_WORD}", re.UNICODE)
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
_TOKEN_PIECES = re.compile(rf"[{_CJK}]|{_WORD}|[^\s\w]", re.UNICODE)

_STOP = frozenset(
    "a an and are as at be been but by did do does for from had has have he her him his how i "
    "in is it its me my of on or our she so than that the their them then there they this to "
    "us was we were what when where which who why will with would you your".split()
)


# What English writes after an apostrophe ("Zhang's", "don't", "we'll"): not a
# word of its own, and as a one-letter term it looked rare enough to decide a match.
_CLITICS = frozenset(("s", "t", "m", "d", "ll", "re", "ve"))
_APOSTROPHES = frozenset("'\u2019")


def terms(text: str) -> list[str]:
    """The lexical terms of ``text``, in order, with repeats."""
    out: list[str] = []
    lower = text.lower()
    for match in _PIECES.finditer(lower):
        piece = match.group()
        start = match.start()
        if piece in _CLITICS and start and lower[start - 1] in _APOSTROPHES:
            continue
        if is_cjk(piece):
            if len(piece) == 1:
                out.append(piece)
            else:
                out.extend(piece[i : i + 2] for i in range(len(piece) - 1))
        elif piece not in _STOP:
            out.append(piece)
    return out


def is_cjk(term: str) -> bool:
    """Whether ``term`` is CJK text (a character or a bigram of :func:`terms`)."""
    return bool(_CJK_RUN.match(term))


def is_particle_pair(term: str) -> bool:
    """Whether ``term`` is a CJK term of :func:`terms` holding the particle 的: a pair
    across a word boundary ("华的", "的杭", joining a name or word to the next one), or
    the particle alone."""
    return "的" in term and is_cjk(term)


def term_counts(text: str) -> Counter[str]:
    return Counter(terms(text))


_LOWER_LATIN = re.compile(r"^[a-z]+$")
_VOWELS = frozenset("aeiou")


def word_forms(term: str) -> frozenset[str]:
    """The regular English inflections of a lexical term, itself included: a question
    asks "reproduce", "switch" or "promise" where the memory wrote "reproduced",
    "switched" or "promises". Plural and third person (-s, -es, -ies), past (-ed,
    -d, -ied) and -ing, from the term's stem, with a doubled final consonant
    ("stopped") and a dropped final e ("moving"). Stems shorter than four letters
    are not formed ("news" is not "new"); numbers, ids and CJK terms stand alone.
    Some forms are not words; they match nothing stored."""
    if len(term) < 4 or not _LOWER_LATIN.match(term):
        return frozenset((term,))
    stems = set()
    for suffix, put in (("ies", "y"), ("ied", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("d", ""),
                        ("ing", ""), ("ing", "e")):
        if term.endswith(suffix) and not (suffix == "s" and term.endswith("ss")):
            stem = term[: -len(suffix)] + put
            if len(stem) >= 4:
                stems.add(stem)
            if suffix in ("ed", "ing") and len(stem) >= 5 and stem[-1] == stem[-2] and stem[-1] not in _VOWELS:
                stems.add(stem[:-1])  # stopped -> stop
    forms = {term, *stems}
    for stem in stems or (term,):
        if stem.endswith("e"):
            forms.update((stem + "s", stem + "d", stem[:-1] + "ing"))
        elif stem.endswith("y") and stem[-2] not in _VOWELS:
            forms.update((stem[:-1] + "ies", stem[:-1] + "ied", stem + "ing"))
        else:
            forms.update((stem + ("es" if stem.endswith(("s", "x", "z", "ch", "sh")) else "s"), stem + "ed", stem + "ing"))
    return frozenset(forms)


def overlap(a: str, b: str) -> float:
    """Jaccard similarity of the two texts' term sets (1.0 for two texts with no terms)."""
    return jaccard(set(terms(a)), set(terms(b)))


def jaccard(ta: set[str] | frozenset[str], tb: set[str] | frozenset[str]) -> float:
    if not ta and not tb:
        return 1.0
    return len(ta & tb) / len(ta | tb)


def figures(text: str) -> frozenset[str]:
    """The terms that hold a digit: amounts, dates, ids. Two memories that differ in
    one are different memories, however alike the rest reads."""
    return frozenset(t for t in terms(text) if any(ch.isdigit() for ch in t))


# Questions whose answer gathers several memories that may sit in different
# branches: counting ("how many", 几个/多少次; not an amount: "how much", 多少钱),
# totals, order and comparison, time between two things.
_AGGREGATE = (
    re.compile(
        r"\bhow many\b|\b(?:in total|total|altogether|combined|overall)\b"
        r"|\b(?:first|earlier|before|after|later)\b[^?.!]*\bor\b|\bor\b[^?.!]*\b(?:first|earlier|before|after|later)\b"
        r"|\bbetween\b|\bboth\b|\bdifference\b|\bcompared?\b|\bin what order\b"
        r"|\bhow long (?:ago|before|after|between|since)\b|\bhow (?:often|frequently)\b",
        re.IGNORECASE,
    ),
    re.compile(r"(?:多少|几)[个次天周月年种本件位场项家回]|哪[个一]+先|谁先|先后|一共|总共|总计|合计|先[^？?。]*还是|还是[^？?。]*先|之间|相差|分别|两[个次件项]"),
)


def aggregate_question(text: str) -> bool:
    """Whether ``text`` asks to count, total, order or compare (English or Chinese):
    its answer likely gathers memories from more than one branch."""
    return any(p.search(text) for p in _AGGREGATE)


# A question asking how long something lasted or will take ("how long did the
# outage last?", "how soon could she start?", 持续了多久, 要几天) is answered by a
# memory that states a duration ("84 minutes of degraded checkout", 降级 28 分钟).
# "How long ago / before / since" asks for the time between two things: not this.
_DURATION_QUESTION = (
    re.compile(
        r"\bhow long\b(?!\s+(?:ago|before|after|between|since)\b)|\bhow soon\b"
        r"|\bhow many (?:seconds|minutes|hours|days|weeks|months|years)\b",
        re.IGNORECASE,
    ),
    # (几月 asks which month, 几个月 how many)
    re.compile(r"多久|多长时间|多少时间|几(?:个)?(?:秒钟?|分钟|小时|钟头|天|周|星期|年)(?!前|以前|之前)|几个月(?!前|以前|之前)"),
)
_NUMBER_WORDS = r"an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|half an?|a few|several"
_DURATION = (
    re.compile(
        rf"(?:\b\d+(?:[.,]\d+)?|\b(?:{_NUMBER_WORDS}))[\s-]?"
        r"(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|nights?|weeks?|fortnights?|months?|years?)\b",
        re.IGNORECASE,
    ),
    re.compile(r"(?:(?<![\d.])\d{1,3}(?:\.\d+)?|[一二两三四五六七八九十半几]+)\s*(?:个)?(?:秒钟?|分钟|小时|钟头|天|周|星期|个月|年)(?![前后])"),
)


def duration_question(text: str) -> bool:
    """Whether ``text`` asks how long something lasted or will take (English or Chinese)."""
    return any(p.search(text) for p in _DURATION_QUESTION)


def holds_duration(text: str) -> bool:
    """Whether ``text`` states a length of time ("84 minutes", "two hours", 28 分钟, 三天)."""
    return any(p.search(text) for p in _DURATION)


# The measure words a Chinese count is written with (共 4 箱, 3 个用例, 约 954 名用户).
_MEASURES = "个名张箱台件位次条份人家辆本套把盒包批项"
# A question asking how many of something ("how many boxes showed up?", 到了几箱？,
# 用例有多少个？) is answered by a memory that counts ("8 boxes", 共 4 箱, 3 个用例).
# Not a length of time (a duration question) and not an amount of money (多少钱).
_COUNT_QUESTION = (
    re.compile(r"\bhow many\b", re.IGNORECASE),  # ("how many days": a duration question, tried first)
    re.compile(rf"(?:几|多少)([{_MEASURES}])"),
)
_MONTHS = frozenset("january february march april may june july august september october november december "
                    "jan feb mar apr jun jul aug sep sept oct nov dec".split())
# A number standing alone (not in an id, a version, an amount, a time or a share),
# followed by the word it counts; the word before it is read to leave dates out.
_COUNT_EN = re.compile(r"(?:(\w+)\s+)?(?<![\w$€£¥.,:/#-])\d+(?:,\d{3})*(?![\w.,:/%-])\s+[a-z]", re.IGNORECASE)
_ZH_NUMBER = r"(?<![A-Za-z0-9_$€£¥.,:/#第-])(?:\d+|[一二两三四五六七八九十百千万]+)\s*"
_COUNT_ZH = re.compile(rf"{_ZH_NUMBER}[{_MEASURES}]")


def count_question(text: str) -> bool:
    """Whether ``text`` asks how many of something there are (English or Chinese), a
    length of time aside."""
    return not duration_question(text) and any(p.search(text) for p in _COUNT_QUESTION)


def holds_count(text: str, measures: str = "") -> bool:
    """Whether ``text`` counts something ("8 boxes", "about 954 users", 共 4 箱, 3 个用例).
    ``measures``: the Chinese measure words a count must be written with (几箱 asks
    for boxes, not for the 两批 an order was split into); empty: any."""
    zh = re.compile(rf"{_ZH_NUMBER}[{re.escape(measures)}]") if measures else _COUNT_ZH
    if zh.search(text):
        return True
    return any((m.group(1) or "").lower() not in _MONTHS for m in _COUNT_EN.finditer(text))


def count_measures(question: str) -> str:
    """The Chinese measure words ``question`` counts in (到了几箱 -> 箱), "" for any:
    none named, or only the general 个."""
    named = {m.group(1) for m in _COUNT_QUESTION[1].finditer(question)}
    return "" if not named or "个" in named else "".join(sorted(named))


# A question asking where something is, was or will be ("where will the onsite take
# place?", "where was the team able to reproduce it?", 在哪里面试, 住哪儿) is answered by
# a memory that names a place: a numbered room, floor or gate ("room 8.03"), a proper
# name after in / at / on ("on Android 14", "on iPadOS", "at the Hilton", "in Dublin";
# not "on the Standard plan", not a month, a weekday or an identifier such as TKT-7525); in Chinese a numbered place (8.03 会议室,
# 展位号是 4.21), a place word after a verb that books or moves something there
# (订了深圳的希尔顿酒店; not 酒店还没订, which names no place), or 在 ... 上/里
# ("在 ARM 构建机上"; not 现在 or 正在, which are times). Not a question asking where
# a task stands (status_question).
_PLACE_QUESTION = (
    re.compile(r"\bwhere\b", re.IGNORECASE),
    re.compile(r"在哪(?![个一些位种天年月次件版])|哪里|哪儿|什么地方|何处|什么地点|哪个(?:城市|地方|房间|会议室)"),
)
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_PLACE_EN = (
    re.compile(r"\b(?:room|rooms|floor|building|gate|terminal|suite|hall|booth|stand|seat|desk|bay|dock|platform)"
               r"\s+[A-Z]?\d", re.IGNORECASE),
    re.compile(r"\b(?:(?:in|at|inside|near)\s+(?:the\s+)?|on\s+)([A-Z][\w&'.]*(?:-[\w]+)?|[a-z]+[A-Z]\w*)"),
)
_IDENTIFIER = re.compile(r"[A-Z]+-\d+")
_ZH_STOP = r"[^，。；,;：:？?！!]"
_ZH_PLACES = "酒店|宾馆|饭店|会议室|办公室|机场|车站|航站楼|大厦|大楼|园区|仓库|机房|门店|展馆|会场|礼堂"
_PLACE_ZH = (
    # a numbered place: 8.03 会议室, 3 号楼, 展位号是 4.21, 登机口 12
    re.compile(r"\d+(?:\.\d+)?\s*(?:号楼|楼|层|室|会议室|展位|展台|登机口)"
               r"|(?:展位|展台|摊位|座位|房间|登机口|工位|会议室)号?\s*(?:是|为|在)?\s*[A-Za-z]?\d"),
    # a place word where something is booked, held or moved to: 订了深圳的希尔顿酒店
    re.compile(rf"(?:订了|订好|住在|住进|定在|改到|搬到|到|去){_ZH_STOP}{{0,12}}?(?:{_ZH_PLACES})"),
    # 在 ... 上 / 里: 在 ARM 构建机上 (not 现在, 正在, 还在 ...: a time, not a place)
    re.compile(rf"(?<![现正还实存所])在{_ZH_STOP}{{1,16}}?[上里]"),
)


def place_question(text: str) -> bool:
    """Whether ``text`` asks where something is, was or will be (English or Chinese),
    and not where a task stands."""
    return any(p.search(text) for p in _PLACE_QUESTION) and not status_question(text)


def holds_place(text: str) -> bool:
    """Whether ``text`` names a place (see :func:`place_question`)."""
    if _PLACE_EN[0].search(text) or any(p.search(text) for p in _PLACE_ZH):
        return True
    for m in _PLACE_EN[1].finditer(text):
        word = m.group(1)
        if word.lower().rstrip(".") in _MONTHS or word.lower() in _WEEKDAYS:
            continue
        if _IDENTIFIER.fullmatch(word):  # an identifier (TKT-7525), not a place
            continue
        return True
    return False


#: The query word a memory holds when it states the kind of answer a question asks
#: for (retrieval.answer_type): a length of time for "how long", a count for "how
#: many". No text has these: :func:`terms` never yields a control character.
ANSWER_TERMS = {"duration": "\x00duration", "count": "\x00count", "place": "\x00place"}


def answer_kind(question: str) -> str | None:
    """The kind of answer ``question`` asks for ("duration", "count", "place"), or None."""
    if duration_question(question):
        return "duration"
    if count_question(question):
        return "count"
    if place_question(question):
        return "place"
    return None


def answer_test(kind: str, question: str = "") -> Callable[[str], bool]:
    """What tells a memory that states an answer of ``kind`` (a key of
    :data:`ANSWER_TERMS`) to ``question`` (which names what a Chinese count counts):
    read off the question once, then asked of each memory's content."""
    if kind == "duration":
        return holds_duration
    if kind == "count":
        return functools.partial(holds_count, measures=count_measures(question))
    if kind == "place":
        return holds_place
    raise ValueError(f"unknown answer kind {kind!r}")


def holds_answer(kind: str, content: str, question: str = "") -> bool:
    """Whether ``content`` states an answer of ``kind`` to ``question`` (:func:`answer_test`)."""
    return answer_test(kind, question)(content)


# A question asking where a task stands ("where does TKT-1049 stand?", "what is
# still open on TRV-2091?", 报销单现在走到哪一步了) is answered by the task's state
# memories (NodeType.STATE), whatever words they share with it.
_STATUS = (
    re.compile(
        r"\bwhere (?:do|does|did|is|are|will)\b[^?]{0,80}?\bstand\b"
        r"|\bstatus\b(?!\s+(?:codes?|pages?|bar|field|flags?|icons?|lights?|messages?)\b)|\bstill (?:open|pending)\b"
        r"|\bhow far along\b|\bprogress\b|\bthe latest (?:on|with)\b|\bwaiting (?:on|for)\s*\?"
        r"|\b(?:is|has)\b[^?]{0,60}?\b(?:resolved|finished|completed|closed|settled|approved|gone through)\b"
        r"|\bhow (?:is|are)\b[^?]{0,60}?\b(?:going|coming along|progressing)\b",
        re.IGNORECASE,
    ),
    re.compile(r"状态(?![码栏位灯])|进展|进度|哪一[步轮关]|到哪儿?了|哪个环节|什么阶段|卡在|怎么样了|还有什么没|还在等"
               r"|(?:解决|完成|办好|办完|结束|下来)了吗"),
)


def status_question(text: str) -> bool:
    """Whether ``text`` asks where a task stands (English or Chinese)."""
    return any(p.search(text) for p in _STATUS)


# A question about how things stand now, after a change: its answer is the newest
# memory of a chain of updates ("Reassigned TKT-1049 to Kim (from Novak)" after
# "TKT-1049 is assigned to Novak"), which often reads less like the question than the
# memory it replaces.
_LATEST = (
    re.compile(
        r"\b(?:now|currently|current|latest|most recent(?:ly)?|these days|at the moment|at present|anymore)\b"
        r"|\bafter the (?:handover|switch|change|update|correction|move|swap|transfer|reassignment|rebooking|reschedul\w*)\b",
        re.IGNORECASE,
    ),
    re.compile(r"现在|目前|当前|最新|如今|眼下|(?:更正|交接|更换|调整|改签|换)[^？?。，,]{0,4}?(?:之后|以后|后)"),
)


def latest_question(text: str) -> bool:
    """Whether ``text`` asks how something stands now, after any change to it
    (English or Chinese)."""
    return any(p.search(text) for p in _LATEST)


def content_hash(content: str) -> str:
    """SHA-256 of the whitespace-normalised content: what finds an exact twin (the store
    keys it with its keyring when it has one)."""
    return hashlib.sha256(" ".join(content.split()).encode("utf-8")).hexdigest()


def count_tokens(text: str) -> int:
    """An estimate of an LLM tokenizer's count: one per CJK character or punctuation
    mark, one per four characters of a Latin word (at least one)."""
    n = 0
    for piece in _TOKEN_PIECES.findall(text):
        n += max(1, math.ceil(len(piece) / 4)) if len(piece) > 1 else 1
    return n
