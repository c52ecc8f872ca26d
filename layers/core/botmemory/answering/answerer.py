"""Answering: a message that mentions or replies to the bot, a DM, or /ask, answered with
memory (docs/architecture.md section 10).

One answer is: the rate limit (one conditional write), the typing indicator, the prompt
(recall with the message as query, the channel's history, the speaker's facts, whether they
are staff), one chat model call, the model's corrections applied and announced (a refused
one as refused) and their results handed back for one more call that writes the answer
(botmemory.answering.follow_up), the reply posted (split at sentence ends, pinging nobody),
and each posted message recorded as an observation of kind answer, under the same key the relay's copy of it
gets, so it is stored once. Then, after the reply, the facts the memory block showed count
one recall hit each (botmemory.memory.hot_tier).

Failures answer, never go silent: a model failure posts a short apology. Discord refusing
the post (403: no access to the channel) is one log line and a count, never retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from botmemory.answering.chat import ChatModel
from botmemory.answering.chat.contract import (
    UPDATE_MEMORY,
    ChatModelError,
    ChatReply,
    ChatRequest,
    ChatTurn,
    ToolCall,
    ToolResult,
)
from botmemory.answering.corrections import (
    Correction,
    Refusal,
    apply_update_memory,
    correction_notice,
    refusal_notice,
)
from botmemory.answering.follow_up import (
    FollowUpStatus,
    answer_after,
    applied_result,
    needed_ms,
    refused_result,
)
from botmemory.answering.notices import memory_lines
from botmemory.answering.prompt import AnswerPrompt, PromptBuilder, asker_is_staff
from botmemory.answering.question import Question, Reply
from botmemory.answering.rate import AnswerRateLimiter, RateDecision
from botmemory.discord.errors import DiscordApiError, DiscordRateLimited
from botmemory.memory.hot_tier import record_hits
from botmemory.memory.short_term import note_answered
from botmemory.memory.visibility import learned_where
from botmemory.recall.contract import shown_facts
from botmemory.records import GuildStaff, Observation, scope_of
from botmemory.services import MemoryServices
from botmemory.text import scrub, split_message

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I couldn't come up with an answer just now. Please try again in a moment."
RATE_REFUSAL = "I'm answering a lot right now; please ask me again in a few minutes."
NOTHING_TO_SAY = "Noted."
# Tool calls applied from one answer, at most: a model asked to rewrite everything gets one.
MAX_CORRECTIONS = 3
TOO_MANY = f"not applied: at most {MAX_CORRECTIONS} corrections per answer"
# Discord's answers that mean the bot may not post there: never retried.
REFUSED_STATUSES = (403, 404)


class Poster(Protocol):
    """What answering needs of Discord's REST API (botmemory.discord.rest.DiscordApi)."""

    def trigger_typing(self, channel_id: str) -> None: ...

    def create_message(
        self,
        channel_id: str,
        content: str,
        *,
        reply_to: str | None = None,
        allowed_users: list[str] | None = None,
        nonce: str | None = None,
    ) -> dict[str, Any]: ...

    def edit_original_response(
        self, application_id: str, token: str, body: dict[str, Any]
    ) -> dict[str, Any] | None: ...


class AnswerStatus(StrEnum):
    ANSWERED = "answered"
    MODEL_FAILED = "model_failed"  # an apology was posted
    RATE_REFUSED = "rate_refused"  # told once
    RATE_SILENT = "rate_silent"
    POST_REFUSED = "post_refused"  # Discord refused the post (403/404)
    # A rate limit would have outlasted the invocation: the parts posted stand (recorded),
    # the rest were not sent into a certain 429 (discord_limits).
    POST_CUT_SHORT = "post_cut_short"
    OFF = "off"  # no chat model configured


