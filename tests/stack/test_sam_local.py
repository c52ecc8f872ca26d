"""Every sample event runs through the handler template.yaml names for its function, and
the whole flow (ingest, stream with the template's filter, consolidate, recall) works.

Also what `sam local invoke` is given: events/env.json points every function at `make dev`'s
stack and never at AWS, samconfig.toml holds only options the SAM CLI has, and each sample
has the shape its trigger in template.yaml really delivers."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import boto3
import pytest

from botmemory.discord.interactions import InteractionResponseType, MessageFlag
from localrun import dev
from localrun import gateway as gw
from localrun.samtemplate import Template, passes_filters
from localrun.stack import LocalStack
from scripts import make_events
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.lambda_local import EVENTS, ROOT, TABLE, LocalLambda, sample_env

FUNCTION_OF_FOLDER = {
    "interactions": "InteractionsFunction",
    "ingest": "IngestFunction",
    "consolidate": "ConsolidateFunction",
    "consolidate_worker": "ConsolidateWorkerFunction",
    "recall": "RecallFunction",
    "sweep": "SweepFunction",
    "search_index": "SearchIndexFunction",
    "answer": "AnswerFunction",
}


def http_json(response: dict[str, Any]) -> Any:
    return json.loads(response["body"])


def check_ingest(r: Any) -> None:
    assert r == {"stored": 14, "channels": 0, "duplicates": 0, "ignored": [], "rejected": []}


def check_stream(r: Any) -> None:
    assert r == {"batchItemFailures": []}


def check_recall(r: Any) -> None:
    assert r["enabled"] is True
    assert r["system_prompt"].startswith("You are Memorybot")
    assert r["search"] == "ok" and r["query_note"] is None


def check_recall_over_http(r: Any) -> None:
    assert r["statusCode"] == 200
    assert http_json(r)["enabled"] is True


def check_sweep(r: Any) -> None:
    assert set(r) == {"enqueued", "failed", "complete"}


def check_ping(r: Any) -> None:
    assert r["statusCode"] == 200
    assert http_json(r) == {"type": InteractionResponseType.PONG}


def check_show(r: Any) -> None:
    assert r["statusCode"] == 200
    data = http_json(r)["data"]
    assert data["flags"] == MessageFlag.EPHEMERAL and data["allowed_mentions"] == {"parse": []}


def check_remember(r: Any) -> None:
    assert r["statusCode"] == 200
    data = http_json(r)["data"]
    assert data["content"].startswith("Remembered as `")
    assert data["flags"] == MessageFlag.EPHEMERAL


def check_unknown(r: Any) -> None:
    assert r["statusCode"] == 200
    assert "don't know the command `/memory dance`" in http_json(r)["data"]["content"]


def check_unauthorized(r: Any) -> None:
    assert r["statusCode"] == 401


def check_answer(r: Any) -> None:
    assert r["status"] == "answered" and r["posted"] == 1 and r["recorded"] == 1


CHECKS: dict[str, Callable[[Any], None]] = {
    "answer/mention.json": check_answer,
    "answer/ask.json": check_answer,
    "ingest/gateway-batch.json": check_ingest,
    "consolidate/stream-batch.json": check_stream,
    "consolidate_worker/channel-work.json": check_stream,
    "recall/request.json": check_recall,
    "recall/function-url-request.json": check_recall_over_http,
    "sweep/schedule.json": check_sweep,
    "search_index/stream-removals.json": check_stream,
    "interactions/ping.json": check_ping,
    "interactions/memory-show.json": check_show,
    "interactions/memory-remember.json": check_remember,
    "interactions/unknown-command.json": check_unknown,
    "interactions/bad-signature.json": check_unauthorized,
}


def sample_files() -> list[str]:
    return sorted(str(p.relative_to(EVENTS)) for p in EVENTS.rglob("*.json") if p.parent != EVENTS)


def test_every_sample_event_has_a_check_and_a_function() -> None:
    assert sample_files() == sorted(CHECKS)
    assert {name.split("/")[0] for name in CHECKS} == set(FUNCTION_OF_FOLDER)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_sample_event_runs_through_its_templates_handler(
    name: str, dynamodb: Any, monkeypatch: pytest.MonkeyPatch, fake_discord: FakeDiscordRest
) -> None:
    env = sample_env()
    # AnswerFunction posts to Discord: here the fake on 127.0.0.1 stands in for make dev's.
    env["AnswerFunction"].update(DISCORD_API_BASE=fake_discord.url, DISCORD_BOT_TOKEN=BOT_TOKEN)
    local = LocalLambda(monkeypatch, env)
    # The consolidation and recall samples refer to what the ingest sample records.
    if not name.startswith("ingest/"):
        local.invoke(
            "IngestFunction", json.loads((EVENTS / "ingest/gateway-batch.json").read_text())
        )
    event = json.loads((EVENTS / name).read_text())

    result = local.invoke(FUNCTION_OF_FOLDER[name.split("/")[0]], event)

    CHECKS[name](result)


def test_a_replayed_interaction_does_its_work_once(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    event = json.loads((EVENTS / "interactions/memory-remember.json").read_text())
    calls: list[str] = []

    from botmemory.commands.member import MemberCommands

    original = MemberCommands.remember

    def counted(self: MemberCommands, invocation: Any) -> dict[str, Any]:
        calls.append(invocation.interaction_id)
        return original(self, invocation)

    monkeypatch.setattr(MemberCommands, "remember", counted)

    first = local.invoke("InteractionsFunction", event)
    second = local.invoke("InteractionsFunction", event)

    assert first["statusCode"] == second["statusCode"] == 200
    assert http_json(first) == http_json(second)
    assert "Remembered as" in http_json(first)["data"]["content"]
    assert calls == ["1500000000000000005"]


def stream_records(client: Any, stream_arn: str, after: set[str]) -> list[dict[str, Any]]:
    """Every record on the table's stream, as Lambda's event source would read them."""
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            records += page["Records"]
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    fresh = [r for r in records if r["dynamodb"]["SequenceNumber"] not in after]
    for record in fresh:
        record["eventSourceARN"] = stream_arn
        record["dynamodb"]["ApproximateCreationDateTime"] = 1_767_225_600
    return fresh


def test_end_to_end_ingest_stream_consolidate_recall(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    source = local.template.stream_source("ConsolidateFunction")
    filters = local.template.stream_filters("ConsolidateFunction")
    stream_arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    statements = {
        gw.ALICE: "I love hiking in the Alps.",
        gw.BOB: "I use Neovim for everything.",
        gw.CAROL: "I'm a teacher at the village school.",
    }
    people = list(statements)
    messages = []
    for i in range(45):
        author = people[i % 3]
        text = statements[author] if i < 3 else f"small talk number {i}"
        messages.append(gw.message(author, text, 1_767_225_600_000 + i * 1000))

    for start in range(0, 45, 15):  # the relay sends batches
        stored = local.invoke("IngestFunction", {"events": messages[start : start + 15]})
        assert stored["stored"] == 15

    seen: set[str] = set()
    records = stream_records(dynamodb, stream_arn, seen)
    seen |= {r["dynamodb"]["SequenceNumber"] for r in records}
    delivered = [r for r in records if passes_filters(filters, r)]
    assert len(delivered) == 45  # only the observation INSERTs pass the template's filter
    for start in range(0, len(delivered), source["BatchSize"]):
        answer = local.invoke(
            "ConsolidateFunction", {"Records": delivered[start : start + source["BatchSize"]]}
        )
        assert answer == {"batchItemFailures": []}

    later = stream_records(dynamodb, stream_arn, seen)
    assert later and not [
        r for r in later if passes_filters(filters, r)
    ]  # facts, episode, consumption

    result = local.invoke(
        "RecallFunction",
        {
            "guild_id": gw.GUILD,
            "channel_id": gw.CHANNEL,
            "user_id": gw.ALICE,
            "template": "Bot.\n{memory}",
        },
    )
    assert set(result["facts"]) == set(people)
    assert [f["text"] for f in result["facts"][gw.ALICE]] == ["Alice loves hiking in the Alps"]
    assert [f["text"] for f in result["facts"][gw.BOB]] == ["Bob uses Neovim for everything"]
    assert [f["text"] for f in result["facts"][gw.CAROL]] == [
        "Carol is a teacher at the village school"
    ]
    assert len(result["episodes"]) == 1
    assert "Alice, Bob and Carol talked about" in result["episodes"][0]["summary"]
    assert result["system_prompt"].startswith("Bot.\n<memory>")


def test_a_bad_stream_record_is_reported_alone(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    good = json.loads((EVENTS / "consolidate/stream-batch.json").read_text())["Records"]
    bad = json.loads(json.dumps(good[0]))
    bad["dynamodb"]["Keys"] = {"pk": {"S": "SC#not-a-channel"}, "sk": {"S": "OBS#1"}}
    bad["dynamodb"]["SequenceNumber"] = "999"

    answer = local.invoke("ConsolidateFunction", {"Records": [good[0], bad, good[1]]})

    assert answer == {"batchItemFailures": [{"itemIdentifier": "999"}]}


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        ({"channel_id": gw.CHANNEL}, ["user_id"]),
        ({"user_id": "x", "channel_id": gw.CHANNEL}, ["user_id"]),
    ],
)
def test_recall_names_the_missing_fields_never_a_stack_trace(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, payload: dict[str, Any], fields: list[str]
) -> None:
    local = LocalLambda(monkeypatch, sample_env())

    result = local.invoke("RecallFunction", payload)

    assert result["fields"] == fields and "error" in result


def test_ingest_answers_a_malformed_request_without_raising(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())

    result = local.invoke("IngestFunction", {"messages": []})

    assert result["stored"] == 0 and "events" in result["error"]


# --- events/env.json: `sam local invoke` against `make dev`, never AWS -----------------

SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
MISSING_SAM = ".venv-sam is missing: run `make sam-venv` (`make test` builds it)"
LOCAL_HOSTS = {"host.docker.internal", "localhost", "127.0.0.1"}
# Every AWS client the functions build: the table, deferred answers, secrets, the models,
# the vector index, metrics.
CLIENTS = (
    "dynamodb",
    "dynamodbstreams",
    "lambda",
    "secretsmanager",
    "bedrock-runtime",
    "s3vectors",
    "cloudwatch",
)
REGENERATE = "regenerate with `.venv/bin/python -m scripts.make_events`"


def env_json() -> dict[str, dict[str, str]]:
    loaded: dict[str, dict[str, str]] = json.loads((EVENTS / "env.json").read_text())
    return loaded


def function_ids() -> list[str]:
    return Template.load().function_ids()


def declared(logical_id: str) -> dict[str, str]:
    """The variables template.yaml gives the function (Globals merged): the only ones
    `sam local invoke --env-vars` can set."""
    return Template.load().function(logical_id).environment


def test_env_json_has_an_entry_for_every_function_of_the_template() -> None:
    assert sorted(env_json()) == sorted(function_ids())


@pytest.mark.parametrize("logical_id", function_ids())
def test_env_json_points_the_function_at_make_devs_stack(logical_id: str) -> None:
    variables = env_json()[logical_id]

    for name in ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"):
        endpoint = urlparse(variables[name])
        assert endpoint.scheme == "http" and endpoint.hostname in LOCAL_HOSTS, name
        assert endpoint.port == dev.DYNAMODB_PORT, (
            f"{name}: make dev listens on {dev.DYNAMODB_PORT}"
        )
    assert variables["TABLE_NAME"] == dev.TABLE_NAME
    assert variables["MEMORY_MODEL"] == "rules"
    assert variables["EMBEDDING_MODEL"] == ""
    assert variables["MEMORY_SEARCH_INDEX"].startswith("sqlite:")
    # The embedded index holds its own keywords: no keyword database locally.
    assert variables["MEMORY_KEYWORD_INDEX"] == ""


@pytest.mark.parametrize("run", [{}, dev.search_environment()], ids=["make demo", "make dev"])
def test_local_runs_leave_the_keyword_database_unset(run: dict[str, str]) -> None:
    """The template's MEMORY_KEYWORD_INDEX (its Aurora cluster) resolves to empty in a local run,
    whose embedded index keeps the keywords itself."""
    environment = LocalStack("http://127.0.0.1:8000", environment=run).environment()
    assert Template.load().function("RecallFunction").environment["MEMORY_KEYWORD_INDEX"] == ""
    assert environment["MEMORY_KEYWORD_INDEX"] == ""


@pytest.mark.parametrize("logical_id", function_ids())
def test_env_json_names_no_real_secret(logical_id: str) -> None:
    variables = env_json()[logical_id]
    secrets = {name for name in {*declared(logical_id), *variables} if name.endswith("_SECRET")}

    # Every secret the template names (a Secrets Manager name or ARN) is blanked.
    assert {name: variables.get(name) for name in secrets} == dict.fromkeys(secrets, "")
    if "MEMORY_HASH_KEY_SECRET" in declared(logical_id):
        # The person hash key is given directly, as make dev gives it.
        assert variables["MEMORY_HASH_KEY"] == dev.sample_hash_key()
        assert len(variables["MEMORY_HASH_KEY"]) >= 16


def container_environment(logical_id: str) -> dict[str, str]:
    """What the function's process sees under `sam local invoke`: SAM's own AWS_* variables
    (placeholder credentials when the caller has none) and env.json's entry."""
    return {
        "AWS_SAM_LOCAL": "true",
        "AWS_LAMBDA_FUNCTION_NAME": logical_id,
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "defaultkey",
        "AWS_SECRET_ACCESS_KEY": "defaultsecret",
        **env_json()[logical_id],
    }


