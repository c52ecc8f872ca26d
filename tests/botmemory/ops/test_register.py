"""Slash command definitions, and their registration against the fake Discord."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from botmemory.commands import specs
from botmemory.commands.specs import command_definitions
from botmemory.discord.rest import DiscordApi
from botmemory.ops.register import diff_commands, main
from tests.support.fake_discord import (  # noqa: F401
    APPLICATION_ID,
    BOT_TOKEN,
    FakeDiscordRest,
    fake_discord_fixture,
)

GUILD = "100000000000000001"
ROOT = Path(__file__).resolve().parents[3]
GLOBAL_PATH = f"/applications/{APPLICATION_ID}/commands"
GUILD_PATH = f"/applications/{APPLICATION_ID}/guilds/{GUILD}/commands"


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


# -- the definitions, checked against Discord's documented limits ----------------------------


# Discord's rule is ^[-_\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$, lowercase where a letter
# has a lowercase form. Python's `re` has no \p{..}: check the characters one by one.
def valid_name(name: str) -> bool:
    return (
        1 <= len(name) <= 32
        and all(ch in "-_" or ch.isalpha() or ch.isnumeric() for ch in name)
        and name == name.lower()
    )


def check_options(options: list[dict[str, Any]], where: str, problems: list[str]) -> None:
    if len(options) > 25:
        problems.append(f"{where}: {len(options)} options (max 25)")
    names = [o.get("name", "") for o in options]
    if len(set(names)) != len(names):
        problems.append(f"{where}: duplicate option names {names}")
    seen_optional = False
    for option in options:
        label = f"{where} {option.get('name')}"
        check_option_text(option, label, problems)
        if option["type"] in (1, 2):
            # A group holds subcommands only; a subcommand holds values only (Discord's nesting).
            allowed = {1} if option["type"] == 2 else {3, 4, 5, 6, 7, 8, 9, 10, 11}
            inner = option.get("options", [])
            if option["type"] == 2 and not inner:
                problems.append(f"{label}: a group with no subcommands")
            if any(o["type"] not in allowed for o in inner):
                problems.append(f"{label}: holds options of types {[o['type'] for o in inner]}")
            check_options(inner, label, problems)
            continue
        if option.get("required"):
            if seen_optional:
                problems.append(f"{label}: required option after an optional one")
        else:
            seen_optional = True
        check_option_values(option, label, problems)


def check_option_text(option: dict[str, Any], label: str, problems: list[str]) -> None:
    """Any option's name and description."""
    if not valid_name(str(option.get("name", ""))):
        problems.append(f"{label}: bad name")
    if not 1 <= len(option.get("description", "")) <= 100:
        problems.append(f"{label}: description must be 1-100 characters")


def check_option_values(option: dict[str, Any], label: str, problems: list[str]) -> None:
    """A value option's choices and length limit."""
    choices = option.get("choices", [])
    if len(choices) > 25:
        problems.append(f"{label}: more than 25 choices")
    if choices and option.get("autocomplete"):
        problems.append(f"{label}: autocomplete and choices exclude each other")
    for choice in choices:
        if not 1 <= len(choice["name"]) <= 100:
            problems.append(f"{label}: choice name must be 1-100 characters")
    if "max_length" in option and not 1 <= option["max_length"] <= 6000:
        problems.append(f"{label}: max_length out of 1-6000")


def text_size(item: dict[str, Any]) -> int:
    """Discord caps a command's name, description and value texts at 4000 characters in all."""
    size = len(item.get("name", "")) + len(item.get("description", ""))
    size += sum(len(str(c["value"])) + len(c["name"]) for c in item.get("choices", []))
    return size + sum(text_size(o) for o in item.get("options", []))


@pytest.mark.parametrize("guild_scoped", [False, True])
def test_definitions_respect_discords_limits(guild_scoped: bool) -> None:
    commands = command_definitions(guild_scoped=guild_scoped)
    problems: list[str] = []
    names = [c["name"] for c in commands]
    assert len(set(names)) == len(names)
    for command in commands:
        name = command["name"]
        assert command["type"] == 1, name
        assert valid_name(name), name
        assert re.fullmatch(r"[-_a-z0-9]{1,32}", name), name  # and plain ASCII, for typing it
        assert 1 <= len(command["description"]) <= 100, name
        assert text_size(command) <= 4000, name
        check_options(command.get("options", []), f"/{name}", problems)
    assert problems == []


