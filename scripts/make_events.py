"""Regenerate the sample events in events/ and events/env.json (run from the repository root:
`.venv/bin/python -m scripts.make_events`).

The interactions samples are signed with a TEST key whose private seed is public (see
events/README.md): never configure a real application with it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from botmemory.discord.interactions import ApplicationCommandType, InteractionType, OptionType
from botmemory.records import ObservationKind
from botmemory.snowflake import DISCORD_EPOCH_MS
from botmemory.storage import keys
from localrun.samtemplate import Template

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"
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
TABLE_STREAM_ARN = (
    f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/MemoryTable/stream/2026-01-01T00:00:00.000"
)
OBSERVATION_RETENTION_S = 365 * 86_400

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


def snowflake(at_ms: int, n: int) -> str:
    return str(((at_ms - DISCORD_EPOCH_MS) << 22) | n)


def user(user_id: str, name: str, bot: bool = False) -> dict[str, Any]:
    return {"id": user_id, "username": name.lower(), "global_name": name, "bot": bot}


def message(n: int, author: tuple[str, str], content: str, bot: bool = False) -> dict[str, Any]:
    at_ms = BASE_MS + n * 30_000
    ts = f"2026-01-01T00:{n // 2:02d}:{(n % 2) * 30:02d}.000000+00:00"
    return {
        "t": "MESSAGE_CREATE",
        "d": {
            "id": snowflake(at_ms, n),
            "channel_id": CHANNEL,
            "guild_id": GUILD,
            "author": user(*author, bot=bot),
            "member": {"nick": None, "roles": []},
            "content": content,
            "timestamp": ts,
            "edited_timestamp": None,
            "mentions": [],
            "attachments": [],
            "embeds": [],
            "type": 0,
        },
    }


def gateway_batch() -> dict[str, Any]:
    alice, bob = (ALICE, "Alice"), (BOB, "Bob")
    lines = [
        (alice, "Hi! I'm a nurse and I love hiking in the Alps."),
        (bob, "Nice. I use Neovim for everything, by the way."),
        (alice, "I live in Lyon these days."),
        (bob, "Alice likes sushi, I think."),
        (alice, "I'm allergic to peanuts, so no satay for me."),
        (bob, "I'm working on a tiny synthesizer project."),
    ]
    events = [message(i, who, text) for i, (who, text) in enumerate(lines)]
    events.append(message(len(lines), (BOT, "Memorybot"), "Noted, both of you!", bot=True))
    first, second = events[0]["d"], events[1]["d"]
    edited = dict(
        events[2]["d"],
        content="I live in Lyon, near the river.",
        edited_timestamp="2026-01-01T00:10:00.000000+00:00",
    )
    events += [
        {"t": "MESSAGE_UPDATE", "d": edited},
        {
            "t": "MESSAGE_REACTION_ADD",
            "d": {
                "user_id": BOB,
                "channel_id": CHANNEL,
                "message_id": first["id"],
                "guild_id": GUILD,
                "emoji": {"id": None, "name": "👍"},
                "member": {"user": user(BOB, "Bob"), "nick": None, "roles": []},
                "message_author_id": ALICE,
            },
        },
        {
            "t": "MESSAGE_REACTION_REMOVE",
            "d": {
                "user_id": BOB,
                "channel_id": CHANNEL,
                "message_id": first["id"],
                "guild_id": GUILD,
                "emoji": {"id": None, "name": "👍"},
            },
        },
        {
            "t": "MESSAGE_REACTION_REMOVE_EMOJI",
            "d": {
                "channel_id": CHANNEL,
                "message_id": second["id"],
                "guild_id": GUILD,
                "emoji": {"id": None, "name": "🎹"},
            },
        },
        {
            "t": "MESSAGE_REACTION_REMOVE_ALL",
            "d": {"channel_id": CHANNEL, "message_id": second["id"], "guild_id": GUILD},
        },
        {
            "t": "MESSAGE_DELETE",
            "d": {"id": events[3]["d"]["id"], "channel_id": CHANNEL, "guild_id": GUILD},
        },
        {
            "t": "MESSAGE_DELETE_BULK",
            "d": {
                "ids": [snowflake(BASE_MS - 60_000, 90), snowflake(BASE_MS - 30_000, 91)],
                "channel_id": CHANNEL,
                "guild_id": GUILD,
            },
        },
    ]
    return {"events": events}


def function_url_event(
    body: str,
    headers: dict[str, str],
    request_id: str,
    *,
    iam_caller: str | None = None,
) -> dict[str, Any]:
    """A Function URL request (payload format 2.0) as Lambda delivers it. With `iam_caller`
    (an IAM role ARN), the URL is AWS_IAM-authenticated: the caller's identity is in
    requestContext.authorizer.iam and accountId is the function owner's; an AuthType NONE
    URL (Discord's) gives accountId "anonymous" and no authorizer."""
    user_agent = "aws-sdk" if iam_caller else "Discord-Interactions/1.0"
    context: dict[str, Any] = {
        "accountId": ACCOUNT if iam_caller else "anonymous",
        "apiId": "samplefunctionurl",
        "domainName": "samplefunctionurl.lambda-url.us-east-1.on.aws",
        "domainPrefix": "samplefunctionurl",
        "http": {
            "method": "POST",
            "path": "/",
            "protocol": "HTTP/1.1",
            "sourceIp": "203.0.113.10",
            "userAgent": user_agent,
        },
        "requestId": request_id,
        "routeKey": "$default",
        "stage": "$default",
        "time": "01/Jan/2026:00:00:00 +0000",
        "timeEpoch": BASE_MS,
    }
    if iam_caller:
        context["authorizer"] = {
            "iam": {
                "accessKey": "ASIASAMPLEACCESSKEY0",
                "accountId": ACCOUNT,
                "callerId": "AROASAMPLEROLEID0000:bot",
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": iam_caller,
                "userId": "AROASAMPLEROLEID0000:bot",
            }
        }
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/",
        "rawQueryString": "",
        # Lambda lower-cases header names and adds the forwarding headers.
        "headers": {
            "content-type": "application/json",
            "host": "samplefunctionurl.lambda-url.us-east-1.on.aws",
            "user-agent": user_agent,
            "x-amzn-tls-cipher-suite": "TLS_AES_128_GCM_SHA256",
            "x-amzn-tls-version": "TLSv1.3",
            "x-amzn-trace-id": "Root=1-67748580-0123456789abcdef01234567",
            "x-forwarded-for": "203.0.113.10",
            "x-forwarded-port": "443",
            "x-forwarded-proto": "https",
            **headers,
        },
        "requestContext": context,
        "body": body,
        "isBase64Encoded": False,
    }