@pytest.mark.parametrize("logical_id", function_ids())
def test_no_aws_client_of_the_function_resolves_a_real_endpoint(
    logical_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    # No other AWS configuration: no profile, no shared files.
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    for name, value in container_environment(logical_id).items():
        monkeypatch.setenv(name, value)
    # The code builds its clients with boto3.client(...): the default session, made afresh.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    variables = env_json()[logical_id]

    endpoints = {service: boto3.client(service).meta.endpoint_url for service in CLIENTS}

    assert endpoints["dynamodb"] == variables["AWS_ENDPOINT_URL_DYNAMODB"]
    assert endpoints == {
        service: variables[
            "AWS_ENDPOINT_URL_DYNAMODB" if service == "dynamodb" else "AWS_ENDPOINT_URL"
        ]
        for service in CLIENTS
    }


# Run by .venv-sam's python: the SAM CLI's own code for the environment of a local invoke
# (Globals merged into each function, then --env-vars applied to what the function declares).
SAM_LOCAL_ENVIRONMENT = """
import json, sys
from samcli.lib.providers.sam_function_provider import SamFunctionProvider
from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider
from samcli.local.lambdafn.env_vars import EnvironmentVariables

stacks, _ = SamLocalStackProvider.get_stacks(sys.argv[1])
overrides = json.load(open(sys.argv[2], encoding="utf-8"))
dropped = {}
for function in SamFunctionProvider(stacks).get_all():
    given = {**overrides.get("Parameters", {}), **overrides.get(function.name, {})}
    resolved = EnvironmentVariables(
        function.name, 512, 30, function.handler,
        variables=(function.environment or {}).get("Variables", {}),
        shell_env_values={}, override_values=given, aws_creds={},
    ).resolve()
    dropped[function.name] = sorted(k for k, v in given.items() if resolved.get(k) != v)
json.dump(dropped, sys.stdout)
"""


def test_sam_local_invoke_passes_every_env_json_variable() -> None:
    assert SAM_PYTHON.exists(), MISSING_SAM
    result = subprocess.run(
        [str(SAM_PYTHON), "-c", SAM_LOCAL_ENVIRONMENT, "template.yaml", "events/env.json"],
        cwd=ROOT,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr

    dropped = json.loads(result.stdout)

    assert dropped == {logical_id: [] for logical_id in function_ids()}


def test_env_json_and_the_samples_are_what_make_events_writes() -> None:
    assert env_json() == make_events.local_environment(), f"events/env.json is stale: {REGENERATE}"
    for name, payload in make_events.samples().items():
        assert json.loads((EVENTS / name).read_text()) == json.loads(
            make_events.as_json(payload)
        ), f"events/{name} is stale: {REGENERATE}"


# --- samconfig.toml --------------------------------------------------------------------

SAMCONFIG = ROOT / "samconfig.toml"
# Run by .venv-sam's python: the options of each SAM CLI command samconfig.toml configures.
SAM_OPTIONS = """
import importlib, json
commands = {
    "build": "samcli.commands.build.command",
    "validate": "samcli.commands.validate.validate",
    "deploy": "samcli.commands.deploy.command",
    "local_invoke": "samcli.commands.local.invoke.cli",
}
json.dump({
    name: sorted(p.name for p in importlib.import_module(module).cli.params if p.name)
    for name, module in commands.items()
}, __import__("sys").stdout)
"""


def samconfig() -> dict[str, Any]:
    with SAMCONFIG.open("rb") as handle:
        return tomllib.load(handle)


def test_samconfig_sets_only_options_the_sam_cli_has() -> None:
    assert SAM_PYTHON.exists(), MISSING_SAM
    result = subprocess.run(
        [str(SAM_PYTHON), "-c", SAM_OPTIONS],
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    options: dict[str, list[str]] = json.loads(result.stdout)
    sections = samconfig()["default"]

    for command, section in sections.items():
        keys = set(section["parameters"])
        if command == "global":
            assert keys <= {o for names in options.values() for o in names}, keys
        else:
            assert keys <= set(options[command]), f"{command}: {keys - set(options[command])}"


def test_samconfig_validates_offline_and_invokes_against_make_dev() -> None:
    sections = samconfig()["default"]

    assert sections["validate"]["parameters"] == {"lint": False, "region": "us-east-1"}
    assert ROOT / sections["local_invoke"]["parameters"]["env_vars"] == EVENTS / "env.json"
    deploy = sections["deploy"]["parameters"]
    assert deploy["resolve_s3"] is True and deploy["confirm_changeset"] is True
    # A region with S3 Vectors and the Bedrock models; parameters only as placeholders to
    # replace (tests/stack/test_deploy_config.py), no value (a secret least of all) fixed here.
    assert deploy["region"] == "us-east-1"
    assert all("=REPLACE-" in override for override in deploy["parameter_overrides"])


# --- the samples have the shape their trigger delivers -------------------------------


def test_the_stream_samples_pass_their_functions_filters() -> None:
    template = Template.load()
    for name, logical_id in (
        ("consolidate/stream-batch.json", "ConsolidateFunction"),
        ("search_index/stream-removals.json", "SearchIndexFunction"),
    ):
        filters = template.stream_filters(logical_id)
        records = json.loads((EVENTS / name).read_text())["Records"]
        assert records and all(passes_filters(filters, r) for r in records), name


def test_the_consolidate_sample_is_what_the_stream_delivers_after_the_ingest_sample(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    local.invoke("IngestFunction", json.loads((EVENTS / "ingest/gateway-batch.json").read_text()))
    stream_arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    filters = local.template.stream_filters("ConsolidateFunction")
    real = [r for r in stream_records(dynamodb, stream_arn, set()) if passes_filters(filters, r)]
    sample = json.loads((EVENTS / "consolidate/stream-batch.json").read_text())["Records"]

    for ours, theirs in zip(sample, real, strict=False):
        assert set(ours) == set(theirs)
        assert set(ours["dynamodb"]) == set(theirs["dynamodb"])
        assert ours["dynamodb"]["Keys"] == theirs["dynamodb"]["Keys"]
        assert set(ours["dynamodb"]["NewImage"]) == set(theirs["dynamodb"]["NewImage"])


def test_the_sweep_sample_comes_from_the_kind_of_schedule_the_template_creates() -> None:
    events = Template.load().resources["SweepFunction"]["Properties"]["Events"]
    ((event_name, event),) = [
        (n, e) for n, e in events.items() if e["Type"] in make_events.SCHEDULE_SOURCES
    ]
    sample = json.loads((EVENTS / "sweep/schedule.json").read_text())

    assert sample["source"] == make_events.SCHEDULE_SOURCES[event["Type"]]
    assert sample["detail-type"] == "Scheduled Event" and sample["detail"] == {}
    if event["Type"] == "Schedule":  # an EventBridge rule, named after function and event
        (rule,) = sample["resources"]
        assert rule.startswith("arn:aws:events:") and f":rule/{make_events.STACK}-" in rule
        assert f"-SweepFunction{event_name}-" in rule


def test_the_function_url_samples_match_each_urls_auth_type() -> None:
    resources = Template.load().resources
    interactions = resources["InteractionsFunction"]["Properties"]["FunctionUrlConfig"]
    recall = resources["RecallFunctionUrl"]["Properties"]
    for name, auth in (
        ("interactions/ping.json", interactions["AuthType"]),
        ("recall/function-url-request.json", recall["AuthType"]),
    ):
        context = json.loads((EVENTS / name).read_text())["requestContext"]
        if auth == "NONE":
            assert context["accountId"] == "anonymous" and "authorizer" not in context, name
        else:
            assert context["authorizer"]["iam"]["accountId"] == context["accountId"], name
