"""The text tables behind :mod:`eval.generate` and how they are read: entity pools and
the slot values drawn from them (:class:`Entities`, :class:`Slots`), and the task
domains per language, parsed once by :func:`domains`.

A domain is a small line format::

    slots   claim=@EXP person=name      slot -> kind, where a slot's kind is not its name
                                        (@EXP: a unique id "EXP-1234"; @#: "#1234")
    title   ...                         the task node
    ref     ... || ...                  how questions name the task (variants)
    ask     ... || ...                  "where does it stand" questions
    state   ...                         task states, in the order a task moves through them
    fact KEY      content || rewording | question || question | noun phrase
    update KEY    content | question    a later fact that supersedes fact KEY: slot KEY is
                                        drawn again, {old} is its previous value
    event / decision / pref KEY         as fact
    routine / summary                   filler events and the closing summary (never asked)
    sub KEY       title | ref           a subtask; the indented lines under it are its items

Questions paraphrase their content, name the task's id, and never hold the value
they ask for; slots that an update may change ({old}'s slot) appear in no question
or ref. ``{n}``, ``{time}``, ``{dtime}`` are drawn afresh at each use, so a line
with a rewording uses none of them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

# The kinds of item line a domain has (the other keywords are single lines).
ITEM_KINDS = ("fact", "event", "decision", "pref")


def _pool(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


POOLS: dict[str, dict[str, tuple[str, ...]]] = {
    "en": {
        "first": _pool(
            "James, Mary, Robert, Patricia, John, Jennifer, Michael, Linda, David, Elizabeth, William, "
            "Barbara, Richard, Susan, Joseph, Jessica, Thomas, Sarah, Daniel, Nancy, Matthew, Lisa, "
            "Anthony, Mark, Sandra, Paul, Ashley, Steven, Emily, Andrew, Olivia, Kevin, Priya, Wei, "
            "Mei, Carlos, Sofia, Ahmed, Fatima, Lukas, Anna, Kenji, Yuki, Omar, Elena, Grace"
        ),
        "last": _pool(
            "Smith, Johnson, Williams, Brown, Jones, Garcia, Miller, Davis, Rodriguez, Martinez, Lopez, "
            "Wilson, Anderson, Taylor, Moore, Jackson, Martin, Lee, Thompson, White, Harris, Clark, "
            "Lewis, Walker, Hall, Young, King, Wright, Patel, Chen, Zhang, Wang, Kim, Nguyen, Schmidt, "
            "Rossi, Novak, Okafor, Silva, Murphy"
        ),
        "city": _pool(
            "Chicago, Denver, Boston, Seattle, Austin, Atlanta, Toronto, London, Berlin, Paris, Madrid, "
            "Amsterdam, Dublin, Singapore, Tokyo, Sydney, Dubai, Mumbai, Shanghai, Chengdu, Zurich, "
            "Stockholm, Mexico City, Lisbon"
        ),
        "hotel": _pool(
            "Hilton, Marriott, Hyatt Regency, Sheraton, Westin, Holiday Inn, Novotel, Radisson Blu, "
            "InterContinental, Courtyard, Hampton Inn, Four Points, Ibis, Crowne Plaza"
        ),
        "merchant": _pool(
            "Blue Door Bistro, Golden Dragon, The Oak Room, Luigi's Trattoria, Sakura Sushi, Harbor Grill, "
            "Green Leaf Cafe, The Steak House, Pho Saigon, Cafe Milano, Bombay Spice, Copper Kettle"
        ),
        "category": _pool(
            "meals, taxi fares, hotel stays, conference fees, client entertainment, office supplies, "
            "mileage, software subscriptions"
        ),
        "dept": _pool(
            "Sales, Marketing, R&D, Finance, Legal, Customer Success, Operations, HR, Data Platform, Design"
        ),
        "company": _pool(
            "Contoso, Initech, Globex, Umbrella Foods, Northwind Traders, Stark Logistics, Wayne Retail, "
            "Acme Health, Blue Harbor Bank, Vandelay Imports, Hooli, Soylent Foods, Tyrell Energy, Cyberdyne"
        ),
        "feature": _pool(
            "invoice export, SSO login, bulk upload, mobile check-in, password reset, payroll sync, "
            "PDF reports, webhook delivery, calendar sync, two-factor login"
        ),
        "platform": _pool(
            "iOS 17, Android 14, Chrome on Windows, Safari on macOS, Firefox, the desktop app, Edge, iPadOS"
        ),
        "plan": _pool("Enterprise, Premium, Business, Standard"),
        "priority": _pool("P1, P2, P3, P4"),
        "conference": _pool(
            "KubeCon, Web Summit, the sales kickoff, the partner summit, PyCon, "
            "the customer advisory board, the annual audit, re:Invent"
        ),
        "cab": _pool(
            "Blacklane, Uber Black, the hotel shuttle, a local taxi firm, Welcome Pickups"
        ),
        "position": _pool(
            "Senior Backend Engineer, Data Analyst, Product Designer, Site Reliability Engineer, "
            "Account Executive, QA Engineer, Frontend Engineer, Finance Controller"
        ),
        "vendor": _pool(
            "Northwind Supplies, Dell Direct, CDW, Staples Business, Insight, Grainger, OfficeMax Pro, "
            "Lenovo Partner Store, Bechtle, Ingram Micro"
        ),
        "product": _pool(
            "Latitude laptops, 27-inch monitors, ergonomic chairs, standing desks, Cisco switches, "
            "conference cameras, docking stations, noise-cancelling headsets, label printers, server racks"
        ),
        "site": _pool("headquarters, Building B, the east warehouse, the downtown office, the lab"),
        "symptom": _pool(
            "times out under load, returns 500 on empty carts, leaks memory after deploys, "
            "double-charges on retry, garbles CSV exports, deadlocks under concurrent writes, "
            "drops webhook events, logs users out at random"
        ),
    },
    "zh": {
        "first": _pool(
            "张,王,李,刘,陈,杨,赵,黄,周,吴,徐,孙,马,朱,胡,郭,何,高,林,罗,郑,梁,谢,宋,唐,许,韩,冯,邓,曹"
        ),
        "last": _pool(
            "伟,娜,芳,敏,静,磊,洋,勇,艳,杰,军,涛,明,超,秀英,丽,强,平,刚,桂英,玲,华,红,飞,婷,晨,宇,浩,"
            "欣怡,子涵,思远,佳琪,建国,海燕,文博,雨桐,俊杰,晓东,雪,鹏"
        ),
        "city": _pool(
            "上海,成都,北京,深圳,杭州,武汉,西安,南京,广州,重庆,厦门,青岛,苏州,长沙,天津,昆明,郑州,合肥"
        ),
        "hotel": _pool(
            "希尔顿酒店,万豪酒店,凯悦酒店,喜来登酒店,全季酒店,亚朵酒店,汉庭酒店,如家酒店,锦江之星,"
            "洲际酒店,香格里拉酒店,维也纳酒店"
        ),
        "merchant": _pool(
            "海底捞,西贝莜面村,外婆家,眉州东坡,绿茶餐厅,全聚德,小南国,太二酸菜鱼,大董,鼎泰丰,南京大牌档,陶陶居"
        ),
        "category": _pool("餐饮,交通,住宿,会议费,业务招待,办公用品,通讯,培训"),
        "dept": _pool(
            "销售部,市场部,研发中心,财务部,法务部,客户成功部,运营部,人力资源部,数据平台部,设计部"
        ),
        "company": _pool(
            "华联超市,星河物流,蓝海科技,远航教育,金桥银行,百川医药,新程汽车,云帆软件,东方纺织,长江电力,盛世文旅,恒达建材"
        ),
        "feature": _pool(
            "发票导出,单点登录,批量导入,移动端打卡,找回密码,工资同步,PDF 报表,消息推送,日历同步,双重验证"
        ),
        "platform": _pool(
            "iPhone,安卓手机,Windows 版 Chrome,Mac 版 Safari,桌面客户端,微信小程序,鸿蒙平板"
        ),
        "plan": _pool("旗舰版,企业版,专业版,标准版"),
        "priority": _pool("P1,P2,P3,P4"),
        "conference": _pool(
            "云栖大会,年度销售启动会,合作伙伴峰会,客户顾问委员会,年度审计,数字中国峰会,世界人工智能大会,秋季交易会"
        ),
        "cab": _pool("滴滴专车,首汽约车,曹操出行,酒店接驳车,当地出租车"),
        "position": _pool(
            "高级后端工程师,数据分析师,产品设计师,运维开发工程师,大客户销售,测试工程师,前端工程师,财务主管"
        ),
        "vendor": _pool(
            "京东企业购,得力办公,晨光科技,联想商用,戴尔直销,齐心集团,震坤行,苏宁企业购,华为企业业务,新华三"
        ),
        "product": _pool(
            "ThinkPad 笔记本,27 英寸显示器,人体工学椅,升降办公桌,华为交换机,会议摄像头,扩展坞,降噪耳机,标签打印机,服务器机柜"
        ),
        "site": _pool("总部,B 座,东区仓库,市区办公室,实验室"),
        "symptom": _pool(
            "高峰期请求超时,空购物车时返回 500,每次发布后内存泄漏,重试时重复扣款,导出的 CSV 乱码,并发写入时死锁,回调事件丢失,用户被随机踢下线"
        ),
    },
}

# Language-neutral pools (code words read the same in both languages).
SHARED: dict[str, tuple[str, ...]] = {
    "endpoint": _pool(
        "POST /api/v2/invoices, GET /api/v2/session, PUT /api/v1/users/me, POST /oauth/token, "
        "GET /reports/export, POST /webhooks/test"
    ),
    "service": _pool(
        "billing-api, auth-service, checkout, search-indexer, notification-worker, payments-gateway, "
        "report-builder, inventory-sync, user-profile, order-service"
    ),
    "file": _pool(
        "retry.py, handlers/payment.go, src/cart/Checkout.tsx, db/migrations/0042_ledger.sql, "
        "client/session.ts, worker/queue.rs, api/export.py, lib/cache.rb"
    ),
    "config": _pool(
        "ENABLE_ASYNC_LEDGER, USE_NEW_RETRY, CACHE_WARMUP, STRICT_TLS, BATCH_EXPORT_V2, READ_REPLICAS"
    ),
    "flag": _pool("ff_new_retry, ff_async_ledger, ff_safe_checkout, ff_export_v2, ff_lazy_cache"),
    "test": _pool(
        "checkout_flow, refund_path, session_refresh, bulk_export, ledger_sync, cart_merge"
    ),
}

# Two gold nodes of one task in one question: {ref} names the task, {a} and {b} are noun phrases.
MULTI: dict[str, tuple[str, ...]] = {
    "en": (
        "Two things about {ref}: {a}, and {b}?",
        "Remind me of {a} and {b} for {ref}.",
        "For {ref} I need {a} plus {b}.",
    ),
    "zh": (
        "{ref}的{a}和{b}分别是什么？",
        "关于{ref}，{a}是什么？{b}呢？",
        "提醒我一下{ref}的{a}，还有{b}。",
    ),
}

# Light rewordings of a near-duplicate write: they keep nearly every term of the original.
DUP_WRAPS: dict[str, tuple[str, ...]] = {
    "en": ("As noted: {c}", "{c} (again)", "Noting once more: {c}", "{c}."),
    "zh": ("备注：{c}", "{c}（同上）", "再记一笔：{c}", "{c}。"),
}

# ---------------------------------------------------------------- entities

# Slots drawn afresh at every use (never stored with the task).
FRESH = frozenset({"n", "time", "dtime"})
_DAY = 86_400

_MONTHS = (
    "January February March April May June July August September October November December".split()
)
_MONEY = {
    "money": (80, 9000, 1),
    "cap": (100, 1500, 50),
    "fee": (15, 120, 1),
    "budget": (1500, 12000, 50),
    "limit": (3000, 50000, 1000),
    "price": (2000, 90000, 10),
    "bonus": (5000, 30000, 1000),
}
_INTS = {
    "n": (2, 9),
    "qty": (4, 120),
    "nights": (2, 6),
    "days": (2, 7),
    "years": (1, 5),
    "users": (40, 5000),
    "percent": (5, 35),
    "ms": (800, 4000),
    "mins": (12, 95),
}
_ERRORS = (
    "HTTP 500",
    "HTTP 502",
    "HTTP 503",
    "HTTP 504",
    "HTTP 429",
    "ORA-00060",
    "ECONNRESET",
    "SSL_ERROR_SYSCALL",
)
_AIRLINES = {
    "en": ("UA", "DL", "AA", "BA", "LH", "AF", "KL", "SQ"),
    "zh": ("MU", "CA", "CZ", "HU", "3U", "ZH", "MF"),
}


class Entities:
    """Draws slot values: pools per language, numbers, dates, and ids unique in the trace."""

    def __init__(self, rng: random.Random, lang: str, now: Callable[[], float],
                 used: dict[str, set[int]] | None = None) -> None:
        self.rng, self.lang, self.now = rng, lang, now
        self.pools = {**SHARED, **POOLS[lang]}
        #: The ids drawn so far, by prefix (``used``: shared with another language's pools).
        self.used: dict[str, set[int]] = {} if used is None else used

    def draw(self, kind: str) -> str:
        r, zh = self.rng, self.lang == "zh"
        if kind.startswith("@"):
            return self._unique(kind[1:])
        if kind == "name":
            first, last = r.choice(self.pools["first"]), r.choice(self.pools["last"])
            return first + last if zh else f"{first} {last}"
        if kind in self.pools:
            return r.choice(self.pools[kind])
        if kind in _MONEY:
            lo, hi, step = _MONEY[kind]
            v = r.randrange(lo, hi, step)
            return f"{v:,} 元" if zh else f"${v:,}"
        if kind in _INTS:
            return str(r.randint(*_INTS[kind]))
        return self._special(kind)

    def _special(self, kind: str) -> str:
        r, zh = self.rng, self.lang == "zh"
        if kind == "date":
            day = time.gmtime(self.now() + r.randint(1, 40) * _DAY)
            return (
                f"{day.tm_mon}月{day.tm_mday}日"
                if zh
                else f"{_MONTHS[day.tm_mon - 1]} {day.tm_mday}"
            )
        if kind == "time":
            return time.strftime("%H:%M", time.gmtime(self.now()))
        if kind == "dtime":
            return f"{r.randint(7, 21):02d}:{r.randrange(0, 60, 5):02d}"
        if kind == "salary":
            return (
                f"年薪 {r.randint(20, 90)} 万"
                if zh
                else f"${r.randrange(80_000, 225_000, 5_000):,}"
            )
        if kind == "phone":
            if zh:
                return f"1{r.choice('3589')}{r.randint(0, 9)}-{r.randint(1000, 9999)}-{r.randint(1000, 9999)}"
            return f"({r.randint(201, 989)}) 555-{r.randint(1000, 9999)}"
        if kind == "flight":
            num = r.randint(1000, 9999) if zh else r.randint(100, 2999)
            return f"{r.choice(_AIRLINES[self.lang])}{'' if zh else ' '}{num}"
        if kind == "rate":
            return f"{r.uniform(7.6, 8.0) if zh else r.uniform(1.02, 1.12):.4f}"
        if kind == "error":
            return f"E{r.randint(1000, 9999)}" if r.random() < 0.5 else r.choice(_ERRORS)
        if kind == "version":
            return f"v{r.randint(1, 5)}.{r.randint(0, 30)}.{r.randint(0, 9)}"
        simple = {
            "commit": lambda: f"{r.getrandbits(28):07x}",
            "card": lambda: f"{r.randint(0, 9999):04d}",
            "room": lambda: f"{r.randint(2, 12)}.{r.randint(1, 40):02d}",
            "asset": lambda: f"AST-{r.randint(100000, 999999)}",
            "code": lambda: f"CC-{r.randint(1000, 9999)}",
            "hours": lambda: str(r.choice((2, 4, 8, 24))),
            "weeks": lambda: str(r.choice((2, 4, 6, 8, 12))),
        }
        if kind not in simple:
            raise KeyError(f"no slot kind {kind!r}")
        return simple[kind]()

    def _unique(self, prefix: str) -> str:
        used = self.used.setdefault(prefix, set())
        lo, hi = (1000, 9999) if len(used) < 6000 else (10000, 99999)
        while True:
            v = self.rng.randint(lo, hi)
            if v not in used:
                used.add(v)
                return f"#{v}" if prefix == "#" else f"{prefix}-{v}"


class Slots(dict[str, str]):
    """A task's entities, drawn the first time a template asks for them."""

    def __init__(self, entities: Entities, kinds: dict[str, str]) -> None:
        super().__init__()
        self.entities, self.kinds = entities, kinds

    def __missing__(self, slot: str) -> str:
        value = self.entities.draw(self.kinds.get(slot, slot))
        if slot not in FRESH:
            self[slot] = value
        return value

    def redraw(self, slot: str) -> tuple[str, str]:
        """A new value for ``slot``, different from the old one: (old, new)."""
        old = self[slot]
        new = old
        while new == old:
            new = self.entities.draw(self.kinds.get(slot, slot))
        self[slot] = new
        return old, new