def test_member_and_staff_layout() -> None:
    commands = by_name(command_definitions())
    assert set(commands) == {"memory", "memory-staff", "forgetme", "ask"}
    assert (
        specs.MEMBER_COMMAND,
        specs.STAFF_COMMAND,
        specs.FORGETME_COMMAND,
        specs.ASK_COMMAND,
    ) == ("memory", "memory-staff", "forgetme", "ask")

    member, staff, forgetme = commands["memory"], commands["memory-staff"], commands["forgetme"]
    ask = commands["ask"]
    for command in (member, forgetme, ask):
        assert command["default_member_permissions"] is None
        assert command["contexts"] == [0, 1]  # servers and the bot's DMs
        assert command["integration_types"] == [0]
    # Discord has no per-subcommand permissions: staff get their own top-level command.
    assert staff["default_member_permissions"] == "32" == str(1 << 5)
    assert staff["contexts"] == [0]
    assert staff["integration_types"] == [0]
    assert "options" not in forgetme

    member_subs = by_name(member["options"])
    staff_subs = by_name([o for o in staff["options"] if o["type"] == 1])
    staff_groups = by_name([o for o in staff["options"] if o["type"] == 2])
    assert list(member_subs) == list(specs.MEMBER_SUBCOMMANDS)
    assert list(member_subs) == [
        "show",
        "remember",
        "forget",
        "optout",
        "optin",
        "privacy",
        "pause",
        "export",
        "forget-recent",
    ]
    # The controls over what is kept (botmemory.commands.controls) come after the groups.
    assert list(staff_subs) == [*specs.STAFF_SUBCOMMANDS, specs.CONSENT]
    assert [o["name"] for o in staff["options"]] == [
        *specs.STAFF_SUBCOMMANDS,
        "persona",
        "notes",
        "channel",
        "backfill",
        "retention",
        "consent",
    ]
    assert list(staff_subs) == [
        "user",
        "forget-fact",
        "restore-fact",
        "pin",
        "unpin",
        "quarantine",
        "history",
        "reset-summary",
        "timezone",
        "consent",
    ]
    assert all(sub["type"] == 1 for sub in member["options"])

    def options(sub: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [
            (
                o["name"],
                o["type"],
                o.get("required", False),
                o.get("max_length"),
                o.get("autocomplete", False),
                [c["value"] for c in o.get("choices", [])],
            )
            for o in sub.get("options", [])
        ]

    assert options(member_subs["show"]) == []
    assert options(member_subs["remember"]) == [("text", 3, True, 240, False, [])]
    assert options(member_subs["forget"]) == [("what", 3, True, None, True, [])]
    assert options(member_subs["optout"]) == options(member_subs["optin"]) == []
    assert options(staff_subs["user"]) == [("member", 6, True, None, False, [])]
    assert options(staff_subs["forget-fact"]) == [("id", 3, True, None, True, [])]
    assert options(staff_subs["restore-fact"]) == [
        ("member", 6, True, None, False, []),
        ("id", 3, True, None, True, []),
    ]
    assert options(staff_subs["pin"]) == [
        ("where", 3, True, None, False, ["global", "channel"]),
        ("text", 3, True, 240, False, []),
    ]
    assert options(staff_subs["unpin"]) == [("id", 3, True, None, True, [])]
    assert options(staff_subs["history"]) == [("id", 3, True, None, True, [])]
    assert options(staff_subs["reset-summary"]) == []
    # /memory-staff persona ...: a subcommand group (type 2) holding subcommands (type 1).
    assert list(staff_groups) == [
        specs.PERSONA_GROUP,
        specs.NOTES_GROUP,
        specs.CHANNEL_GROUP,
        specs.BACKFILL_GROUP,
        specs.RETENTION_GROUP,
    ]
    assert list(staff_groups) == ["persona", "notes", "channel", "backfill", "retention"]
    backfill = by_name(staff_groups["backfill"]["options"])
    assert list(backfill) == ["start", "status", "cancel", "on-join"]
    assert options(backfill["start"]) == [
        ("channel", 7, False, None, False, []),
        ("days", 4, False, None, False, []),
    ]
    assert [(o["min_value"], o["max_value"]) for o in backfill["start"]["options"][1:]] == [(1, 30)]
    # 0: never; the deployment's default has the same bound (MEMORY_BACKFILL_ON_JOIN_DAYS).
    assert options(backfill["on-join"]) == [("days", 4, True, None, False, [])]
    assert [(o["min_value"], o["max_value"]) for o in backfill["on-join"]["options"]] == [(0, 30)]
    persona_subs = by_name(staff_groups["persona"]["options"])
    assert list(persona_subs) == list(specs.PERSONA_SUBCOMMANDS)
    assert list(persona_subs) == ["set", "list", "remove", "purge", "teach"]
    assert all(sub["type"] == 1 for sub in persona_subs.values())
    assert options(persona_subs["set"]) == [
        ("id", 3, True, 32, True, []),
        ("name", 3, True, 80, False, []),
        ("prompt", 3, True, 6000, False, []),  # Discord's cap for a string option
        ("where", 3, False, None, False, ["channel", "global"]),
    ]
    assert "{memory}" in persona_subs["set"]["options"][2]["description"]
    assert "6,000" in persona_subs["set"]["options"][2]["description"]
    assert options(persona_subs["list"]) == []
    assert options(persona_subs["remove"]) == [("id", 3, True, None, True, [])]
    assert options(persona_subs["purge"]) == [("id", 3, True, None, True, [])]
    assert options(persona_subs["teach"]) == [
        ("id", 3, True, None, True, []),
        ("text", 3, True, 240, False, []),
    ]
    # /memory-staff notes ...: the server's notes for direct messages (botmemory.memory.notes).
    notes_subs = by_name(staff_groups["notes"]["options"])
    assert list(notes_subs) == list(specs.NOTES_SUBCOMMANDS) == ["set", "show", "clear"]
    assert options(notes_subs["set"]) == [("text", 3, True, 1500, False, [])]
    assert options(notes_subs["show"]) == options(notes_subs["clear"]) == []
    # /memory-staff channel ...: a channel's memory switch (botmemory.commands.controls).
    channel_subs = by_name(staff_groups["channel"]["options"])
    assert list(channel_subs) == list(specs.CHANNEL_SUBCOMMANDS)
    assert list(channel_subs) == ["off", "on", "status", "forget"]
    for sub in channel_subs.values():
        assert options(sub) == [("channel", 7, False, None, False, [])]  # this one by default
    assert options(staff_subs["consent"]) == [("mode", 3, True, None, False, ["opt-out", "opt-in"])]
    # /memory-staff retention ...: this server's retention (botmemory.commands.retention).
    retention_subs = by_name(staff_groups["retention"]["options"])
    assert list(retention_subs) == ["facts", "messages", "episodes", "leavers", "status"]
    for kind in ("facts", "messages", "episodes"):
        assert retention_subs[kind]["options"][0]["min_value"] == 1
    assert retention_subs["leavers"]["options"][0]["min_value"] == 0
    assert options(retention_subs["status"]) == []
    assert options(member_subs["pause"]) == [("duration", 3, True, 16, False, [])]
    assert member_subs["forget-recent"]["options"][0]["max_value"] == 10_080
    # /ask is a command of its own (no subcommand): one required question, a message long.
    assert options(ask) == [("question", 3, True, 2000, False, [])]
    assert member_subs["forget"]["options"][0]["description"] == "A fact id or words of the fact"


def test_guild_scoped_definitions_leave_out_global_only_fields() -> None:
    full = command_definitions()
    scoped = command_definitions(guild_scoped=True)
    for command in scoped:
        assert "contexts" not in command and "integration_types" not in command
    strip = [{k: v for k, v in c.items() if k not in specs.GLOBAL_ONLY_FIELDS} for c in full]
    assert scoped == strip


def test_definitions_are_fresh_copies() -> None:
    first = command_definitions()
    first[0]["options"][0]["name"] = "changed"
    first.append({"name": "extra"})
    assert command_definitions()[0]["options"][0]["name"] == "show"
    assert len(command_definitions()) == 4


# -- the change report ----------------------------------------------------------------------


def test_diff_ignores_discords_own_fields_and_defaults() -> None:
    desired = [
        {
            "name": "x",
            "type": 1,
            "description": "d",
            "default_member_permissions": None,
            "options": [{"type": 3, "name": "a", "description": "a", "required": False}],
        }
    ]
    held = [
        {
            "id": "1",
            "application_id": APPLICATION_ID,
            "version": "7",
            "name": "x",
            "description": "d",
            "nsfw": False,
            "dm_permission": True,
            "contexts": None,
            "name_localizations": None,
            "options": [{"type": 3, "name": "a", "description": "a"}],
        }
    ]
    changes = diff_commands(held, desired)
    assert (changes.unchanged, changes.has_changes) == (["x"], False)


def test_diff_sees_changed_sent_fields() -> None:
    desired = command_definitions()
    held = command_definitions()
    held[0]["options"][1]["options"][0]["max_length"] = 100  # /memory remember text
    held[1]["default_member_permissions"] = None  # /memory-staff open to everyone
    held[2]["contexts"] = [0]  # /forgetme not in DMs
    held.append({"name": "old", "type": 1, "description": "gone"})
    changes = diff_commands(held, desired)
    assert changes.updated == ["memory", "memory-staff", "forgetme"]
    assert (changes.added, changes.removed, changes.unchanged) == ([], ["old"], ["ask"])


def test_diff_matches_by_name_and_type() -> None:
    held = [{"name": "memory", "type": 2, "description": ""}]  # a user context-menu command
    changes = diff_commands(held, command_definitions())
    assert changes.added == ["memory", "memory-staff", "forgetme", "ask"]
    assert changes.removed == ["memory"]


# -- registration against the fake Discord --------------------------------------------------


def run(fake: FakeDiscordRest, *argv: str, **env: str) -> tuple[int, str, str]:
    environ = {
        "DISCORD_APPLICATION_ID": APPLICATION_ID,
        "DISCORD_BOT_TOKEN": BOT_TOKEN,
        "DISCORD_API_BASE": fake.url,
        **env,
    }
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), environ={k: v for k, v in environ.items() if v}, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def report_lines(out: str) -> list[str]:
    return [" ".join(line.split()) for line in out.splitlines() if line.startswith("  ")]


