"""Held-out text for the TEST split of the synthetic traces (``generate(..., split="test")``).

The retrieval code was tuned on the traces of :mod:`eval.generate` (the ``dev`` split), on
the exact question wordings of :mod:`eval.generate_templates`, so figures on them overstate
quality. This module holds text that is used only for testing, never while tuning:

- a second, independently written set of question phrasings for the six dev domains
  (:data:`HELDOUT_QUESTIONS`, noun phrases in :data:`HELDOUT_NPS`, two-fact questions in
  :data:`MULTI`): other sentence shapes and other words, the same meaning and the same
  answer. The memories themselves (contents, titles, states, routines) stay as they are;
  only the way questions are asked, and the task and subtask refs they use, change;
- three whole new domains (:data:`NEW_DOMAINS`: an office move, a customer data migration,
  a customer event), in the dev domains' line format.

The test split uses the rephrased six domains plus the new ones. Figures on it are
reported separately from the dev figures; nothing here is to be looked at or tuned
against while working on retrieval (do not read failing test-split queries to fix them).

The question blocks mirror a domain's lines::

    ref     ... || ...                 how questions name the task
    ask     ... || ...                 "where does it stand" questions
    fact KEY      question || question | noun phrase
    update KEY    question || question
    sub KEY       ref                  the subtask's ref; its items follow, indented

Every item, update, ``ref`` and ``ask`` line of a dev domain that has questions has a
held-out line here (:func:`rephrase` checks it). Placeholders are those the dev question
of the line or the domain's refs use, plus ``{ref}``.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from .generate_templates import Domain, Line, Sub, domains, parse_domain

Key = tuple[str, str]  # (kind, key): ("ref", ""), ("fact", "amount"), ("event", "receipts/folio")

# Two gold nodes of one task in one question: {ref} names the task, {a} and {b} are noun phrases.
MULTI: dict[str, tuple[str, ...]] = {
    "en": (
        "Could you pull up {a} and also {b} on {ref}?",
        "On {ref}, what were {a} and {b} again?",
        "Looking at {ref}: {a}? And {b}?",
    ),
    "zh": (
        "帮我把{ref}的{a}跟{b}都找出来。",
        "{ref}那边，{a}和{b}各是怎么回事来着？",
        "我要{ref}的两样信息：{a}、{b}。",
    ),
}

# ---------------------------------------------------------------- held-out questions, en

QUESTIONS: dict[str, dict[str, str]] = {"en": {}, "zh": {}}

QUESTIONS["en"]["expense"] = """
ref     the {claim} expense report || reimbursement request {claim} || {person}'s {city} expenses ({claim}) || the paperwork for {claim}
ask     Give me a quick update on {ref}. || Has {ref} moved since we last looked? || I'm trying to work out which step {ref} has reached.
fact amount     Remind me what the invoice total was for {ref}. || {person} paid something for {claim}; what was the sum? | the invoice total
fact manager    Whose approval is {ref} sitting with at the moment? || {ref} needs a sign-off, but from which manager? | whose approval it needs
fact limit      Is there a per-day ceiling on {ref}, and how high is it? || I need the policy maximum per day for {ref}. | the per-day ceiling
fact client     Remind me which account {ref} was entertaining. || The costs on {ref} were for a client meeting; with whom? | the customer behind it
update amount   {ref} was fixed after a rescan; what does it come to now? || I need the revised sum on {ref}.
update manager  Since the approver changed, whose desk is {ref} on? || Do you know who took over approving {ref}?
event returned  Finance bounced {ref}, didn't they? What was the reason? || Tell me what got {ref} rejected the first time. | the reason for the rejection
event reupload  After the bounce, how did {person} fix the paperwork for {claim}? || Remind me what {person} resubmitted on {claim}. | what was resubmitted
event overlap   A receipt on {ref} was counted twice; on which other claim? || I need the number of the claim that duplicates a receipt from {ref}. | the duplicate claim number
event missing   Something is still absent from {ref}; which receipt was it? || There's a gap in the receipts for {ref}. Which one? | the receipt that is not in yet
decision split     What was the reasoning behind breaking {ref} up? || {ref} went in as separate forms; remind me why. | the reason for two forms
decision escalate  {ref} has been stuck a long time; whose attention are we raising it to? || Tell me who gets {ref} pushed up to them, and on what grounds. | who it goes up to
pref notify     When {ref} is decided, what's the right way to tell {person}? || Remind me how {person} likes to be contacted about {claim}. | how to reach them
pref card       I need the account details for paying out {ref}. || {person} asked for the payout of {claim} to go somewhere specific; where? | the account to pay into
sub receipts    chasing the lost paperwork on {claim}
  event folio     For {ref}, whose front desk did we write to for the bill? || Which hotel was it again that's sending the itemised bill for {ref}? | the hotel sending the bill
  fact count      {ref} is short some receipts; what's the count? || Give me the number of receipts not yet handed in for {ref}. | how many are missing
  decision stmt   The cab receipt for {ref} is gone; what are we submitting in its place? || Remind me of the substitute for the lost taxi slip on {ref}. | the substitute proof
sub fx          the foreign-currency part of {claim}
  fact rate       I need the euro rate that {ref} was converted at. || Look up the FX rate used on {ref} for me. | the FX rate
  event fee       Did the bank take a cut when {ref} was converted? How much? || Tell me about the card fee on {ref}. | the card charge
"""

QUESTIONS["en"]["support"] = """
ref     help request {ticket} || support request {ticket} || the {feature} complaint from {customer} ({ticket}) || {customer}'s {ticket} issue
ask     Catch me up on {ref}. || Has there been any movement on {ref}? || I need to know which stage {ref} is at.
fact error      Remind me of the code {customer} sees when {ref} fails. || {ref} shows an error message; which one exactly? | the code they see
fact contact    I need a name and number at {customer} for {ref}. || Our counterpart on {ref}: who was that again? | our counterpart
fact sla        Remind me how many hours we have to first reply on {ref}. || Under their contract, by when does {ref} need a first response? | the reply window
fact users      {ref} affects some of {customer}'s staff; how many? || Give me the head count of users impacted by {ref}. | how many users it touches
fact priority   Can you look up the severity level set on {ref}? || {ref} got a priority at triage; which one? | the severity
fact agent      Remind me which of our agents has {ref}. || {ref} is assigned to someone; who? | the assignee
update priority After the escalation, where does {ref} sit in priority? || I need the current severity on {ref}.
update agent    {ref} changed hands; to whom? || When {ref} got reassigned, who picked it up?
event workaround Until the fix lands, how can {customer} get around {ref}? || Remind me of the temporary fix we gave for {ref}. | the temporary fix
event logs      The captured traffic for {ref} points at one API call; which one? || I need the endpoint that breaks in {ref}. | the broken API call
event angry     {customer} keeps chasing {ref}; what's at stake for them? || Not sure I remember why {ref} is so pressing for the customer. | what's at stake
event dupe      Is {ref} the same problem as an existing ticket? Which? || I need the number of the issue {ref} was linked to. | the existing ticket it matches
decision hotfix Remind me how the fix for {ref} is going out. || Are we bundling {ref} into the next version, or doing something else? | the delivery route for the fix
decision credit Did {customer} get anything back for {ref}? || We made a goodwill gesture over {ref}; what was it? | the goodwill gesture
pref phone      Before I send {contact} an update on {ref}, what channel and time suit them? || Remind me of {contact}'s rules for updates on {ref}. | how they want updates
pref cc         When I answer {ref}, which extra address goes in copy? || Does {customer} want someone copied on {ref}? Who? | the extra recipient
sub repro       reproducing the {ticket} fault
  event env       {ref} was reproduced in-house; on what setup? || Remind me which platform we got {ref} to fail on. | the setup it failed on
  fact cause      So what actually causes {ref}? || I need the underlying reason for {ref}. | the underlying reason
sub comms       the note to the customer about {ticket}
  decision eta    Remind me of the deadline we committed to on {ref}. || {customer} was given a fix date for {ref}; which day? | the committed deadline
  event sent      The update on {ref} went to the customer with one colleague in cc; who? || Who on our side was on copy for the {ref} notice? | the colleague in cc
