"""`python -m botmemory.ops.census`: after an upgrade from a version that kept no list of the
servers it knows, a server the bot left back then (its data still in the table, no
GUILD_DELETE ever recorded) has its purge scheduled, and ServerPurgeFunction purges it when
the grace period is over; the servers the bot is in are kept and become known, so a later
READY can reveal a removal. The bot's list comes from the fake Discord REST server on
127.0.0.1 (`GET /users/@me/guilds`, paged); the data from the deployment's functions
(tests/botmemory/people/test_server_lifecycle.py's servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from botmemory.discord.guilds import PAGE_LIMIT
from botmemory.ops import census
from botmemory.settings.config import get_settings
from botmemory.storage import keys
from botmemory.storage.repository import open_repository
from localrun import gateway as gw
from tests.botmemory.commands.test_controls import (  # noqa: F401
    Controls,
    controls,
    notice,
)
from tests.botmemory.people.test_server_lifecycle import (
    OTHER,
    of_server,
    purge_at,
    purge_run,
    ready,
    seeded,
    through_the_relay,
)
from tests.conftest import TABLE
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import fact_writer  # noqa: F401


@pytest.fixture
def upgraded(
    controls: Controls,  # noqa: F811
    fake_discord: FakeDiscordRest,
    monkeypatch: pytest.MonkeyPatch,
) -> Controls:
    """Two servers with data; the bot has since left gw.GUILD, while the deployment kept no
    list of the servers it knows (the version before); the census's environment."""
    seeded(controls)
    dynamodb = controls.d.dynamodb
    for item in controls.items():
        if item["pk"]["S"] == keys.SERVERS_PK:
            dynamodb.delete_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]})
    # The bot is in OTHER and in a page and a half of servers that never said anything.
    fake_discord.members = {OTHER: set()} | {
        str(300000000000000000 + n): set() for n in range(PAGE_LIMIT + PAGE_LIMIT // 2)
    }
    monkeypatch.setenv("TABLE_NAME", TABLE)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("DISCORD_API_BASE", fake_discord.url)
    get_settings.cache_clear()
    return controls


def known(controls: Controls) -> set[str]:  # noqa: F811
    return {i["sk"]["S"] for i in controls.items() if i["pk"]["S"] == keys.SERVERS_PK}


def test_a_server_left_before_the_upgrade_is_scheduled_then_purged_and_the_rest_kept(
    upgraded: Controls,
    fake_discord: FakeDiscordRest,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    d = upgraded.d
    # Without the census the upgrade leaves gw.GUILD's data for good: READY knows of nothing.
    through_the_relay(upgraded, ready(OTHER), tmp=tmp_path / "a")
    assert purge_at(upgraded) == []

    # The report alone writes nothing.
    assert census.main([]) == 0
    assert "1 servers the bot is no longer in" in capsys.readouterr().out
    assert purge_at(upgraded) == [] and known(upgraded) == set()

    assert census.main(["--apply"]) == 0

    assert [keys.guild_of_purge_sk(sk) for sk in purge_at(upgraded)] == [gw.GUILD]
    assert OTHER in known(upgraded) and len(known(upgraded)) == 1 + PAGE_LIMIT * 3 // 2
    assert gw.GUILD not in known(upgraded)
    pages = fake_discord.requests_matching("GET", "/users/@me/guilds")
    assert len(pages) == 2 * 2  # two pages, each time
    # Again: its date stays, nothing more is scheduled.
    scheduled = purge_at(upgraded)
    d.later(minutes=24 * 60)
    assert census.main(["--apply"]) == 0
    assert purge_at(upgraded) == scheduled
    assert "1 already scheduled" in capsys.readouterr().out

    other_before = of_server(upgraded.items(), OTHER)
    d.later(minutes=28 * 24 * 60)
    assert purge_run(upgraded)["servers"] == []
    d.later(minutes=2 * 24 * 60)
    assert purge_run(upgraded)["servers"] == [gw.GUILD]
    assert [
        i for i in of_server(upgraded.items(), gw.GUILD) if i["sk"]["S"] != keys.INDEX_PURGED_SK
    ] == []
    assert of_server(upgraded.items(), OTHER) == other_before
    # Known now: a READY without OTHER (the bot removed while the relay was down) is seen.
    through_the_relay(upgraded, ready(), tmp=tmp_path / "b")
    assert OTHER in {keys.guild_of_purge_sk(sk) for sk in purge_at(upgraded)}


def test_discord_refusing_the_list_writes_nothing(
    upgraded: Controls,
    fake_discord: FakeDiscordRest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A wrong token: no list, so no server may be taken for one the bot left."""
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "not-the-token")

    assert census.main(["--apply"]) == 1

    assert "Discord refused the guild list" in capsys.readouterr().err
    assert purge_at(upgraded) == [] and known(upgraded) == set()


def test_a_server_the_bot_is_in_is_never_scheduled(upgraded: Controls) -> None:
    """The bot back in gw.GUILD (the list says so): nothing to purge."""
    repository = open_repository(TABLE, upgraded.d.dynamodb)
    found = census.take_census(repository, lambda: [gw.GUILD, OTHER])
    assert found.to_schedule == [] and found.with_items >= {gw.GUILD, OTHER}
