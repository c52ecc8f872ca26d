"""The smallest piece of a slash command's option specs, shared by the modules that build
them (botmemory.commands.specs, botmemory.commands.server_specs)."""

from __future__ import annotations

from typing import Any

from botmemory.discord.interactions import OptionType


def subcommand(
    name: str, description: str, options: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    sub: dict[str, Any] = {"type": OptionType.SUB_COMMAND, "name": name, "description": description}
    if options:
        sub["options"] = options
    return sub