# ---------------------------------------------------------------- domains

DOMAINS: dict[str, dict[str, str]] = {"en": {}, "zh": {}}

DOMAINS["en"]["expense"] = """
slots   claim=@EXP other=@EXP person=name manager=name director=name amount=money client=company limit=cap
title   Expense claim {claim} for {person}: {category} in {city}
ref     claim {claim} || {person}'s claim {claim} || expense claim {claim} || {person}'s reimbursement {claim}
ask     Where does {ref} stand now? || What is the status of {ref} at the moment? || What is {ref} waiting on?
state   Claim {claim}: drafted, receipts still being gathered
state   Claim {claim}: submitted, waiting for {manager}'s approval
state   Claim {claim}: approved by {manager}, queued for finance review
state   Claim {claim}: finance review passed, payment scheduled for the next payroll run
state   Claim {claim}: paid out and closed
fact amount     Invoice for {claim}: {amount}, paid at {merchant} on {date} | How much did {person} spend on {claim}? || What did the receipt on {ref} come to? | the amount
fact manager    {manager} is the approver for claim {claim} | Who signs off {ref}? | the approver
fact limit      Policy cap for {claim} ({category} in {city}): {limit} per day | What daily limit applies to {ref}? | the daily cap
fact client     Claim {claim} covers a dinner with {client} about their renewal || The spending on {claim} was the {client} renewal dinner | Which customer was the spending on {ref} for? | the client
update amount   Corrected claim {claim} to {amount} (was {old}); the first scan missed the service charge | What is the corrected total on {ref}? || After the correction, how much is {ref} for?
update manager  Approver for {claim} is now {manager}; {old} is on leave | Who has to approve {ref} now?
event returned  Finance returned claim {claim}: the invoice photo is unreadable || Finance sent {claim} back because they cannot read the invoice picture | Why was {ref} sent back? || What problem did finance have with {ref}? | why it was returned
event reupload  {person} re-uploaded a sharper scan of the invoice for {claim} | What did {person} do about the rejected invoice on {claim}? | the fix for the invoice
event overlap   Finance flagged {claim}: one receipt also appears on claim {other} | Which other claim clashes with {ref}? | the clashing claim
event missing   The taxi receipt from {date} is missing on claim {claim} || Claim {claim} still lacks the {date} taxi receipt | Which receipt is {ref} missing? | the missing receipt
decision split     Decided to split {claim}: meals and hotel go on separate forms so the hotel part is not held up | Why is {ref} being filed as two forms? | why it was split
decision escalate  Escalating {claim} to {director}: it has waited over 30 days for approval | Who is {ref} being escalated to, and why? | the escalation
pref notify     {person} wants the result of {claim} by text message, not email || Text {person} about {claim}, do not email | How should {person} hear about {ref}? | the notification channel
pref card       {person} wants the refund for {claim} paid to the card ending {card} | Where should the money for {ref} go? | the payout card
routine         Checked claim {claim} in the expense system at {time}: no change
routine         Reminded the approver about claim {claim} at {time}
summary         Wrap-up for {claim}: {n} receipts handled, closed without further issues
sub receipts    Collect the missing receipts for {claim} | the receipt hunt for {claim}
  event folio     Asked the {hotel} front desk to email the folio for {claim} | Which hotel was asked for a folio for {ref}? | the hotel asked for the folio
  fact count      {n} receipts for {claim} are still outstanding, all from {date} | How many receipts are still owed on {ref}? | the number still owed
  decision stmt   A bank statement will stand in for the lost taxi receipt on {claim} | What replaces the lost taxi receipt on {ref}? | the replacement document
sub fx          Convert the foreign-currency items on {claim} | the currency conversion for {claim}
  fact rate       Exchange rate for {claim}: 1 EUR = {rate} USD on the purchase date | What conversion rate applies to {ref}? | the exchange rate
  event fee       The bank charged a {fee} conversion fee on the card used for {claim} | What extra charge came with converting {ref}? | the bank fee
"""