"""

QUESTIONS["en"]["code"] = """
ref     defect {bug} || bug report {bug} || the {service} regression {bug}
ask     Give me the current state of {ref}. || Is {ref} fixed yet, or where is it stuck? || I'd like a progress check on {ref}.
fact file       Remind me where in the codebase {ref} lives. || I need the source file to open for {ref}. | the source file
fact config     {ref} only happens under one configuration; which? || Any idea which switch makes {ref} appear? | the configuration that triggers it
fact commit     I need the hash of the commit that brought in {ref}. || Remind me where {ref} first crept in. | the bad commit
fact latency    Since {ref}, what does p99 look like? || In milliseconds, how much is {ref} costing us? | the p99 figure
fact reviewer   Remind me whose review the {ref} fix is waiting on. || {ref} has a patch; who is going to look it over? | who looks over the patch
fact version    The fix for {ref} should ship in a particular version; which? || I need the planned release number for {ref}. | the planned version
update reviewer The reviewer on {ref} was swapped; to whom? || Remind me who took over the review of {ref}.
update version  The fix for {ref} moved; what version is it on now? || I need the new target release of {ref} after the freeze.
event ci        The build for {ref} failed; what broke? || Which check was it that failed in CI for {ref}? | the broken check
event review    Before the fix for {ref} can be approved, what is still wanted? || Remind me of the review condition on {ref}. | the review condition
event rollback  {ref} forced a rollback; to which version? || What did {service} get put back to over {ref}? | the version restored
event page      Which on-call engineer was woken up about {ref}? || Remind me who was alerted for {ref}. | the on-call engineer
decision flag      Look up the toggle that gates the {ref} fix. || The fix for {ref} ships dark; what turns it on? | the toggle
decision backport  Customers on the old version: do they get the {ref} fix? || Remind me what we decided about backporting {ref}. | what happens on the old version
pref smallpr    Before I open a PR for {ref}, what does {owner} want it to look like? || Does {owner} have a rule on pull request size for {ref}? | the PR rule
pref tests      I'm adding tests for {ref}; which style does {owner} like? || Remind me of {owner}'s testing taste for {ref}. | the preferred testing style
sub tests       the test coverage added for {bug}
  fact cases      How big did the regression suite for {ref} end up? || I need the number of cases written for {ref}. | the size of the suite
  event flaky     The new test for {ref} is unreliable somewhere; on which runners? || Remind me where the {ref} test had to be marked as expected to fail. | the unreliable runners
sub postmortem  the incident review for {bug}
  fact impact     Checkout was degraded by {ref} for how many minutes? || I need the duration of the {ref} incident. | the incident duration
  decision alert  After {ref}, what monitoring did we add? || Remind me of the follow-up alarm from the {ref} incident. | the added monitoring
"""

QUESTIONS["en"]["travel"] = """
ref     journey {trip} || booking {trip} for {event} || {traveler}'s travel booking {trip} || the {city} visit ({trip})
ask     Is everything sorted for {ref} yet? || Give me an update on the bookings for {ref}. || Remind me how far the planning of {ref} has got.
fact hotel      Which hotel was booked for {ref}? || I need the accommodation details for {ref}. | the accommodation
fact flight     Remind me of the flight number for the outbound leg of {ref}. || {traveler} leaves for {ref} on which flight? | the outward flight
fact budget     I need the spending limit for {ref}. || What is {ref} allowed to cost in total? | the spending limit
fact badge      Remind me by what date the passes for {ref} must be collected. || There is a deadline for fetching the event passes on {ref}; which day? | the pass pick-up date
update hotel    After the hotel change, where does {ref} put {traveler} up? || Remind me of the new accommodation on {ref}.
update flight   The original flight on {ref} got cancelled; what's the replacement? || {traveler} was put on another plane for {ref}; which one?
event upgrade   Remind me of the price the airline quoted for a better seat on {ref}. || I need the cost of moving {traveler} up a class on {ref}. | the price of a better seat
event schedule  Something moved in the programme for {ref}; what was it? || The agenda for {ref} shifted; how? | the agenda shift
event insurance Remind me whether we bought cover for {ref}. || I need to know if {ref} has a policy in case something goes wrong. | the cover
decision train  And the return leg of {ref}: how does that work? || For {ref}, is {traveler} flying back or doing something else? | the way home
decision extend Remind me whether {traveler} can stay on after {ref}. || Can {traveler} add a night to {ref}, and who pays? | the extra night
pref seat       Before I book seats for {ref}, what does {traveler} insist on? || Any flying habits of {traveler}'s I should know about for {ref}? | the flying habits
pref near       Remind me what {traveler} wants in terms of location on {ref}. || Picking a place to stay for {ref}: what's {traveler}'s priority? | the location wish
sub ground      getting around {city} on {trip}
  fact pickup     Is anyone collecting {traveler} on arrival for {ref}? Who? || I need the transfer booking from the airport on {ref}. | the arrival transfer
  event rental    Remind me what the car hire firm is waiting for on {ref}. || The rental car for {ref} is blocked on one detail; which? | the missing rental detail
sub visa        the entry documents for {trip}
  event letter    Remind me whether HR has produced the visa invitation for {ref}. || I need to know if the letter {traveler} needs for {ref} exists yet. | the HR letter
  fact docs       The visa application for {ref} is incomplete; what's lacking? || Which papers does the consulate still need for {ref}, do you know? | the paper still lacking
"""

QUESTIONS["en"]["procurement"] = """
ref     procurement request {po} || the {dept} purchase {po} || {po}, the {product} buy || our {product} purchase {po}
ask     Remind me where we are with {ref}. || Is {ref} still stuck, or has it moved on? || I need a status line for {ref}.
fact vendor     Remind me which vendor won {ref} and what they charge. || I need the supplier name and quoted total for {ref}. | the winning vendor
fact date       The goods for {ref} are due on which day? || {ref} has a promised arrival date; what is it? | the due date
fact code       Remind me what cost code {ref} is booked against. || I need the budget code for {ref}. | the cost code
fact warranty   Is there a guarantee on the goods in {ref}? For how long? || For how many years are the items in {ref} covered? | the guarantee period
update vendor   We changed vendors on {ref}; who is it now? || Remind me of the current supplier for {ref}.
update date     Customs held up {ref}; what's the revised delivery day? || Remind me of the new due date for {ref}.
event quote     Look up the alternative bid we got for {ref}. || A second vendor priced {ref} too; at how much? | the alternative bid
event damaged   Remind me what was broken when {ref} arrived. || Some items on {ref} came in bad shape; how many? | the broken items
event invoice   Remind me of the problem with what the vendor charged for {ref}. || The invoice on {ref} doesn't match; by how much is it off? | the overcharge
decision split  What made us ship {ref} in halves? || {ref} comes in two deliveries; what's behind that? | the two-part delivery
decision tender Remind me why there was no competitive bidding on {ref}. || {ref} skipped the formal bid process; on what basis? | why bidding was skipped
pref local      Remind me what {requester} looks for in a supplier for {ref}. || When picking a seller for {ref}, does {requester} have a preference? | the supplier wish
pref color      Look up the finish {dept} wants for {ref}. || Did {dept} specify a colour for {ref}? Which? | the finish
sub approval    the spending sign-off for {po}
  event ask       Remind me what the approver pushed back on for {ref}. || The approver had a concern about {ref}; what was it? | the approver's concern
  fact signoff    Remind me who has to sign {ref}, given its size. || Because of the amount, whose signature does {ref} need? | the signature needed
sub receiving   checking in the goods of {po}
  event count     Remind me how many cartons were counted for {ref}. || At the dock, what did the count for {ref} come to? | the carton count
  fact serials    Can you find the asset register entry for {ref}? || I need the record the serials of {ref} went into. | the register entry
