"""Slash commands: members see and control what is kept about them; staff review and steer it.

Every answer is ephemeral, scrubbed, and sent with `allowed_mentions: {"parse": []}`, so
stored text never pings anyone. Staff rights are checked here from `member.permissions`
on every call, whatever the command's registration says. Work that may outlast Discord's
3 seconds (erasure, long listings) answers "thinking…" at once and finishes through the
interaction webhook (see `Deferrer`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botmemory import command_specs as spec
from botmemory import keys
from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.erasure import Eraser, names_pattern
from botmemory.interactions import (
    APPLICATION_COMMAND,
    APPLICATION_COMMAND_AUTOCOMPLETE,
    APPLICATION_COMMAND_AUTOCOMPLETE_RESULT,
    DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
    EPHEMERAL,
    MESSAGE_COMPONENT,
    ephemeral_message,
    invoking_user,
)
from botmemory.records import Fact, FactKind, FactSource, FactStatus, Pin, scope_of
from botmemory.repository import ttl_alive
from botmemory.runtime import MemoryServices
from botmemory.text import clip, content_hash, normalized, scrub, short_id

ADMINISTRATOR = 1 << 3
DEFERRED_UPDATE_MESSAGE = 6
UPDATE_MESSAGE = 7
MAX_LISTED = 25
MAX_PINS_PER_SCOPE = 50
CONFIRM_ERASE = "forgetme:confirm"
CANCEL_ERASE = "forgetme:cancel"
# Text that could ping people or impersonate a mention if it were ever shown outside an answer.
_PINGS = re.compile(r"@(everyone|here)\b|<@[!&]?\d+>|<#\d+>", re.IGNORECASE)


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
            self.permissions & (spec.MANAGE_GUILD | ADMINISTRATOR)
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
    if options and isinstance(options[0], dict) and options[0].get("type") == spec.SUB_COMMAND:
        invocation.subcommand = str(options[0].get("name", ""))
        options = options[0].get("options") or []
    for option in options:
        if isinstance(option, dict) and "name" in option:
            invocation.options[str(option["name"])] = option.get("value")
            if option.get("focused"):
                invocation.focused = str(option["name"])
    return invocation


def message(content: str, *, components: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response = ephemeral_message(scrub(content, keep_newlines=True))
    if components is not None:
        response["data"]["components"] = components
    return response


def body(content: str, *, components: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A message body for the interaction webhook (editing the original answer)."""
    data = message(content, components=components)["data"]
    data.pop("flags", None)  # flags are fixed when the answer was first sent
    return data


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d")


def _fact_line(fact: Fact) -> str:
    return f"`{fact.fact_id}` {scrub(fact.text)} ({fact.kind.value}, {fact.source.value}, {_day(fact.updated_ms)})"


def _listing(header: str, lines: list[str]) -> str:
    """Lines under a header, cut to what one Discord message holds."""
    text = header
    for shown, line in enumerate(lines):
        if len(text) + len(line) + 40 > 2000:
            return text + f"\n… and {len(lines) - shown} more."
        text += "\n" + line
    return text


Deferrer = Callable[[dict[str, Any]], None]