DOMAINS["en"]["support"] = """
slots   ticket=@TKT other=@TKT contact=name agent=name customer=company
title   Support ticket {ticket}: {customer} reports {feature} failing on {platform}
ref     ticket {ticket} || {customer}'s ticket {ticket} || the {customer} case {ticket}
ask     Where does {ref} stand? || What's the latest on {ref}? || Is {ref} resolved, and if not, what is it waiting for?
state   Ticket {ticket}: new, triaging the report
state   Ticket {ticket}: reproduced and handed to engineering
state   Ticket {ticket}: fix ready, waiting for {contact} to confirm
state   Ticket {ticket}: resolved and closed
fact error      {customer}'s {feature} fails with error {error} since {version} | What error does {customer} get in {ref}? | the error code
fact contact    Main contact for {ticket} is {contact}, phone {phone} | Who should we talk to at {customer} about {ref}? | the contact person
fact sla        {customer} is on the {plan} plan: first response due within {hours} hours | How fast must we answer {ref}? | the response deadline
fact users      About {users} users at {customer} are affected by {ticket} | How many people are hit by {ref}? | the number of affected users
fact priority   Ticket {ticket} is priority {priority} | How urgent is {ref} rated? | the priority
fact agent      Ticket {ticket} is assigned to {agent} | Who is handling {ref}? | the owner
update priority Raised {ticket} to {priority} (was {old}) after {customer}'s payroll run failed | What priority does {ref} carry now?
update agent    Reassigned {ticket} to {agent} (from {old}), who knows the {feature} code | Who owns {ref} after the handover?
event workaround Gave {contact} a workaround for {ticket}: clear the cache and sign in again || Told {contact} to clear the cache and log in again as a stopgap for {ticket} | What stopgap did {customer} get for {ref}? | the workaround
event logs      {contact} sent HAR logs for {ticket}; the failing call is {endpoint} | Which request fails according to the logs on {ref}? | the failing request
event angry     {contact} called about {ticket}, upset: it blocks their month-end close || {contact} phoned, annoyed that {ticket} holds up their month-end close | Why is {customer} pushing hard on {ref}? | why it is urgent
event dupe      Linked {ticket} to the known issue {other} that another customer reported | Which known issue is {ref} tied to? | the linked issue
decision hotfix Decided to ship a hotfix for {ticket} instead of waiting for the next release | Will {ref} wait for the regular release? | how the fix ships
decision credit Agreed to give {customer} a {percent}% service credit over {ticket} | What compensation was offered for {ref}? | the compensation
pref phone      {contact} wants updates on {ticket} by phone before 10 am | How and when does {contact} want to hear about {ref}? | the contact preference
pref cc         {customer} wants every reply on {ticket} copied to their IT mailbox | Who else should receive our replies on {ref}? | who to copy
routine         Checked the queue for {ticket} at {time}: still waiting on the customer
routine         Added an internal note to {ticket} at {time}
summary         Wrap-up for {ticket}: closed after {n} customer contacts
sub repro       Reproduce the {feature} failure from {ticket} | the reproduction of {ticket}
  event env       Reproduced {ticket} on {platform} with a test account; it fails at the third step | Where was the team able to reproduce {ref}? | where it was reproduced
  fact cause      Root cause for {ticket}: the session token expires after {n} minutes instead of 60 | What is behind the failure in {ref}? | the root cause
sub comms       Draft the customer update for {ticket} | the customer update for {ticket}
  decision eta    The update to {customer} on {ticket} admits the fault and promises a fix by {date} | What date did we promise {customer} for {ref}? | the promised date
  event sent      Sent the update on {ticket} to {contact}, copying {agent} | Who was copied on the customer update for {ref}? | who was copied
"""