@dataclass
class AnswerReport:
    status: AnswerStatus
    posted: int = 0  # messages posted
    corrections: int = 0
    refused_corrections: int = 0
    model_calls: int = 0  # chat model calls made: 2 when it answered after correcting
    follow_up: FollowUpStatus = FollowUpStatus.NONE  # how the answer after acting went
    ignored_tool_calls: int = 0  # tool calls of that second reply: never applied
    prompt_chars: int = 0
    recorded: int = 0  # answer observations newly stored
    recall_hits: int = 0  # facts of the memory block whose recall hit was recorded
    recall_hits_failed: bool = False  # recording them failed (logged; the answer stands)
    notes: list[str] = field(default_factory=list)


class Answerer:
    def __init__(
        self,
        services: MemoryServices,
        model: ChatModel | None,
        poster: Poster,
        limiter: AnswerRateLimiter,
        template: Callable[[], str],
        time_left_ms: Callable[[], int | None] = lambda: None,
    ) -> None:
        """`time_left_ms`: the invocation's time left (botmemory.invocation), None unbounded;
        the answer after acting is asked for only when its attempt fits (follow_up.needed_ms)."""
        self._services = services
        self._model = model
        self._poster = poster
        self._limiter = limiter
        self._template = template
        self._time_left_ms = time_left_ms
        self._prompts = PromptBuilder(
            services.repository, services.recaller, services.settings, services.clock
        )

    def answer(self, question: Question, reply: Reply | None = None) -> AnswerReport:
        reply = reply or Reply()
        if self._model is None:
            return AnswerReport(AnswerStatus.OFF)
        # The channel's persona (botmemory.memory.personas) and whether the asker is staff are read
        # beside the rate limit's counters.
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="answer-read") as pool:
            persona_read = pool.submit(
                self._services.personas.for_channel, question.guild_id, question.channel_id
            )
            staff_read = self._staff_reads(pool, question)
            decision = self._limiter.check(
                scope_of(question.guild_id), question.channel_id, question.author_id
            )
            persona = persona_read.result()
            question = replace(question, staff=staff_read())
        if decision == RateDecision.SILENT:
            return AnswerReport(AnswerStatus.RATE_SILENT)
        if decision == RateDecision.REFUSE_ONCE:
            report = AnswerReport(AnswerStatus.RATE_REFUSED)
            return self._post(question, reply, RATE_REFUSAL, report)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="typing") as pool:
            if reply.interaction is None:  # a deferred /ask already shows "thinking…"
                pool.submit(self._typing, question.channel_id)
            prompt = self._prompts.build(question, self._template(), persona)
        report = AnswerReport(AnswerStatus.ANSWERED, prompt_chars=prompt.chars)
        request = ChatRequest(
            system=prompt.system,
            turns=[ChatTurn(role="user", content=prompt.user_turn)],
            tools=[UPDATE_MEMORY],
            max_output_tokens=self._services.settings.chat_max_output_tokens,
        )
        try:
            report.model_calls = 1
            answer = self._model.reply(request)
        except ChatModelError as error:
            log.warning(
                "chat model failed",
                extra={"channel_id": question.channel_id, "error": str(error)[:300]},
            )
            report.status = AnswerStatus.MODEL_FAILED
            return self._post(question, reply, APOLOGY, report)
        notices, acted = self._corrections(question, prompt, answer, report)
        if acted:  # the model answers once it knows what its calls did
            text = self._answer_after(request, answer, acted, report)
        else:
            text = answer.text.strip() or NOTHING_TO_SAY
        lines = memory_lines(self._services, question)  # what is kept, said under the answer
        text = "\n\n".join([*notices, text]).strip()
        report = self._post(question, reply, "\n".join([text, *lines]), report)
        if report.status == AnswerStatus.ANSWERED:
            self._record_hits(question, prompt, report)
        return report

    # Steps ------------------------------------------------------------------------

    def _staff_reads(
        self, pool: ThreadPoolExecutor, question: Question
    ) -> Callable[[], bool | None]:
        """Start reading what says whether the asker is staff (the guild's staff record, the
        roles stored with the question's message: botmemory.answering.prompt.asker_is_staff);
        returns what waits for them. A failed read leaves it not known, and the answer goes on."""
        repository = self._services.repository
        guild_id, message_id = question.guild_id, question.message_id
        if question.staff is not None or guild_id is None:
            return lambda: asker_is_staff(question, None, None)
        record: Future[GuildStaff] = pool.submit(repository.guild_staff, guild_id)
        message: Future[list[Observation]] | None = None
        if message_id:
            message = pool.submit(
                repository.message_observations, question.channel_id, [message_id]
            )

        def staff() -> bool | None:
            try:
                found = message.result() if message is not None else []
                return asker_is_staff(question, record.result(), found[0] if found else None)
            except Exception as error:  # a note in the prompt: never a reason not to answer
                log.warning("staff status not read", extra={"error": repr(error)[:300]})
                return None

        return staff

    def _typing(self, channel_id: str) -> None:
        try:
            self._poster.trigger_typing(channel_id)
        except DiscordApiError as error:  # a nicety: never a reason not to answer
            log.info("typing indicator refused", extra={"status": error.status})

    def _corrections(
        self, question: Question, prompt: AnswerPrompt, answer: ChatReply, report: AnswerReport
    ) -> tuple[list[str], list[tuple[ToolCall, ToolResult]]]:
        """Apply the model's update_memory calls: the notices to post, in the open, and each
        call with its result, for the model's next turn. Calls past MAX_CORRECTIONS are
        refused unread; calls of tools never offered are left out (not answered back)."""
        notices: list[str] = []
        acted: list[tuple[ToolCall, ToolResult]] = []
        calls = [c for c in answer.tool_calls if c.name == UPDATE_MEMORY.name]
        for call in calls[MAX_CORRECTIONS:]:
            named = call.arguments.get("id")
            fact_id = named[:64] if isinstance(named, str) else ""
            acted.append((call, refused_result(call, Refusal(fact_id=fact_id, reason=TOO_MANY))))
        report.refused_corrections += len(acted)
        for index, call in enumerate(calls[:MAX_CORRECTIONS]):
            outcome = apply_update_memory(
                self._services,
                call.arguments,
                shown=prompt.correctable,
                scope=scope_of(question.guild_id),
                bot_user_id=self._services.settings.bot_user_id,
                actor_id=question.author_id,
                lineage_id=prompt.recall.persona.lineage if prompt.recall.persona else None,
                learned=learned_where(
                    question.channel_id, question.channel_id in prompt.recall.public_channels
                ),
            )
            if isinstance(outcome, Correction):
                report.corrections += 1
                notices.append(correction_notice(outcome, question.author_name or "you"))
                acted.insert(index, (call, applied_result(call, outcome)))  # in call order
            else:  # said as refused: the answer must not read as if it were done
                acted.insert(index, (call, refused_result(call, outcome)))
                report.refused_corrections += 1
                report.notes.append(f"correction refused: {outcome.reason}")
                shown = prompt.correctable.get(outcome.fact_id)
                notices.append(refusal_notice(outcome, shown, question.author_name or "you"))
                log.info(
                    "correction refused",
                    extra={"fact_id": outcome.fact_id[:80], "reason": outcome.reason},
                )
        return notices, acted

    def _answer_after(
        self,
        request: ChatRequest,
        first: ChatReply,
        acted: list[tuple[ToolCall, ToolResult]],
        report: AnswerReport,
    ) -> str:
        """The answer once the corrections are applied (botmemory.answering.follow_up)."""
        assert self._model is not None  # nosec B101 # narrows the type: answer() returned OFF otherwise
        follow_up = answer_after(
            self._model,
            request,
            first,
            acted,
            time_left_ms=self._time_left_ms,
            needed=needed_ms(self._services.settings),
        )
        report.model_calls += int(follow_up.called)
        report.follow_up = follow_up.status
        report.ignored_tool_calls = follow_up.ignored_calls
        if follow_up.status != FollowUpStatus.ANSWERED:
            report.notes.append(f"answer after corrections: {follow_up.status.value}")
        return follow_up.text

    def _record_hits(self, question: Question, prompt: AnswerPrompt, report: AnswerReport) -> None:
        """Once the reply is posted (so never on recall's latency path, nor the reply's):
        each fact the memory block showed counts one recall hit (botmemory.memory.hot_tier), in one
        request. A failure is logged and counted, and the answer stands."""
        hits = record_hits(
            self._services.repository,
            shown_facts(prompt.recall, question.guild_id),
            self._services.clock.now_ms(),
        )
        report.recall_hits, report.recall_hits_failed = hits.recorded, hits.failed

    def _post(
        self, question: Question, reply: Reply, text: str, report: AnswerReport
    ) -> AnswerReport:
        # Model output is text from outside too: no control, bidirectional or invisible
        # characters reach the channel (and pings are off whatever it says).
        chunks = split_message(scrub(text, keep_newlines=True) or NOTHING_TO_SAY)
        posted: list[dict[str, Any]] = []
        try:
            for index, chunk in enumerate(chunks):
                posted.append(self._send(question, reply, chunk, index))
        except DiscordRateLimited as error:
            log.warning(
                "answer cut short: a Discord rate limit outlasts the invocation",
                extra={
                    "channel_id": question.channel_id,
                    "posted": len(posted),
                    "unsent": len(chunks) - len(posted),
                    "retry_after": error.retry_after,
                },
            )
            report.status = AnswerStatus.POST_CUT_SHORT
        except DiscordApiError as error:
            if error.status not in REFUSED_STATUSES:
                raise
            log.warning(
                "Discord refused the answer: the bot may not post in this channel",
                extra={
                    "channel_id": question.channel_id,
                    "status": error.status,
                    "code": error.code,
                },
            )
            report.status = AnswerStatus.POST_REFUSED
        report.posted = len(posted)
        # A channel whose memory is off, a paused member, a member not recorded in an opt-in
        # server (botmemory.people.controls): neither the answer nor a short-term line is kept.
        refusal = self._services.recorder.gate.refusal(
            question.guild_id, question.channel_id, question.author_id
        )
        if refusal is not None:
            report.notes.append(f"not kept: {refusal}")
            return report
        report.recorded = self._record(question, posted)
        if report.status == AnswerStatus.ANSWERED:  # after the post: never before it
            self._note_exchange(question, text, posted)
        return report

    def _note_exchange(self, question: Question, text: str, posted: list[dict[str, Any]]) -> None:
        """The asker's short-term entry for this channel (botmemory.memory.short_term): what
        they asked and what the bot said, for the server's other public channels. A failure
        is logged there, and the answer stands."""
        services = self._services
        note_answered(
            services.repository,
            services.settings,
            services.opt_outs.barred,
            guild_id=question.guild_id,
            channel_id=question.channel_id,
            asker_id=question.author_id,
            question=question.content,
            question_message_id=question.message_id,
            answer=text,
            answer_message_ids=[str(m["id"]) for m in posted if m.get("id")],
            now_ms=services.clock.now_ms(),
        )

    def _send(self, question: Question, reply: Reply, chunk: str, index: int) -> dict[str, Any]:
        first = index == 0
        if reply.interaction is not None and first:
            interaction = reply.interaction
            edited = self._poster.edit_original_response(
                interaction["application_id"],
                interaction["token"],
                {"content": chunk, "allowed_mentions": {"parse": []}},
            )
            return edited or {}
        # Discord posts a message once per nonce: a retried request never posts it twice.
        asked = question.message_id or (reply.interaction or {}).get("id", "")
        return self._poster.create_message(
            question.channel_id,
            chunk,
            reply_to=question.message_id if first else None,
            allowed_users=[],  # pings nobody, not even the person replied to
            nonce=f"{asked}-{index}" if asked else None,
        )

    def _record(self, question: Question, messages: list[dict[str, Any]]) -> int:
        """Each posted message as the gateway will show it, so the relay's copy is the same
        observation (one conditional write each: stored once)."""
        events = []
        for message in messages:
            if not message.get("id"):
                continue
            payload = dict(message)
            payload["channel_id"] = question.channel_id  # where it was posted, whatever the route
            if question.guild_id:
                payload["guild_id"] = question.guild_id  # REST message objects may omit it
            events.append({"t": "MESSAGE_CREATE", "d": payload})
        if not events:
            return 0
        return self._services.recorder.record(events).stored
