"""The member commands: `/memory show | remember | forget | optout | optin` and
`/memory-forgetme`, with their confirm buttons and the erasure they start."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from botmemory.clock import DAY_MS, day, epoch_seconds, moment, ttl_alive
from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext, confirmation
from botmemory.commands.invocation import (
    CommandError,
    Invocation,
    deferred_interaction,
    ephemeral_reply,
    webhook_edit,
)
from botmemory.commands.listing import fact_line, listing, shown, status_mark, zone_for
from botmemory.commands.notes import dm_notes_line
from botmemory.commands.paging import paged
from botmemory.discord.interactions import InteractionResponseType
from botmemory.memory import fact_history
from botmemory.memory.behaviour import behaviour_request
from botmemory.people.erasure import ErasureReport
from botmemory.people.names import names_pattern
from botmemory.people.retention import Kept
from botmemory.records import Fact, FactSource, FactStatus, HistoryActor, Persona
from botmemory.storage import keys
from botmemory.text import clip, content_hash, normalized, scrub, short_id

MAX_SHORT_TERM_SHOWN = 10
CONFIRM_ERASE = "forgetme:confirm"
CANCEL_ERASE = "forgetme:cancel"
CONFIRM_OPTOUT = "optout:confirm"
CANCEL_OPTOUT = "optout:cancel"
# `/memory remember` of an instruction to the bot (botmemory.memory.behaviour): nothing is stored.
BEHAVIOUR_REFUSAL = (
    "That reads as an instruction for how I should behave (how to answer or address you, "
    "rules to ignore, a role to play), not a fact about you, so I did not remember it. "
    "State a fact about yourself instead, such as `I prefer short answers` or "
    "`My nickname is Ally`."
)
# What an erasure erases, as the confirmations say it (keep it true to erasure.py).
ERASES = (
    "everything I keep about you, in every server and in DMs: your facts and profile, your "
    "recorded messages and reactions, the channel summaries you took part in or that name "
    "you, pins made in your name; and your mentions (and any name that is yours alone) are "
    "taken out of other people's recorded messages that I know name you"
)
ERASE_FAILED = (
    "I could not finish erasing what I keep about you. What is done stays done; the rest "
    "will be retried automatically, and staff are alerted if it keeps failing. You can also "
    "run the command again."
)


class MemberCommands:
    """What members see and control of what is kept about them."""

    def __init__(self, context: CommandContext) -> None:
        self._context = context
        self._services = context.services

    def my_facts(self, invocation: Invocation) -> list[Fact]:
        """The caller's own facts here, every persona's included (never a persona's own
        knowledge: it is no one's), each scope's active ones first, then demoted ones."""
        return [fact for _, facts in self._my_facts_by_scope(invocation) for fact in facts]

    def _my_facts_by_scope(self, invocation: Invocation) -> list[tuple[Persona | None, list[Fact]]]:
        """The caller's facts by scope: theirs (None: every persona sees them), then what each
        of this server's personas (live or removed) knows of them, one Query per persona;
        scopes holding nothing left out. Active ones first (newest first), then demoted."""
        repository = self._services.repository
        now = self._services.clock.now_ms()

        def kept(scope: str) -> list[Fact]:
            facts = [
                f
                for f in repository.all_facts(scope, invocation.user_id)
                if f.status in (FactStatus.ACTIVE, FactStatus.DEMOTED)
                and ttl_alive(f.expires_at, now)
            ]
            return sorted(facts, key=lambda f: (f.status == FactStatus.DEMOTED, -f.updated_ms))

        scopes: list[tuple[Persona | None, list[Fact]]] = [(None, kept(invocation.scope))]
        for persona in self._context.personas_here(invocation):
            scopes.append((persona, kept(keys.persona_scope(invocation.scope, persona.lineage_id))))
        return [(persona, facts) for persona, facts in scopes if facts]

    def show(
        self, invocation: Invocation, page: int = 0, *, pressed: bool = False
    ) -> dict[str, Any]:
        """Everything, in pages with buttons (botmemory.commands.paging); `page`: which."""
        by_scope = self._my_facts_by_scope(invocation)
        facts = [fact for _, scoped in by_scope for fact in scoped]
        lines: list[str] = []
        now = self._services.clock.now_ms()
        zone = zone_for(self._services, invocation.scope, facts)
        for persona, scoped in by_scope:
            heading = "About you (every persona here):"
            if persona is not None:
                removed = "" if persona.active else " (removed: kept until staff purge it)"
                heading = f"What {shown(persona.name)} knows about you{removed}:"
            lines += [heading] + [fact_line(f) + status_mark(f, now, zone) for f in scoped]
        mentions = self._mentions_here(invocation)
        notes = (
            dm_notes_line(self._services, invocation.user_id)
            if invocation.guild_id is None
            else None
        )
        if not lines and not mentions and notes is None:
            return ephemeral_reply("I don't remember anything about you here yet.")
        header = "What I remember about you here:"
        if any(f.status == FactStatus.DEMOTED for f in facts):
            header = (
                "What I remember about you here ([demoted]: kept, but not brought up until you "
                "say it again):"
            )
        text = "\n".join([header, *lines]) if lines else "I keep no facts about you here."
        if mentions:
            text = "\n".join([text + "\n\nIn this channel, mentioning you:", *mentions])
        if notes is not None:
            text += f"\n\n{notes}"
        return paged("\n".join([text, *self._lately(invocation, 0)]), page, pressed=pressed)

    def _lately(self, invocation: Invocation, used: int) -> list[str]:
        """What `/memory show` adds after the facts, in the room one message has left: the
        caller's short-term entries (which channels, when; their words stay there) and this
        channel's running summary, cut to fit."""
        repository = self._services.repository
        now = self._services.clock.now_ms()
        lines: list[str] = []
        theirs = repository.short_term_of(invocation.scope, [invocation.user_id])
        entries = [e for e in theirs.get(invocation.user_id, []) if ttl_alive(e.expires_at, now)]
        if entries:
            lines += ["", "Lately, for other channels (kept a few hours):"]
            lines += [
                f"<#{e.channel_id}>: {e.messages} message{'s' if e.messages > 1 else ''}, "
                f"the last at {moment(e.at_ms)}"
                for e in entries[:MAX_SHORT_TERM_SHOWN]
            ]
        summary = repository.channel_summary(invocation.channel_id)
        if summary is not None and ttl_alive(summary.expires_at, now):
            room = 2000 - used - sum(len(line) + 1 for line in lines) - 120
            if room > 80:
                lines += ["", "This channel's running summary:", shown(summary.summary)[:room]]
        return lines

    def _mentions_here(self, invocation: Invocation) -> list[str]:
        """Pins and episodes of this channel that name the caller or include them."""
        repository = self._services.repository
        now = self._services.clock.now_ms()
        pattern = names_pattern([invocation.user_name])
        lines = []
        for pin in repository.pins(invocation.scope, "global", 20) + repository.pins(
            invocation.scope, invocation.channel_id, 20
        ):
            if pin.author_id == invocation.user_id or (pattern and pattern.search(pin.text)):
                lines.append(f"pin `{pin.pin_id}`: {shown(pin.text)}")
        for episode in repository.recent_episodes(
            invocation.channel_id, self._services.settings.episodes_per_channel
        ):
            if not ttl_alive(episode.expires_at, now):
                continue
            if invocation.user_id in episode.participant_ids or (
                pattern and pattern.search(episode.summary)
            ):
                lines.append(
                    f"summary of {day(episode.end_ms)}: {shown(clip(scrub(episode.summary), 300))}"
                )
        return lines

    def remember(self, invocation: Invocation) -> dict[str, Any]:
        raw = invocation.text(spec.OPTION_TEXT)
        if re.search(r"<@!?\d+>", raw) and not re.fullmatch(rf".*<@!?{invocation.user_id}>.*", raw):
            raise CommandError("You can only ask me to remember things about yourself.")
        text = self._context.checked_text(raw)
        if behaviour_request(text):
            raise CommandError(BEHAVIOUR_REFUSAL)
        if self._services.opt_outs.is_opted_out(invocation.user_id):
            raise CommandError(
                "You are opted out, so I keep nothing about you. Use `/memory optin` first."
            )
        # Consolidation's own rules give the kind (one owner); imported here, as compiling
        # its patterns would slow every other command's cold start.
        from botmemory.consolidation.model.rules import kind_of

        now = self._services.clock.now_ms()
        repository = self._services.repository
        days = self._services.retention.days_of(invocation.scope, Kept.FACTS)
        fact_id = short_id(content_hash(invocation.scope, invocation.user_id, normalized(text)))
        previous = repository.fact(invocation.scope, invocation.user_id, fact_id)
        fact = Fact(
            fact_id=fact_id,
            scope=invocation.scope,
            user_id=invocation.user_id,
            text=text,
            kind=kind_of(text),
            source=FactSource.MANUAL,
            created_ms=now,
            updated_ms=now,
            expires_at=epoch_seconds(now + days * DAY_MS),
        ).model_copy(update=self._context.learned_here(invocation, previous).fields())
        entry = fact_history.written(
            previous,
            fact,
            actor=HistoryActor.MEMBER,
            at_ms=now,
            retention_days=days,
            actor_id=invocation.user_id,
        )
        repository.put_fact(fact, entry)
        return ephemeral_reply(f"Remembered as `{fact.fact_id}` ({fact.kind.value}): {shown(text)}")

    def forget(self, invocation: Invocation) -> dict[str, Any]:
        what = scrub(invocation.text(spec.OPTION_WHAT))
        facts = self.my_facts(invocation)
        matching = [f for f in facts if f.fact_id == what.lower()]
        if not matching and len(normalized(what)) >= 3:
            matching = [f for f in facts if normalized(what) in normalized(f.text)]
        if not matching:
            return ephemeral_reply(
                "None of your facts here matches that. `/memory show` lists them with their ids."
            )
        self._context.delete_recorded(matching, HistoryActor.MEMBER, invocation.user_id)
        return ephemeral_reply(
            listing("Forgotten:", [f"`{f.fact_id}` {shown(f.text)}" for f in matching])
        )

    def optout(self, invocation: Invocation) -> dict[str, Any]:
        return ephemeral_reply(
            "Opting out stops me remembering you: from now on nothing new about you is "
            f"recorded, and I erase {ERASES}. It cannot be undone (`/memory optin` only lets "
            "me record you again).",
            components=confirmation("Opt out and erase", CONFIRM_OPTOUT, CANCEL_OPTOUT),
        )

    def optin(self, invocation: Invocation) -> dict[str, Any]:
        self._services.opt_outs.opt_in(invocation.user_id)
        return ephemeral_reply("You are opted in: I may remember what you tell me again.")

    def forgetme(self, invocation: Invocation) -> dict[str, Any]:
        return ephemeral_reply(
            f"This erases {ERASES}. It cannot be undone.",
            components=confirmation("Erase everything", CONFIRM_ERASE, CANCEL_ERASE),
        )

    def confirm_erasure(self, invocation: Invocation) -> dict[str, Any]:
        """An erasure (or an opt-out) confirmed: done in deferred work, which edits the
        confirmation."""
        work = "erase"
        if invocation.custom_id == CONFIRM_OPTOUT:
            if not self._services.settings.memory_enabled:
                raise CommandError("Memory is off on this bot: nothing is kept about anyone.")
            self._services.opt_outs.opt_out(invocation.user_id)  # nothing new from now on
            work = "optout"
        self._context.defer(
            {
                "work": work,
                "interaction": deferred_interaction(invocation),
                "failed": ERASE_FAILED,  # what the person is told if the work fails
            }
        )
        return {"type": InteractionResponseType.DEFERRED_UPDATE_MESSAGE}

    def erase(
        self,
        job: dict[str, Any],
        invocation: Invocation,
        time_left_ms: Callable[[], int] | None = None,
    ) -> dict[str, Any]:
        """The deferred erasure (or opt-out); one that runs short of time hands the rest to
        another deferred job, from its checkpoint, and says how far it got."""
        work = str(job.get("work"))  # "erase" or "optout"
        report = self._context.eraser.erase(
            invocation.user_id,
            [invocation.user_name],
            checkpoint=job.get("erasure"),
            time_left_ms=time_left_ms,
        )
        if not report.finished:
            self._context.defer({**job, "erasure": report.checkpoint})
            return webhook_edit(
                f"Still erasing; so far: {report.summary()}. "
                "I will update this message when it is done.",
                components=[],
            )
        return webhook_edit(self._erased(work, report), components=[])

    @staticmethod
    def _erased(work: str, report: ErasureReport) -> str:
        if work == "optout":
            return (
                "You are opted out: from now on nothing is recorded about you, and I erased "
                f"what I had: {report.summary()}. Use `/memory optin` to change your mind."
            )
        return f"Done. I erased everything I kept about you: {report.summary()}."