DOMAINS["en"]["code"] = """
slots   bug=@BUG pr=@# owner=name reviewer=name prev=version
title   Fix bug {bug}: {service} {symptom}
ref     {bug} || the {service} bug {bug} || the {bug} issue
ask     Where does the fix for {bug} stand? || What is the status of {ref}? || How far along is the work on {ref}?
state   {bug}: investigating, no fix yet
state   {bug}: fix up for review as PR {pr}
state   {bug}: fix merged, waiting for the next release
state   {bug}: fix deployed and verified in production
fact file       The fault behind {bug} is in {file}, inside the retry loop || {bug} lives in the retry loop of {file} | Which file holds the faulty code for {ref}? | the file at fault
fact config     {bug} only shows up when {config} is switched on | What setting has to be enabled to trigger {ref}? | the trigger
fact commit     {bug} came in with commit {commit} in {prev} | Which change introduced {ref}? | the offending commit
fact latency    Since {bug}, p99 latency of {service} is up to {ms} ms | How bad is the slowdown caused by {ref}? | the latency
fact reviewer   {reviewer} will review the fix for {bug} | Who is reviewing the patch for {ref}? | the reviewer
fact version    The fix for {bug} is planned for release {version} | In which release will {ref} be fixed? | the target release
update reviewer Swapped the reviewer for {bug} to {reviewer}; {old} is out this week | Who reviews the patch for {ref} now?
update version  Moved the fix for {bug} to release {version} (was {old}): the release train is frozen | Which release is {ref} slated for now?
event ci        CI failed on PR {pr} for {bug}: the integration test test_{test} timed out | Why did the pipeline go red on the fix for {ref}? | the CI failure
event review    {owner} asked for a regression test on PR {pr} before approving | What did the reviewer want added for {ref}? | the review request
event rollback  Rolled {service} back to {prev} after {bug} pushed errors to {percent}% || {bug} pushed errors to {percent}%, so {service} went back to {prev} | Which version was {service} reverted to because of {ref}? | the rollback target
event page      Paged {owner} about {bug} at {time}; {owner} acknowledged | Who got paged for {ref}? | who was paged
decision flag      Decided to put the fix for {bug} behind the feature flag {flag} | How will the fix for {ref} be switched on? | the rollout flag
decision backport  Won't backport {bug} to {prev}; customers on it keep the workaround | Will {ref} be fixed on the older release line? | the backport decision
pref smallpr    {owner} wants small PRs for {service}, one concern each | What kind of pull requests does {owner} expect for {ref}? | the PR style
pref tests      {owner} prefers table-driven tests for the {service} handlers | How does {owner} want tests written for {ref}? | the test style
routine         Re-ran the flaky tests for {bug} at {time}: all green
routine         Rebased the branch for {bug} on main at {time}
summary         Wrap-up for {bug}: fixed in PR {pr} after {n} review rounds
sub tests       Write regression tests for {bug} | the regression tests for {bug}
  fact cases      The regression suite for {bug} has {n} cases, including the empty-cart path | How many test cases guard against {ref} coming back? | the test count
  event flaky     The new test for {bug} is flaky on ARM runners; marked it xfail there | Where does the new test for {ref} misbehave? | where the test is flaky
sub postmortem  Write the postmortem for {bug} | the postmortem of {bug}
  fact impact     Postmortem for {bug}: {mins} minutes of degraded checkout, about {users} users affected | How long did the outage from {ref} last? | the outage length
  decision alert  Action item from the {bug} postmortem: alert when {service} errors pass 2% | What alert came out of the review of {ref}? | the new alert
"""

DOMAINS["en"]["travel"] = """
slots   trip=@TRV traveler=name event=conference vdate=date
title   Business trip {trip}: {traveler} to {city} for {event} on {date}
ref     trip {trip} || {traveler}'s {city} trip ({trip}) || {traveler}'s trip {trip}
ask     Where do the arrangements for {ref} stand? || What is still open on {ref}? || What is the status of {ref}?
state   Trip {trip}: request received, dates confirmed with {traveler}
state   Trip {trip}: flights on hold, hotel not booked yet
state   Trip {trip}: everything booked, waiting for the travel-policy check
state   Trip {trip}: approved; itinerary sent to {traveler}
fact hotel      Booked {traveler} at the {hotel} in {city} for {nights} nights | Where is {traveler} staying during {ref}? | the hotel
fact flight     Outbound flight for {trip}: {flight}, leaving {date} at {dtime} | Which flight takes {traveler} out on {ref}? | the outbound flight
fact budget     Travel budget for {trip} is {budget}, per diem included | How much money is approved for {ref}? | the budget
fact badge      Badges for {event} must be collected at the venue before {vdate} | When do the conference badges for {ref} need picking up? | the badge deadline
update hotel    Changed the hotel for {trip} to the {hotel}: the {old} had no rooms with a desk | Which hotel is {traveler} booked into for {ref} now?
update flight   Rebooked {traveler} onto {flight} because {old} was cancelled | Which flight does {ref} use now?
event upgrade   The airline offered {traveler} a paid seat upgrade on the {trip} outbound leg for {fee} | What would the seat upgrade on {ref} cost? | the upgrade price
event schedule  The organisers of {event} moved the keynote to the afternoon || {event} now holds its keynote in the afternoon | What changed in the conference schedule for {ref}? | the schedule change
event insurance Bought travel insurance for {trip} covering {city} | Is {ref} covered by travel insurance? | the insurance
decision train  Decided {traveler} takes the train back from {city}: cheaper and just as fast | How is {traveler} getting home from {ref}? | the return transport
decision extend Agreed {traveler} may stay one extra night after {event} at own cost | Was {traveler} allowed to extend {ref}? | the extension
pref seat       {traveler} always wants an aisle seat and no red-eye flights || No red-eyes for {traveler}, and always an aisle seat | What seating does {traveler} like for {ref}? | the seat preference
pref near       {traveler} prefers hotels within walking distance of the venue | What matters to {traveler} when choosing a hotel for {ref}? | the hotel preference
routine         Checked fares for {trip} at {time}: nothing cheaper
routine         Confirmed the booking codes for {trip} at {time}
summary         Wrap-up for trip {trip}: completed with {n} changes along the way
sub ground      Arrange ground transport in {city} for {trip} | the local transport for {trip}
  fact pickup     Airport pickup for {traveler} booked with {cab} at {dtime} | Who meets {traveler} at the airport on {ref}? | the airport pickup
  event rental    The car-hire desk in {city} needs {traveler}'s licence number before {date} | What does the rental desk still need for {ref}? | what the rental desk needs
sub visa        Prepare the visa paperwork for {trip} | the visa paperwork for {trip}
  event letter    HR issued the invitation letter for {traveler}'s visa | Has the invitation letter for {ref} been issued? | the invitation letter
  fact docs       The visa file for {trip} still lacks bank statements for the last {n} months | What document is still missing from the visa file for {ref}? | the missing document
"""