class Commands:
    def __init__(self, services: MemoryServices, defer: Deferrer) -> None:
        self._services = services
        self._defer = defer
        self._eraser = Eraser(services.repository)

    # Entry points -------------------------------------------------------------------

    def handle(self, interaction: dict[str, Any]) -> dict[str, Any]:
        """The immediate answer to a command, a button or an autocomplete request."""
        try:
            invocation = parse_invocation(interaction)
            if invocation.kind == APPLICATION_COMMAND_AUTOCOMPLETE:
                return self._autocomplete(invocation)
            if invocation.kind == MESSAGE_COMPONENT:
                return self._component(invocation)
            if invocation.kind == APPLICATION_COMMAND:
                return self._command(invocation)
            return message("This kind of interaction is not supported.")
        except CommandError as refusal:
            return message(str(refusal))

    def changes_nothing(self, interaction: dict[str, Any]) -> bool:
        """Reads (show, listings, autocomplete) need no replay protection, and their answers,
        which quote what is kept, are better not stored for it."""
        try:
            invocation = parse_invocation(interaction)
        except CommandError:
            return True
        if invocation.kind == APPLICATION_COMMAND_AUTOCOMPLETE:
            return True
        return invocation.kind == APPLICATION_COMMAND and (
            invocation.command,
            invocation.subcommand,
        ) in (
            (spec.MEMBER_COMMAND, spec.SHOW),
            (spec.STAFF_COMMAND, spec.USER),
        )

    def finish(self, job: dict[str, Any]) -> dict[str, Any]:
        """Do deferred work; the result is the body that replaces the "thinking…" answer."""
        invocation = parse_invocation(job["interaction"])
        work = job.get("work")
        if work == "erase":
            report = self._eraser.erase(invocation.user_id, [invocation.user_name])
            return body(
                f"Done. I erased everything I kept about you: {report.summary()}.", components=[]
            )
        if work == "optout":
            report = self._eraser.erase(invocation.user_id, [invocation.user_name])
            return body(
                "You are opted out: from now on nothing is recorded about you, and I erased "
                f"what I had: {report.summary()}. Use `/memory optin` to change your mind."
            )
        if work == "staff_user":
            return body(
                self.user_listing(invocation.scope, invocation.snowflake(spec.OPTION_MEMBER))
            )
        return body("Sorry, I lost track of that request.")

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
            (spec.STAFF_COMMAND, spec.PIN): self._staff_pin,
            (spec.STAFF_COMMAND, spec.UNPIN): self._staff_unpin,
        }
        route = routes.get((invocation.command, invocation.subcommand))
        if route is None:
            label = scrub(f"/{invocation.command} {invocation.subcommand}".strip())
            return message(f"Sorry, I don't know the command `{clip(label, 60)}`.")
        if invocation.command == spec.STAFF_COMMAND and not invocation.is_staff:
            return message("Only members with the Manage Server permission can use this command.")
        if (
            invocation.command != spec.FORGETME_COMMAND
            and not self._services.settings.memory_enabled
        ):
            return message("Memory is off on this bot: nothing is kept about anyone.")
        return route(invocation)

    def _my_facts(self, invocation: Invocation) -> list[Fact]:
        now = self._services.clock.now_ms()
        facts = self._services.repository.all_facts(invocation.scope, invocation.user_id)
        active = [
            f for f in facts if f.status == FactStatus.ACTIVE and ttl_alive(f.expires_at, now)
        ]
        return sorted(active, key=lambda f: f.updated_ms, reverse=True)

    def _show(self, invocation: Invocation) -> dict[str, Any]:
        facts = self._my_facts(invocation)
        lines = [_fact_line(f) for f in facts]
        mentions = self._mentions_here(invocation)
        if not lines and not mentions:
            return message("I don't remember anything about you here yet.")
        text = (
            _listing("What I remember about you here:", lines)
            if lines
            else "I keep no facts about you here."
        )
        if mentions:
            text = _listing(text + "\n\nIn this channel, mentioning you:", mentions)
        return message(text)

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
                lines.append(f"pin `{pin.pin_id}`: {scrub(pin.text)}")
        for episode in repository.recent_episodes(
            invocation.channel_id, self._services.settings.episodes_per_channel
        ):
            if not ttl_alive(episode.expires_at, now):
                continue
            if invocation.user_id in episode.participant_ids or (
                pattern and pattern.search(episode.summary)
            ):
                lines.append(
                    f"summary of {_day(episode.end_ms)}: {clip(scrub(episode.summary), 300)}"
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
        if _PINGS.search(text):
            raise CommandError(
                "Please leave out mentions and @everyone/@here: I never store text that could ping people."
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
        self._services.repository.put_fact(fact)
        return message(f"Remembered as `{fact.fact_id}`: {text}")

    def _forget(self, invocation: Invocation) -> dict[str, Any]:
        what = scrub(invocation.text(spec.OPTION_WHAT))
        facts = self._my_facts(invocation)
        matching = [f for f in facts if f.fact_id == what.lower()]
        if not matching and len(normalized(what)) >= 3:
            matching = [f for f in facts if normalized(what) in normalized(f.text)]
        if not matching:
            return message(
                "None of your facts here matches that. `/memory show` lists them with their ids."
            )
        self._services.repository.delete_facts(matching)
        return message(_listing("Forgotten:", [f"`{f.fact_id}` {scrub(f.text)}" for f in matching]))

    def _optout(self, invocation: Invocation) -> dict[str, Any]:
        self._services.opt_outs.opt_out(invocation.user_id)
        return self._deferred(invocation, "optout")

    def _optin(self, invocation: Invocation) -> dict[str, Any]:
        self._services.opt_outs.opt_in(invocation.user_id)
        return message("You are opted in: I may remember what you tell me again.")

    def _forgetme(self, invocation: Invocation) -> dict[str, Any]:
        buttons = [
            {
                "type": 1,
                "components": [
                    {
                        "type": 2,
                        "style": 4,
                        "label": "Erase everything",
                        "custom_id": CONFIRM_ERASE,
                    },
                    {"type": 2, "style": 2, "label": "Cancel", "custom_id": CANCEL_ERASE},
                ],
            }
        ]
        return message(
            "This erases everything I keep about you, in every server and in DMs: facts, your "
            "recorded messages and reactions, the channel summaries you appear in, and pins made "
            "in your name. It cannot be undone.",
            components=buttons,
        )

    def _component(self, invocation: Invocation) -> dict[str, Any]:
        if invocation.custom_id == CANCEL_ERASE:
            return {
                "type": UPDATE_MESSAGE,
                "data": body("Cancelled: nothing was erased.", components=[]),
            }
        if invocation.custom_id == CONFIRM_ERASE:
            self._defer({"work": "erase", "interaction": _minimal(invocation)})
            return {"type": DEFERRED_UPDATE_MESSAGE}
        return message("That button has expired.")

    # Staff --------------------------------------------------------------------------

    def _staff_user(self, invocation: Invocation) -> dict[str, Any]:
        invocation.snowflake(spec.OPTION_MEMBER)
        return self._deferred(invocation, "staff_user")

    def user_listing(self, scope: str, member: str) -> str:
        """Every fact kept about a member in a scope, active first, with ids."""
        now = self._services.clock.now_ms()
        facts = [
            f
            for f in self._services.repository.all_facts(scope, member)
            if ttl_alive(f.expires_at, now)
        ]
        if not facts:
            return f"I keep no facts about <@{member}> in this server."
        facts.sort(key=lambda f: (f.status != FactStatus.ACTIVE, -f.updated_ms))
        lines = [
            _fact_line(f) + ("" if f.status == FactStatus.ACTIVE else " [superseded]")
            for f in facts
        ]
        return _listing(f"Facts about <@{member}> ({len(facts)}):", lines)

    def _owned_item(
        self, invocation: Invocation, item_id: str, prefix: str
    ) -> dict[str, Any] | None:
        """A fact or pin by id, only when it belongs to this server."""
        item = self._services.repository.item_by_id(item_id.strip().lower())
        if item is None or not item.get("sk", "").startswith(prefix):
            return None
        if item.get("scope") != invocation.scope:
            return None
        return item

    def _staff_forget_fact(self, invocation: Invocation) -> dict[str, Any]:
        item = self._owned_item(invocation, invocation.text(spec.OPTION_ID), keys.FACT_PREFIX)
        if item is None:
            return message("There is no fact with that id in this server.")
        fact = Fact.model_validate(item)
        self._services.repository.delete_facts([fact])
        return message(f"Deleted `{fact.fact_id}` about <@{fact.user_id}>: {scrub(fact.text)}")

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
        return message(f"Pinned `{pin.pin_id}` {place}: {text}")

    def _staff_unpin(self, invocation: Invocation) -> dict[str, Any]:
        item = self._owned_item(invocation, invocation.text(spec.OPTION_ID), keys.PIN_PREFIX)
        if item is None:
            return message("There is no pin with that id in this server.")
        self._services.repository.delete_keys([{"pk": {"S": item["pk"]}, "sk": {"S": item["sk"]}}])
        return message(f"Unpinned `{item['pin_id']}`: {scrub(str(item.get('text', '')))}")

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
            elif invocation.subcommand == spec.FORGET_FACT and typed:
                item = self._owned_item(invocation, typed, keys.FACT_PREFIX)
                choices = [(item["fact_id"], str(item["text"]))] if item else []
        matches = [
            {"name": clip(f"{item_id}: {scrub(text)}", 100), "value": item_id}
            for item_id, text in choices
            if not typed or item_id.startswith(typed) or typed in text.lower()
        ]
        return {
            "type": APPLICATION_COMMAND_AUTOCOMPLETE_RESULT,
            "data": {"choices": matches[:MAX_LISTED]},
        }

    def _deferred(self, invocation: Invocation, work: str) -> dict[str, Any]:
        self._defer({"work": work, "interaction": _minimal(invocation)})
        return {"type": DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE, "data": {"flags": EPHEMERAL}}


def _minimal(invocation: Invocation) -> dict[str, Any]:
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
                {"name": invocation.subcommand, "type": spec.SUB_COMMAND, "options": options}
            ]
            if invocation.subcommand
            else options,
        },
    }


def user_facts_listing(services: MemoryServices, scope: str, user_id: str) -> str:
    """Staff view of one member (what `/memory-staff user` answers), for local runs."""
    return Commands(services, defer=lambda job: None).user_listing(scope, user_id)
