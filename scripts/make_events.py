"""Regenerate the sample events in events/ and events/env.json (run from the repository root:
`.venv/bin/python -m scripts.make_events`).

The samples come from scripts/discord_samples.py (gateway events, signed interactions) and
scripts/aws_samples.py (Function URL requests, the table's stream, the schedule, the work
queue), in the world of scripts/sample_world.py (ids, times, the TEST key: see
events/README.md; never configure a real application with it). Tests import the samples'
names from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from botmemory.discord.interactions import InteractionType
from localrun.samtemplate import Template
from scripts.aws_samples import (
    SCHEDULE_SOURCES,
    function_url_event,
    scheduled_event,
    search_removals,
    stream_batch,
    work_event,
)
from scripts.discord_samples import command, gateway_batch, signed
from scripts.sample_world import (
    ACCOUNT,
    ALICE,
    BASE_MS,
    BOB,
    BOT,
    CHANNEL,
    GUILD,
    SAMPLE_TIMESTAMP_TOLERANCE_SECONDS,
    STACK,
    TEST_SEED,
    TIMESTAMP,
    snowflake,
)

__all__ = [
    "ALICE",
    "BOB",
    "BOT",
    "CHANNEL",
    "GUILD",
    "SCHEDULE_SOURCES",
    "STACK",
    "TEST_SEED",
    "TIMESTAMP",
    "as_json",
    "command",
    "function_url_event",
    "local_environment",
    "samples",
    "signed",
    "snowflake",
]

EVENTS = Path(__file__).resolve().parent.parent / "events"

# What `sam local invoke --env-vars events/env.json` points every function at: the stack of
# `make dev` (localrun/dev.py), seen from inside the function's container. The DynamoDB
# endpoint names the table; AWS_ENDPOINT_URL sends every other AWS client (Secrets Manager,
# Lambda, Bedrock, S3 Vectors) to the same moto server, so nothing reaches a real account.
LOCAL_ENDPOINT = "http://host.docker.internal:8000"
LOCAL_TABLE = "MemoryTable"
# The key of the person hash for local runs only (make dev uses it too, so opt-outs agree).
LOCAL_HASH_KEY = "local-development-person-hash-key-not-a-secret"
LOCAL_SEARCH_INDEX = "sqlite:/tmp/botmemory-search.sqlite3"
# `make dev` serves a stand-in for Discord's REST API on its HTTP port (localrun/dev.py).
LOCAL_DISCORD_API = "http://host.docker.internal:8787/api/v10"


def samples() -> dict[str, Any]:
    """Every sample event, by its path under events/."""
    batch = gateway_batch()
    found: dict[str, Any] = {
        "ingest/gateway-batch.json": batch,
        "consolidate/stream-batch.json": stream_batch(batch),
        "search_index/stream-removals.json": search_removals(),
        "recall/request.json": {
            "guild_id": GUILD,
            "channel_id": CHANNEL,
            "user_id": ALICE,
            "participants": [BOB],
            "template": "You are Memorybot, a friendly assistant.\n\n{memory}",
            "query": "Where does Alice like to go hiking?",
        },
        # RecallFunction's URL (EnableRecallUrl) is AWS_IAM: the bot's role signs the request.
        "recall/function-url-request.json": function_url_event(
            json.dumps({"guild_id": GUILD, "channel_id": CHANNEL, "user_id": ALICE}),
            {},
            "sample-recall-1",
            iam_caller=f"arn:aws:sts::{ACCOUNT}:assumed-role/discord-bot/bot",
        ),
        "sweep/schedule.json": scheduled_event(),
        # What ConsolidateFunction (or the sweep) hands ConsolidateWorkerFunction: one
        # channel's turn, as the FIFO queue's event source delivers it.
        "consolidate_worker/channel-work.json": work_event(),
        # What IngestFunction hands AnswerFunction for a message that mentions the bot.
        "answer/mention.json": {
            "answer": {
                "kind": "mention",
                "guild_id": GUILD,
                "channel_id": CHANNEL,
                "message_id": snowflake(BASE_MS + 60_000, 90),
                "author_id": ALICE,
                "author_name": "Alice",
                "content": "what do I grow on my balcony?",
                "replied_to_bot": False,
            }
        },
        # What InteractionsFunction hands AnswerFunction for `/ask`: the answer edits the
        # deferred reply through the interaction's webhook.
        "answer/ask.json": {
            "ask": {
                "interaction": {
                    "id": "1500000000000000009",
                    "application_id": BOT,
                    "token": "sample-ask-token",
                    "type": 2,
                    "guild_id": GUILD,
                    "channel_id": CHANNEL,
                    "member": {
                        "user": {"id": ALICE, "global_name": "Alice"},
                        "permissions": "0",
                    },
                },
                "question": "what do I grow on my balcony?",
            }
        },
        "interactions/ping.json": signed(
            {
                "id": "1500000000000000001",
                "application_id": BOT,
                "type": InteractionType.PING,
                "token": "sample-ping-token",
                "version": 1,
            },
            "sample-ping-1",
        ),
        "interactions/memory-show.json": signed(
            command("1500000000000000002", "memory", "show"), "sample-show-1"
        ),
        "interactions/memory-remember.json": signed(
            command(
                "1500000000000000005",
                "memory",
                "remember",
                {"text": "I grow chillies on my balcony"},
            ),
            "sample-remember-1",
        ),
        "interactions/unknown-command.json": signed(
            command("1500000000000000003", "memory", "dance"), "sample-unknown-1"
        ),
    }
    bad = signed(
        {
            "id": "1500000000000000004",
            "application_id": BOT,
            "type": InteractionType.PING,
            "token": "t",
            "version": 1,
        },
        "sample-bad-1",
    )
    bad["headers"]["x-signature-ed25519"] = "00" * 64
    found["interactions/bad-signature.json"] = bad
    return found


def local_environment() -> dict[str, dict[str, str]]:
    """events/env.json: for every function of template.yaml, the variables that point it at
    `make dev`'s stack instead of AWS. `sam local invoke` applies only the variables the
    template declares for the function (Globals included) and silently drops the others."""
    template = Template.load()
    environment: dict[str, dict[str, str]] = {}
    for logical_id in template.function_ids():
        declared = template.function(logical_id).environment
        variables = {
            "AWS_ENDPOINT_URL_DYNAMODB": LOCAL_ENDPOINT,
            "AWS_ENDPOINT_URL": LOCAL_ENDPOINT,
            "TABLE_NAME": LOCAL_TABLE,
            "MEMORY_MODEL": "rules",
            # The embedded index (the template's is S3 Vectors), keyword leg only: a local
            # invoke calls no embedding model. It holds its own keywords: no keyword database.
            "MEMORY_SEARCH_INDEX": LOCAL_SEARCH_INDEX,
            "MEMORY_KEYWORD_INDEX": "",
            "EMBEDDING_MODEL": "",
            "DISCORD_BOT_USER_ID": BOT,
        }
        # No Secrets Manager: every secret the template names is blanked, and the person
        # hash key is given directly where the function hashes.
        secrets = sorted(name for name in declared if name.endswith("_SECRET"))
        variables.update(dict.fromkeys(secrets, ""))
        if "MEMORY_HASH_KEY_SECRET" in declared:
            variables["MEMORY_HASH_KEY"] = LOCAL_HASH_KEY
        if logical_id == "InteractionsFunction":
            variables.update(
                DISCORD_PUBLIC_KEY=SigningKey(TEST_SEED).verify_key.encode().hex(),
                DISCORD_APPLICATION_ID=BOT,
                DISCORD_TIMESTAMP_TOLERANCE_SECONDS=SAMPLE_TIMESTAMP_TOLERANCE_SECONDS,
            )
        if logical_id == "AnswerFunction":
            # Answers go to `make dev`'s stand-in for Discord, which prints them.
            variables.update(
                CHAT_MODEL="rules",
                DISCORD_BOT_TOKEN="local-bot-token",
                DISCORD_API_BASE=LOCAL_DISCORD_API,
            )
        environment[logical_id] = variables
    return environment


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    written = samples()
    for name, payload in written.items():
        path = EVENTS / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(as_json(payload), encoding="utf-8")
    (EVENTS / "env.json").write_text(as_json(local_environment()), encoding="utf-8")
    public_key = SigningKey(TEST_SEED).verify_key.encode().hex()
    print(f"wrote {len(written)} events and env.json; test public key {public_key}")


if __name__ == "__main__":
    main()