"""

QUESTIONS["en"]["hiring"] = """
ref     job {req} || vacancy {req} || the {city} {role} search ({req}) || {manager}'s open headcount {req}
ask     Remind me where we've got to with {ref}. || Is {ref} close to being filled? || I need the current stage of {ref}.
fact idate      Remind me of the date and time of {candidate}'s onsite for {ref}. || {candidate} is interviewing for {ref}; on which day? | the onsite slot
fact salary     What's the top of the pay range for {ref}, again? || I need the maximum salary budgeted for {ref}. | the top of the pay range
fact referral   Remind me who put the candidate for {ref} forward. || The candidate on {ref} came through an employee; which one? | who put them forward
fact notice     Remind me how long {candidate} has to stay at the old job before joining {ref}. || I need {candidate}'s notice length for {ref}. | the notice length
update idate    The onsite for {ref} was rescheduled; to when? || Remind me of the moved interview slot on {ref}.
update salary   After the market adjustment, what's the maximum we can offer on {ref}? || Remind me of the revised top salary for {ref}.
event score     Do you have {candidate}'s system design result for {ref}? || What mark did {candidate} get from the design interview for {ref}? | the design mark
event counter   {candidate} hasn't said yes to {ref}; what's holding things up? || Remind me why {candidate} needs more time on {ref}. | what is holding them up
event refcheck  Remind me how {candidate}'s former manager described them for {ref}. || The background check for {ref} came back; what was the feedback on {candidate}? | the former manager's feedback
decision reject What kept {rival} out of the next round of {ref}? || {rival} was dropped from {ref}; on what grounds? | why they were dropped
decision remote Remind me how many office days the hire on {ref} needs. || Can whoever takes {ref} work from home, and how often? | the home-working terms
pref takehome   Did {manager} set a time limit for the {ref} homework task? How long? || I'm writing the exercise for {ref}; how long can it take? | the exercise time limit
pref call       Remind me of the hours {candidate} can be reached about {ref}. || I need to ring {candidate} about {ref}; when is best? | the best time to ring
sub loop        {candidate}'s interview day for {req}
  fact panel      Which colleagues are interviewing {candidate} for {ref}? || I need the list of interviewers meeting {candidate} on {ref}. | the interviewers
  event room      Remind me which meeting room is booked for {candidate} on {ref}. || {candidate} comes in for {ref}; in what room? | the meeting room
sub offer       {candidate}'s offer package for {req}
  decision bonus  Remind me what sweetener we added to the {ref} offer. || Is there a one-off payment in the offer for {ref}? How much? | the one-off payment
  event approved  Remind me whose approval the {ref} offer letter got. || The offer for {ref} was approved; by whom, and when? | the offer approver
"""

# ---------------------------------------------------------------- held-out questions, zh

QUESTIONS["zh"]["expense"] = """
ref     {claim} 号报销 || {person}报的那笔 {claim} || 单号 {claim} 的报销申请 || {person}在{city}的费用报销（{claim}）
ask     帮我看看{ref}办得怎么样了。 || {ref}有新进展没有？ || 之前提交的{ref}，批到哪儿了来着？
fact amount     帮我查一下{ref}的发票总额。 || {ref}的票面金额是多少来着？ | 票面金额
fact manager    {ref}得找哪位领导签字？ || 提醒我一下，{ref}是谁负责把关的。 | 签字的领导
fact limit      按公司标准，{ref}一天最多能报多少？ || 帮我查下{ref}的每天报销上限。 | 每天的上限
fact client     {ref}这笔招待，对象是哪个客户来着？ || 帮我确认一下{ref}跟哪家公司有关。 | 招待的客户
update amount   {ref}重新扫描后改成多少钱了？ || 帮我查一下{ref}最新的报销数额。
update manager  原来的审批人不在，{ref}转给谁批了？ || 提醒我{ref}换成哪位领导签字了。
event returned  {ref}被打回过一次，原因是啥来着？ || 帮我查一下财务退{ref}的理由。 | 被打回的理由
event reupload  {person}后来怎么补救{claim}的发票问题的？ || 提醒我一下，{ref}被退以后{person}重新交了什么。 | 重新提交的材料
event overlap   {ref}里有张票重复报了，跟的是哪一单？ || 帮我找一下和{ref}票据重复的那张单号。 | 撞票的另一张单
event missing   {ref}的票据还没齐，差的是哪一张来着？ || 帮我查查{ref}少交了什么票。 | 没交上来的那张票
decision split     之前说把{ref}分开报，是出于什么考虑？ || 提醒我一下{ref}分两张单提交的理由。 | 分开报的考虑
decision escalate  {ref}一直没人批，最后报给了哪位领导？ || 帮我确认{ref}往上报的对象和原因。 | 上报的领导
pref notify     {ref}有了结果，用什么方式告诉{person}比较好？ || 提醒我{person}希望怎么收到{claim}的消息。 | 联系方式偏好
pref card       {ref}批下来以后，款打到哪里来着？ || 帮我查一下{person}给{claim}留的收款卡。 | 打款的卡
sub receipts    {claim} 缺票的补交
  event folio     {ref}的住宿账单是请哪家酒店发的？ || 提醒我一下，{ref}那张水单找的是哪个酒店前台。 | 发账单的酒店
  fact count      帮我数一下{ref}还有多少张票没到。 || {ref}未交的票据是几张来着？ | 没到的票数
  decision stmt   {ref}的打车票丢了，拿什么顶替？ || 之前说的{ref}丢票的办法是哪个？ | 顶替丢票的材料
sub fx          {claim} 里外币部分的折算
  fact rate       {ref}的欧元按什么比价折算的？ || 帮我查一下{ref}换算用的牌价。 | 折算比价
  event fee       银行在{ref}的外币消费上收了多少费用来着？ || 提醒我{ref}被银行额外扣的那笔。 | 银行扣的费用
"""

QUESTIONS["zh"]["support"] = """
ref     {ticket} 号工单 || {customer}报的 {ticket} || 客户{customer}的问题单 {ticket} || {feature}故障单 {ticket}
ask     帮我看下{ref}的最新进展。 || {ref}有眉目了没有？ || 跟我说说{ref}进行到哪个阶段了。
fact error      {ref}报的是哪个错来着？ || 帮我查一下{customer}在{ref}中遇到的报错代码。 | 报错代码
fact contact    {ref}在{customer}那边找谁沟通？ || 给我{ref}客户方联系人的名字和电话。 | 客户方联系人
fact sla        按合同，{ref}几个小时内必须首次回复？ || 提醒我一下{ref}首响的时间要求。 | 首响要求
fact users      {ref}影响到{customer}多少个用户？ || 帮我查一下{ref}涉及的用户数量。 | 涉及的用户数
fact priority   {ref}当初定的紧急程度是哪一档？ || 提醒我{ref}的级别定的是多少。 | 紧急程度
fact agent      {ref}是分给哪位同事的？ || 帮我查一下{ref}的负责人。 | 负责的同事
update priority {ref}升级之后排到哪一档了？ || 帮我确认{ref}目前的紧急级别。
update agent    {ref}转手给了哪位？ || 提醒我一下{ref}重新分配后的处理人。
event workaround 修复出来之前，{ref}有什么应急办法？ || 之前教{customer}绕开{ref}的方法是哪个？ | 应急办法
event logs      {ref}抓包里失败的请求是哪一个？ || 帮我查一下{ref}挂在哪个 API 上。 | 失败的请求
event angry     {customer}一直催{ref}，主要担心什么？ || 提醒我{ref}对客户影响最大的是哪件事。 | 客户的顾虑
event dupe      {ref}是不是和以前的某个单子重复了？哪一个？ || 帮我查一下{ref}挂靠的那个老问题单号。 | 重复的老单号
decision hotfix {ref}的补丁打算怎么发出去？ || 提醒我一下{ref}修复的上线方式。 | 补丁的上线方式
decision credit {customer}因为{ref}拿到了什么赔偿？ || 帮我确认{ref}的补偿是怎么定的。 | 赔偿
pref phone      给{contact}同步{ref}，用什么方式、什么时间合适？ || 提醒我{contact}对{ref}的沟通有什么讲究。 | 同步方式
pref cc         回复{ref}的时候，还得加上哪个邮箱？ || 帮我查一下{customer}对{ref}邮件抄送的规定。 | 要加的邮箱
sub repro       {ticket} 故障的重现
  event env       {ref}是在哪个平台上重现的？ || 提醒我一下我们用什么环境把{ref}跑出来的。 | 重现用的平台
  fact cause      帮我查一下{ref}背后的根本问题。 || {ref}的故障是怎么引起的来着？ | 根本问题
