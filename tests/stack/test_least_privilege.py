"""Each function's role allows what its code really calls, and no more than it needs.

Every function runs through its template handler (tests/support/lambda_local.py) on in-process AWS,
through the flows a deployment sees: ingest, the stream into consolidation, the sweep,
recall with a query, the search index following deletions, and every slash command up to
/forgetme. Each AWS call is recorded against the function that made it and checked against
the actions its role grants in the translated template (tests/stack/test_iam.py reads those).
"""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from botocore.client import BaseClient
from botocore.stub import Stubber

from botmemory.answering.requests import register_local_target
from botmemory.discord.interactions import Permissions
from botmemory.records import FactStatus, scope_of
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_transport import DataApiTransport
from botmemory.storage.keys import (
    GUILD_PREFIX,
    OPT_OUT_PK,
    PAUSE_PK,
    PURGE_PK,
    SERVERS_PK,
    fact_passage_id,
    message_passage_id,
)
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from scripts.make_events import BOB, BOT
from tests.botmemory.commands.test_commands import Discord, confirm_flow, seed_fact
from tests.botmemory.commands.test_notes import notes
from tests.botmemory.commands.test_personas import PROMPT, persona, purge
from tests.stack.test_iam import FUNCTIONS, function_statements, listed
from tests.stack.test_sam_local import stream_records
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.lambda_local import EVENTS, ROOT, TABLE
from tests.support.sam_tools import translated_template

STAFF = "32"  # MANAGE_GUILD
VIEW_CHANNEL = int(Permissions.VIEW_CHANNEL)
PACKAGE = ROOT / "layers" / "core" / "botmemory"
# The parts of a transaction are authorised as the single-item actions they stand for.
TRANSACTION_PARTS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
# S3 operations authorised as an action of another name.
S3_AUTHORISED_AS = {"ListObjectsV2": "s3:ListBucket", "DeleteObjects": "s3:DeleteObject"}
# The name followup.py gives the thread that finishes deferred work locally; in Lambda that
# work runs in an asynchronous invoke of InteractionsFunction itself.
DEFERRED_THREAD = "deferred-interaction"
DM_NOTES = "/discord-memory/day/dm-notes"


class CallLog:
    """Every AWS API call made while a function runs, by function."""

    def __init__(self) -> None:
        self.running: str | None = None
        self.calls: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)

    def record(self, service: str, operation: str, params: dict[str, Any]) -> None:
        function = (
            "InteractionsFunction"
            if threading.current_thread().name == DEFERRED_THREAD
            else self.running
        )
        if function is not None:
            self.calls[function].append((f"{service}:{operation}", params))

    def actions(self, function: str) -> set[str]:
        """The IAM actions the recorded calls need."""
        needed = set()
        for action, params in self.calls[function]:
            if action == "dynamodb:TransactWriteItems":
                for item in params["TransactItems"]:
                    needed |= {f"dynamodb:{TRANSACTION_PARTS[part]}" for part in item}
            elif action == "lambda:Invoke":
                needed.add("lambda:InvokeFunction")
            elif action.startswith("s3:"):
                needed.add(S3_AUTHORISED_AS.get(action.removeprefix("s3:"), action))
            else:
                needed.add(action)
        return needed


