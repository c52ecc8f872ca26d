"""Slash commands: members see and control what is kept about them; staff review and steer it;
`/ask` hands a question to the answering function.

Every answer but `/ask`'s is ephemeral; every answer is scrubbed and sent with
`allowed_mentions: {"parse": []}`, so stored text never pings anyone; stored text is shown
through `as_discord_text`, so what one member wrote reaches others as text, never as
formatting, masked links or mentions. Staff rights are checked here from
`member.permissions` on every call, whatever the command's registration says. Work that
may outlast Discord's 3 seconds (erasure, long listings) answers "thinking…" at once and
finishes through the interaction webhook (see `Deferrer`).
`/ask` answers "thinking…" in public (the answer is for the channel) and hands the question
to the injected `Asker`; like every command that does work, it runs behind the handler's
replay protection (it is not in `changes_nothing`), so a replayed interaction asks once.
Every change to a fact made here is kept in its history (botmemory.fact_history).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botmemory import command_specs as spec
from botmemory import fact_history
from botmemory.clock import DAY_MS, day, epoch_seconds, moment
from botmemory.erasure import Eraser, ErasureReport
from botmemory.hot_tier import HotTier
from botmemory.interactions import (
    ButtonStyle,
    ComponentType,
    InteractionResponseType,
    InteractionType,
    MessageFlag,
    OptionType,
    Permissions,
    ephemeral_message,
    invoking_user,
)
from botmemory.keys import message_of
from botmemory.names import names_pattern
from botmemory.recall import SECTION_HEADINGS
from botmemory.records import (
    Fact,
    FactChange,
    FactHistory,
    FactKind,
    FactSource,
    FactStatus,
    HistoryActor,
    Pin,
    Quarantine,
    scope_of,
)
from botmemory.runtime import MemoryServices
from botmemory.table import ttl_alive
from botmemory.text import (
    as_discord_text,
    clip,
    content_hash,
    has_pings,
    markup_in,
    normalized,
    scrub,
    short_id,
)

log = logging.getLogger(__name__)

MAX_LISTED = 25
MAX_SHORT_TERM_SHOWN = 10
MAX_PINS_PER_SCOPE = 50
CONFIRM_ERASE = "forgetme:confirm"
CANCEL_ERASE = "forgetme:cancel"
CONFIRM_OPTOUT = "optout:confirm"
CANCEL_OPTOUT = "optout:cancel"
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


class CommandError(Exception):
    """A refusal or a problem with the request, answered to the caller as is."""


@dataclass
class Invocation:
    """The parts of an interaction the commands read, validated once."""

    kind: int
    interaction_id: str
    token: str
    application_id: str
    guild_id: str | None
    channel_id: str
    user_id: str
    user_name: str
    permissions: int
    command: str = ""
    subcommand: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    focused: str | None = None
    custom_id: str = ""

    @property
    def scope(self) -> str:
        return scope_of(self.guild_id)

    @property
    def is_staff(self) -> bool:
        return self.guild_id is not None and bool(
            self.permissions & (Permissions.MANAGE_GUILD | Permissions.ADMINISTRATOR)
        )

    def text(self, name: str) -> str:
        value = self.options.get(name)
        if not isinstance(value, str) or not value.strip():
            raise CommandError(f"Please give `{name}` as text.")
        return value

    def snowflake(self, name: str) -> str:
        value = self.options.get(name)
        if not isinstance(value, str) or not value.isdigit():
            raise CommandError(f"Please choose a member for `{name}`.")
        return value


def parse_invocation(interaction: dict[str, Any]) -> Invocation:
    user = invoking_user(interaction)
    user_id = str(user.get("id", ""))
    if not user_id.isdigit():
        raise CommandError("I could not tell who is asking.")
    member: dict[str, Any] = interaction.get("member") or {}
    if not isinstance(member, dict):
        member = {}
    try:
        permissions = int(member.get("permissions") or 0)
    except (TypeError, ValueError):
        permissions = 0
    data: dict[str, Any] = interaction.get("data") or {}
    if not isinstance(data, dict):
        data = {}
    invocation = Invocation(
        kind=int(interaction.get("type") or 0),
        interaction_id=str(interaction.get("id", "")),
        token=str(interaction.get("token", "")),
        application_id=str(interaction.get("application_id", "")),
        guild_id=str(interaction["guild_id"]) if interaction.get("guild_id") else None,
        channel_id=str(
            interaction.get("channel_id") or (interaction.get("channel") or {}).get("id", "")
        ),
        user_id=user_id,
        user_name=scrub(
            str(member.get("nick") or user.get("global_name") or user.get("username") or "")
        ),
        permissions=permissions,
        command=str(data.get("name", "")),
        custom_id=str(data.get("custom_id", "")),
    )
    options = data.get("options") or []
    if (
        options
        and isinstance(options[0], dict)
        and options[0].get("type") == OptionType.SUB_COMMAND
    ):
        invocation.subcommand = str(options[0].get("name", ""))
        options = options[0].get("options") or []
    for option in options:
        if isinstance(option, dict) and "name" in option:
            invocation.options[str(option["name"])] = option.get("value")
            if option.get("focused"):
                invocation.focused = str(option["name"])
    return invocation


def ephemeral_reply(
    content: str, *, components: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An immediate answer to the interaction that only the caller sees, scrubbed."""
    response = ephemeral_message(scrub(content, keep_newlines=True))
    if components is not None:
        response["data"]["components"] = components
    return response