sub comms       给客户的 {ticket} 说明
  decision eta    我们给{customer}承诺的{ref}修复日期是哪天？ || 提醒我{ref}对外说的完成期限。 | 对外的期限
  event sent      {ref}的说明邮件还同时发给了哪位同事？ || 帮我确认{ref}通报的抄送对象。 | 同时收到的同事
"""

QUESTIONS["zh"]["code"] = """
ref     {bug} 号问题 || {service} 上的故障 {bug} || 线上问题 {bug}
ask     帮我看看{ref}修好没有。 || 跟我说一下{ref}的处理进度。 || {ref}那边的工作推进到什么程度了？
fact file       帮我找一下{ref}对应的源文件。 || {ref}得去哪个源码文件里改？ | 对应的源文件
fact config     {ref}只在某个配置下冒出来，是哪个？ || 提醒我一下{ref}复现需要的配置项。 | 相关配置项
fact commit     帮我查一下引入{ref}的那个 commit。 || {ref}最早是从哪次改动开始有的？ | 出问题的 commit
fact latency    {ref}之后尾延迟变成多少了？ || 提醒我{ref}对响应时间的影响有多大。 | 尾延迟
fact reviewer   {ref}的修复等着哪位评审？ || 提醒我一下{ref}的 PR 是交给谁看的。 | 看 PR 的人
fact version    帮我查下{ref}计划随哪个版本发布。 || {ref}的修复排进的是哪一版来着？ | 计划版本
update reviewer {ref}换了评审，现在是哪位？ || 提醒我{ref}的评审改成谁了。
update version  发版冻结以后，{ref}挪到哪一版了？ || 帮我确认{ref}新的目标版本。
event ci        {ref}那个 PR 的构建失败，是哪个用例的问题？ || 提醒我{ref}的 CI 红在哪里。 | 构建失败的用例
event review    {ref}的修复要批准，还差什么？ || 提醒我一下{ref}评审时被要求补的东西。 | 批准前要补的东西
event rollback  {ref}出事后 {service} 回滚到哪一版了？ || 帮我查一下{ref}导致回退的目标版本。 | 回退到的版本
event page      {ref}当时叫醒的是哪位 on-call？ || 提醒我为{ref}响应告警的值班同事。 | 响应的值班同事
decision flag      {ref}的修复默认关着，要怎么打开？ || 帮我查一下打开{ref}修复的那个开关名。 | 控制开关
decision backport  用旧版本的客户能拿到{ref}的修复吗？ || 提醒我之前关于{ref}回合的结论。 | 旧版本怎么处理
pref smallpr    给{ref}提 PR 之前，{owner}有什么规矩要注意？ || 提醒我{owner}对{ref}这类改动的 PR 大小的要求。 | 提 PR 的规矩
pref tests      {owner}希望{ref}的测试怎么组织？ || 提醒我一下{owner}喜欢的测试写法，{ref}要用。 | 喜欢的测试写法
sub tests       {bug} 的防复发用例
  fact cases      帮我查一下为{ref}写了几个回归用例。 || {ref}的回归集一共多少条来着？ | 回归用例条数
  event flaky     {ref}新加的用例在哪种构建机上时好时坏？ || 提醒我{ref}的测试被标成 xfail 的那个环境。 | 时好时坏的构建机
sub postmortem  {bug} 事故回顾
  fact impact     {ref}让结算降级了几分钟？ || 帮我查一下{ref}那次事故的持续时间。 | 降级时长
  decision alert  {ref}之后监控上补了哪条规则？ || 提醒我{ref}事故回顾里定的告警阈值。 | 补的监控规则
"""

QUESTIONS["zh"]["travel"] = """
ref     行程 {trip} || {traveler}这趟差旅 {trip} || 去{event}的那次出差（{trip}） || {trip} 号差旅申请
ask     帮我看看{ref}都订妥了没有。 || {ref}还差哪些没办完？ || 跟我说说{ref}准备到哪一步了。
fact hotel      {ref}的住宿订在哪家来着？ || 帮我查一下{traveler}在{ref}期间落脚的酒店。 | 落脚的酒店
fact flight     帮我查一下{ref}出发那程的航班号。 || {traveler}为{ref}飞过去，坐的是哪一班来着？ | 出发的航班号
fact budget     {ref}最多能花多少钱？ || 提醒我一下{ref}的差旅费用额度。 | 费用额度
fact badge      {ref}的胸牌得在哪天之前去拿？ || 提醒我{ref}领证件的截止日期。 | 领证截止日
update hotel    {ref}的酒店换了以后住哪儿？ || 帮我确认{ref}改订后的住处。
update flight   原航班取消后，{ref}改成了哪一班？ || 提醒我{traveler}为{ref}改签后的航班。
event upgrade   航司给{ref}开的换舱位价格是多少来着？ || 帮我查一下{traveler}在{ref}换更好的座位要加多少钱。 | 加价金额
event schedule  {ref}那个会的议程调整了什么？ || 提醒我主办方为{ref}改动的安排。 | 议程调整
event insurance 帮我确认{ref}有没有上旅行险。 || {ref}出了意外有保障吗？ | 旅行险
decision train  {traveler}从{ref}回来坐什么交通工具？ || 提醒我{ref}回程定的出行方式。 | 回程交通
decision extend {traveler}在{ref}结束后能多待一晚吗？费用谁出？ || 提醒我{ref}多住一晚是怎么定的。 | 多住一晚的安排
pref seat       给{ref}选座前，{traveler}有什么忌讳？ || 提醒我{traveler}坐飞机的习惯，{ref}要用。 | 坐飞机的习惯
pref near       {traveler}对{ref}住处的位置有什么要求？ || 提醒我一下{ref}订酒店要照顾{traveler}哪点。 | 位置要求
sub ground      {trip} 在{city}的出行安排
  fact pickup     {ref}下飞机后，接{traveler}的车是哪家约的？ || 帮我查一下{ref}接机的车和时间。 | 接机的车
  event rental    {ref}的租车手续还缺什么信息？ || 提醒我{city}租车柜台为{ref}要的东西。 | 租车还缺的信息
sub expo        {trip} 参会要带的资料
  event slides    帮我确认{traveler}为{ref}准备的讲稿有没有提交。 || {ref}的演讲材料送审了吗？ | 讲稿
  fact stand      {ref}的摊位编号是多少来着？ || 提醒我{ref}布展用的展位。 | 摊位编号
"""

QUESTIONS["zh"]["procurement"] = """
ref     {po} 号订单 || {dept}申请的采购 {po} || 买{product}的那单（{po}） || 采购申请 {po}
ask     帮我看下{ref}目前办到哪了。 || {ref}有没有新动静？ || 提醒我一下{ref}的整体进度。
fact vendor     {ref}最后定的是谁家，总价多少来着？ || 帮我查一下{ref}中标的厂商和报价。 | 中标厂商
fact date       {ref}的货说好几号送到？ || 提醒我{ref}的到货日期。 | 到货日期
fact code       {ref}的费用记在哪个科目下？ || 帮我查一下{ref}挂的成本中心代码。 | 成本中心代码
fact warranty   {ref}里的东西坏了，几年内能免费修？ || 提醒我{ref}的保修年限。 | 保修年限
update vendor   {ref}后来改由谁家供货了？ || 帮我确认{ref}目前的供货方。
update date     {ref}被海关耽误后，改到几号送？ || 提醒我{ref}推迟后的交期。
event quote     帮我查一下{ref}比价时另一家开的价。 || {ref}的备选报价是多少来着？ | 备选报价
event damaged   {ref}送来的货有几件坏了？ || 提醒我{ref}收货时发现的损坏情况。 | 损坏情况
event invoice   {ref}开票金额和报价对不上，差在哪？ || 帮我查一下{ref}多开的那张票。 | 开票差额
decision split  {ref}分两次交货，是照顾谁的需要？ || 提醒我一下{ref}拆成两次送的理由。 | 分批交货的考虑
decision tender {ref}没走招标流程，依据是什么？ || 提醒我{ref}免招标的原因。 | 免招标的依据
pref local      {requester}希望{ref}找什么样的商家？ || 提醒我一下{requester}对{ref}供货方的倾向。 | 对商家的要求
pref color      {dept}对{ref}的外观颜色有指定吗？是哪种？ || 帮我确认{ref}的货要哪种配色。 | 配色
sub approval    {po} 的资金审批
  event ask       {ref}审批时被问到了什么？ || 提醒我审批人对{ref}的顾虑。 | 审批人的顾虑
  fact signoff    {ref}金额较大，得哪位领导签？ || 帮我查一下{ref}最终要谁批准。 | 需要的签批
