"""The samples of what AWS delivers to the functions: a Function URL request, the table's
stream (new observations; removals for the search index), the sweep's schedule and a work
message from the FIFO queue (make_events.py writes them to events/)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from botmemory.records import ObservationKind
from botmemory.storage import keys
from localrun.samtemplate import Template
from scripts.sample_world import (
    ACCOUNT,
    ALICE,
    BASE_MS,
    CHANNEL,
    GUILD,
    REGION,
    STACK,
    snowflake,
)

TABLE_STREAM_ARN = (
    f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/MemoryTable/stream/2026-01-01T00:00:00.000"
)
OBSERVATION_RETENTION_S = 365 * 86_400


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