def webhook_edit(content: str, *, components: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The new content of the original answer, for the interaction webhook (which edits
    a deferred answer) or an UPDATE_MESSAGE response."""
    data: dict[str, Any] = ephemeral_reply(content, components=components)["data"]
    data.pop("flags", None)  # flags are fixed when the answer was first sent
    return data


def _shown(text: str) -> str:
    """A stored string as a Discord message shows it: one line, markup and mentions defused."""
    return as_discord_text(scrub(text))


def _fact_line(fact: Fact) -> str:
    return f"`{fact.fact_id}` {_shown(fact.text)} ({fact.kind.value}, {fact.source.value}, {day(fact.updated_ms)})"


def _quarantine_line(record: Quarantine) -> str:
    messages = sorted({m for sk in record.observation_sks if (m := message_of(sk))}, key=int)
    authors = ", ".join(f"<@{u}>" for u in record.user_ids) or "no author"
    return (
        f"`{record.quarantine_id}` {day(record.quarantined_ms)}: "
        f"{len(record.observation_sks)} observation(s) by {authors}"
        + (f", message {', '.join(messages)}" if messages else "")
        + f"; after {record.attempts} attempts: {_shown(record.error)}"
    )


def _listing(header: str, lines: list[str]) -> str:
    """Lines under a header, cut to what one Discord message holds."""
    text = header
    for shown, line in enumerate(lines):
        if len(text) + len(line) + 40 > 2000:
            return text + f"\n… and {len(lines) - shown} more."
        text += "\n" + line
    return text


_CHANGE_WORDS = {
    FactChange.CREATED: "created",
    FactChange.UPDATED: "changed",
    FactChange.RESTORED: "restated",
    FactChange.SUPERSEDED: "superseded",
    FactChange.DEMOTED: "demoted",
    FactChange.DELETED: "deleted",
}


def _history_line(entry: FactHistory) -> str:
    """One change to a fact: when, who, what, with its texts shown as text."""
    who = entry.actor.value + (f" <@{entry.actor_id}>" if entry.actor_id else "")
    old = f'"{_shown(entry.old)}"' if entry.old is not None else ""
    new = f'"{_shown(entry.new)}"' if entry.new is not None else ""
    what = " → ".join(t for t in (old, new) if t)
    if entry.change == FactChange.SUPERSEDED and entry.superseded_by:
        what += f" (by `{entry.superseded_by}`)"
    word = _CHANGE_WORDS[entry.change]
    if entry.change == FactChange.RESTORED and entry.actor == HistoryActor.STAFF:
        word = "restored"  # `/memory-staff restore-fact`, not a restatement
    return f"{moment(entry.at_ms)}, {who}: {word} {what}".rstrip()


def _status_mark(fact: Fact) -> str:
    """How a listing marks a fact recall does not show: demoted or superseded."""
    return "" if fact.status == FactStatus.ACTIVE else f" [{fact.status.value}]"


Deferrer = Callable[[dict[str, Any]], None]
# Starts the answer to `/ask`: `{"ask": {"interaction": ..., "question": ...}}`, in Lambda an
# asynchronous invoke of AnswerFunction, which edits the deferred answer.
Asker = Callable[[dict[str, Any]], None]


class Commands:
    def __init__(self, services: MemoryServices, defer: Deferrer, ask: Asker | None = None) -> None:
        self._services = services
        self._defer = defer
        self._ask = ask
        self._eraser = Eraser(
            services.repository,
            services.clock,
            services.opt_outs.hash_of,
            settle_ms=services.settings.lock_lease_seconds * 1000,
        )

    # Entry points -------------------------------------------------------------------

    def handle(self, interaction: dict[str, Any]) -> dict[str, Any]:
        """The immediate answer to a command, a button or an autocomplete request."""
        try:
            invocation = parse_invocation(interaction)
            if invocation.kind == InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE:
                return self._autocomplete(invocation)
            if invocation.kind == InteractionType.MESSAGE_COMPONENT:
                return self._component(invocation)
            if invocation.kind == InteractionType.APPLICATION_COMMAND:
                return self._command(invocation)
            return ephemeral_reply("This kind of interaction is not supported.")
        except CommandError as refusal:
            return ephemeral_reply(str(refusal))

    def changes_nothing(self, interaction: dict[str, Any]) -> bool:
        """Reads (show, listings, autocomplete) need no replay protection, and their answers,
        which quote what is kept, are better not stored for it."""
        try:
            invocation = parse_invocation(interaction)
        except CommandError:
            return True
        if invocation.kind == InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE:
            return True
        return invocation.kind == InteractionType.APPLICATION_COMMAND and (
            invocation.command,
            invocation.subcommand,
        ) in (
            (spec.MEMBER_COMMAND, spec.SHOW),
            (spec.STAFF_COMMAND, spec.USER),
            (spec.STAFF_COMMAND, spec.QUARANTINE),
            (spec.STAFF_COMMAND, spec.HISTORY),
        )

    def finish(
        self, job: dict[str, Any], time_left_ms: Callable[[], int] | None = None
    ) -> dict[str, Any]:
        """Do deferred work; the result is the body that replaces the "thinking…" answer.

        An erasure that runs short of time (`time_left_ms`) hands the rest to another
        deferred job, from its checkpoint, and says how far it got."""
        invocation = parse_invocation(job["interaction"])
        work = job.get("work")
        if work in ("erase", "optout"):
            report = self._eraser.erase(
                invocation.user_id,
                [invocation.user_name],
                checkpoint=job.get("erasure"),
                time_left_ms=time_left_ms,
            )
            if not report.finished:
                self._defer({**job, "erasure": report.checkpoint})
                return webhook_edit(
                    f"Still erasing; so far: {report.summary()}. "
                    "I will update this message when it is done.",
                    components=[],
                )
            return webhook_edit(self._erased(work, report), components=[])
        if work == "staff_user":
            return webhook_edit(
                self.user_listing(invocation.scope, invocation.snowflake(spec.OPTION_MEMBER))
            )
        return webhook_edit("Sorry, I lost track of that request.")

    @staticmethod
    def _erased(work: str, report: ErasureReport) -> str:
        if work == "optout":
            return (
                "You are opted out: from now on nothing is recorded about you, and I erased "
                f"what I had: {report.summary()}. Use `/memory optin` to change your mind."
            )
        return f"Done. I erased everything I kept about you: {report.summary()}."

    # Commands -----------------------------------------------------------------------

    def _command(self, invocation: Invocation) -> dict[str, Any]:
        routes: dict[tuple[str, str], Callable[[Invocation], dict[str, Any]]] = {
            (spec.MEMBER_COMMAND, spec.SHOW): self._show,
            (spec.MEMBER_COMMAND, spec.REMEMBER): self._remember,
            (spec.MEMBER_COMMAND, spec.FORGET): self._forget,
            (spec.MEMBER_COMMAND, spec.OPTOUT): self._optout,
            (spec.MEMBER_COMMAND, spec.OPTIN): self._optin,
            (spec.FORGETME_COMMAND, ""): self._forgetme,
            (spec.STAFF_COMMAND, spec.USER): self._staff_user,
            (spec.STAFF_COMMAND, spec.FORGET_FACT): self._staff_forget_fact,
            (spec.STAFF_COMMAND, spec.RESTORE_FACT): self._staff_restore_fact,
            (spec.STAFF_COMMAND, spec.PIN): self._staff_pin,
            (spec.STAFF_COMMAND, spec.UNPIN): self._staff_unpin,
            (spec.STAFF_COMMAND, spec.QUARANTINE): self._staff_quarantine,
            (spec.STAFF_COMMAND, spec.HISTORY): self._staff_history,
            (spec.STAFF_COMMAND, spec.RESET_SUMMARY): self._staff_reset_summary,
            (spec.ASK_COMMAND, ""): self._ask_question,
        }
        route = routes.get((invocation.command, invocation.subcommand))
        if route is None:
            label = scrub(f"/{invocation.command} {invocation.subcommand}".strip())
            return ephemeral_reply(f"Sorry, I don't know the command `{clip(label, 60)}`.")
        if invocation.command == spec.STAFF_COMMAND and not invocation.is_staff:
            return ephemeral_reply(
                "Only members with the Manage Server permission can use this command."
            )
        if (
            # Erasure works whatever the settings; answering does not need memory.
            invocation.command not in (spec.FORGETME_COMMAND, spec.ASK_COMMAND)
            and not self._services.settings.memory_enabled
        ):
            return ephemeral_reply("Memory is off on this bot: nothing is kept about anyone.")
        return route(invocation)

    def _my_facts(self, invocation: Invocation) -> list[Fact]:
        """The caller's facts here, active ones first (newest first), then demoted ones."""
        now = self._services.clock.now_ms()
        facts = self._services.repository.all_facts(invocation.scope, invocation.user_id)
        kept = [
            f
            for f in facts
            if f.status in (FactStatus.ACTIVE, FactStatus.DEMOTED) and ttl_alive(f.expires_at, now)
        ]
        return sorted(kept, key=lambda f: (f.status == FactStatus.DEMOTED, -f.updated_ms))

    def _show(self, invocation: Invocation) -> dict[str, Any]:
        facts = self._my_facts(invocation)
        lines = [_fact_line(f) + _status_mark(f) for f in facts]
        mentions = self._mentions_here(invocation)
        if not lines and not mentions:
            return ephemeral_reply("I don't remember anything about you here yet.")
        header = "What I remember about you here:"
        if any(f.status == FactStatus.DEMOTED for f in facts):
            header = (
                "What I remember about you here ([demoted]: kept, but not brought up until you "
                "say it again):"
            )
        text = _listing(header, lines) if lines else "I keep no facts about you here."
        if mentions:
            text = _listing(text + "\n\nIn this channel, mentioning you:", mentions)
        return ephemeral_reply(_listing(text, self._lately(invocation, len(text))))

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
                lines += ["", "This channel's running summary:", _shown(summary.summary)[:room]]
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
                lines.append(f"pin `{pin.pin_id}`: {_shown(pin.text)}")
        for episode in repository.recent_episodes(
            invocation.channel_id, self._services.settings.episodes_per_channel
        ):
            if not ttl_alive(episode.expires_at, now):
                continue
            if invocation.user_id in episode.participant_ids or (
                pattern and pattern.search(episode.summary)
            ):
                lines.append(
                    f"summary of {day(episode.end_ms)}: {_shown(clip(scrub(episode.summary), 300))}"
                )
        return lines

    def _checked_text(self, raw: str) -> str:
        text = scrub(raw)
        if not text:
            raise CommandError("That text is empty once invisible characters are removed.")
        if len(text) > spec.MAX_TEXT_LENGTH:
            raise CommandError(
                f"Please keep it to {spec.MAX_TEXT_LENGTH} characters (yours has {len(text)})."
            )
        if has_pings(text):
            raise CommandError(
                "Please leave out mentions and @everyone/@here: I never store text that could ping people."
            )
        markup = markup_in(text, SECTION_HEADINGS)
        if markup is not None:
            raise CommandError(
                f"Please leave out {markup}: I store plain text, without markup such as "
                "<tags>, links, code blocks or headings."
            )
        return text

    def _remember(self, invocation: Invocation) -> dict[str, Any]:
        raw = invocation.text(spec.OPTION_TEXT)
        if re.search(r"<@!?\d+>", raw) and not re.fullmatch(rf".*<@!?{invocation.user_id}>.*", raw):
            raise CommandError("You can only ask me to remember things about yourself.")
        text = self._checked_text(raw)
        if self._services.opt_outs.is_opted_out(invocation.user_id):
            raise CommandError(
                "You are opted out, so I keep nothing about you. Use `/memory optin` first."
            )
        now = self._services.clock.now_ms()
        fact = Fact(
            fact_id=short_id(content_hash(invocation.scope, invocation.user_id, normalized(text))),
            scope=invocation.scope,
            user_id=invocation.user_id,
            text=text,
            kind=FactKind.FACT,
            source=FactSource.MANUAL,
            created_ms=now,
            updated_ms=now,
            expires_at=epoch_seconds(now + self._services.settings.fact_retention_days * DAY_MS),
        )
        repository = self._services.repository
        previous = repository.fact(fact.scope, fact.user_id, fact.fact_id)
        entry = fact_history.written(
            previous,
            fact,
            actor=HistoryActor.MEMBER,
            at_ms=now,
            retention_days=self._services.settings.fact_retention_days,
            actor_id=invocation.user_id,
        )
        repository.put_fact(fact, entry)
        return ephemeral_reply(f"Remembered as `{fact.fact_id}`: {_shown(text)}")

    def _forget(self, invocation: Invocation) -> dict[str, Any]:
        what = scrub(invocation.text(spec.OPTION_WHAT))
        facts = self._my_facts(invocation)
        matching = [f for f in facts if f.fact_id == what.lower()]
        if not matching and len(normalized(what)) >= 3:
            matching = [f for f in facts if normalized(what) in normalized(f.text)]
        if not matching:
            return ephemeral_reply(
                "None of your facts here matches that. `/memory show` lists them with their ids."
            )
        self._delete_recorded(matching, HistoryActor.MEMBER, invocation.user_id)
        return ephemeral_reply(
            _listing("Forgotten:", [f"`{f.fact_id}` {_shown(f.text)}" for f in matching])
        )

    def _optout(self, invocation: Invocation) -> dict[str, Any]:
        return ephemeral_reply(
            "Opting out stops me remembering you: from now on nothing new about you is "
            f"recorded, and I erase {ERASES}. It cannot be undone (`/memory optin` only lets "
            "me record you again).",
            components=_confirmation("Opt out and erase", CONFIRM_OPTOUT, CANCEL_OPTOUT),
        )

    def _optin(self, invocation: Invocation) -> dict[str, Any]:
        self._services.opt_outs.opt_in(invocation.user_id)
        return ephemeral_reply("You are opted in: I may remember what you tell me again.")

    def _forgetme(self, invocation: Invocation) -> dict[str, Any]:
        return ephemeral_reply(
            f"This erases {ERASES}. It cannot be undone.",
            components=_confirmation("Erase everything", CONFIRM_ERASE, CANCEL_ERASE),
        )

    def _component(self, invocation: Invocation) -> dict[str, Any]:
        if invocation.custom_id in (CANCEL_ERASE, CANCEL_OPTOUT):
            return {
                "type": InteractionResponseType.UPDATE_MESSAGE,
                "data": webhook_edit("Cancelled: nothing was erased.", components=[]),
            }
        if invocation.custom_id in (CONFIRM_ERASE, CONFIRM_OPTOUT):
            work = "erase"
            if invocation.custom_id == CONFIRM_OPTOUT:
                if not self._services.settings.memory_enabled:
                    raise CommandError("Memory is off on this bot: nothing is kept about anyone.")
                self._services.opt_outs.opt_out(invocation.user_id)  # nothing new from now on
                work = "optout"
            self._defer(
                {
                    "work": work,
                    "interaction": deferred_interaction(invocation),
                    "failed": ERASE_FAILED,  # what the person is told if the work fails
                }
            )
            return {"type": InteractionResponseType.DEFERRED_UPDATE_MESSAGE}
        return ephemeral_reply("That button has expired.")

    # Staff --------------------------------------------------------------------------

    def _staff_user(self, invocation: Invocation) -> dict[str, Any]:
        invocation.snowflake(spec.OPTION_MEMBER)
        return self._deferred(invocation, "staff_user")

    def user_listing(self, scope: str, member: str) -> str:
        """Every fact kept about a member in a scope, with ids: active first, then demoted
        (`/memory-staff restore-fact` brings one back), then superseded."""
        now = self._services.clock.now_ms()
        facts = [
            f
            for f in self._services.repository.all_facts(scope, member)
            if ttl_alive(f.expires_at, now)
        ]
        if not facts:
            return f"I keep no facts about <@{member}> in this server."
        facts.sort(
            key=lambda f: (
                f.status != FactStatus.ACTIVE,
                f.status == FactStatus.SUPERSEDED,
                -f.updated_ms,
            )
        )
        lines = [_fact_line(f) + _status_mark(f) for f in facts]
        return _listing(f"Facts about <@{member}> ({len(facts)}):", lines)

    def _staff_quarantine(self, invocation: Invocation) -> dict[str, Any]:
        """Batches of this channel that failed even alone: consumed without facts, so staff
        can see what was not remembered and why."""
        now = self._services.clock.now_ms()
        records = [
            q
            for q in self._services.repository.quarantined(invocation.channel_id, MAX_LISTED)
            if ttl_alive(q.expires_at, now)
        ]
        if not records:
            return ephemeral_reply("Nothing in this channel was quarantined.")
        lines = [_quarantine_line(q) for q in records]
        return ephemeral_reply(
            _listing(
                f"Quarantined in this channel ({len(records)}), not remembered "
                "because the memory model kept failing on them:",
                lines,
            )
        )

    def _staff_reset_summary(self, invocation: Invocation) -> dict[str, Any]:
        """Clear the channel's rolling summary: a round already thinking over the old one
        cannot bring it back (its commit requires the summary it rewrote). The archived
        summaries stay searchable until they expire."""
        if not self._services.repository.clear_channel_summary(invocation.channel_id):
            return ephemeral_reply("This channel has no running summary.")
        log.info(
            "channel summary reset",
            extra={"channel_id": invocation.channel_id, "staff_id": invocation.user_id},
        )
        return ephemeral_reply(
            "This channel's running summary is cleared; the next batches start a new one. "
            "Earlier summaries stay searchable until they expire."
        )

    def _fact_here(self, invocation: Invocation, fact_id: str) -> Fact | None:
        """A fact by id, only when it belongs to this server."""
        fact = self._services.repository.fact_by_id(fact_id.strip().lower())
        return fact if fact is not None and fact.scope == invocation.scope else None

    def _pin_here(self, invocation: Invocation, pin_id: str) -> Pin | None:
        """A pin by id, only when it belongs to this server."""
        pin = self._services.repository.pin_by_id(pin_id.strip().lower())
        return pin if pin is not None and pin.scope == invocation.scope else None

    def _staff_forget_fact(self, invocation: Invocation) -> dict[str, Any]:
        fact = self._fact_here(invocation, invocation.text(spec.OPTION_ID))
        if fact is None:
            return ephemeral_reply("There is no fact with that id in this server.")
        self._delete_recorded([fact], HistoryActor.STAFF, invocation.user_id)
        return ephemeral_reply(
            f"Deleted `{fact.fact_id}` about <@{fact.user_id}>: {_shown(fact.text)}"
        )

    def _staff_restore_fact(self, invocation: Invocation) -> dict[str, Any]:
        """A demoted fact of this server's member active again (botmemory.hot_tier)."""
        member = invocation.snowflake(spec.OPTION_MEMBER)
        fact = self._fact_here(invocation, invocation.text(spec.OPTION_ID))
        if fact is None or fact.user_id != member:
            return ephemeral_reply(f"<@{member}> has no fact with that id in this server.")
        if fact.status != FactStatus.DEMOTED or not ttl_alive(
            fact.expires_at, self._services.clock.now_ms()
        ):
            return ephemeral_reply(
                f"`{fact.fact_id}` is not demoted: only a demoted fact can be restored."
            )
        if not self._hot_tier().restore(fact, invocation.user_id):
            return ephemeral_reply(
                f"`{fact.fact_id}` changed meanwhile (or its member is being erased): nothing "
                "was restored. `/memory-staff user` shows it as it is now."
            )
        return ephemeral_reply(
            f"Restored `{fact.fact_id}` about <@{fact.user_id}>: {_shown(fact.text)}"
        )

    def _hot_tier(self) -> HotTier:
        services = self._services
        return HotTier(
            services.repository, services.settings, services.clock, services.opt_outs.hash_of
        )

    def _delete_recorded(self, facts: list[Fact], actor: HistoryActor, actor_id: str) -> None:
        """Delete facts, each with its history entry, in one write per few facts."""
        now = self._services.clock.now_ms()
        retention = self._services.settings.fact_retention_days
        entries = [
            fact_history.deleted(
                f, actor=actor, at_ms=now, retention_days=retention, actor_id=actor_id
            )
            for f in facts
        ]
        self._services.repository.delete_facts(facts, entries)

    def _staff_history(self, invocation: Invocation) -> dict[str, Any]:
        """Every change to one fact of this server, oldest first: when, who, the texts."""
        fact_id = scrub(invocation.text(spec.OPTION_ID)).strip().lower()
        if not fact_id.isalnum() or len(fact_id) > 32:
            return ephemeral_reply("There is no fact with that id in this server.")
        now = self._services.clock.now_ms()
        entries = [
            e
            for e in self._services.repository.history_of(invocation.scope, fact_id)
            if ttl_alive(e.expires_at, now)
        ]
        if not entries:
            if self._fact_here(invocation, fact_id) is not None:
                return ephemeral_reply(f"No change to `{fact_id}` is on record.")
            return ephemeral_reply("There is no fact with that id in this server.")
        return ephemeral_reply(
            _listing(
                f"History of `{fact_id}` about <@{entries[0].user_id}>, oldest first:",
                [_history_line(e) for e in entries],
            )
        )

    # Asking -------------------------------------------------------------------------

    def _ask_question(self, invocation: Invocation) -> dict[str, Any]:
        """Hand the question to the answering function; the answer is for the channel, so
        the "thinking…" answer is public. A replay of this interaction gets the stored
        response from the handler's replay protection and asks nothing."""
        if self._ask is None:
            return ephemeral_reply("Answering is not set up on this bot.")
        question = scrub(invocation.text(spec.OPTION_QUESTION), keep_newlines=True)
        if not question:
            raise CommandError("That question is empty once invisible characters are removed.")
        if len(question) > spec.MAX_QUESTION_LENGTH:
            raise CommandError(
                f"Please keep a question to {spec.MAX_QUESTION_LENGTH} characters "
                f"(yours has {len(question)})."
            )
        self._ask({"ask": {"interaction": deferred_interaction(invocation), "question": question}})
        return {"type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE}

    def _staff_pin(self, invocation: Invocation) -> dict[str, Any]:
        where = invocation.text(spec.OPTION_WHERE)
        if where not in (spec.WHERE_GLOBAL, spec.WHERE_CHANNEL):
            raise CommandError("Choose where the pin applies: global or channel.")
        text = self._checked_text(invocation.text(spec.OPTION_TEXT))
        if (
            len(self._services.repository.scope_pins(invocation.scope, MAX_PINS_PER_SCOPE))
            >= MAX_PINS_PER_SCOPE
        ):
            raise CommandError(
                f"This server already has {MAX_PINS_PER_SCOPE} pins; unpin one first."
            )
        now = self._services.clock.now_ms()
        target = "global" if where == spec.WHERE_GLOBAL else invocation.channel_id
        pin = Pin(
            pin_id=short_id(content_hash("pin", invocation.scope, target, normalized(text))),
            scope=invocation.scope,
            target=target,
            text=text,
            author_id=invocation.user_id,
            created_ms=now,
        )
        self._services.repository.put_pin(pin)
        place = "everywhere in this server" if target == "global" else "in this channel"
        return ephemeral_reply(f"Pinned `{pin.pin_id}` {place}: {_shown(text)}")

    def _staff_unpin(self, invocation: Invocation) -> dict[str, Any]:
        pin = self._pin_here(invocation, invocation.text(spec.OPTION_ID))
        if pin is None:
            return ephemeral_reply("There is no pin with that id in this server.")
        self._services.repository.delete_pin(pin)
        return ephemeral_reply(f"Unpinned `{pin.pin_id}`: {_shown(pin.text)}")

    # Autocomplete and deferral ------------------------------------------------------

    def _autocomplete(self, invocation: Invocation) -> dict[str, Any]:
        typed = str(invocation.options.get(invocation.focused or "", "") or "").lower()
        choices: list[tuple[str, str]] = []
        if invocation.command == spec.MEMBER_COMMAND and invocation.subcommand == spec.FORGET:
            choices = [(f.fact_id, f.text) for f in self._my_facts(invocation)]
        elif invocation.command == spec.STAFF_COMMAND and invocation.is_staff:
            if invocation.subcommand == spec.UNPIN:
                choices = [
                    (p.pin_id, p.text)
                    for p in self._services.repository.scope_pins(
                        invocation.scope, MAX_PINS_PER_SCOPE
                    )
                ]
            elif invocation.subcommand in (spec.FORGET_FACT, spec.HISTORY) and typed:
                fact = self._fact_here(invocation, typed)
                choices = [(fact.fact_id, fact.text)] if fact else []
            elif invocation.subcommand == spec.RESTORE_FACT:
                choices = self._demoted_choices(invocation, typed)
        matches = [
            # Choice names are plain text to Discord: only mentions need defusing.
            {
                "name": clip(f"{item_id}: {as_discord_text(scrub(text), markdown=False)}", 100),
                "value": item_id,
            }
            for item_id, text in choices
            if not typed or item_id.startswith(typed) or typed in text.lower()
        ]
        return {
            "type": InteractionResponseType.APPLICATION_COMMAND_AUTOCOMPLETE_RESULT,
            "data": {"choices": matches[:MAX_LISTED]},
        }

    def _demoted_choices(self, invocation: Invocation, typed: str) -> list[tuple[str, str]]:
        """What restore-fact offers: the chosen member's demoted facts here, or (no member
        chosen yet) the demoted fact whose id is typed."""
        member = invocation.options.get(spec.OPTION_MEMBER)
        if isinstance(member, str) and member.isdigit():
            now = self._services.clock.now_ms()
            facts = self._services.repository.all_facts(invocation.scope, member)
            demoted = [f for f in facts if ttl_alive(f.expires_at, now)]
        else:
            fact = self._fact_here(invocation, typed) if typed else None
            demoted = [fact] if fact is not None else []
        return [(f.fact_id, f.text) for f in demoted if f.status == FactStatus.DEMOTED]

    def _deferred(self, invocation: Invocation, work: str) -> dict[str, Any]:
        self._defer({"work": work, "interaction": deferred_interaction(invocation)})
        return {
            "type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
            "data": {"flags": MessageFlag.EPHEMERAL},
        }


def _confirmation(label: str, confirm: str, cancel: str) -> list[dict[str, Any]]:
    """A danger button that does it and a button that cancels."""
    return [
        {
            "type": ComponentType.ACTION_ROW,
            "components": [
                {
                    "type": ComponentType.BUTTON,
                    "style": ButtonStyle.DANGER,
                    "label": label,
                    "custom_id": confirm,
                },
                {
                    "type": ComponentType.BUTTON,
                    "style": ButtonStyle.SECONDARY,
                    "label": "Cancel",
                    "custom_id": cancel,
                },
            ],
        }
    ]


def deferred_interaction(invocation: Invocation) -> dict[str, Any]:
    """What deferred work needs of the interaction, in the interaction's own shape."""
    options = [{"name": k, "value": v} for k, v in invocation.options.items()]
    return {
        "id": invocation.interaction_id,
        "token": invocation.token,
        "application_id": invocation.application_id,
        "type": invocation.kind,
        "guild_id": invocation.guild_id,
        "channel_id": invocation.channel_id,
        "member": {
            "user": {"id": invocation.user_id, "global_name": invocation.user_name},
            "permissions": str(invocation.permissions),
        },
        "data": {
            "name": invocation.command,
            "options": [
                {"name": invocation.subcommand, "type": OptionType.SUB_COMMAND, "options": options}
            ]
            if invocation.subcommand
            else options,
        },
    }


def user_facts_listing(services: MemoryServices, scope: str, user_id: str) -> str:
    """Staff view of one member (what `/memory-staff user` answers), for local runs."""
    return Commands(services, defer=lambda job: None).user_listing(scope, user_id)