sub receiving   {po} 的收货清点
  event count     仓库清点{ref}时一共数出多少箱？ || 提醒我{ref}的实收箱数。 | 实收箱数
  fact serials    {ref}的设备序列号登记在哪个台账编号下？ || 帮我找一下{ref}入账的资产记录。 | 资产记录
"""

QUESTIONS["zh"]["hiring"] = """
ref     职位 {req} || {city}的{role}空缺（{req}） || {manager}那边的招聘单 {req} || {req} 号岗位
ask     帮我看看{ref}招到哪一步了。 || {ref}离招满还差多远？ || 跟我说说{ref}最近的情况。
fact idate      {candidate}的{ref}现场面试约在什么时候？ || 提醒我{candidate}来公司面{ref}的日子。 | 到场面试的日子
fact salary     {ref}的薪酬预算顶到多少？ || 提醒我一下{ref}能开的最高年薪。 | 最高薪酬
fact referral   {ref}这位候选人是哪位同事内推的？ || 帮我查下{ref}候选人的推荐来源。 | 推荐来源
fact notice     {candidate}离职得提前多久通知原公司？{ref}要算进去。 || 提醒我{candidate}加入{ref}前的离职交接期。 | 离职交接期
update idate    {ref}的面试延期后定在哪天了？ || 提醒我{ref}重新约的面试日期。
update salary   为贴近市场，{ref}的薪资上限调到多少了？ || 帮我确认{ref}上调后的最高薪资。
event score     {candidate}在{ref}系统设计那轮拿了几分？ || 提醒我{ref}设计面对{candidate}的打分。 | 系统设计得分
event counter   {candidate}还没接{ref}的 offer，卡在哪儿？ || 提醒我{candidate}要多考虑几天的原因（{ref}）。 | 迟迟不答复的原因
event refcheck  {ref}候选人的前上司是怎么说的？ || 帮我查一下{ref}背景调查的反馈。 | 背景调查反馈
decision reject {rival}在{ref}没进下一轮，是卡在哪？ || 提醒我刷掉{rival}（{ref}）的理由。 | 没进下一轮的理由
decision remote {ref}招进来的人一周能在家办公几天？ || 提醒我{ref}居家办公的约定。 | 居家办公约定
pref takehome   出给{ref}候选人的题，{manager}说最多能做多久？ || 帮我确认{ref}的书面作业要控制在多久内。 | 笔试时长限制
pref call       {candidate}几点以后才方便接{ref}的电话？ || 提醒我联系{candidate}（{ref}）要避开的时间。 | 方便接电话的时间
sub loop        {candidate}参加 {req} 面试的日程
  fact panel      {candidate}这场{ref}的面试官都有谁？ || 帮我列一下面{candidate}的人（{ref}）。 | 面试官名单
  event room      {ref}给{candidate}订的是哪间会议室？ || 提醒我{candidate}来{ref}现场面试的房间号。 | 会议室
sub offer       {candidate}的录用条件（{req}）
  decision bonus  {ref}给出的 offer 有没有一次性奖励？多少？ || 提醒我{ref}录用方案里的额外补贴。 | 一次性奖励
  event approved  {ref}的录用通知是哪位领导签批的？ || 帮我查一下{ref}的 offer 哪天、由谁批准。 | 签批的领导
"""

# ---------------------------------------------------------------- new domains, en

NEW_DOMAINS: dict[str, dict[str, str]] = {"en": {}, "zh": {}}

NEW_DOMAINS["en"]["move"] = """
slots   move=@MOV lead=name mover=company movedate=date inspect=date quote=price deposit=price
title   Office move {move}: {dept} leaves {site} for a new floor in {city}
ref     move {move} || {dept}'s office move {move} || the {city} relocation ({move})
ask     Where does {ref} stand? || What is still open on {ref}? || How close is {ref} to moving day?
state   Move {move}: kicked off, taking an inventory of {site}
state   Move {move}: floor plan agreed, movers being booked
state   Move {move}: packing under way, crates delivered
state   Move {move}: moved in, working through the snag list
state   Move {move}: old premises handed back, closed
fact mover      Movers for {move}: {mover}, quote {quote} including packing and crates | Which removal firm is doing {ref}, and for how much? || Who did we hire to carry things on {ref}? | the removal firm
fact movedate   Moving day for {move} is {movedate}; the crew starts at 7 am || {move} moves on {movedate}, crew on site from 7 am | When is moving day for {ref}? || On what date do the boxes go for {ref}? | the moving day
fact floor      {dept} gets the desks around room {room} on the new floor after {move} | Where will {dept} sit after {ref}? | the new seating area
fact budget     {move} has a budget of {budget}, booked to cost centre {code} | How much may {ref} spend, and who pays? | the budget
fact crates     {qty} crates ordered for {move}, one per person plus spares | How many crates were ordered for {ref}? | the crate count
fact lead       {lead} coordinates {move} for {dept}, phone {phone} | Who is running {ref} on the {dept} side? || Remind me who our coordinator is on {ref}. | the coordinator
update mover    Switched the movers for {move} to {mover}: {old} had no crew free that week | Which firm is moving us on {ref} now?
update movedate Moving day for {move} moved to {movedate} (was {old}): the goods lift is taken on the old date | What is the new moving day for {ref}?
event lift      Building management reserved the goods lift for {move} for the whole morning | What did building management arrange for {ref}? | the lift booking
event network   IT found no network points in the new meeting rooms for {move} || The new meeting rooms for {move} have no network points, IT says | What problem did IT find on the new floor for {ref}? | the network gap
event damage    {n} monitors arrived scratched after {move}; a claim is filed with the movers | What got damaged during {ref}? | the damage
event badges    Access badges for the new floor will be ready on {date} for {move} | When can people get into the new floor for {ref}? | the badge date
decision weekend Decided to run {move} over a weekend so nobody loses a working day | Why is {ref} happening at the weekend? | the weekend plan
decision desks  Old desks stay behind for {move}: the landlord disposes of them for {fee} | What happens to the old furniture in {ref}? | the old desks
pref window     {dept} asked to sit by the windows, away from the kitchen, after {move} | Where does {dept} want to be seated after {ref}? | the seating wish
pref labels     {lead} wants every crate in {move} labelled with the owner and the new desk number | How does {lead} want the crates for {ref} marked? | the labelling rule
routine         Walked the new floor for {move} at {time}: painters still at work
routine         Updated the seating plan for {move} at {time}
summary         Wrap-up for {move}: {dept} settled in, {n} snags fixed
sub it          Move the IT equipment for {move} | the IT side of {move}
  fact switch     The core switch for {move} is asset {asset}; it goes first, the evening before | Which piece of network kit leads the way in {ref}? | the core switch
  decision servers Servers for {move} travel a day early with a specialist courier, not with the movers | How are the servers getting across in {ref}? | the server transport
  event wifi      Wi-Fi survey of the new floor for {move}: weak signal by the stairs, {n} extra access points needed | What did the wireless survey for {ref} find? | the Wi-Fi survey