def signed(interaction: dict[str, Any], request_id: str) -> dict[str, Any]:
    body = json.dumps(interaction, separators=(",", ":"))
    signature = SigningKey(TEST_SEED).sign((TIMESTAMP + body).encode()).signature.hex()
    return function_url_event(
        body, {"x-signature-ed25519": signature, "x-signature-timestamp": TIMESTAMP}, request_id
    )


def command(
    interaction_id: str,
    name: str,
    sub: str,
    options: dict[str, Any] | None = None,
    permissions: str = "0",
    user_id: str = ALICE,
) -> dict[str, Any]:
    given = [
        {
            "name": key,
            "type": OptionType.USER if key == "member" else OptionType.STRING,
            "value": value,
        }
        for key, value in (options or {}).items()
    ]
    return {
        "id": interaction_id,
        "application_id": BOT,
        "type": InteractionType.APPLICATION_COMMAND,
        "token": "sample-interaction-token",
        "version": 1,
        "guild_id": GUILD,
        "channel_id": CHANNEL,
        "member": {
            "user": user(user_id, "Alice" if user_id == ALICE else "Bob"),
            "roles": [],
            "permissions": permissions,
            "nick": None,
        },
        "data": {
            "id": "1400000000000000001",
            "name": name,
            "type": ApplicationCommandType.CHAT_INPUT,
            "options": [{"name": sub, "type": OptionType.SUB_COMMAND, "options": given}]
            if sub
            else given,
        },
    }