DOMAINS["en"]["procurement"] = """
slots   po=@PO requester=name approver=name vendor2=vendor price2=price billed=price left=budget
title   Purchase order {po}: {qty} {product} for {dept}
ref     order {po} || {dept}'s order {po} || the {product} order {po} || purchase order {po}
ask     Where does {ref} stand? || What is the status of {ref}? || Has {ref} gone through yet?
state   Order {po}: request logged, collecting quotes
state   Order {po}: quote chosen, waiting for budget approval
state   Order {po}: placed with the supplier, awaiting delivery
state   Order {po}: goods received and invoice matched
fact vendor     Chosen supplier for {po} is {vendor}, quote {price} all-in | Who is supplying {ref}, and at what price? | the supplier
fact date       {po} is promised for delivery on {date} to {site} | When will {ref} be delivered? | the delivery date
fact code       {po} is charged to budget line {code}, with {left} left this quarter | Which budget line pays for {ref}? | the budget line
fact warranty   The {product} in {po} come with a {years}-year warranty | How long is the warranty on {ref}? | the warranty
update vendor   Switched {po} from {old} to {vendor}: {old} cannot deliver this month | Which supplier is {ref} with after the switch?
update date     Delivery of {po} slipped to {date} (was {old}) because of a customs hold | When is {ref} expected to arrive now?
event quote     Got a second quote for {po} from {vendor2}: {price2} | What did the competing offer for {ref} come in at? | the second quote
event damaged   {n} of the {product} in {po} arrived damaged; photos sent to the supplier | What went wrong with the delivery of {ref}? | the damage
event invoice   The invoice for {po} bills {billed}, more than the agreed quote || {po} was invoiced at {billed}, above what we agreed | What is wrong with the bill for {ref}? | the invoice mismatch
decision split  Decided to split {po} into two deliveries so {dept} gets half now | Why will {ref} arrive in two parts? | the split delivery
decision tender Skipping the tender for {po}: it is under the {limit} threshold | Why didn't {ref} go out to tender? | the tender decision
pref local      {requester} prefers local suppliers with next-day service for {po} | What kind of vendor does {requester} favour for {ref}? | the vendor preference
pref color      {dept} wants the {product} on {po} in black, not silver || Black, not silver: {dept}'s colour for the {product} on {po} | Which colour did {dept} ask for on {ref}? | the colour
routine         Chased the supplier about {po} at {time}: no delivery date yet
routine         Updated the tracker row for {po} at {time}
summary         Wrap-up for {po}: delivered and paid after {n} emails with the supplier
sub approval    Get budget approval for {po} | the budget approval for {po}
  event ask       {approver} asked whether {po} could wait until next quarter | What did the approver question about {ref}? | the approver's question
  fact signoff    Orders above {limit} such as {po} need the CFO's signature | Whose sign-off does {ref} require? | the required sign-off
sub receiving   Check in the delivery for {po} | the goods receipt for {po}
  event count     Counted the {product} for {po} at the dock: {n} boxes, labels match | How many boxes showed up for {ref}? | the box count
  fact serials    Serial numbers for {po} are logged in the asset register under {asset} | Where were the serial numbers from {ref} recorded? | the asset record
"""

DOMAINS["en"]["hiring"] = """
slots   req=@REQ role=position candidate=name manager=name recruiter=name interviewer=name referrer=name rival=name approver=name idate=date
title   Hiring a {role} in {city} ({req}); hiring manager {manager}
ref     requisition {req} || the {role} opening {req} || {manager}'s {role} hire ({req})
ask     Where does {ref} stand? || How far along is {ref}? || What is the status of {ref}?
state   {req}: job posted, screening applications
state   {req}: {candidate} is in the interview loop
state   {req}: offer out to {candidate}, waiting for an answer
state   {req}: offer accepted; {candidate} starts on {date}
fact idate      Onsite interview with {candidate} for {req} on {idate} at {dtime} | When does {candidate} come in for {ref}? | the interview time
fact salary     Budget for {req}: up to {salary} | How much can we pay on {ref}? | the salary cap
fact referral   {candidate} came to {req} through a referral from {referrer} | Who referred the candidate on {ref}? | the referral
fact notice     {candidate}'s notice period at the current employer is {weeks} weeks | How soon could {candidate} start on {ref}? | the notice period
update idate    Moved {candidate}'s interview for {req} to {idate} (was {old}); {manager} is travelling | What is the new interview date on {ref}?
update salary   Raised the salary cap for {req} to {salary} (was {old}) to match the market | What is the pay ceiling on {ref} now?
event score     {interviewer} scored {candidate} 3 of 4 in system design; strong on trade-offs || {candidate} got a 3 out of 4 from {interviewer} in system design, good on trade-offs | How did {candidate} do in the design round for {ref}? | the design score
event counter   {candidate} got a counter-offer and asked for {days} days to decide | Why is {candidate} stalling on {ref}? | the counter-offer
event refcheck  Reference check for {candidate} done: the former boss praised their ownership | What did the references say about {candidate} for {ref}? | the reference check
decision reject Not moving {rival} forward on {req}: no hands-on Kubernetes | Why was {rival} turned down for {ref}? | the rejection reason
decision remote Agreed the {role} hired on {req} may work remotely three days a week | What is the remote-work arrangement for {ref}? | the remote policy
pref takehome   {manager} wants the take-home task for {req} kept under two hours | How long may the take-home for {ref} be? | the take-home limit
pref call       {candidate} prefers calls after 6 pm, never at the office | When is it fine to phone {candidate} about {ref}? | when to call
routine         Screened {n} new applications for {req} at {time}
routine         Synced with {recruiter} on {req} at {time}
summary         Wrap-up for {req}: filled after {n} interviews
sub loop        Schedule the interview loop for {candidate} ({req}) | the interview loop for {candidate} on {req}
  fact panel      Panel for {candidate}: {interviewer}, {manager} and a peer from {dept} | Who sits on {candidate}'s panel for {ref}? | the panel
  event room      Booked room {room} for {candidate}'s onsite; visitor badge requested | Where will {candidate}'s onsite for {ref} take place? | the room
sub offer       Prepare the offer for {candidate} ({req}) | the offer for {candidate} on {req}
  decision bonus  The offer for {candidate} includes a signing bonus of {bonus} | What extra is in the offer for {ref}? | the signing bonus
  event approved  The offer letter for {candidate} was approved by {approver} on {date} | Who signed off the offer on {ref}? | who approved the offer
"""

