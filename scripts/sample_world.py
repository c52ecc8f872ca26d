"""The world the sample events (events/) happen in: one server, one channel, Alice, Bob and
the bot, at 2026-01-01 00:00 UTC, in one AWS account and region, and the TEST key the
interactions are signed with (its private seed is public: events/README.md; never configure
a real application with it)."""

from __future__ import annotations

from typing import Any

from botmemory.snowflake import DISCORD_EPOCH_MS

TEST_SEED = bytes(range(32))  # 000102…1f: for tests and samples only
TIMESTAMP = "1767225600"
# The samples are signed at that fixed moment, and the interactions function refuses a signed
# timestamp more than DISCORD_TIMESTAMP_TOLERANCE_SECONDS (default 300) from now: env.json
# widens it to a century so the samples keep working. Only with the TEST key, which anyone
# can sign with anyway; never in a deployment.
SAMPLE_TIMESTAMP_TOLERANCE_SECONDS = str(100 * 365 * 86_400)
GUILD = "1100000000000000001"
CHANNEL = "1200000000000000001"
ALICE = "1300000000000000001"
BOB = "1300000000000000002"
BOT = "1399999999999999999"
BASE_MS = 1_767_225_600_000
ACCOUNT = "123456789012"
REGION = "us-east-1"
# The stack name samconfig.toml deploys under: CloudFormation names the sweep's rule after it.
STACK = "discord-memory"


def snowflake(at_ms: int, n: int) -> str:
    return str(((at_ms - DISCORD_EPOCH_MS) << 22) | n)


def user(user_id: str, name: str, bot: bool = False) -> dict[str, Any]:
    return {"id": user_id, "username": name.lower(), "global_name": name, "bot": bot}
