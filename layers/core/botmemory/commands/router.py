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
Every change to a fact made here is kept in its history (botmemory.memory.fact_history).

Personas (botmemory.memory.personas) are configuration staff own (`/memory-staff persona ...`, a
subcommand group); people stay in control of what each persona keeps about them: `/memory
show` lists it by persona, `/memory forget` works on it, staff find it by id like any fact of
their server. A persona's own knowledge is no one's: no member can forget it, staff can.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botmemory.clock import DAY_MS, day, epoch_seconds, moment, ttl_alive
from botmemory.commands import specs as spec
from botmemory.discord.interactions import (
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
from botmemory.memory import fact_history
from botmemory.memory.behaviour import behaviour_request
from botmemory.memory.hot_tier import HotTier
from botmemory.memory.personas import (
    MAX_PERSONAS_PER_SERVER,
    PersonaError,
    active_persona,
    check_name,
    check_persona_id,
    check_prompt,
    new_lineage,
)
from botmemory.memory.visibility import Where, learned_where, place_label
from botmemory.people.erasure import Eraser, ErasureReport
from botmemory.people.names import NameIndex, names_pattern
from botmemory.recall.block import MAX_REGISTRY_NAMES, SECTION_HEADINGS
from botmemory.records import (
    Fact,
    FactChange,
    FactHistory,
    FactKind,
    FactSource,
    FactStatus,
    Forgotten,
    HistoryActor,
    MemoryScope,
    Persona,
    Pin,
    Quarantine,
    scope_of,
)
from botmemory.services import MemoryServices
from botmemory.storage import keys
from botmemory.storage.keys import message_of
from botmemory.storage.personas import PersonaConflict, PersonaPurge
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
# `/memory remember` of an instruction to the bot (botmemory.memory.behaviour): nothing is stored.
BEHAVIOUR_REFUSAL = (
    "That reads as an instruction for how I should behave (how to answer or address you, "
    "rules to ignore, a role to play), not a fact about you, so I did not remember it. "
    "State a fact about yourself instead, such as `I prefer short answers` or "
    "`My nickname is Ally`."
)
# A purge's confirm button names the persona and the lineage the staff member saw:
# `persona-purge:confirm:{persona id}:{lineage id}` (at most 22 + 32 + 1 + 40 characters,
# inside Discord's 100 for a custom id).
CONFIRM_PURGE_PERSONA = "persona-purge:confirm:"
CANCEL_PURGE_PERSONA = "persona-purge:cancel"
# Commands that work with memory off: erasure, answering, and personas as configuration
# (teaching one writes memory, so it is not among them).
WITHOUT_MEMORY = {
    (spec.FORGETME_COMMAND, "", ""),
    (spec.ASK_COMMAND, "", ""),
    *(
        (spec.STAFF_COMMAND, spec.PERSONA_GROUP, sub)
        for sub in spec.PERSONA_SUBCOMMANDS
        if sub != spec.PERSONA_TEACH
    ),
}
# Commands that only read: no replay protection (see `Commands.changes_nothing`).
READS = {
    (spec.MEMBER_COMMAND, "", spec.SHOW),
    (spec.STAFF_COMMAND, "", spec.USER),
    (spec.STAFF_COMMAND, "", spec.QUARANTINE),
    (spec.STAFF_COMMAND, "", spec.HISTORY),
    (spec.STAFF_COMMAND, spec.PERSONA_GROUP, spec.PERSONA_LIST),
}
# A mention of any kind, or a bare Discord id: a persona's knowledge names no one.
_MENTION_OR_ID = re.compile(r"<[@#][!&]?\d+>|(?<!\d)\d{15,20}(?!\d)")
# What an erasure erases, as the confirmations say it (keep it true to erasure.py).
ERASES = (
    "everything I keep about you, in every server and in DMs: your facts and profile, your "
    "recorded messages and reactions, the channel summaries you took part in or that name "
    "you, pins made in your name; and your mentions (and any name that is yours alone) are "
    "taken out of other people's recorded messages that I know name you"
)
PURGE_FAILED = (
    "I could not finish purging that persona. What is deleted stays deleted; run "
    "`/memory-staff persona purge` again to finish."
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
    group: str = ""  # a subcommand group's name, `persona` in `/memory-staff persona set`
    subcommand: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    focused: str | None = None
    custom_id: str = ""

    @property
    def scope(self) -> str:
        return scope_of(self.guild_id)

    @property
    def path(self) -> tuple[str, str, str]:
        """What was run: (command, group, subcommand), "" where there is none."""
        return self.command, self.group, self.subcommand

    @property
    def label(self) -> str:
        """What was run, as Discord shows it: `/memory-staff persona set`."""
        return "/" + " ".join(part for part in self.path if part)

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
    options = _nested(data.get("options"))
    if _is(options, OptionType.SUB_COMMAND_GROUP):
        invocation.group = str(options[0].get("name", ""))
        options = _nested(options[0].get("options"))
    if _is(options, OptionType.SUB_COMMAND):
        invocation.subcommand = str(options[0].get("name", ""))
        options = _nested(options[0].get("options"))
    for option in options:
        if isinstance(option, dict) and "name" in option:
            invocation.options[str(option["name"])] = option.get("value")
            if option.get("focused"):
                invocation.focused = str(option["name"])
    return invocation


def _nested(options: Any) -> list[Any]:
    """An `options` list as a request carries it (anything else: none)."""
    return options if isinstance(options, list) else []


def _is(options: list[Any], kind: OptionType) -> bool:
    """Whether these options are one subcommand (or group) of this kind."""
    return bool(options) and isinstance(options[0], dict) and options[0].get("type") == kind


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
    return (
        f"`{fact.fact_id}` {_shown(fact.text)} ({fact.kind.value}, {fact.source.value}, "
        f"{day(fact.updated_ms)}; {place_label(fact)})"
    )


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
            lineages=services.personas.lineages_of,
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
        return invocation.kind == InteractionType.APPLICATION_COMMAND and invocation.path in READS

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
        if work == "persona_purge" and invocation.guild_id is not None:
            answer = self._purge(
                invocation.guild_id, str(job.get("persona_id")), str(job.get("lineage_id"))
            )
            return webhook_edit(answer, components=[])
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
        persona = (spec.STAFF_COMMAND, spec.PERSONA_GROUP)
        routes: dict[tuple[str, str, str], Callable[[Invocation], dict[str, Any]]] = {
            (spec.MEMBER_COMMAND, "", spec.SHOW): self._show,
            (spec.MEMBER_COMMAND, "", spec.REMEMBER): self._remember,
            (spec.MEMBER_COMMAND, "", spec.FORGET): self._forget,
            (spec.MEMBER_COMMAND, "", spec.OPTOUT): self._optout,
            (spec.MEMBER_COMMAND, "", spec.OPTIN): self._optin,
            (spec.FORGETME_COMMAND, "", ""): self._forgetme,
            (spec.STAFF_COMMAND, "", spec.USER): self._staff_user,
            (spec.STAFF_COMMAND, "", spec.FORGET_FACT): self._staff_forget_fact,
            (spec.STAFF_COMMAND, "", spec.RESTORE_FACT): self._staff_restore_fact,
            (spec.STAFF_COMMAND, "", spec.PIN): self._staff_pin,
            (spec.STAFF_COMMAND, "", spec.UNPIN): self._staff_unpin,
            (spec.STAFF_COMMAND, "", spec.QUARANTINE): self._staff_quarantine,
            (spec.STAFF_COMMAND, "", spec.HISTORY): self._staff_history,
            (spec.STAFF_COMMAND, "", spec.RESET_SUMMARY): self._staff_reset_summary,
            (*persona, spec.PERSONA_SET): self._persona_set,
            (*persona, spec.PERSONA_LIST): self._persona_list,
            (*persona, spec.PERSONA_REMOVE): self._persona_remove,
            (*persona, spec.PERSONA_PURGE): self._persona_purge,
            (*persona, spec.PERSONA_TEACH): self._persona_teach,
            (spec.ASK_COMMAND, "", ""): self._ask_question,
        }
        route = routes.get(invocation.path)
        if route is None:
            label = scrub(invocation.label)
            return ephemeral_reply(f"Sorry, I don't know the command `{clip(label, 60)}`.")
        if invocation.command == spec.STAFF_COMMAND and not invocation.is_staff:
            return ephemeral_reply(
                "Only members with the Manage Server permission can use this command."
            )
        if invocation.path not in WITHOUT_MEMORY and not self._services.settings.memory_enabled:
            return ephemeral_reply("Memory is off on this bot: nothing is kept about anyone.")
        return route(invocation)

    def _my_facts(self, invocation: Invocation) -> list[Fact]:
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
        for persona in self._personas_here(invocation):
            scopes.append((persona, kept(keys.persona_scope(invocation.scope, persona.lineage_id))))
        return [(persona, facts) for persona, facts in scopes if facts]

    def _personas_here(self, invocation: Invocation) -> list[Persona]:
        """The personas whose memories live in this server: live ones (the server's, then
        the deployment's), then removed ones; one per lineage, at most
        MAX_PERSONAS_PER_SERVER. None in direct messages."""
        server, deployment = self._services.personas.of_server(invocation.guild_id)
        ordered = [p for p in server if p.active] + deployment + [p for p in server if not p.active]
        by_lineage: dict[str, Persona] = {}
        for persona in ordered:
            by_lineage.setdefault(persona.lineage_id, persona)
        return list(by_lineage.values())[:MAX_PERSONAS_PER_SERVER]

    def _show(self, invocation: Invocation) -> dict[str, Any]:
        by_scope = self._my_facts_by_scope(invocation)
        facts = [fact for _, scoped in by_scope for fact in scoped]
        lines: list[str] = []
        for persona, scoped in by_scope:
            heading = "About you (every persona here):"
            if persona is not None:
                removed = "" if persona.active else " (removed: kept until staff purge it)"
                heading = f"What {_shown(persona.name)} knows about you{removed}:"
            lines += [heading] + [_fact_line(f) + _status_mark(f) for f in scoped]
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
        if behaviour_request(text):
            raise CommandError(BEHAVIOUR_REFUSAL)
        if self._services.opt_outs.is_opted_out(invocation.user_id):
            raise CommandError(
                "You are opted out, so I keep nothing about you. Use `/memory optin` first."
            )
        now = self._services.clock.now_ms()
        repository = self._services.repository
        fact_id = short_id(content_hash(invocation.scope, invocation.user_id, normalized(text)))
        previous = repository.fact(invocation.scope, invocation.user_id, fact_id)
        fact = Fact(
            fact_id=fact_id,
            scope=invocation.scope,
            user_id=invocation.user_id,
            text=text,
            kind=FactKind.FACT,
            source=FactSource.MANUAL,
            created_ms=now,
            updated_ms=now,
            expires_at=epoch_seconds(now + self._services.settings.fact_retention_days * DAY_MS),
        ).model_copy(update=self._learned_here(invocation, previous).fields())
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

    def _learned_here(self, invocation: Invocation, previous: Fact | None = None) -> Where:
        """Where a fact written by a command is shown (botmemory.memory.visibility): the channel
        the command was used in, public when @everyone can view it, added to where the same
        fact was learned before."""
        channel = invocation.channel_id
        public = invocation.guild_id is not None and self._services.repository.channel_is_public(
            invocation.guild_id, channel
        )
        return learned_where(channel, public).added_to(previous)

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
        if invocation.custom_id == CANCEL_PURGE_PERSONA:
            return {
                "type": InteractionResponseType.UPDATE_MESSAGE,
                "data": webhook_edit("Cancelled: nothing was purged.", components=[]),
            }
        if invocation.custom_id.startswith(CONFIRM_PURGE_PERSONA):
            return self._confirm_purge(invocation)
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
        """A fact by id, only when it belongs to this server (its personas' included)."""
        fact = self._services.repository.fact_by_id(fact_id.strip().lower())
        if fact is None or keys.server_scope_of(fact.scope) != invocation.scope:
            return None
        return fact

    def _whose(self, invocation: Invocation, scope: str, user_id: str) -> str:
        """Whose a fact of this server is, as staff answers say it: `about <@id>`, with the
        persona that keeps it, if any."""
        lineage = keys.lineage_of(scope)
        if lineage is None:
            return f"about <@{user_id}>"
        known = {p.lineage_id: p for p in self._personas_here(invocation)}
        persona = known.get(lineage)
        name = f"{_shown(persona.name)} (`{persona.persona_id}`)" if persona else "a persona"
        if user_id == keys.PERSONA_SUBJECT:
            return f"known to {name} for everyone"
        return f"about <@{user_id}>, as {name} knows them"

    def _pin_here(self, invocation: Invocation, pin_id: str) -> Pin | None:
        """A pin by id, only when it belongs to this server."""
        pin = self._services.repository.pin_by_id(pin_id.strip().lower())
        return pin if pin is not None and pin.scope == invocation.scope else None

    def _staff_forget_fact(self, invocation: Invocation) -> dict[str, Any]:
        fact = self._fact_here(invocation, invocation.text(spec.OPTION_ID))
        if fact is None:
            return ephemeral_reply("There is no fact with that id in this server.")
        self._delete_recorded([fact], HistoryActor.STAFF, invocation.user_id)
        whose = self._whose(invocation, fact.scope, fact.user_id)
        return ephemeral_reply(f"Deleted `{fact.fact_id}` {whose}: {_shown(fact.text)}")

    def _staff_restore_fact(self, invocation: Invocation) -> dict[str, Any]:
        """A demoted fact of this server's member active again (botmemory.memory.hot_tier)."""
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
        """Forget facts: each deleted with its history entry and its forget tombstone, in
        one write per few facts. The tombstone keeps a consolidation round from bringing
        one back from words said before now (one thinking meanwhile included: its commit is
        conditioned on it); it lasts as long as those words can (observation retention)."""
        now = self._services.clock.now_ms()
        settings = self._services.settings
        retention = settings.fact_retention_days
        entries = [
            fact_history.deleted(
                f, actor=actor, at_ms=now, retention_days=retention, actor_id=actor_id
            )
            for f in facts
        ]
        until = epoch_seconds(now + settings.observation_retention_days * DAY_MS)
        tombstones = [
            Forgotten(
                scope=f.scope,
                user_id=f.user_id,
                fact_id=f.fact_id,
                forgotten_ms=now,
                expires_at=until,
            )
            for f in facts
        ]
        self._services.repository.delete_facts(facts, entries, tombstones)

    def _staff_history(self, invocation: Invocation) -> dict[str, Any]:
        """Every change to one fact of this server, oldest first: when, who, the texts."""
        fact_id = scrub(invocation.text(spec.OPTION_ID)).strip().lower()
        if not fact_id.isalnum() or len(fact_id) > 32:
            return ephemeral_reply("There is no fact with that id in this server.")
        now = self._services.clock.now_ms()
        fact = self._fact_here(invocation, fact_id)
        # Its history is in its scope's partition: the fact's, or (a fact since deleted) the
        # server's or one of its personas'.
        scopes = [fact.scope] if fact is not None else [invocation.scope]
        if fact is None:
            lineages = [p.lineage_id for p in self._personas_here(invocation)]
            scopes += [keys.persona_scope(invocation.scope, lineage) for lineage in lineages]
        entries: list[FactHistory] = []
        for scope in scopes:
            entries = [
                e
                for e in self._services.repository.history_of(scope, fact_id)
                if ttl_alive(e.expires_at, now)
            ]
            if entries:
                break
        if not entries:
            if fact is not None:
                return ephemeral_reply(f"No change to `{fact_id}` is on record.")
            return ephemeral_reply("There is no fact with that id in this server.")
        whose = self._whose(invocation, entries[0].scope, entries[0].user_id)
        return ephemeral_reply(
            _listing(
                f"History of `{fact_id}` {whose}, oldest first:",
                [_history_line(e) for e in entries],
            )
        )

    # Personas (staff) ---------------------------------------------------------------

    def _persona_set(self, invocation: Invocation) -> dict[str, Any]:
        """Create a server persona, or change one: a change keeps its lineage (its memories
        follow it); a channel (or the whole server) has at most one live server persona."""
        guild_id = _guild_of(invocation)
        try:
            persona_id = check_persona_id(_persona_id(invocation))
            name = check_name(scrub(invocation.text(spec.OPTION_NAME)))
            prompt = check_prompt(_prompt_text(invocation.text(spec.OPTION_PROMPT)))
        except PersonaError as error:
            raise CommandError(f"Nothing was changed: {error}.") from error
        where = invocation.options.get(spec.OPTION_WHERE)
        if where not in (None, spec.WHERE_CHANNEL, spec.WHERE_GLOBAL):
            raise CommandError("Choose where it answers: this channel or the whole server.")
        repository = self._services.repository
        server = repository.personas_of(guild_id)
        stored = next((p for p in server if p.persona_id == persona_id), None)
        live = stored if stored is not None and stored.active else None
        if (
            stored is not None
            and live is None
            and repository.persona_holds_memories(guild_id, stored.lineage_id)
        ):
            # A new persona under this id would leave the removed one's memories unreachable.
            raise CommandError(
                f"`{persona_id}` was removed and its memories are kept until it is purged: "
                f"`/memory-staff persona purge {persona_id}` first, or choose another id."
            )
        channels = _places(live, where, invocation.channel_id)
        others = [p for p in server if p.active and p.persona_id != persona_id]
        holder = _holder(others, channels)
        if holder is not None:
            place = f"<#{holder[1]}>" if holder[1] else "The whole server"
            raise CommandError(
                f"{place} already has a persona: {_shown(holder[0].name)} "
                f"(`{holder[0].persona_id}`). Remove it or move it first; nothing was changed."
            )
        if live is None and len(others) >= MAX_PERSONAS_PER_SERVER:
            raise CommandError(
                f"This server already has {MAX_PERSONAS_PER_SERVER} personas; remove one first."
            )
        now = self._services.clock.now_ms()
        persona = Persona(
            persona_id=persona_id,
            lineage_id=live.lineage_id if live else new_lineage(guild_id, persona_id, now),
            name=name,
            prompt=prompt,
            guild_id=guild_id,
            channels=channels,
            created_ms=live.created_ms if live else now,
            updated_ms=now,
        )
        try:
            repository.put_persona(persona, replaces_ms=live.updated_ms if live else None)
        except PersonaConflict:
            raise CommandError(_changed_meanwhile(persona_id)) from None
        done = "Changed" if live else "Created"
        kept = " Its memories stay with it." if live else ""
        return ephemeral_reply(
            f"{done} persona `{persona_id}` ({_shown(name)}): it answers in "
            f"{_where(persona)}.{kept}"
        )

    def _persona_list(self, invocation: Invocation) -> dict[str, Any]:
        """The server's personas, then the deployment's: where each answers, which one
        answers in this channel; removed ones marked."""
        server, deployment = self._services.personas.of_server(_guild_of(invocation))
        here = active_persona(server, deployment, invocation.channel_id)
        live = [p for p in server if p.active]
        lines = [_persona_line(p, here) for p in live + [p for p in server if not p.active]]
        if deployment:
            lines += ["The deployment's (this server's own come first):"]
            lines += [_persona_line(p, here) for p in deployment]
        now_here = (
            f"In this channel the bot answers as {_shown(here.name)} (`{here.persona_id}`)."
            if here is not None
            else "No persona answers in this channel: the bot answers as itself."
        )
        if not server and not deployment:
            return ephemeral_reply(
                "This server has no personas. `/memory-staff persona set` creates one."
            )
        return ephemeral_reply(
            _listing(
                f"{now_here}\nThis server's personas ({len(live)} of at most "
                f"{MAX_PERSONAS_PER_SERVER}):",
                lines,
            )
        )

    def _persona_remove(self, invocation: Invocation) -> dict[str, Any]:
        """A server persona answers nowhere from now on; its memories stay until purged."""
        guild_id = _guild_of(invocation)
        persona_id = _persona_id(invocation)
        stored = self._services.repository.persona_item(guild_id, persona_id)
        if stored is None or not stored.active:
            return ephemeral_reply(self._not_live(invocation, persona_id, stored))
        now = self._services.clock.now_ms()
        removed = stored.model_copy(update={"removed_ms": now, "updated_ms": now})
        try:
            self._services.repository.put_persona(removed, replaces_ms=stored.updated_ms)
        except PersonaConflict:
            raise CommandError(_changed_meanwhile(persona_id)) from None
        return ephemeral_reply(
            f"Removed persona `{persona_id}` ({_shown(stored.name)}): it answers nowhere now. "
            f"Its memories are kept until it is purged (`/memory-staff persona purge "
            f"{persona_id}`)."
        )

    def _persona_purge(self, invocation: Invocation) -> dict[str, Any]:
        """Ask before purging a removed server persona (the buttons name its lineage, so what
        is purged is what was confirmed)."""
        guild_id = _guild_of(invocation)
        persona_id = _persona_id(invocation)
        stored = self._services.repository.persona_item(guild_id, persona_id)
        if stored is None:
            return ephemeral_reply(self._not_live(invocation, persona_id, stored))
        if stored.active:
            return ephemeral_reply(
                f"`{persona_id}` still answers: only a removed persona can be purged "
                f"(`/memory-staff persona remove {persona_id}` first)."
            )
        return ephemeral_reply(
            f"Purging `{persona_id}` ({_shown(stored.name)}) deletes for good everything it "
            "remembers in this server: what it knows for everyone, what it knows of each "
            "person, and their history; then the persona itself. It cannot be undone.",
            components=_confirmation(
                "Purge",
                f"{CONFIRM_PURGE_PERSONA}{persona_id}:{stored.lineage_id}",
                CANCEL_PURGE_PERSONA,
            ),
        )

    def _confirm_purge(self, invocation: Invocation) -> dict[str, Any]:
        """The purge confirmed: done in deferred work, which edits the confirmation."""
        if not invocation.is_staff:
            return ephemeral_reply(
                "Only members with the Manage Server permission can purge a persona."
            )
        persona_id, _, lineage_id = invocation.custom_id.removeprefix(
            CONFIRM_PURGE_PERSONA
        ).partition(":")
        try:
            check_persona_id(persona_id)
        except PersonaError:
            return ephemeral_reply("That button has expired.")
        self._defer(
            {
                "work": "persona_purge",
                "persona_id": persona_id,
                "lineage_id": lineage_id,
                "interaction": deferred_interaction(invocation),
                "failed": PURGE_FAILED,
            }
        )
        return {"type": InteractionResponseType.DEFERRED_UPDATE_MESSAGE}

    def _purge(self, guild_id: str, persona_id: str, lineage_id: str) -> str:
        """Purge the removed persona that was confirmed, if it is still that one."""
        stored = self._services.repository.persona_item(guild_id, persona_id)
        if stored is None:
            return f"`{persona_id}` is already purged."
        if stored.active or stored.lineage_id != lineage_id:
            return (
                f"`{persona_id}` changed since you confirmed: nothing was purged. Run "
                "`/memory-staff persona purge` again if you still mean it."
            )
        report: PersonaPurge = self._services.repository.purge_persona(stored)
        log.info(
            "persona purged",
            extra={"guild_id": guild_id, "persona_id": persona_id, "lineage_id": lineage_id},
        )
        gone = "" if report.persona_deleted else " (its id was set again meanwhile and stays)"
        return f"Purged `{persona_id}` ({_shown(stored.name)}){gone}: {report.summary()}."

    def _persona_teach(self, invocation: Invocation) -> dict[str, Any]:
        """Staff teach a live persona something it knows for everyone: persona knowledge,
        about no one (no mention, no id, no member's name), with its history entry."""
        guild_id = _guild_of(invocation)
        persona_id = _persona_id(invocation)
        persona = self._services.personas.by_id(guild_id, persona_id)
        if persona is None:
            stored = self._services.repository.persona_item(guild_id, persona_id)
            return ephemeral_reply(self._not_live(invocation, persona_id, stored))
        text = self._checked_text(invocation.text(spec.OPTION_TEXT))
        if _MENTION_OR_ID.search(text):
            raise CommandError(
                "A persona's knowledge is about no one: please leave out mentions and ids."
            )
        repository = self._services.repository
        if NameIndex(repository.name_registry(invocation.scope, MAX_REGISTRY_NAMES), {}).named_in(
            text
        ):
            raise CommandError(
                "That names a member of this server. A persona's knowledge is about no one; "
                "what it knows of a person, it learns from them."
            )
        now = self._services.clock.now_ms()
        retention = self._services.settings.fact_retention_days
        scope = keys.persona_scope(invocation.scope, persona.lineage_id)
        fact_id = short_id(content_hash(scope, keys.PERSONA_SUBJECT, normalized(text)))
        previous = repository.fact(scope, keys.PERSONA_SUBJECT, fact_id)
        fact = Fact(
            fact_id=fact_id,
            scope=scope,
            user_id=keys.PERSONA_SUBJECT,
            text=text,
            kind=FactKind.FACT,
            source=FactSource.OPERATOR,
            created_ms=previous.created_ms if previous else now,
            updated_ms=now,
            expires_at=epoch_seconds(now + retention * DAY_MS),
            memory_scope=MemoryScope.PERSONA,
            lineage_id=persona.lineage_id,
        ).model_copy(update=self._learned_here(invocation, previous).fields())
        entry = fact_history.written(
            previous,
            fact,
            actor=HistoryActor.STAFF,
            at_ms=now,
            retention_days=retention,
            actor_id=invocation.user_id,
        )
        repository.put_fact(fact, entry)
        return ephemeral_reply(
            f"Taught {_shown(persona.name)} (`{persona.persona_id}`), as `{fact_id}`: "
            f"{_shown(text)}"
        )

    def _not_live(self, invocation: Invocation, persona_id: str, stored: Persona | None) -> str:
        """Why a persona id names no live server persona here."""
        persona_id = scrub(persona_id)
        if stored is not None:
            return (
                f"`{persona_id}` is removed: it answers nowhere; its memories are kept until "
                f"it is purged (`/memory-staff persona purge {persona_id}`)."
            )
        _, deployment = self._services.personas.of_server(invocation.guild_id)
        if any(p.persona_id == persona_id for p in deployment):
            return (
                f"`{persona_id}` is the deployment's persona: ops change it in its parameter "
                "(PERSONAS_PARAMETER)."
            )
        return f"There is no persona `{clip(persona_id, 40)}` in this server."

    def _persona_choices(self, invocation: Invocation) -> list[tuple[str, str]]:
        """What a persona subcommand's `id` offers: the personas it can act on here."""
        server, deployment = self._services.personas.of_server(invocation.guild_id)
        offered = {
            spec.PERSONA_SET: [p for p in server if p.active],
            spec.PERSONA_REMOVE: [p for p in server if p.active],
            spec.PERSONA_PURGE: [p for p in server if not p.active],
            spec.PERSONA_TEACH: [p for p in server if p.active] + deployment,
        }.get(invocation.subcommand, [])
        return [(p.persona_id, p.name) for p in offered]

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
        if invocation.path == (spec.MEMBER_COMMAND, "", spec.FORGET):
            choices = [(f.fact_id, f.text) for f in self._my_facts(invocation)]
        elif invocation.command == spec.STAFF_COMMAND and invocation.is_staff:
            if invocation.group == spec.PERSONA_GROUP:
                choices = self._persona_choices(invocation)
            elif invocation.subcommand == spec.UNPIN:
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


def _guild_of(invocation: Invocation) -> str:
    if invocation.guild_id is None:  # staff commands are for servers (`is_staff`)
        raise CommandError("This command works in a server only.")
    return invocation.guild_id


def _persona_id(invocation: Invocation) -> str:
    """The `id` option as persona ids are written: lower case, no surrounding spaces."""
    return scrub(invocation.text(spec.OPTION_ID)).lower()


def _prompt_text(raw: str) -> str:
    """A persona's prompt as stored: each line scrubbed, its paragraphs kept."""
    return "\n".join(scrub(line) for line in raw.splitlines()).strip()


def _changed_meanwhile(persona_id: str) -> str:
    return f"`{persona_id}` changed meanwhile: nothing was written. Please try again."


def _places(live: Persona | None, where: Any, channel_id: str) -> list[str]:
    """The channels a persona set here answers in ([]: the whole server): `where` unset
    keeps a persona's places (a new one: this channel); this channel is added to its
    channels (a whole-server persona narrowed to it); the whole server is every channel."""
    if where == spec.WHERE_GLOBAL:
        return []
    if where is None and live is not None:
        return list(live.channels)
    if live is not None and live.channels and where == spec.WHERE_CHANNEL:
        return list(dict.fromkeys([*live.channels, channel_id]))
    return [channel_id]


def _holder(others: list[Persona], channels: list[str]) -> tuple[Persona, str] | None:
    """Another live server persona already holding one of these channels (or, for [], the
    whole server), with the channel ("" for the whole server)."""
    for persona in others:
        if not channels and not persona.channels:
            return persona, ""
        for channel_id in channels:
            if channel_id in persona.channels:
                return persona, channel_id
    return None


def _where(persona: Persona) -> str:
    if not persona.channels:
        return "the whole server"
    return ", ".join(f"<#{c}>" for c in persona.channels)


def _persona_line(persona: Persona, here: Persona | None) -> str:
    """A persona in `/memory-staff persona list`."""
    line = f"`{persona.persona_id}` {_shown(persona.name)}: "
    if not persona.active:
        return line + (
            f"removed {day(persona.removed_ms or 0)}, answers nowhere; memories kept until purged"
        )
    line += f"answers in {_where(persona)}"
    if here is not None and (here.persona_id, here.guild_id) == (
        persona.persona_id,
        persona.guild_id,
    ):
        line += " (in this channel)"
    return line


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
    options: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in invocation.options.items()]
    if invocation.subcommand:
        options = [
            {"name": invocation.subcommand, "type": OptionType.SUB_COMMAND, "options": options}
        ]
    if invocation.group:
        options = [
            {"name": invocation.group, "type": OptionType.SUB_COMMAND_GROUP, "options": options}
        ]
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
        "data": {"name": invocation.command, "options": options},
    }


def user_facts_listing(services: MemoryServices, scope: str, user_id: str) -> str:
    """Staff view of one member (what `/memory-staff user` answers), for local runs."""
    return Commands(services, defer=lambda job: None).user_listing(scope, user_id)
