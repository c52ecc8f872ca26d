"""The offline memory model gives a fact the last day its words say it holds ("until Friday",
"back on Monday"), by the rule botmemory.when.relative states, on the template's functions:
IngestFunction and ConsolidateFunction with the rules model, read back through RecallFunction
and `/memory show`, the server's zone set by staff through InteractionsFunction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from localrun import gateway as gw
from tests.botmemory.when.test_dated_memory import (
    CHANNEL,
    block_facts,
    local,
    member_show,
    staff_command,
)
from tests.support.deployment import Deployment, guild_create
from tests.support.fake_discord import FakeDiscordRest
from tests.support.fake_providers import ScriptServer

ZONE = "America/New_York"
DAY_MS = 86_400_000


@pytest.fixture
def bot(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    tmp_path: Path,
) -> Deployment:
    deployed = Deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        tmp_path / "index.db",
        {"ConsolidateFunction": {"MEMORY_MODEL": "rules", "MEMORY_CONSOLIDATE_EVERY": "1"}},
    )
    deployed.say(guild_create([CHANNEL], []))
    staff_command(deployed, "timezone", {"zone": ZONE})
    return deployed


def after(day: date, weekday: int) -> date:
    """The first such weekday after `day` (Monday 0): "on", "next" and a bare weekday."""
    return day + timedelta(days=(weekday - day.weekday()) % 7 or 7)


def end_of(day: date) -> int:
    """When a fact whose last day is `day` stops holding: the next midnight in the zone."""
    midnight = datetime.combine(day + timedelta(days=1), time(0), tzinfo=ZoneInfo(ZONE))
    return int(midnight.timestamp() * 1000)


Said = Callable[[date], tuple[str, str, date]]
FORMS: dict[str, Said] = {
    "until a weekday": lambda d: ("I'm in Tokyo until Friday", "Alice is in Tokyo", after(d, 4)),
    "until a day of a month": lambda d: (
        f"I'm staying with my parents until {d + timedelta(days=10):%d %B}.",
        "Alice is staying with their parents",
        d + timedelta(days=10),
    ),
    "till next week": lambda d: (
        "I'm working from home till next week",
        "Alice is working from home",
        d + timedelta(days=6 - d.weekday()),  # the Sunday before next week
    ),
    "back on a weekday": lambda d: (
        "I'm away, back on Monday!",
        "Alice is away",
        after(d, 0) - timedelta(days=1),  # away through the day before
    ),
    "a project until the end of the month": lambda d: (
        "I'm working on my thesis until the end of the month",
        "Alice is working on their thesis",
        date(d.year + d.month // 12, d.month % 12 + 1, 1) - timedelta(days=1),
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_the_rules_model_stores_the_last_day_its_words_give(bot: Deployment, form: str) -> None:
    said_on = local(bot.at + 1000, ZONE).date()
    words, text, last = FORMS[form](said_on)

    bot.say(bot.message(gw.ALICE, words, CHANNEL))

    (kept,) = bot.services().repository.all_facts(gw.GUILD, gw.ALICE)
    assert (kept.text, kept.valid_until_ms) == (text, end_of(last))
    assert f'"{text}"' in block_facts(bot)


def test_a_passing_state_with_no_end_is_no_fact(bot: Deployment) -> None:
    bot.say(bot.message(gw.ALICE, "I'm in Tokyo", CHANNEL))
    bot.say(bot.message(gw.ALICE, "I'm away and my sister is back on Monday", CHANNEL))

    # "back on Monday" is the sister's: what Alice said has no end, so no fact of hers.
    kept = [f.text for f in bot.services().repository.all_facts(gw.GUILD, gw.ALICE)]
    assert "Alice is in Tokyo" not in kept and "Alice is away" not in kept


def test_a_fact_past_the_day_its_words_gave_leaves_the_block_until_restated(
    bot: Deployment,
) -> None:
    bot.say(bot.message(gw.ALICE, "I'm in Tokyo until Friday", CHANNEL))
    friday = after(local(bot.at, ZONE).date(), 4)
    assert '"Alice is in Tokyo"' in block_facts(bot)

    days = (friday - local(bot.clock.now_ms(), ZONE).date()).days + 1
    bot.later(minutes=days * 24 * 60)
    assert '"Alice is in Tokyo"' not in block_facts(bot)
    assert f"[past: held until {friday}]" in member_show(bot)

    bot.say(bot.message(gw.ALICE, "I'm in Tokyo till Sunday", CHANNEL))
    (kept,) = bot.services().repository.all_facts(gw.GUILD, gw.ALICE)
    assert kept.valid_until_ms == end_of(after(local(bot.at, ZONE).date(), 6))
    assert '"Alice is in Tokyo"' in block_facts(bot) and "[past" not in member_show(bot)