sub handback    Hand back the old premises for {move} | the handback of {site} after {move}
  event inspect   The landlord's final inspection of {site} for {move} is on {inspect} | When does the landlord walk through the old space for {ref}? | the inspection date
  fact deposit    The deposit on {site} for {move} is {deposit}, returned after the inspection | How much money comes back to us from the landlord after {ref}? | the deposit
  decision paint  Agreed to repaint the old office walls ourselves before handing it back for {move} | Who is doing the repainting for {ref}? | the repainting
"""

NEW_DOMAINS["en"]["migration"] = """
slots   mig=@MIG customer=company contact=name engineer=name cutover=date
title   Data migration {mig}: moving {customer}'s records into {service}
ref     migration {mig} || {customer}'s migration {mig} || the {service} data move {mig}
ask     Where does {ref} stand? || What is blocking {ref} right now? || How far along is {ref}?
state   Migration {mig}: scoping, sample export requested from {customer}
state   Migration {mig}: field mapping drafted, dry run scheduled
state   Migration {mig}: dry runs passing, cut-over being planned
state   Migration {mig}: cut over, the old system is read-only
state   Migration {mig}: signed off by {customer} and closed
fact volume     {mig} covers about {qty} thousand customer records plus their order history | How much data does {ref} have to move? | the data volume
fact cutover    Cut-over for {mig} is set for {cutover}, starting at 22:00 || {mig} cuts over on {cutover} at 22:00 | When is the switch-over night for {ref}? || Remind me of the go-live date of {ref}. | the cut-over date
fact contact    {customer}'s contact for {mig} is {contact}, phone {phone} | Who is our person at {customer} for {ref}? | the customer contact
fact engineer   {engineer} runs the migration scripts for {mig} | Who is at the keyboard running {ref}? | the engineer
fact errors     Dry run for {mig}: {percent}% of records failed validation, mostly bad postcodes | What share of rows were rejected in the trial of {ref}? | the failure rate
fact format     {customer} exports the {mig} data as CSV files in Latin-1, not UTF-8 | What character set do the files for {ref} come in? | the file encoding
update cutover  Cut-over for {mig} moved to {cutover} (was {old}) because of {customer}'s quarter-end freeze | What is the new cut-over date for {ref}?
update engineer {engineer} took over the scripts for {mig} from {old}, who changed teams | Who runs the scripts for {ref} now?
event timeout   The bulk load for {mig} timed out with {error} after {mins} minutes | What error stopped the bulk load of {ref}? | the load error
event dupes     The dedup pass for {mig} found {n} duplicate customer accounts | How many doubles turned up in {ref}? | the duplicates
event sample    {contact} sent a sample export for {mig}; the date fields are day-first || The sample file for {mig} from {contact} writes dates day first | What did the sample export for {ref} reveal about dates? | the date format
decision freeze Decided to freeze writes in the old system for {hours} hours during the {mig} cut-over | How long is the old system closed for writing during {ref}? | the write freeze
decision keep   The old system stays read-only for {weeks} weeks after {mig}, then it is switched off | How long does the old system stay around after {ref}? | the read-only period
pref report     {contact} wants a short status email on {mig} every day at 5 pm | How does {contact} want to be kept up to date on {ref}? | the status reports
pref secure     {customer}'s security team requires the {mig} files over SFTP only, never by email | How must files for {ref} be exchanged? | the transfer rule
routine         Checked the {mig} staging database at {time}: row counts unchanged
routine         Re-ran the {mig} validation report at {time}
summary         Wrap-up for {mig}: {customer} is live on {service} after {n} dry runs
sub mapping     Map {customer}'s fields to the new schema for {mig} | the field mapping for {mig}
  fact fields     The mapping for {mig} has {n} fields with no match in {service} | How many source columns in {ref} have nowhere to go? | the unmatched fields
  decision notes  Free-text notes in {mig} go into one comments field instead of being split | What happens to the free-text notes in {ref}? | the notes rule
sub rollback    Plan the rollback for {mig} | the rollback plan for {mig}
  fact backup     A full backup for {mig} is taken at 21:00 on cut-over day and kept {days} days | How long is the safety copy for {ref} retained? | the backup retention
  event drill     The rollback drill for {mig} took {mins} minutes end to end | How long did the rollback rehearsal for {ref} take? | the rollback time
"""

NEW_DOMAINS["en"]["event"] = """
slots   evt=@EVT host=name caterer=merchant venue=hotel speaker=name guest=company contact=name evdate=date attendees=qty invited=qty perhead=fee avfee=fee
title   Customer event {evt}: {dept} hosts a workshop for {guest} in {city}
ref     event {evt} || the {guest} workshop ({evt}) || {dept}'s customer event {evt}
ask     Where does {ref} stand? || What is still to be organised for {ref}? || How ready is {ref}?
state   Event {evt}: agenda drafted, venues shortlisted
state   Event {evt}: venue booked, invitations out
state   Event {evt}: registration closed, final numbers sent to the venue
state   Event {evt}: held; feedback survey sent to attendees
state   Event {evt}: invoices paid, closed
fact venue      {evt} takes place at the {venue} in {city}, in the main function room | Where is {ref} being held? || Which hotel hosts {ref}? | the venue
fact evdate     {evt} runs on {evdate}, from 9:30 to 16:00 | On what day does {ref} take place? | the event date
fact attendees  {attendees} guests have registered for {evt} | How many people are coming to {ref}? | the headcount
fact budget     Budget for {evt}: {budget}, covering the room, food and AV | What can we spend on {ref}? | the budget
fact speaker    {speaker} from {guest} gives the opening talk at {evt} | Who opens {ref} on stage? | the opening speaker
update venue    {evt} moved to the {venue}: the {old} double-booked the room | Which venue is {ref} in now?
update evdate   {evt} postponed to {evdate} (was {old}) so that {guest}'s board can attend | On what day does {ref} happen now?
event catering  Catering for {evt} ordered from {caterer} at {perhead} per head | Who is doing the food for {ref}? | the caterer
event av        The AV check for {evt} found a single projector; a second one is rented for {avfee} | What did the AV check for {ref} turn up? | the AV problem
event diet      {n} guests at {evt} need vegetarian or halal meals | How many special meals does {ref} need? | the dietary requests
event shuttle   The shuttle from the station to {evt} is booked with {cab} | How are guests getting from the station to {ref}? | the shuttle
decision dinner Decided to skip the evening dinner at {evt} and hold a longer lunch instead | Is there a dinner at {ref}? | the dinner decision
decision record The talks at {evt} will be recorded but shared only with {guest} | Will the sessions at {ref} be filmed, and who gets them? | the recording
pref seating    {host} wants round tables at {evt}, not theatre rows | How does {host} want the room set up for {ref}? | the room layout
pref gifts      {guest} asked that {evt} hands out no branded giveaways | What did {guest} ask about giveaways at {ref}? | the giveaway rule
routine         Checked registrations for {evt} at {time}: a few new sign-ups
routine         Sent the speakers of {evt} a reminder at {time}
summary         Wrap-up for {evt}: {n} follow-up meetings booked with {guest}
sub invites     Send the invitations for {evt} | the invitations for {evt}
  fact invited    The invite list for {evt} has {invited} names, approved by {host} | How many were invited to {ref}? | the invite count
  event bounce    {n} invitations for {evt} bounced; {contact} is sending corrected addresses | Who is fixing the bounced invitations for {ref}? | the bounced invites
sub agenda      Build the agenda for {evt} | the agenda of {evt}
  fact handson    The hands-on session at {evt} starts at {dtime}, right after lunch | When does the hands-on session at {ref} start? | the hands-on slot
  decision panel  Replaced the afternoon keynote at {evt} with a customer panel | What replaced the afternoon keynote at {ref}? | the customer panel