DOMAINS["zh"]["expense"] = """
slots   claim=@EXP other=@EXP person=name manager=name director=name amount=money client=company limit=cap
title   报销单 {claim}：{person}在{city}的{category}费用
ref     报销单 {claim} || {person}的报销单 {claim} || {claim} 这笔报销
ask     {ref}现在走到哪一步了？ || {ref}目前是什么状态？ || {ref}还卡在哪个环节？
state   报销单 {claim}：草稿已建，还在收集票据
state   报销单 {claim}：已提交，等待{manager}审批
state   报销单 {claim}：{manager}已批准，转财务复核
state   报销单 {claim}：财务复核通过，排进下一次打款
state   报销单 {claim}：款项已到账，流程关闭
fact amount     报销单 {claim}：发票金额 {amount}，{date}在{merchant}消费 | {person}这次在 {claim} 里花了多少钱？ || {ref}一共要报多少？ | 报销金额
fact manager    {claim} 的审批人是{manager} | {ref}由谁来批？ | 审批人
fact limit      {claim} 适用{city}的{category}标准：每天 {limit} | {ref}适用的每日限额是多少？ | 每日限额
fact client     {claim} 对应的客户是{client}，用于续约洽谈 || {claim} 这笔钱花在{client}的续约洽谈上 | {ref}是为哪家客户花的？ | 对应客户
update amount   报销单 {claim} 金额更正为 {amount}（原为 {old}），第一次扫描漏了服务费 | 更正之后，{ref}的金额是多少？ || {ref}现在报的数是多少？
update manager  {claim} 的审批人改为{manager}，{old}休假了 | {ref}现在该找谁审批？
event returned  财务退回报销单 {claim}：发票照片看不清 || 报销单 {claim} 被财务打回，原因是发票拍得太模糊 | {ref}为什么被退回来了？ || 财务对{ref}有什么意见？ | 退回原因
event reupload  {person}重新上传了 {claim} 的清晰发票扫描件 | 发票被退后，{person}对{ref}做了什么？ | 补救措施
event overlap   财务提示 {claim} 里有一张票和报销单 {other} 重复 | 财务说{ref}和哪张单子撞票了？ | 重复的单号
event missing   {claim} 缺少{date}的出租车票 || 报销单 {claim} 还差{date}那张出租车票 | {ref}还缺哪张票？ | 缺的票据
decision split     决定把 {claim} 拆成两张单：餐饮和住宿分开报，免得住宿部分被卡住 | {ref}为什么要拆成两张？ | 拆单原因
decision escalate  决定把 {claim} 升级给{director}：超过 30 天还没人审批 | {ref}要升级给谁？为什么？ | 升级对象
pref notify     {person}希望 {claim} 的结果用短信通知，不要发邮件 || {claim} 有结果就给{person}发短信，别发邮件 | {ref}的结果该怎么通知{person}？ | 通知方式
pref card       {person}希望 {claim} 的款项打到尾号 {card} 的工资卡 | {ref}的钱要打到哪张卡？ | 收款账户
routine         {time} 在报销系统里查看 {claim}：没有变化
routine         {time} 提醒审批人处理报销单 {claim}
summary         {claim} 收尾：共处理 {n} 张票据，流程顺利结束
sub receipts    补齐 {claim} 缺失的票据 | {claim} 的补票工作
  event folio     已请{hotel}前台把 {claim} 的住宿水单发到邮箱 | 为了{ref}，找哪家酒店要了水单？ | 要水单的酒店
  fact count      {claim} 还有 {n} 张票据没交，都是{date}那天的 | {ref}还差几张票据没交？ | 缺票数量
  decision stmt   丢失的出租车票用银行流水代替，{claim} 照常提交 | {ref}里丢的那张出租车票怎么处理？ | 丢票的替代方案
sub fx          换算 {claim} 里的外币费用 | {claim} 的外币换算
  fact rate       {claim} 按消费当天汇率换算：1 欧元 = {rate} 元 | {ref}用的汇率是多少？ | 汇率
  event fee       银行对 {claim} 用的信用卡收了 {fee}的货币转换费 | {ref}换汇时多扣了什么钱？ | 手续费
"""

DOMAINS["zh"]["support"] = """
slots   ticket=@TKT other=@TKT contact=name agent=name customer=company
title   工单 {ticket}：{customer}反馈{platform}上的{feature}无法使用
ref     工单 {ticket} || {customer}的工单 {ticket} || {customer}那张 {ticket}
ask     {ref}现在处理到哪了？ || {ref}目前什么状态？ || {ref}解决了吗？还在等什么？
state   工单 {ticket}：新建，正在初步排查
state   工单 {ticket}：问题已复现，转给研发
state   工单 {ticket}：修复已就绪，等{contact}确认
state   工单 {ticket}：已解决并关闭
fact error      {customer}的{feature}从 {version} 起报错 {error} | {customer}在{ref}里看到的错误码是什么？ | 错误码
fact contact    工单 {ticket} 的对接人是{contact}，电话 {phone} | {ref}该联系{customer}的谁？ | 对接人
fact sla        {customer}是{plan}客户，首次响应须在 {hours} 小时内 | {ref}的响应时限是多久？ | 响应时限
fact users      {customer}约有 {users} 名用户受 {ticket} 影响 | {ref}波及多少人？ | 受影响人数
fact priority   工单 {ticket} 优先级定为 {priority} | {ref}是什么级别？ | 优先级
fact agent      工单 {ticket} 分配给{agent}处理 | {ref}现在谁在跟？ | 处理人
update priority {ticket} 优先级从 {old} 提到 {priority}：{customer}的月结跑不动了 | {ref}现在是什么优先级？
update agent    {ticket} 转给{agent}（原来是{old}），{agent}熟悉{feature}的代码 | 交接以后{ref}归谁负责？
event workaround 给{contact}提供了 {ticket} 的临时方案：清缓存后重新登录 || 让{contact}先清缓存再重新登录，临时绕过 {ticket} | {customer}的{ref}先用什么办法绕过去？ | 临时方案
event logs      {contact}发来 {ticket} 的抓包日志，出错的请求是 {endpoint} | 按日志看，{ref}是哪个接口出的错？ | 出错接口
event angry     {contact}来电催 {ticket}，情绪很大：影响他们月底结账 || {contact}打电话抱怨 {ticket} 拖累了月底结账 | {customer}为什么急着要{ref}的结果？ | 催办原因
event dupe      把 {ticket} 关联到已知问题 {other}，别的客户也报过 | {ref}和哪个已知问题是同一个？ | 关联工单
decision hotfix 决定为 {ticket} 单独发热修复，不等下个版本 | {ref}的修复要等正式版本吗？ | 发布方式
decision credit 同意就 {ticket} 给{customer} {percent}% 的服务费抵扣 | 针对{ref}给了客户什么补偿？ | 补偿方案
pref phone      {contact}希望上午 10 点前电话同步 {ticket} 的进展，别发邮件 | {contact}希望怎么收到{ref}的进展？ | 沟通偏好
pref cc         {customer}要求 {ticket} 的所有回复都抄送他们的 IT 邮箱 | {ref}的回复还要抄给谁？ | 抄送要求
routine         {time} 查看 {ticket} 队列：还在等客户回复
routine         {time} 在 {ticket} 上补了一条内部备注
summary         {ticket} 收尾：前后和客户沟通 {n} 次后关闭
sub repro       复现 {ticket} 里{feature}的故障 | {ticket} 的复现
  event env       用测试账号在{platform}上复现了 {ticket}，第三步必挂 | {ref}在什么环境下复现出来了？ | 复现环境
  fact cause      {ticket} 根因：会话令牌 {n} 分钟就过期，应为 60 分钟 | {ref}到底是什么原因？ | 根因
sub comms       起草 {ticket} 的客户通报 | {ticket} 的客户通报
  decision eta    给{customer}的 {ticket} 通报里承认问题，承诺{date}前修好 | {ref}答应客户什么时候修好？ | 承诺时间
  event sent      {ticket} 的通报已发给{contact}，抄送{agent} | {ref}的客户通报抄送了谁？ | 抄送人
"""

