"""relay/template.yaml: lint, the SAM validator, least privilege, and agreement with the relay.

The metric filters are checked against lines the relay itself logs (its own forwarder and
gateway runner, through its own JSON formatter), read by a small matcher for the part of
CloudWatch's JSON filter syntax the template uses.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import discord
import pytest

from relay.app import log_formatter
from relay.config import (
    DEFAULT_FLEET_IDENTIFY_PER_DAY,
    MAX_FLEET_SHARDS,
    MAX_TASK_COUNT,
    RelayConfig,
)
from relay.gateway import GatewayRunner
from relay.health import STALE_SECONDS
from relay.identify import IdentifyLedger
from relay.logs import HEALTH_EVENT, REFUSED_EVENT
from relay.protocol import GUILDS_PER_SHARD_LIMIT
from relay.sinks import Outcome, SendResult
from relay.store import PARTITION
from tests.relay.helpers import Clock, RecordingSink, make_forwarder
from tests.support.sam_tools import assert_lint_clean, assert_sam_validates, load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "relay" / "template.yaml"
INGEST_ARN = "arn:aws:lambda:us-east-1:123456789012:function:discord-memory-IngestFunction-AbC"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = template["Resources"]
    return found


def _of_type(resources: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in resources.items() if r["Type"] == kind}


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        statement
        for policy in role["Properties"].get("Policies", [])
        for statement in policy["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def _container(resources: dict[str, Any]) -> dict[str, Any]:
    (container,) = resources["TaskDefinition"]["Properties"]["ContainerDefinitions"]
    found: dict[str, Any] = container
    return found


# --- static checks: cfn-lint and SAM's validator, offline ---------------------------


def test_cfn_lint_is_clean() -> None:
    assert_lint_clean(TEMPLATE)


def test_sam_validate_accepts_the_template() -> None:
    assert_sam_validates(TEMPLATE)


# --- least privilege ---------------------------------------------------------------


def test_the_task_role_can_only_invoke_ingest_function_and_keep_its_items(
    resources: dict[str, Any],
) -> None:
    role = resources["TaskRole"]
    statements = [(_actions(s), s["Resource"], s["Effect"]) for s in _statements(role)]
    assert statements[0] == (["lambda:InvokeFunction"], {"Ref": "IngestFunctionArn"}, "Allow")
    assert len(statements) == 2  # the other: the table's RELAY partition (test below)
    assert "ManagedPolicyArns" not in role["Properties"]
    assert resources["TaskDefinition"]["Properties"]["TaskRoleArn"] == {
        "Fn::GetAtt": ["TaskRole", "Arn"]
    }
    # The relay invokes the same function the role names.
    environment = {e["Name"]: e["Value"] for e in _container(resources)["Environment"]}
    assert environment["INGEST_FUNCTION_NAME"] == {"Ref": "IngestFunctionArn"}


def test_only_the_execution_role_reads_a_secret_and_only_the_token(
    resources: dict[str, Any],
) -> None:
    execution = resources["ExecutionRole"]
    readers = [s for s in _statements(execution) if "secretsmanager" in str(s["Action"])]
    assert [(_actions(s), s["Resource"]) for s in readers] == [
        (["secretsmanager:GetSecretValue"], {"Ref": "BotTokenSecretArn"})
    ]
    assert "ManagedPolicyArns" not in execution["Properties"]
    assert "secretsmanager" not in json.dumps(_statements(resources["TaskRole"]))
    # ECS injects the token; the relay's code never reads Secrets Manager itself.
    container = _container(resources)
    (secret,) = container["Secrets"]
    assert secret["Name"] == "DISCORD_BOT_TOKEN"
    assert "BotTokenSecretArn" in json.dumps(secret["ValueFrom"])
    names = {e["Name"] for e in container["Environment"]}
    assert not names & {"DISCORD_BOT_TOKEN", "DISCORD_BOT_TOKEN_SECRET"}


def test_both_roles_trust_only_ecs_tasks_of_this_account(resources: dict[str, Any]) -> None:
    for name in ("TaskRole", "ExecutionRole"):
        (trust,) = resources[name]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
        assert trust["Condition"] == {
            "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        }


# The only wildcards, each justified by a comment beside it in the template.
JUSTIFIED_WILDCARDS = {
    ("ecr:GetAuthorizationToken", "*"),
    # AWS::Logs::LogGroup's Arn attribute ends in ":*" (the group's streams).
    ("logs:CreateLogStream", json.dumps({"Fn::GetAtt": ["LogGroup", "Arn"]})),
    ("logs:PutLogEvents", json.dumps({"Fn::GetAtt": ["LogGroup", "Arn"]})),
}


def test_no_wildcard_action_or_resource_without_a_comment(resources: dict[str, Any]) -> None:
    for name, resource in resources.items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for statement in _statements(resource):
            resource_text = (
                statement["Resource"]
                if isinstance(statement["Resource"], str)
                else json.dumps(statement["Resource"])
            )
            for action in _actions(statement):
                assert "*" not in action, f"{name}: wildcard action {action}"
                if "*" in resource_text or "LogGroup" in resource_text:
                    assert (action, resource_text) in JUSTIFIED_WILDCARDS, (name, action)
    lines = TEMPLATE.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if re.search(r"Resource: (\"\*\"|!GetAtt LogGroup\.Arn)", line):
            above = lines[max(0, number - 3) : number]
            assert any(text.strip().startswith("#") for text in above), (
                f"line {number + 1}: a wildcard resource needs a comment saying why"
            )


def test_the_security_group_allows_outbound_https_only(resources: dict[str, Any]) -> None:
    group = resources["SecurityGroup"]["Properties"]
    assert "SecurityGroupIngress" not in group
    assert [
        (r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in group["SecurityGroupEgress"]
    ] == [("tcp", 443, 443)]
    assert not _of_type(resources, "AWS::EC2::SecurityGroupIngress")


# --- the task and the service agree with the relay ---------------------------------


def _environment_with_defaults(
    template: dict[str, Any], resources: dict[str, Any]
) -> dict[str, str]:
    """The container's environment as ECS would set it with the parameters' defaults."""
    parameters = {name: str(p.get("Default", "")) for name, p in template["Parameters"].items()}
    parameters.update(
        IngestFunctionArn=INGEST_ARN, TableName="MemoryTable", **{"AWS::Region": "us-east-1"}
    )
    environment: dict[str, str] = {}
    for entry in _container(resources)["Environment"]:
        value = entry["Value"]
        if isinstance(value, dict) and "Fn::If" in value:
            # Only AutoShardCount: true with the default ShardCount of 0.
            condition, when_true, _ = value["Fn::If"]
            assert condition == "AutoShardCount" and parameters["ShardCount"] == "0"
            value = when_true
        environment[entry["Name"]] = parameters[value["Ref"]] if isinstance(value, dict) else value
    return environment


def test_the_relay_accepts_the_task_environment(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    config = RelayConfig.from_env(_environment_with_defaults(template, resources))
    assert config.ingest_function_name == INGEST_ARN
    assert config.log_format == "json"
    # The fleet mode: leases in the table, Discord's shard count, one task.
    assert config.fleet and config.table_name == "MemoryTable"
    assert config.shard is None and config.shard_count is None and config.task_count == 1
    assert config.identify_max_per_day == DEFAULT_FLEET_IDENTIFY_PER_DAY


def test_task_count_tasks_and_the_shard_limits_match_the_relay(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    service = resources["Service"]["Properties"]
    assert service["DesiredCount"] == {"Ref": "TaskCount"}
    assert service["LaunchType"] == "FARGATE"
    environment = {e["Name"]: e["Value"] for e in _container(resources)["Environment"]}
    assert "SHARD_ID" not in environment
    assert environment["RELAY_TASK_COUNT"] == {"Ref": "TaskCount"}
    parameters = template["Parameters"]
    assert parameters["ShardCount"]["MaxValue"] == MAX_FLEET_SHARDS
    assert parameters["TaskCount"]["MaxValue"] == MAX_TASK_COUNT
    assert f"{GUILDS_PER_SHARD_LIMIT:,} guilds" in parameters["ShardCount"]["Description"]
    assert parameters["IdentifyAlarmAt"]["MaxValue"] <= DEFAULT_FLEET_IDENTIFY_PER_DAY


def test_a_deploy_hands_over_without_a_deadlock(resources: dict[str, Any]) -> None:
    """New tasks start before the old stop (MaximumPercent 200) and are healthy on standby:
    the health check reads a file the fleet touches with or without a lease."""
    deployment = resources["Service"]["Properties"]["DeploymentConfiguration"]
    assert (deployment["MinimumHealthyPercent"], deployment["MaximumPercent"]) == (100, 200)
    check = _container(resources)["HealthCheck"]
    assert check["Command"] == ["CMD", "python", "-m", "relay.health"]
    # Stale after far longer than any loop turn, so a healthy standby task never fails it.
    assert check["Interval"] * check["Retries"] < STALE_SECONDS


def test_the_task_role_reaches_the_relay_partition_alone(resources: dict[str, Any]) -> None:
    statements = _statements(resources["TaskRole"])
    (table,) = [s for s in statements if any(a.startswith("dynamodb:") for a in _actions(s))]
    assert sorted(_actions(table)) == [
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    ]
    assert table["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [PARTITION]}
    }


def test_ecs_waits_for_the_shutdown_flush(resources: dict[str, Any]) -> None:
    assert _container(resources)["StopTimeout"] > RelayConfig().shutdown_seconds


def test_the_log_group_has_a_retention_and_receives_the_relays_log(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    (group,) = _of_type(resources, "AWS::Logs::LogGroup").values()
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert template["Parameters"]["LogRetentionDays"]["Default"] == 30
    options = _container(resources)["LogConfiguration"]["Options"]
    assert options["awslogs-group"] == {"Ref": "LogGroup"}
    filters = _of_type(resources, "AWS::Logs::MetricFilter")
    assert {f["LogGroupName"]["Ref"] for f in filters.values()} == {"LogGroup"}


# --- the metric filters match what the relay logs ----------------------------------


_TERM = re.compile(
    r"^\(?\s*\$\.(?P<path>[A-Za-z0-9_.]+)\s*(?P<op>!=|=)\s*"
    r'(?:"(?P<text>[^"*]*)"|(?P<number>-?\d+(?:\.\d+)?))\s*\)?$'
)


def matches(pattern: str, event: str) -> bool:
    """CloudWatch Logs' JSON filter syntax, the part the template uses: `{ $.a = "x" }`,
    numbers, `!=`, and `&&` between terms. Anything else is refused, not guessed at."""
    body = pattern.strip()
    if not (body.startswith("{") and body.endswith("}")) or "||" in body:
        raise ValueError(f"unsupported filter pattern: {pattern}")
    try:
        data = json.loads(event)
    except ValueError:
        return False  # a JSON filter matches only JSON log events
    return all(_term(term.strip(), data) for term in body[1:-1].split("&&"))


def _term(term: str, data: Any) -> bool:
    found = _TERM.match(term)
    if found is None:
        raise ValueError(f"unsupported filter term: {term}")
    value = _select(data, found["path"])
    if found["text"] is not None:
        equal = value == found["text"]
    else:
        equal = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isclose(value, float(found["number"]))
        )
    return equal if found["op"] == "=" else not equal


def _select(data: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def metric_value(transformation: dict[str, Any], event: str) -> float:
    value = transformation["MetricValue"]
    if value.startswith("$."):
        selected = _select(json.loads(event), value[2:])
        assert isinstance(selected, int | float) and not isinstance(selected, bool), value
        return float(selected)
    return float(value)


def test_the_matcher_reads_the_syntax_it_claims() -> None:
    line = json.dumps({"event": "relay_health", "sink": "down", "backlog": 3})
    assert matches('{ $.event = "relay_health" }', line)
    assert matches('{ ($.event = "relay_health") && ($.sink != "up") }', line)
    assert matches("{ $.backlog = 3 }", line)
    assert not matches('{ $.event = "relay_health_x" }', line)
    assert not matches('{ $.missing = "relay_health" }', line)
    assert not matches('{ $.event = "relay_health" }', "health: in=1 sink=up")
    with pytest.raises(ValueError, match="unsupported"):
        matches('{ $.event = "relay_*" }', line)


@pytest.fixture
def relay_log(tmp_path: Path) -> Iterator[io.StringIO]:
    """What the relay writes with the template's settings: RELAY_LOG_FORMAT=json, a shard."""
    config = RelayConfig.from_env(
        {
            "INGEST_FUNCTION_NAME": INGEST_ARN,
            "RELAY_LOG_FORMAT": "json",
            "SHARD_ID": "1",
            "SHARD_COUNT": "2",
            "RELAY_SPOOL_DIR": str(tmp_path),
        }
    )
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(log_formatter(config))
    logger = logging.getLogger("relay")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line.strip()]