def observation_image(event: dict[str, Any], at_ms: int) -> dict[str, Any]:
    """A message observation as IngestFunction stores it (botmemory.storage.items.observation_values),
    in the stream's attribute-value form."""
    d = event["d"]
    sk = keys.observation_sk(at_ms, ObservationKind.MESSAGE, d["id"])
    author = d["author"]
    return {
        "pk": {"S": keys.channel_pk(CHANNEL)},
        "sk": {"S": sk},
        "channel_id": {"S": CHANNEL},
        "scope": {"S": GUILD},
        "kind": {"S": ObservationKind.MESSAGE.value},
        "at_ms": {"N": str(at_ms)},
        "author_id": {"S": author["id"]},
        "author_name": {"S": author["global_name"]},
        # Every name the author goes by (botmemory.ingest.observe: nickname, global, account name).
        "author_names": {
            "L": [
                {"S": name}
                for name in dict.fromkeys([author["global_name"], author["username"]])
                if name
            ]
        },
        "author_is_bot": {"BOOL": bool(author.get("bot"))},
        "message_id": {"S": d["id"]},
        "content": {"S": d["content"]},
        "expires_at": {"N": str(at_ms // 1000 + OBSERVATION_RETENTION_S)},
        "ingest_id": {"S": "sample-ingest-1"},
        "user_id": {"S": author["id"]},
        "pending_sk": {"S": sk},
    }


def stream_batch(batch: dict[str, Any]) -> dict[str, Any]:
    """What the stream delivers after the gateway batch was ingested (filtered to OBS# inserts)."""
    records = []
    for n, event in enumerate(batch["events"][:3]):
        image = observation_image(event, BASE_MS + n * 30_000)
        records.append(
            {
                "eventID": f"sample-{n}",
                "eventName": "INSERT",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": REGION,
                "dynamodb": {
                    "ApproximateCreationDateTime": BASE_MS // 1000,
                    "Keys": {"pk": image["pk"], "sk": image["sk"]},
                    "NewImage": image,
                    "SequenceNumber": f"{100000000000000000000 + n}",
                    "SizeBytes": 600,
                    "StreamViewType": "NEW_AND_OLD_IMAGES",
                },
                "eventSourceARN": TABLE_STREAM_ARN,
            }
        )
    return {"Records": records}


def _stream_record(
    n: int, event_name: str, old: dict[str, Any], new: dict[str, Any] | None = None
) -> dict[str, Any]:
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": BASE_MS // 1000 + 30 * 86_400,
        "Keys": {"pk": old["pk"], "sk": old["sk"]},
        "OldImage": old,
        "SequenceNumber": f"{200000000000000000000 + n}",
        "SizeBytes": 300,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if new is not None:
        change["NewImage"] = new
    return {
        "eventID": f"sample-removal-{n}",
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": change,
        "eventSourceARN": TABLE_STREAM_ARN,
    }


def search_removals() -> dict[str, Any]:
    """What the stream gives SearchIndexFunction: an observation expired by TTL (with the
    passages that copy it), a fact superseded, an episode deleted beyond the cap."""
    channel_pk = {"S": keys.channel_pk(CHANNEL)}
    obs_sk = keys.observation_sk(BASE_MS, ObservationKind.MESSAGE, snowflake(BASE_MS, 1))
    next_sk = keys.observation_sk(
        BASE_MS + 30_000, ObservationKind.MESSAGE, snowflake(BASE_MS + 30_000, 2)
    )
    expired = _stream_record(
        0,
        "REMOVE",
        {
            "pk": channel_pk,
            "sk": {"S": obs_sk},
            "kind": {"S": ObservationKind.MESSAGE.value},
            "author_id": {"S": ALICE},
            "content": {"S": "Hi! I'm a nurse and I love hiking in the Alps."},
            "passages": {
                "L": [{"S": keys.message_passage_id(CHANNEL, sk)} for sk in (obs_sk, next_sk)]
            },
            "expires_at": {"N": str(BASE_MS // 1000 + 30 * 86_400)},
        },
    )
    # DynamoDB's TTL deletions carry this identity.
    expired["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    fact = {
        "pk": {"S": keys.user_pk(GUILD, ALICE)},
        "sk": {"S": keys.fact_sk("f1a2b3c4")},
        "scope": {"S": GUILD},
        "user_id": {"S": ALICE},
        "fact_id": {"S": "f1a2b3c4"},
        "text": {"S": "Works as a nurse"},
        "status": {"S": "active"},
    }
    superseded = _stream_record(1, "MODIFY", fact, {**fact, "status": {"S": "superseded"}})
    episode = _stream_record(
        2,
        "REMOVE",
        {
            "pk": channel_pk,
            "sk": {"S": keys.episode_sk(BASE_MS + 60_000, "e1a2b3c4")},
            "channel_id": {"S": CHANNEL},
            "episode_id": {"S": "e1a2b3c4"},
            "summary": {"S": "Alice talked about nursing and hiking."},
        },
    )
    return {"Records": [expired, superseded, episode]}


def sweep_rule() -> tuple[str, str]:
    """The sweep's schedule event in template.yaml: its event source, and the ARN of what
    SAM creates for it (Type Schedule: an EventBridge rule, logical id function + event
    name, named by CloudFormation <stack>-<logical id>-<suffix>; ScheduleV2: an EventBridge
    Scheduler schedule)."""
    events = Template.load().resources["SweepFunction"]["Properties"]["Events"]
    ((name, event),) = [(n, e) for n, e in events.items() if e["Type"] in SCHEDULE_SOURCES]
    if event["Type"] == "Schedule":
        arn = f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{STACK}-SweepFunction{name}-1A2B3C4D5E6F7"
    else:
        arn = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/{STACK}-SweepFunction{name}"
    return SCHEDULE_SOURCES[event["Type"]], arn


# What each kind of SAM schedule event delivers as `source`.
SCHEDULE_SOURCES = {"Schedule": "aws.events", "ScheduleV2": "aws.scheduler"}


def scheduled_event() -> dict[str, Any]:
    source, arn = sweep_rule()
    return {
        "version": "0",
        "id": "5f1c9e2a-7d34-4c1b-9a8e-0b6d2f3c4e5a",
        "detail-type": "Scheduled Event",
        "source": source,
        "account": ACCOUNT,
        "time": "2026-01-01T00:30:00Z",
        "region": REGION,
        "resources": [arn],
        "detail": {},
    }


def work_event() -> dict[str, Any]:
    body = json.dumps({"channel_id": CHANNEL, "source": "stream", "force": False})
    return {
        "Records": [
            {
                "messageId": "5f0c2a7e-0c1e-4c55-9d43-2b7e8f6a1d01",
                "receiptHandle": "sample-receipt-handle",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": str(BASE_MS),
                    "SenderId": "AROAEXAMPLE:ConsolidateFunction",
                    "ApproximateFirstReceiveTimestamp": str(BASE_MS + 100),
                    "SequenceNumber": "18849496460467696128",
                    "MessageGroupId": CHANNEL,
                    "MessageDeduplicationId": f"stream.{CHANNEL}.{BASE_MS // 60_000}",
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:discord-memory-ConsolidateWorkQueue.fifo",
                "awsRegion": REGION,
            }
        ]
    }


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
            # invoke calls no embedding model. It holds its own keywords: no S3 shards.
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