DOMAINS["zh"]["code"] = """
slots   bug=@BUG pr=@# owner=name reviewer=name prev=version
title   修复缺陷 {bug}：{service} {symptom}
ref     缺陷 {bug} || {service} 的 {bug} || {bug} 这个 bug
ask     {bug} 的修复进展到哪了？ || {ref}现在什么状态？ || {ref}修到哪一步了？
state   缺陷 {bug}：排查中，还没有修复方案
state   缺陷 {bug}：修复已提交 PR {pr}，在评审
state   缺陷 {bug}：已合并，等下次发版
state   缺陷 {bug}：已上线，生产环境验证通过
fact file       {bug} 出在 {file} 的重试循环里 || {bug} 的问题代码在 {file} 的重试循环中 | {ref}的问题代码在哪个文件？ | 出问题的文件
fact config     只有打开 {config} 开关时 {bug} 才会出现 | 什么配置下会触发{ref}？ | 触发条件
fact commit     {bug} 是 {prev} 里的提交 {commit} 引入的 | 是哪次提交把{ref}带进来的？ | 引入提交
fact latency    {bug} 出现后，{service} 的 p99 延迟涨到 {ms} 毫秒 | {ref}让延迟恶化到什么程度？ | 延迟数据
fact reviewer   {bug} 的修复由{reviewer}评审 | {ref}的补丁谁来审？ | 评审人
fact version    {bug} 计划在 {version} 版本修复 | {ref}会在哪个版本修掉？ | 目标版本
update reviewer {bug} 的评审人换成{reviewer}，{old}这周请假 | {ref}的补丁现在谁来审？
update version  {bug} 的修复推迟到 {version}（原定 {old}）：发版窗口冻结了 | {ref}现在排在哪个版本？
event ci        {bug} 的 PR {pr} 跑 CI 失败：集成测试 test_{test} 超时 | {ref}的修复为什么流水线挂了？ | CI 失败原因
event review    {owner}要求 PR {pr} 先补一个回归测试再批准 | 评审对{ref}的补丁提了什么要求？ | 评审意见
event rollback  {bug} 让错误率飙到 {percent}%，{service} 回滚到了 {prev} || 因为 {bug} 错误率升到 {percent}%，只好把 {service} 退回 {prev} | 因为{ref}，{service} 退回了哪个版本？ | 回滚版本
event page      {time} 就 {bug} 呼叫了值班的{owner}，已响应 | {ref}呼了哪位值班？ | 值班人
decision flag      决定把 {bug} 的修复放在特性开关 {flag} 后面 | {ref}的修复靠什么开启？ | 上线开关
decision backport  {bug} 不回合到 {prev}，老版本客户先用临时方案 | {ref}会在老版本上修吗？ | 回合决定
pref smallpr    {owner}要求 {service} 的 PR 拆小，一个 PR 只改一件事 | 修{ref}时，{owner}对 PR 有什么要求？ | PR 要求
pref tests      {owner}喜欢给 {service} 的接口写表驱动测试 | 给{ref}写测试时{owner}偏好什么风格？ | 测试风格
routine         {time} 重跑了 {bug} 相关的不稳定用例：全绿
routine         {time} 把 {bug} 的分支变基到 main
summary         {bug} 收尾：经过 {n} 轮评审后在 PR {pr} 修复
sub tests       为 {bug} 补回归测试 | {bug} 的回归测试
  fact cases      {bug} 的回归用例共 {n} 个，包括空购物车的路径 | 防止{ref}复发的用例有多少个？ | 用例数量
  event flaky     {bug} 的新用例在 ARM 构建机上不稳定，先在那边标成 xfail | {ref}的新测试在哪里不稳定？ | 不稳定的环境
sub postmortem  写 {bug} 的事故复盘 | {bug} 的复盘
  fact impact     {bug} 复盘：结算功能降级 {mins} 分钟，约 {users} 名用户受影响 | {ref}造成的故障持续了多久？ | 故障时长
  decision alert  {bug} 复盘的改进项：{service} 错误率超过 2% 时告警 | {ref}复盘后加了什么告警？ | 新增告警
"""

DOMAINS["zh"]["travel"] = """
slots   trip=@TRV traveler=name event=conference vdate=date booth=room
title   出差 {trip}：{traveler}{date}去{city}参加{event}
ref     出差单 {trip} || {traveler}的{city}之行（{trip}） || {traveler}去{city}的出差 {trip}
ask     {ref}安排得怎么样了？ || {ref}还有什么没落实？ || {ref}现在什么进度？
state   出差 {trip}：已收到申请，和{traveler}确认了日期
state   出差 {trip}：机票已预留，酒店还没订
state   出差 {trip}：全部订好，等差旅政策审核
state   出差 {trip}：审批通过，行程单已发给{traveler}
fact hotel      给{traveler}订了{city}的{hotel}，住 {nights} 晚 | {ref}订的住处是哪里？ || {traveler}这趟出差（{trip}）住哪儿？ | 酒店
fact flight     {trip} 去程航班 {flight}，{date} {dtime} 起飞 | {ref}的去程坐哪个航班？ | 去程航班
fact budget     {trip} 差旅预算 {budget}，含每日补贴 | {ref}批了多少预算？ | 预算
fact badge      {event}的参会证要在{vdate}前到会场领取 | {ref}的参会证什么时候领？ | 领证时间
update hotel    {trip} 的酒店改订{hotel}：{old}没有带书桌的房间了 | {ref}现在订的是哪家酒店？
update flight   {old} 取消了，{traveler}改签到 {flight} | {ref}现在坐哪班飞机？
event upgrade   航司给{traveler}的 {trip} 去程提供付费升舱，要 {fee} | {ref}升舱要多少钱？ | 升舱价格
event schedule  {event}主办方把主题演讲挪到了下午 || {event}的主题演讲改到下午了 | {ref}的会议日程有什么变化？ | 日程变化
event insurance 已为 {trip} 购买了覆盖{city}的旅行保险 | {ref}买保险了吗？ | 保险
decision train  决定{traveler}从{city}坐高铁回来：更便宜，也不比飞机慢 | {ref}返程怎么走？ | 返程方式
decision extend 同意{traveler}在{event}结束后自费多住一晚 | {ref}能延住吗？ | 延住安排
pref seat       {traveler}坐飞机一定要靠过道，不坐红眼航班 || {traveler}不坐红眼航班，座位必须靠过道 | {traveler}对{ref}的座位有什么讲究？ | 座位偏好
pref near       {traveler}希望酒店离会场走路就能到 | 给{ref}选酒店时{traveler}最看重什么？ | 选酒店的要求
routine         {time} 查了 {trip} 的票价：没有更便宜的
routine         {time} 核对了 {trip} 的订单编号
summary         出差 {trip} 收尾：行程结束，途中改动 {n} 次
sub ground      安排 {trip} 在{city}的地面交通 | {trip} 的当地交通
  fact pickup     已约{cab} {dtime} 去机场接{traveler} | {ref}落地后谁来接？ | 接机安排
  event rental    {city}的租车柜台要在{date}前拿到{traveler}的驾照号 | 租车那边还要{ref}提供什么？ | 租车所需材料
sub expo        准备 {trip} 的参会材料 | {trip} 的参会材料
  event slides    {traveler}的演讲稿已交给{event}主办方审核 | {ref}的演讲稿交了没有？ | 演讲稿
  fact stand      {trip} 的展位号是 {booth}，{vdate}布展 | {ref}的展位在哪？ | 展位号
"""

DOMAINS["zh"]["procurement"] = """
slots   po=@PO requester=name approver=name vendor2=vendor price2=price billed=price left=budget
title   采购单 {po}：为{dept}采购{product}，数量 {qty}
ref     采购单 {po} || {dept}的采购单 {po} || {product}那张采购单 {po}
ask     {ref}进行到哪一步了？ || {ref}现在什么状态？ || {ref}批下来了吗？
state   采购单 {po}：需求已登记，正在询价
state   采购单 {po}：已选定报价，等预算审批
state   采购单 {po}：已下单，等待到货
state   采购单 {po}：货已验收，发票已核对
fact vendor     {po} 选定供应商{vendor}，含税总价 {price} | {ref}找的哪家供应商？多少钱？ | 供应商
fact date       {po} 承诺{date}送到{site} | {ref}哪天交货？ | 交货日期
fact code       {po} 走预算科目 {code}，本季度还剩 {left} | {ref}从哪个预算科目出钱？ | 预算科目
fact warranty   {po} 里的{product}提供 {years} 年质保 | {ref}保修多久？ | 质保期
update vendor   {po} 的供应商从{old}换成{vendor}：{old}这个月交不了货 | {ref}换供应商后是哪家？
update date     {po} 交期推迟到{date}（原定{old}），货被海关查验 | {ref}现在预计哪天到？
event quote     {po} 拿到{vendor2}的第二份报价：{price2} | {ref}的另一家报价是多少？ | 第二份报价
event damaged   {po} 到货有 {n} 件{product}破损，已拍照发给供应商 | {ref}到货出了什么问题？ | 到货破损
event invoice   {po} 的发票开了 {billed}，比约定报价高 || {po} 发票金额 {billed}，超出了谈好的报价 | {ref}的发票有什么问题？ | 发票差异
decision split  决定 {po} 分两批到货，{dept}先拿一半 | {ref}为什么分两批送？ | 分批原因
decision tender {po} 不走招标：金额低于 {limit}的门槛 | {ref}为什么没招标？ | 不招标的理由
pref local      {requester}倾向给 {po} 找本地、能次日达的供应商 | {requester}给{ref}选供应商有什么偏好？ | 供应商偏好
pref color      {dept}要黑色的{product}，不要银色，见 {po} || {po}：{dept}指定黑色{product}，银色不要 | {ref}要什么颜色？ | 颜色要求
routine         {time} 催供应商发 {po} 的货：还没有准确到货时间
routine         {time} 更新了跟踪表里 {po} 这一行
summary         {po} 收尾：已到货付款，和供应商往来邮件 {n} 封
sub approval    走 {po} 的预算审批 | {po} 的预算审批
  event ask       {approver}问 {po} 能不能推到下个季度 | 审批人对{ref}提了什么问题？ | 审批人的疑问
  fact signoff    超过 {limit}的订单（比如 {po}）需要财务总监签字 | {ref}需要谁签字？ | 签字要求
sub receiving   验收 {po} 的到货 | {po} 的到货验收
  event count     在仓库清点 {po} 的{product}：共 {n} 箱，标签一致 | {ref}到了几箱？ | 箱数
  fact serials    {po} 的序列号已登记到资产台账 {asset} | {ref}的序列号记在哪？ | 资产台账编号
"""