def test_the_health_filters_match_the_relays_own_health_line(
    tmp_path: Path, relay_log: io.StringIO, resources: dict[str, Any]
) -> None:
    from localrun import gateway as gw

    def health_lines(*script: SendResult) -> list[str]:
        start = len(_lines(relay_log))
        forwarder = make_forwarder(
            RecordingSink(*script), tmp_path / f"spool-{start}", Clock(), attempts=1
        )
        forwarder.submit("MESSAGE_CREATE", gw.message(gw.ALICE, "hello", 1_767_225_600_000)["d"])
        forwarder.pump(final=True)
        return [line for line in _lines(relay_log)[start:] if "health:" in line]

    (up,) = health_lines()
    (down,) = health_lines(SendResult(Outcome.RETRY, "connection refused"))
    filters = _of_type(resources, "AWS::Logs::MetricFilter")
    health = {
        t["MetricName"]: (f["FilterPattern"], t)
        for f in filters.values()
        for t in f["MetricTransformations"]
        if HEALTH_EVENT in f["FilterPattern"]
    }
    assert set(health) == {"HealthLines", "SinkDown", "Backlog"}
    for pattern, _ in health.values():
        assert matches(pattern, up) and matches(pattern, down)
        assert not matches(pattern, json.dumps({"event": REFUSED_EVENT}))
    assert metric_value(health["HealthLines"][1], up) == 1
    assert (metric_value(health["SinkDown"][1], up), metric_value(health["SinkDown"][1], down)) == (
        0,
        1,
    )
    assert (metric_value(health["Backlog"][1], up), metric_value(health["Backlog"][1], down)) == (
        0,
        1,
    )
    # Each line names its shard, and still says in words what README.md shows.
    assert json.loads(up)["shard"] == 1 and json.loads(up)["shard_count"] == 2
    assert json.loads(down)["message"].startswith("health: in=1 forwarded=0 spooled=1")


