"""What a command is handed and what it answers: an interaction parsed once into an
`Invocation`, the refusal a command raises (`CommandError`), and the shapes of an answer
(`ephemeral_reply`, `webhook_edit`, the interaction `deferred_interaction` hands on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botmemory.discord.interactions import OptionType, Permissions, ephemeral_message, invoking_user
from botmemory.records import scope_of
from botmemory.text import scrub


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