def test_first_global_registration_adds_everything(fake_discord: FakeDiscordRest) -> None:
    code, out, err = run(fake_discord)

    assert (code, err) == (0, "")
    assert [(r.method, r.path) for r in fake_discord.requests] == [
        ("GET", GLOBAL_PATH),
        ("PUT", GLOBAL_PATH),
    ]
    assert {r.authorization for r in fake_discord.requests} == {f"Bot {BOT_TOKEN}"}
    assert fake_discord.requests[1].body == command_definitions()
    assert report_lines(out) == [
        "added /memory",
        "added /memory-staff",
        "added /forgetme",
        "added /ask",
    ]
    assert "4 added, 0 updated, 0 removed, 0 unchanged" in out
    assert "globally" in out
    stored = by_name(fake_discord.commands[(APPLICATION_ID, None)])
    assert stored["memory-staff"]["default_member_permissions"] == "32"


def test_second_run_reports_everything_unchanged(fake_discord: FakeDiscordRest) -> None:
    assert run(fake_discord)[0] == 0
    ids = {c["name"]: c["id"] for c in fake_discord.commands[(APPLICATION_ID, None)]}

    code, out, _ = run(fake_discord)

    assert code == 0
    assert report_lines(out) == [
        "unchanged /memory",
        "unchanged /memory-staff",
        "unchanged /forgetme",
        "unchanged /ask",
    ]
    assert "0 added, 0 updated, 0 removed, 4 unchanged" in out
    # The overwrite is still sent (it is idempotent) and keeps the commands' ids.
    assert [r.method for r in fake_discord.requests] == ["GET", "PUT", "GET", "PUT"]
    assert {c["name"]: c["id"] for c in fake_discord.commands[(APPLICATION_ID, None)]} == ids