"""

# ---------------------------------------------------------------- new domains, zh

NEW_DOMAINS["zh"]["move"] = """
slots   move=@MOV lead=name mover=company movedate=date inspect=date quote=price deposit=price
title   搬迁 {move}：{dept}从{site}搬到{city}的新办公楼
ref     搬迁项目 {move} || {dept}的搬家（{move}） || {city}新址搬迁 {move}
ask     {ref}准备得怎么样了？ || {ref}离搬家那天还有哪些事没办？ || {ref}目前是什么情况？
state   搬迁 {move}：已启动，正在盘点{site}的物品
state   搬迁 {move}：新工位布局已确认，正在找搬家公司
state   搬迁 {move}：开始打包，周转箱已送到
state   搬迁 {move}：已入驻新址，正在处理遗留问题
state   搬迁 {move}：旧场地已交还，项目结束
fact mover      {move} 的搬家公司定了{mover}，报价 {quote}，打包和周转箱都包含在内 | {ref}请的是哪家搬家公司？花多少钱？ || {ref}找谁来搬？ | 搬家公司
fact movedate   {move} 定在{movedate}搬，师傅早上 7 点进场 || {movedate}正式搬家，{move} 的工人 7 点到 | {ref}哪天正式搬？ || {ref}的搬家日子是哪天来着？ | 搬家日期
fact floor      搬完后{dept}坐新楼层 {room} 会议室旁边那一片（{move}） | {ref}之后{dept}坐在哪一块？ | 新工位区域
fact budget     {move} 预算 {budget}，记在成本中心 {code} 下 | {ref}能花多少钱，从哪出？ | 预算
fact crates     为 {move} 订了 {qty} 个周转箱，每人一个，另有备用 | {ref}一共订了多少个箱子？ | 箱子数量
fact lead       {dept}这边牵头 {move} 的是{lead}，电话 {phone} | {dept}由谁负责协调{ref}？ || {ref}有事该找谁？ | 牵头人
update mover    {move} 改请{mover}来搬：{old}那周排不出人手 | {ref}现在由哪家公司来搬？
update movedate {move} 改到{movedate}搬（原定{old}）：原来那天货梯被别人订了 | {ref}改到哪天搬了？
event lift      物业同意 {move} 当天整个上午专用货梯 | 物业为{ref}做了什么安排？ | 货梯安排
event network   IT 发现 {move} 新楼层的会议室没有网口 || 据 IT 反馈，{move} 新址的会议室里没有网络接口 | IT 在{ref}的新楼层发现了什么问题？ | 网络问题
event damage    {move} 搬完后有 {n} 台显示器被刮花，已向搬家公司索赔 | {ref}搬坏了什么东西？ | 损坏情况
event badges    {move} 新楼层的门禁卡{date}能做好 | 大家什么时候能刷卡进{ref}的新楼层？ | 门禁卡日期
decision weekend 决定 {move} 放在周末搬，不耽误大家上班 | {ref}为什么挑周末？ | 周末搬的安排
decision desks  旧办公桌不搬了，由房东代为清运，收费 {fee}（{move}） | {ref}的旧家具怎么处理？ | 旧桌子的去向
pref window     {dept}希望 {move} 后坐在靠窗的位置，离茶水间远一点 | {dept}对{ref}之后的座位有什么想法？ | 座位要求
pref labels     {lead}要求 {move} 的每个箱子都贴上主人姓名和新工位号 | {lead}希望{ref}的箱子怎么做标记？ | 贴标签的规矩
routine         {time} 去新楼层看了一下 {move} 的进度：还在刷墙
routine         {time} 更新了 {move} 的座位表
summary         {move} 收尾：{dept}已在新址安顿下来，遗留问题处理了 {n} 项
sub it          搬运 {move} 的 IT 设备 | {move} 的 IT 搬迁
  fact switch     {move} 的核心交换机资产编号 {asset}，提前一晚先搬 | {ref}里哪台网络设备要打头阵？ | 核心交换机
  decision servers {move} 的服务器交给专业运输公司提前一天运，不跟搬家公司走 | {ref}的服务器怎么运过去？ | 服务器运输方式
  event wifi      {move} 新楼层无线测试：楼梯间信号弱，需加装 {n} 个 AP | {ref}的无线测试查出了什么？ | 无线测试结果
sub handback    交还 {move} 的旧场地 | {move} 旧场地的交还
  event inspect   房东{inspect}来验收{site}的旧场地（{move}） | 房东哪天来检查{ref}腾出的地方？ | 验收日期
  fact deposit    {site}的押金 {deposit}，验收后退还（{move}） | {ref}结束后房东要退我们多少钱？ | 押金
  decision paint  决定 {move} 交还前自己找人把旧办公室的墙重新刷一遍 | {ref}的旧墙谁来刷？ | 刷墙安排
"""

NEW_DOMAINS["zh"]["migration"] = """
slots   mig=@MIG customer=company contact=name engineer=name cutover=date
title   数据迁移 {mig}：把{customer}的历史数据迁到 {service}
ref     迁移项目 {mig} || {customer}的数据迁移 {mig} || {mig} 这次迁移
ask     {ref}推进到哪了？ || {ref}现在卡在什么地方？ || {ref}还差哪些工作？
state   迁移 {mig}：梳理范围，已向{customer}要样例数据
state   迁移 {mig}：字段映射初稿完成，安排试迁移
state   迁移 {mig}：试迁移通过，正在排切换计划
state   迁移 {mig}：已切换，旧系统改为只读
state   迁移 {mig}：{customer}验收签字，项目关闭
fact volume     {mig} 要迁约 {qty} 万条客户记录，外加订单历史 | {ref}的数据量有多大？ | 数据量
fact cutover    {mig} 的正式切换定在{cutover}晚上 10 点 || {cutover}晚 10 点做 {mig} 的切换 | {ref}哪天晚上上线？ || {ref}的切换日是哪天来着？ | 切换日期
fact contact    {customer}负责 {mig} 的是{contact}，电话 {phone} | {customer}那边{ref}找谁对接？ | 客户联系人
fact engineer   {mig} 的迁移脚本由{engineer}负责跑 | {ref}的脚本是谁在操作？ | 执行工程师
fact errors     {mig} 试迁移：{percent}% 的记录校验失败，大多是邮编格式不对 | {ref}试跑时有多少比例的数据没通过？ | 失败率
fact format     {customer}导出的 {mig} 数据是 GBK 编码的 CSV，不是 UTF-8 | {ref}收到的文件用的什么字符集？ | 文件编码
update cutover  {mig} 切换推迟到{cutover}（原定{old}），因为{customer}季末封网 | {ref}的切换改到哪天了？
update engineer {mig} 的脚本改由{engineer}接手，{old}调去别的组了 | {ref}的脚本现在谁负责？
event timeout   {mig} 批量导入跑了 {mins} 分钟后超时，报 {error} | {ref}批量导入时报了什么错？ | 导入报错
event dupes     {mig} 去重时发现 {n} 个重复的客户账号 | {ref}查出了多少个重号？ | 重复账号
event sample    {contact}发来 {mig} 的样例文件，日期格式是日在前 || {contact}给的 {mig} 样例里，日期按“日/月/年”的顺序写 | {ref}的样例数据在日期上有什么问题？ | 日期格式
decision freeze 决定 {mig} 切换期间旧系统停写 {hours} 小时 | {ref}切换时老系统多久不能写入？ | 停写时长
decision keep   {mig} 完成后旧系统保留只读 {weeks} 周再下线 | {ref}做完以后老系统还留多久？ | 只读保留期
pref report     {contact}希望每天下午 5 点收到一封 {mig} 的简短进度邮件 | {contact}想怎么了解{ref}的进展？ | 进度汇报方式
pref secure     {customer}的安全部门要求 {mig} 的文件只能走 SFTP，不能发邮件 | {ref}的文件该怎么传？ | 传输要求
routine         {time} 检查了 {mig} 的预发库：行数没有变化
routine         {time} 重跑了 {mig} 的校验报告
summary         {mig} 收尾：试迁移 {n} 轮后，{customer}已在 {service} 上线
sub mapping     把{customer}的字段映射到新表结构（{mig}） | {mig} 的字段映射
  fact fields     {mig} 的映射里有 {n} 个字段在 {service} 里找不到对应 | {ref}有几个源字段没地方放？ | 对不上的字段数
  decision notes  {mig} 里的备注类自由文本统一放进一个备注字段，不拆分 | {ref}的备注文本怎么处理？ | 备注的处理方式