DOMAINS["zh"]["hiring"] = """
slots   req=@REQ role=position candidate=name manager=name recruiter=name interviewer=name referrer=name rival=name approver=name idate=date
title   招聘 {req}：{city}的{role}，用人经理{manager}
ref     招聘需求 {req} || {role}岗位 {req} || {manager}的{role}招聘（{req}）
ask     {ref}进展到哪了？ || {ref}现在什么状态？ || {ref}到哪一轮了？
state   {req}：职位已发布，正在筛简历
state   {req}：{candidate}进入面试流程
state   {req}：已给{candidate}发 offer，等回复
state   {req}：offer 已接受，{candidate}{date}入职
fact idate      {candidate}应聘 {req} 的现场面试定在{idate} {dtime} | {candidate}哪天来面{ref}？ | 面试时间
fact salary     {req} 的薪资预算上限是{salary} | {ref}最多能给多少钱？ | 薪资上限
fact referral   {candidate}是{referrer}内推到 {req} 的 | {ref}的候选人是谁推荐的？ | 推荐人
fact notice     {candidate}在现公司的离职通知期是 {weeks} 周 | {candidate}最快什么时候能来{ref}？ | 通知期
update idate    {candidate}的 {req} 面试改到{idate}（原定{old}），{manager}出差 | {ref}的面试现在改到哪天？
update salary   {req} 的薪资上限提到{salary}（原来是{old}），以贴近市场 | {ref}现在的薪资天花板是多少？
event score     {interviewer}给{candidate}的系统设计打了 3 分（满分 4），权衡取舍讲得好 || {candidate}系统设计拿了{interviewer}的 3 分（满分 4），取舍讲得清楚 | {candidate}在{ref}的设计面表现如何？ | 设计面评分
event counter   {candidate}拿到现公司的挽留 offer，要 {days} 天考虑 | {candidate}为什么对{ref}迟迟不答复？ | 挽留 offer
event refcheck  {candidate}的背调做完了：前上司说此人责任心很强 | 背调对{ref}的候选人怎么评价？ | 背调结果
decision reject 决定{rival}不进入 {req} 的下一轮：缺少 Kubernetes 实战经验 | {rival}为什么没过{ref}？ | 淘汰原因
decision remote 同意 {req} 招的{role}每周可以远程三天 | {ref}的远程办公怎么安排？ | 远程安排
pref takehome   {manager}要求 {req} 的笔试题控制在两小时内 | {ref}的笔试最长能多久？ | 笔试时长
pref call       {candidate}希望晚上 6 点后再打电话，别打到公司 | 什么时候方便给{candidate}打电话谈{ref}？ | 联系时间
routine         {time} 为 {req} 筛了 {n} 份新简历
routine         {time} 和{recruiter}同步了 {req} 的进展
summary         {req} 收尾：面了 {n} 位候选人后招满
sub loop        安排{candidate}的面试流程（{req}） | {req} 里{candidate}的面试安排
  fact panel      {candidate}的面试官：{interviewer}、{manager}，外加{dept}的一位同事 | {ref}里{candidate}由哪些人面？ | 面试官
  event room      已为{candidate}的现场面试订好 {room} 会议室，访客证已申请 | {candidate}在哪里面{ref}？ | 面试地点
sub offer       准备给{candidate}的 offer（{req}） | {req} 给{candidate}的 offer
  decision bonus  {candidate}的 offer 里加了 {bonus}的签字费 | {ref}的 offer 里额外加了什么？ | 签字费
  event approved  {candidate}的 offer 已由{approver}在{date}批准 | {ref}的 offer 是谁批的？ | offer 审批人
"""


# ---------------------------------------------------------------- reading the domains


@dataclass(frozen=True)
class Line:
    kind: str  # fact, update, event, decision, pref
    key: str
    contents: tuple[str, ...]  # the wording, then rewordings of the same information
    questions: tuple[str, ...]
    np: str  # a noun phrase for the answer, for two-fact questions


@dataclass(frozen=True)
class Sub:
    key: str
    title: str
    ref: str
    items: tuple[Line, ...]


@dataclass(frozen=True)
class Domain:
    name: str
    kinds: dict[str, str]  # slot -> kind, where they differ
    titles: tuple[str, ...]
    refs: tuple[str, ...]
    asks: tuple[str, ...]
    states: tuple[str, ...]
    items: tuple[Line, ...]
    updates: dict[str, Line]
    routines: tuple[str, ...]
    summaries: tuple[str, ...]
    subs: tuple[Sub, ...]


def _variants(field_text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in field_text.split(" || "))


def _parse_line(kind: str, rest: str) -> Line:
    key, _, body = rest.strip().partition(" ")
    fields = [f.strip() for f in body.split(" | ")]
    questions = _variants(fields[1]) if len(fields) > 1 else ()
    return Line(kind, key, _variants(fields[0]), questions, fields[2] if len(fields) > 2 else "")


def parse_domain(name: str, text: str) -> Domain:
    single: dict[str, list[str]] = {}
    items: list[Line] = []
    updates: dict[str, Line] = {}
    subs: list[Sub] = []
    sub_items: list[Line] = []
    for raw in text.strip().splitlines():
        indented = raw[:1].isspace()
        kind, _, rest = raw.strip().partition(" ")
        if kind == "sub":
            key, _, body = rest.strip().partition(" ")
            title, ref = (f.strip() for f in body.split(" | "))
            sub_items = []
            subs.append(Sub(key, title, ref, ()))
        elif indented:
            sub_items.append(_parse_line(kind, rest))
            last = subs[-1]
            subs[-1] = Sub(last.key, last.title, last.ref, tuple(sub_items))
        elif kind == "update":
            line = _parse_line(kind, rest)
            updates[line.key] = line
        elif kind in ITEM_KINDS:
            items.append(_parse_line(kind, rest))
        else:
            single.setdefault(kind, []).append(rest.strip())
    kinds = dict(pair.split("=") for pair in " ".join(single.get("slots", [])).split())
    facts = {i.key: i for i in items if i.kind == "fact"}
    updates = {k: Line(u.kind, k, u.contents, u.questions, facts[k].np) for k, u in updates.items()}
    return Domain(
        name,
        kinds,
        tuple(single["title"]),
        _variants(single["ref"][0]),
        _variants(single["ask"][0]),
        tuple(single["state"]),
        tuple(items),
        updates,
        tuple(single["routine"]),
        tuple(single["summary"]),
        tuple(subs),
    )


@cache
def domains(lang: str, split: str = "dev") -> tuple[Domain, ...]:
    """The parsed task domains of a language. ``split="test"``: the held-out ones of
    :mod:`eval.generate_heldout` (other question phrasings, more domains), for testing only."""
    if split == "test":
        from .generate_heldout import test_domains

        return test_domains(lang)
    if split != "dev":
        raise ValueError(f"unknown split {split!r}; expected dev or test")
    return tuple(parse_domain(name, text) for name, text in DOMAINS[lang].items())