def test_guild_registration_uses_the_guild_path(fake_discord: FakeDiscordRest) -> None:
    code, out, _ = run(fake_discord, "--guild", GUILD)

    assert code == 0
    assert [(r.method, r.path) for r in fake_discord.requests] == [
        ("GET", GUILD_PATH),
        ("PUT", GUILD_PATH),
    ]
    assert {r.authorization for r in fake_discord.requests} == {f"Bot {BOT_TOKEN}"}
    assert fake_discord.requests[1].body == command_definitions(guild_scoped=True)
    assert f"guild {GUILD}" in out
    assert (APPLICATION_ID, None) not in fake_discord.commands

    _, again, _ = run(fake_discord, "--guild", GUILD)
    assert "4 unchanged" in again


def test_report_names_added_updated_removed_unchanged(fake_discord: FakeDiscordRest) -> None:
    memory, _staff, forgetme, _ask = command_definitions()
    older_memory = {**memory, "description": "An older description"}
    obsolete = {"name": "remember-me", "type": 1, "description": "A command since dropped"}
    with DiscordApi(BOT_TOKEN, base_url=fake_discord.url) as api:
        api.bulk_overwrite_commands(APPLICATION_ID, [older_memory, forgetme, obsolete])
    fake_discord.requests.clear()

    code, out, _ = run(fake_discord)

    assert code == 0
    assert report_lines(out) == [
        "added /memory-staff",
        "added /ask",
        "updated /memory",
        "removed /remember-me",
        "unchanged /forgetme",
    ]
    assert "2 added, 1 updated, 1 removed, 1 unchanged" in out
    assert [c["name"] for c in fake_discord.commands[(APPLICATION_ID, None)]] == [
        "memory",
        "memory-staff",
        "forgetme",
        "ask",
    ]