sub rollback    制定 {mig} 的回退方案 | {mig} 的回退方案
  fact backup     {mig} 切换当天 21:00 做全量备份，保留 {days} 天 | {ref}的备份留多久？ | 备份保留期
  event drill     {mig} 回退演练从头到尾用了 {mins} 分钟 | {ref}的回退演练花了多长时间？ | 回退用时
"""

NEW_DOMAINS["zh"]["event"] = """
slots   evt=@EVT host=name caterer=merchant venue=hotel speaker=name guest=company contact=name evdate=date attendees=qty invited=qty perhead=fee avfee=fee
title   客户活动 {evt}：{dept}在{city}为{guest}办一场交流会
ref     活动 {evt} || {guest}交流会（{evt}） || {dept}办的客户活动 {evt}
ask     {ref}筹备得怎么样了？ || {ref}还有哪些没安排好？ || {ref}现在到什么阶段了？
state   活动 {evt}：议程初稿已出，场地在比选
state   活动 {evt}：场地已订，邀请函已发
state   活动 {evt}：报名截止，最终人数已报给场地
state   活动 {evt}：活动已举办，满意度问卷已发出
state   活动 {evt}：费用结清，项目关闭
fact venue      {evt} 的场地定在{city}{venue}的多功能厅 | {ref}在哪儿办？ || {ref}借的是哪家酒店的厅？ | 场地
fact evdate     {evt} 定在{evdate}举行，上午 9:30 到下午 4 点 | {ref}哪天办？ | 活动日期
fact attendees  {evt} 已有 {attendees} 位嘉宾报名 | {ref}来多少人？ | 报名人数
fact budget     {evt} 的预算是 {budget}，含场地、餐饮和音视频 | {ref}一共能花多少？ | 预算
fact speaker    {guest}的{speaker}在 {evt} 上做开场发言 | {ref}由谁开场致辞？ | 开场嘉宾
update venue    {evt} 换到{venue}办：{old}把厅重复订出去了 | {ref}现在改在哪办？
update evdate   {evt} 延期到{evdate}（原定{old}），方便{guest}的高层出席 | {ref}改到哪天了？
event catering  {evt} 的餐饮交给{caterer}，每位 {perhead} | {ref}的吃饭问题找的是谁？ | 餐饮供应商
event av        {evt} 的场地只有一台投影仪，另租了一台，花了 {avfee} | {ref}的设备检查发现了什么？ | 设备问题
event diet      {evt} 有 {n} 位嘉宾需要素食或清真餐 | {ref}要准备几份特殊餐？ | 特殊餐食
event shuttle   {evt} 从高铁站到会场的接驳由{cab}负责 | 嘉宾从车站怎么去{ref}的会场？ | 接驳安排
decision dinner 决定 {evt} 不办晚宴，改成延长午餐 | {ref}有晚宴吗？ | 晚宴安排
decision record {evt} 的演讲全程录像，但只分享给{guest} | {ref}的演讲会录下来吗？给谁看？ | 录像安排
pref seating    {host}希望 {evt} 用圆桌摆台，不要课桌式 | {host}希望{ref}的会场怎么摆？ | 会场布置
pref gifts      {guest}要求 {evt} 不发带公司标志的礼品 | {guest}对{ref}的伴手礼有什么要求？ | 礼品要求
routine         {time} 查看 {evt} 的报名情况：新增了几位
routine         {time} 提醒 {evt} 的讲者提交材料
summary         {evt} 收尾：会后和{guest}约了 {n} 场跟进会议
sub invites     发送 {evt} 的邀请函 | {evt} 的邀请函
  fact invited    {evt} 的邀请名单有 {invited} 人，由{host}审定 | {ref}一共邀请了多少人？ | 邀请人数
  event bounce    {evt} 有 {n} 封邀请函被退信，{contact}在核对正确的邮箱 | {ref}退回来的邀请函谁在处理？ | 退信处理
sub agenda      排 {evt} 的议程 | {evt} 的议程
  fact handson    {evt} 的动手实操环节在午饭后 {dtime} 开始 | {ref}的实操环节几点开始？ | 实操时间
  decision panel  {evt} 下午的主题演讲改成客户圆桌讨论 | {ref}下午的主题演讲换成了什么？ | 客户圆桌
"""

# ---------------------------------------------------------------- reading and applying


def _variants(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(" || "))


def parse_questions(text: str) -> tuple[dict[Key, tuple[str, ...]], dict[Key, str]]:
    """The question block of one domain: phrasings by (kind, key), and noun phrases by
    (kind, key) for the item lines. Sub items are keyed ``"SUB/KEY"``, a sub's ref
    ``("sub", "SUB")``, the domain's refs and asks ``("ref", "")`` and ``("ask", "")``."""
    questions: dict[Key, tuple[str, ...]] = {}
    nps: dict[Key, str] = {}
    sub = ""
    for raw in text.strip().splitlines():
        indented = raw[:1].isspace()
        kind, _, rest = raw.strip().partition(" ")
        rest = rest.strip()
        if kind in ("ref", "ask"):
            key: Key = (kind, "")
            questions[key] = _variants(rest)
            continue
        name, _, body = rest.partition(" ")
        if kind == "sub":
            sub = name
            key = ("sub", name)
            questions[key] = (body.strip(),)
            continue
        key = (kind, f"{sub}/{name}" if indented else name)
        phrasings, _, np = body.partition(" | ")
        if key in questions:
            raise ValueError(f"two held-out lines for {key}")
        questions[key] = _variants(phrasings)
        if kind != "update":
            if not np.strip():
                raise ValueError(f"held-out line {key} has no noun phrase")
            nps[key] = np.strip()
    return questions, nps


HELDOUT_QUESTIONS: dict[str, dict[str, dict[Key, tuple[str, ...]]]] = {}
HELDOUT_NPS: dict[str, dict[str, dict[Key, str]]] = {}
for _lang, _blocks in QUESTIONS.items():
    HELDOUT_QUESTIONS[_lang], HELDOUT_NPS[_lang] = {}, {}
    for _name, _text in _blocks.items():
        HELDOUT_QUESTIONS[_lang][_name], HELDOUT_NPS[_lang][_name] = parse_questions(_text)


def rephrase(dom: Domain, lang: str) -> Domain:
    """A copy of the dev domain ``dom`` whose questions, refs and noun phrases are the
    held-out ones; its contents are unchanged. Raises KeyError when a line that has
    questions has no held-out phrasing, or a held-out phrasing has no line."""
    qs, nps = HELDOUT_QUESTIONS[lang][dom.name], HELDOUT_NPS[lang][dom.name]
    used: set[Key] = {("ref", ""), ("ask", "")}

    def line(item: Line, sub: str = "") -> Line:
        key = (item.kind, f"{sub}/{item.key}" if sub else item.key)
        if not item.questions:
            return item
        used.add(key)
        np = nps[("fact", item.key)] if item.kind == "update" else nps[key]
        return dataclasses.replace(item, questions=qs[key], np=np)

    def sub(s: Sub) -> Sub:
        used.add(("sub", s.key))
        (ref,) = qs[("sub", s.key)]
        return dataclasses.replace(s, ref=ref, items=tuple(line(i, s.key) for i in s.items))

    out = dataclasses.replace(
        dom,
        refs=qs[("ref", "")],
        asks=qs[("ask", "")],
        items=tuple(line(i) for i in dom.items),
        updates={k: line(u) for k, u in dom.updates.items()},
        subs=tuple(sub(s) for s in dom.subs),
    )
    unused = set(qs) - used
    if unused:
        raise KeyError(f"held-out phrasings for no line of {lang}/{dom.name}: {sorted(unused)}")
    return out


@cache
def new_domains(lang: str) -> tuple[Domain, ...]:
    """The domains that only the test split has."""
    return tuple(parse_domain(name, text) for name, text in NEW_DOMAINS[lang].items())


@cache
def test_domains(lang: str) -> tuple[Domain, ...]:
    """The domains of the test split: the dev domains with held-out phrasings, then the
    new domains."""
    return tuple(rephrase(d, lang) for d in domains(lang)) + new_domains(lang)