@pytest.fixture
def call_log(monkeypatch: pytest.MonkeyPatch) -> CallLog:
    log = CallLog()
    make_api_call = BaseClient._make_api_call

    def recording(self: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        prefix = self.meta.service_model.signing_name or self.meta.service_model.endpoint_prefix
        log.record(prefix, operation, params)
        return make_api_call(self, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", recording)
    return log


@pytest.fixture
def discord(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    call_log: CallLog,
) -> Iterator[Discord]:
    client = Discord(monkeypatch, fake_discord, dynamodb)
    client.local._overrides["AnswerFunction"].update(
        DISCORD_API_BASE=fake_discord.url, DISCORD_BOT_TOKEN=BOT_TOKEN, CHAT_MODEL="rules"
    )
    # Each invoke, the worker's from the queue included, is recorded against its function.
    invoke = client.local._invoke

    def recorded(logical_id: str, event: Any, settings_of: str) -> Any:
        call_log.running = logical_id
        try:
            return invoke(logical_id, event, settings_of)
        finally:
            call_log.running = None

    monkeypatch.setattr(client.local, "_invoke", recorded)
    yield client


def run_stream(discord: Discord, function: str, after: set[str]) -> None:
    """Deliver the table's new stream records to a stream-triggered function, through its
    template filter, as Lambda's event source mapping would."""
    template = discord.local.template
    filters = template.stream_filters(function)
    stream_arn = discord.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    records = stream_records(discord.dynamodb, stream_arn, after)
    after |= {r["dynamodb"]["SequenceNumber"] for r in records}
    delivered = [r for r in records if passes_filters(filters, r)]
    if delivered:
        answer = discord.local.invoke(function, {"Records": delivered})
        assert answer == {"batchItemFailures": []}


def channel_events() -> list[dict[str, Any]]:
    everyone_denied = {"id": gw.GUILD, "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)}
    other = "200000000000000077"
    return [
        {
            "t": "GUILD_CREATE",
            "d": {
                "id": gw.GUILD,
                "roles": [{"id": gw.GUILD, "permissions": str(VIEW_CHANNEL)}],
                "channels": [{"id": gw.CHANNEL, "type": 0}, {"id": other, "type": 0}],
            },
        },
        {
            "t": "CHANNEL_UPDATE",
            "d": {
                "id": other,
                "type": 0,
                "guild_id": gw.GUILD,
                "permission_overwrites": [everyone_denied],
            },
        },
        {"t": "CHANNEL_DELETE", "d": {"id": other, "type": 0, "guild_id": gw.GUILD}},
        # A thread, a role made staff, and @everyone losing View Channel (its channels
        # recomputed).
        {
            "t": "THREAD_CREATE",
            "d": {
                "id": "200000000000000078",
                "type": 11,
                "guild_id": gw.GUILD,
                "parent_id": gw.CHANNEL,
            },
        },
        {
            "t": "GUILD_ROLE_UPDATE",
            "d": {"guild_id": gw.GUILD, "role": {"id": "500000000000000001", "permissions": "32"}},
        },
        {
            "t": "GUILD_ROLE_UPDATE",
            "d": {"guild_id": gw.GUILD, "role": {"id": gw.GUILD, "permissions": "0"}},
        },
        # A shard's READY: the servers the deployment knows, compared with its guilds.
        {"t": "READY", "d": {"guilds": [gw.GUILD], "shard": [0, 1]}},
    ]


def a_deployments_day(discord: Discord) -> None:
    seen_by_consolidation: set[str] = set()
    seen_by_index: set[str] = set()
    sample = json.loads((EVENTS / "ingest" / "gateway-batch.json").read_text())
    discord.local.invoke("IngestFunction", sample)
    # The relay's guild and channel events: which channels @everyone can view.
    discord.local.invoke("IngestFunction", {"events": channel_events()})
    talk = [
        gw.message(
            [gw.ALICE, gw.BOB, gw.CAROL][i % 3],
            "I love hiking in the Alps." if i == 0 else f"small talk {i}",
            1_767_225_600_000 + i * 1000,
        )
        for i in range(40)
    ]
    discord.local.invoke("IngestFunction", {"events": talk})
    run_stream(discord, "ConsolidateFunction", seen_by_consolidation)
    # A quiet channel's leftovers wait for the sweep.
    discord.local.invoke(
        "IngestFunction",
        {"events": [gw.message(gw.BOB, "see you tomorrow", 1_767_225_700_000, channel="77")]},
    )
    discord.local.invoke(
        "SweepFunction", json.loads((EVENTS / "sweep" / "schedule.json").read_text())
    )
    recall = {
        "guild_id": gw.GUILD,
        "channel_id": gw.CHANNEL,
        "user_id": gw.ALICE,
        "query": "where does Alice like hiking?",
    }
    assert discord.local.invoke("RecallFunction", recall)["enabled"] is True
    # In a DM, recall also reads the deployment's notes (its SSM parameter) and the servers'.
    parameters.clear_caches()
    boto3.client("ssm", region_name="us-east-1").put_parameter(
        Name=DM_NOTES, Value="Be brief.", Type="SecureString"
    )
    discord.local._overrides.setdefault("RecallFunction", {})["DM_NOTES_PARAMETER"] = DM_NOTES
    in_dm = {"channel_id": "200000000000000799", "user_id": gw.ALICE}
    assert discord.local.invoke("RecallFunction", in_dm)["notes"][0]["text"] == "Be brief."
    parameters.clear_caches()
    # The bot answers a mention (rules chat model), then corrects what it was shown.
    started: list[dict[str, Any]] = []
    register_local_target("AnswerFunction", started.append)
    hiking = discord.services().repository.active_facts(scope_of(gw.GUILD), gw.ALICE, 8)[0]
    for n, text in enumerate(
        ["where do I like hiking?", f"correct {hiking.fact_id} to Alice loves the Dolomites"]
    ):
        asked = gw.message(gw.ALICE, f"<@{BOT}> {text}", 1_767_225_800_000 + n * 1000)
        asked["d"]["mentions"] = [{"id": BOT, "username": "memorybot", "bot": True}]
        discord.local.invoke("IngestFunction", {"events": [asked]})
        assert len(started) == 1
        assert discord.local.invoke("AnswerFunction", started.pop())["posted"] == 1
    corrected = discord.services().repository.fact_by_id(hiking.fact_id)
    assert corrected is not None and corrected.text == "Alice loves the Dolomites"
    # After posting, each answer counted a recall hit of the facts its block showed.
    assert corrected.recall_hits >= 1

    discord.text("memory", "show")
    discord.text("memory", "remember", {"text": "I grow chillies on my balcony"})
    discord.text("memory", "forget", {"what": "chillies"})
    discord.text("memory-staff", "pin", {"where": "channel", "text": "Be kind"}, permissions=STAFF)
    discord.run("memory-staff", "user", {"member": BOB}, permissions=STAFF)
    # A fact consolidation demoted out of the hot tier, restored by staff.
    tuba = seed_fact(discord.services(), BOB, "Plays the tuba")
    discord.services().repository.put_fact(tuba.model_copy(update={"status": FactStatus.DEMOTED}))
    restored = discord.text(
        "memory-staff", "restore-fact", {"member": BOB, "id": tuba.fact_id}, permissions=STAFF
    )
    assert restored.startswith("Restored")
    discord.run("memory-staff", "quarantine", permissions=STAFF)
    discord.text("memory-staff", "reset-summary", permissions=STAFF)
    # Personas: staff define one, teach it, list them, remove it and purge it.
    assert persona(discord, "set", {"id": "bard", "name": "Bard", "prompt": PROMPT}).startswith(
        "Created"
    )
    assert persona(discord, "teach", {"id": "bard", "text": "The tavern opens at dusk"}).startswith(
        "Taught"
    )
    persona(discord, "list")
    discord.text("memory", "show")  # with a persona's partition to read
    persona(discord, "remove", {"id": "bard"})
    assert purge(discord, "bard").startswith("Purged `bard`")
    # Notes for direct messages: staff write, show and clear them; a DM's /memory show.
    assert notes(discord, "set", {"text": "Game night is on Fridays"}).startswith("Saved")
    notes(discord, "show")
    discord.text("memory", "show", guild=None)
    notes(discord, "clear")
    confirm_flow(discord, "memory", "optout", "optout:confirm")
    discord.text("memory", "optin")
    confirm_flow(discord, "forgetme", "", "forgetme:confirm")
    # The deletions and rewrites above reach the search index through the stream.
    run_stream(discord, "SearchIndexFunction", seen_by_index)


@pytest.fixture
def day(discord: Discord, call_log: CallLog) -> CallLog:
    a_deployments_day(discord)
    return call_log


def granted(function: str) -> set[str]:
    statements = function_statements(translated_template(), function)
    return {action for s in statements for action in listed(s["Action"])}


def test_every_call_a_function_makes_is_allowed_by_its_role(day: CallLog) -> None:
    # The day reached every function that touches the table (so this is not vacuous); the
    # search index function needs no table access at all.
    for function in FUNCTIONS:
        if function != "SearchIndexFunction":
            assert any(a.startswith("dynamodb:") for a in day.actions(function)), function
    missing = {
        function: sorted(day.actions(function) - granted(function))
        for function in FUNCTIONS
        if day.actions(function) - granted(function)
    }
    assert missing == {}, f"calls the role does not allow: {missing}"


# Read by Lambda's event source mapping with the function's role, never by its code.
STREAM_READS = {
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
}


def table_operations_in_the_code() -> set[str]:
    """Every DynamoDB action the package can need: the client methods its code calls (a
    transaction needs the single-item actions of its parts)."""
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    called = {
        "dynamodb:" + "".join(part.title() for part in name.split("_"))
        for name in re.findall(r"_client\.([a-z_]+)\(", source)
    }
    if "dynamodb:TransactWriteItems" in called:
        called |= {f"dynamodb:{action}" for action in TRANSACTION_PARTS.values()}
    return called


def test_no_role_is_granted_a_table_action_the_code_never_calls() -> None:
    code = table_operations_in_the_code()
    assert {"dynamodb:PutItem", "dynamodb:Query", "dynamodb:TransactWriteItems"} <= code
    for function in FUNCTIONS:
        table = {a for a in granted(function) - STREAM_READS if a.startswith("dynamodb:")}
        assert table <= code, f"{function}: {sorted(table - code)} (never called)"
        assert "dynamodb:Scan" not in table


def table_actions(function: str) -> set[str]:
    return {a for a in granted(function) if a.startswith("dynamodb:")}


def test_recall_reads_and_the_search_index_never_touches_the_table() -> None:
    assert table_actions("RecallFunction") == {
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
    }
    assert table_actions("SearchIndexFunction") == STREAM_READS  # the stream, never the table


def test_ingest_writes_observations_and_reads_only_the_opt_out_list(day: CallLog) -> None:
    visibility = {
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:DeleteItem",
    }
    assert table_actions("IngestFunction") == {"dynamodb:PutItem", "dynamodb:Query"} | visibility
    assert day.actions("IngestFunction") == table_actions("IngestFunction")
    queries = [p for a, p in day.calls["IngestFunction"] if a == "dynamodb:Query"]
    assert queries
    for params in queries:  # the opt-out list, the pauses, or a guild's partition (its
        # channels and its memory controls), as the conditions allow
        pk = params["ExpressionAttributeValues"][":pk"]["S"]
        assert pk in (OPT_OUT_PK, PAUSE_PK, SERVERS_PK) or pk.startswith(GUILD_PREFIX)
    # Channel visibility reads and deletes only guild partitions (as the role's condition);
    # a server's purge pointer is deleted when the bot comes back (its own statement), and
    # when the bot joined a known server is read by key (botmemory.catchup.on_join).
    for action, params in day.calls["IngestFunction"]:
        if action == "dynamodb:GetItem":
            pk = params["Key"]["pk"]["S"]
            assert pk.startswith(GUILD_PREFIX) or pk == SERVERS_PK
        if action == "dynamodb:UpdateItem":
            assert params["Key"]["pk"]["S"].startswith(GUILD_PREFIX)
        if action == "dynamodb:DeleteItem":
            pk = params["Key"]["pk"]["S"]
            assert pk.startswith(GUILD_PREFIX) or pk == PURGE_PK
        if action == "dynamodb:BatchWriteItem":
            for (requests,) in [params["RequestItems"].values()]:
                assert all(
                    r["PutRequest"]["Item"]["pk"]["S"].startswith(GUILD_PREFIX) for r in requests
                )


# --- the keyword database: what each function calls on it, on botocore's Stubber -------------

SERVER = "100000000000000001"  # a guild's scope is its id
TALK = "200000000000000001"
QUIET = "200000000000000002"
ALICE = "300000000000000001"
SAID_MS = 1_767_225_600_000
CLUSTER = "arn:aws:rds:us-east-1:123456789012:cluster:memory-keywords"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rds!cluster-AbCdEf"


class NoVectors:
    """The vector leg out of the way: only the keyword leg's calls are watched here (the
    vector rights are read from the template in tests/stack/test_iam.py)."""

    def add(self, passages: Sequence[Passage]) -> int:
        return len(passages)

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        return len(list(ids))

    def nearest_passages(self, query: SearchQuery, text: str) -> list[Passage]:
        return []

    def passages(self) -> Iterator[Passage]:
        return iter(())


def said(channel: str, message: str, text: str) -> Passage:
    return Passage(
        id=message_passage_id(channel, message),
        kind=PassageKind.MESSAGE,
        scope=SERVER,
        channel_id=channel,
        text=text,
        time_ms=SAID_MS,
    )


def alices_fact(text: str) -> Passage:
    return Passage(
        id=fact_passage_id(SERVER, ALICE, "f1"),
        kind=PassageKind.FACT,
        scope=SERVER,
        channel_id="",
        text=text,
        time_ms=SAID_MS,
        authors=[ALICE],
    )


def recalls(index: DeployedSearchIndex) -> None:
    """RecallFunction's search: in the channels asked about, and server-wide."""
    for channels in ([TALK, QUIET], None):
        index.search(SearchQuery(scope=SERVER, channel_ids=channels, text="kayak", now_s=1))


def consolidates(index: DeployedSearchIndex) -> None:
    """ConsolidateWorkerFunction's IndexWriter.write: a deleted message's passage removed, the
    round's passages added, and one the table stopped holding meanwhile withdrawn."""
    index.remove([message_passage_id(TALK, "1")], scope=SERVER)
    index.add([said(TALK, "3", "a red kayak"), said(QUIET, "4", "hello"), alices_fact("kayaks")])
    index.remove([message_passage_id(QUIET, "4")], scope=SERVER)


def answers(index: DeployedSearchIndex) -> None:
    """AnswerFunction: its own recall, then a corrected fact indexed again (reindex_fact), and
    withdrawn when it changed meanwhile."""
    recalls(index)
    index.add([alices_fact("Alice owns two kayaks")])
    index.remove([fact_passage_id(SERVER, ALICE, "f1")], scope=SERVER)


def follows(index: DeployedSearchIndex) -> None:
    """SearchIndexFunction's IndexFollower.follow: passages of deleted items removed."""
    index.remove([message_passage_id(TALK, "2")], scope=SERVER)
    index.remove([message_passage_id(TALK, "1")], scope=None)


KEYWORD_USES = {
    "RecallFunction": recalls,
    "ConsolidateWorkerFunction": consolidates,
    "AnswerFunction": answers,
    "SearchIndexFunction": follows,
}


def keyword_granted(function: str) -> set[str]:
    return {
        a
        for a in granted(function)
        if a.startswith("rds-data:") or a == "secretsmanager:GetSecretValue"
    } - ({"secretsmanager:GetSecretValue"} if not keyword_statement_secrets(function) else set())


def keyword_statement_secrets(function: str) -> bool:
    """Whether the function's GetSecretValue grant names the keyword cluster's secret."""
    secret = {"Fn::GetAtt": ["KeywordDbCluster", "MasterUserSecret.SecretArn"]}
    return any(
        secret in listed(s.get("Resource"))
        for s in function_statements(translated_template(), function)
    )


def test_every_function_with_keyword_rights_has_its_calls_watched() -> None:
    assert {f for f in FUNCTIONS if any(a.startswith("rds-data:") for a in granted(f))} == set(
        KEYWORD_USES
    )


@pytest.mark.parametrize("function", sorted(KEYWORD_USES))
def test_a_function_is_granted_exactly_the_keyword_calls_it_makes(
    function: str, call_log: CallLog
) -> None:
    client = boto3.client("rds-data", region_name="us-east-1")
    stubber = Stubber(client)
    for _ in range(16):
        stubber.add_response("execute_statement", {"records": []})
    keywords = PostgresKeywordIndex(DataApiTransport(CLUSTER, SECRET, "botmemory", client=client))
    call_log.running = function
    try:
        with stubber:
            KEYWORD_USES[function](DeployedSearchIndex(NoVectors(), keywords))
    finally:
        call_log.running = None
    made = {a for a in call_log.actions(function) if a.startswith("rds-data:")}
    assert made == {"rds-data:ExecuteStatement"}  # the flow reached the database
    # The Data API reads the secret with the caller's rights: that, and no more.
    assert made | {"secretsmanager:GetSecretValue"} == keyword_granted(function)