def test_dry_run_sends_no_put(fake_discord: FakeDiscordRest) -> None:
    code, out, _ = run(fake_discord, "--dry-run", "--guild", GUILD)

    assert code == 0
    assert [r.method for r in fake_discord.requests] == ["GET"]
    assert "Dry run" in out and "nothing sent" in out
    assert "4 added" in out
    assert fake_discord.commands == {}


# -- failures -------------------------------------------------------------------------------


def test_missing_application_id_exits_2(fake_discord: FakeDiscordRest) -> None:
    code, _, err = run(fake_discord, DISCORD_APPLICATION_ID="")
    assert code == 2
    assert "DISCORD_APPLICATION_ID" in err
    assert fake_discord.requests == []


def test_missing_token_exits_2(fake_discord: FakeDiscordRest) -> None:
    code, _, err = run(fake_discord, DISCORD_BOT_TOKEN="")
    assert code == 2
    assert "DISCORD_BOT_TOKEN" in err and "DISCORD_BOT_TOKEN_SECRET" in err
    assert fake_discord.requests == []


@pytest.mark.parametrize(
    ("argv", "env"),
    [((), {"DISCORD_APPLICATION_ID": "my-app"}), (("--guild", "general"), {})],
)
def test_ids_that_are_not_snowflakes_exit_2(
    fake_discord: FakeDiscordRest, argv: tuple[str, ...], env: dict[str, str]
) -> None:
    code, _, err = run(fake_discord, *argv, **env)
    assert code == 2
    assert "error:" in err
    assert fake_discord.requests == []


def test_discord_refusing_exits_1_without_the_token(fake_discord: FakeDiscordRest) -> None:
    fake_discord.script(403, {"message": "Missing Access", "code": 50001}, method="PUT")

    code, _, err = run(fake_discord, "--guild", GUILD)

    assert code == 1
    assert "Missing Access" in err and "403" in err
    assert BOT_TOKEN not in err


def test_wrong_token_exits_1(fake_discord: FakeDiscordRest) -> None:
    code, _, err = run(fake_discord, DISCORD_BOT_TOKEN="some-other-token")
    assert code == 1
    assert "401" in err
    assert "some-other-token" not in err


def test_module_runs_as_a_script(fake_discord: FakeDiscordRest) -> None:
    """`python -m botmemory.ops.register` end to end, with DISCORD_API_BASE pointing at the fake."""
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("DISCORD_", "AWS_"))
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "layers" / "core"), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "botmemory.ops.register", "--guild", GUILD]

    missing = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert "DISCORD_APPLICATION_ID" in missing.stderr

    env |= {
        "DISCORD_APPLICATION_ID": APPLICATION_ID,
        "DISCORD_BOT_TOKEN": BOT_TOKEN,
        "DISCORD_API_BASE": fake_discord.url,
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert "4 added" in done.stdout
    assert [r.method for r in fake_discord.requests] == ["GET", "PUT"]