def test_the_refusal_filter_matches_the_relays_own_sharding_required_line(
    tmp_path: Path, relay_log: io.StringIO, resources: dict[str, Any]
) -> None:
    closed = discord.ConnectionClosed(SimpleNamespace(close_code=4011), shard_id=None)  # type: ignore[arg-type]

    class Refused:
        async def start(self, token: str) -> None:
            raise closed

        async def close(self) -> None:
            pass

    ledger = IdentifyLedger(tmp_path / "identify.json", 10)
    runner = GatewayRunner("token", Refused, ledger)  # type: ignore[arg-type]
    assert asyncio.run(runner.run(asyncio.Event())) == 2
    (line,) = [line for line in _lines(relay_log) if REFUSED_EVENT in line]
    (refused,) = [
        f
        for f in _of_type(resources, "AWS::Logs::MetricFilter").values()
        if REFUSED_EVENT in f["FilterPattern"]
    ]
    assert matches(refused["FilterPattern"], line)
    assert metric_value(refused["MetricTransformations"][0], line) == 1
    assert json.loads(line)["close_code"] == 4011
    assert "sharding required" in json.loads(line)["message"]


# --- the alarms watch what the filters publish -------------------------------------


def test_every_alarm_watches_a_published_metric_and_says_what_to_check(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    published = {
        (json.dumps(t["MetricNamespace"]), t["MetricName"])
        for f in _of_type(resources, "AWS::Logs::MetricFilter").values()
        for t in f["MetricTransformations"]
    }
    alarms = _of_type(resources, "AWS::CloudWatch::Alarm")
    assert set(alarms) == {
        "RelaySilentAlarm",
        "RelaySinkDownAlarm",
        "RelayGatewayRefusedAlarm",
        "RelayIdentifyBudgetAlarm",
    }
    topic = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    for name, alarm in alarms.items():
        assert (json.dumps(alarm["Namespace"]), alarm["MetricName"]) in published, name
        assert "Check first" in json.dumps(alarm["AlarmDescription"]), name
        assert alarm["AlarmActions"] == alarm["OKActions"] == topic, name
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""


def test_silence_is_an_alarm(template: dict[str, Any], resources: dict[str, Any]) -> None:
    silent = resources["RelaySilentAlarm"]["Properties"]
    assert silent["MetricName"] == "HealthLines"
    assert silent["TreatMissingData"] == "breaching"
    assert (silent["Statistic"], silent["ComparisonOperator"], silent["Threshold"]) == (
        "Sum",
        "LessThanThreshold",
        1,
    )
    # A line a minute: the shortest window allowed still holds two of them.
    assert silent["Period"] == 60 >= RelayConfig().health_seconds
    assert silent["EvaluationPeriods"] == {"Ref": "SilentMinutes"}
    assert template["Parameters"]["SilentMinutes"]["MinValue"] >= 3


def test_a_sink_down_for_the_whole_window_is_an_alarm(resources: dict[str, Any]) -> None:
    down = resources["RelaySinkDownAlarm"]["Properties"]
    assert down["MetricName"] == "SinkDown"
    assert (down["Statistic"], down["ComparisonOperator"], down["Threshold"]) == (
        "Minimum",
        "GreaterThanOrEqualToThreshold",
        1,
    )
    assert down["TreatMissingData"] == "notBreaching"  # silence is RelaySilentAlarm's


def test_the_identify_filters_read_the_gates_own_lines(
    dynamodb: Any, relay_log: io.StringIO, resources: dict[str, Any]
) -> None:
    from relay.identify_gate import IdentifyBudgetSpent, IdentifyGate, inline
    from relay.store import Store
    from tests.relay.fake_shards import TABLE

    gate = IdentifyGate(Store(dynamodb, TABLE), 16, 2, offload=inline)

    async def turns() -> None:
        await gate.turn(0)
        await gate.turn(1)
        with pytest.raises(IdentifyBudgetSpent):
            await gate.turn(2)

    asyncio.run(turns())
    filters = {
        name: f
        for name, f in _of_type(resources, "AWS::Logs::MetricFilter").items()
        if f["MetricTransformations"][0]["MetricName"] == "IdentifiesToday"
    }
    assert set(filters) == {"IdentifiesMetricFilter", "IdentifyRefusedMetricFilter"}
    values = [
        metric_value(f["MetricTransformations"][0], line)
        for line in _lines(relay_log)
        for f in filters.values()
        if matches(f["FilterPattern"], line)
    ]
    assert values == [1, 2, 2]  # two counted, then the refusal at the cap of 2
    alarm = resources["RelayIdentifyBudgetAlarm"]["Properties"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["Threshold"]) == (
        "IdentifiesToday",
        "Maximum",
        {"Ref": "IdentifyAlarmAt"},
    )
