"""template.yaml: lint, the real SAM translator, and agreement with the code it deploys."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from botmemory.settings.config import ENVIRONMENT, MAX_BACKFILL_DAYS, Settings
from botmemory.storage import schema
from tests.support.sam_tools import (
    assert_lint_clean,
    assert_sam_validates,
    cfn_lint,
    load_template,
    translated_template,
)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
FUNCTIONS = {
    "InteractionsFunction": "functions/interactions/",
    "IngestFunction": "functions/ingest/",
    "ConsolidateFunction": "functions/consolidate/",
    "ConsolidateWorkerFunction": "functions/consolidate_worker/",
    "RecallFunction": "functions/recall/",
    "SweepFunction": "functions/sweep/",
    "SearchIndexFunction": "functions/search_index/",
    "AnswerFunction": "functions/answer/",
}
OBSERVATION_INSERTS = {
    "eventName": ["INSERT"],
    "dynamodb": {"Keys": {"sk": {"S": [{"prefix": "OBS#"}]}}},
}
# Environment variables the template sets that are not botmemory settings.
OTHER_ENVIRONMENT = {
    "DISCORD_PUBLIC_KEY",
    "DISCORD_APPLICATION_ID",
    "DISCORD_BOT_TOKEN_SECRET",
    "DISCORD_BOT_TOKEN",
    "DISCORD_API_BASE",
    "MEMORY_HASH_KEY_SECRET",
    "DISCORD_TIMESTAMP_TOLERANCE_SECONDS",
    "POWERTOOLS_SERVICE_NAME",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "MEMORY_HASH_KEY",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
}
# Template parameter -> Settings field whose default it must repeat.
PARAMETER_DEFAULTS = {
    "BackfillOnJoinDays": "backfill_on_join_days",
    "ConsolidateEvery": "consolidate_every",
    "EpisodesPerChannel": "episodes_per_channel",
    "FactRetentionDays": "fact_retention_days",
    "IdleFlushMinutes": "idle_flush_minutes",
    "LockLeaseSeconds": "lock_lease_seconds",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = template["Resources"]
    return found


def _environment(template: dict[str, Any], function: dict[str, Any]) -> dict[str, Any]:
    names = dict(template["Globals"]["Function"]["Environment"]["Variables"])
    names.update(function["Properties"].get("Environment", {}).get("Variables", {}))
    return names


# --- (a) and (b): static checks -----------------------------------------------------


def test_cfn_lint_is_clean() -> None:
    assert_lint_clean(TEMPLATE)


def test_sam_translator_accepts_the_template() -> None:
    # cfn-lint does not run the real SAM translator; `sam validate` (no --lint) does, offline.
    assert_sam_validates(TEMPLATE)


def test_translated_template_is_lint_clean(tmp_path: Path) -> None:
    # Neither cfn-lint on the SAM template nor `sam validate` catches a broken !Ref or
    # !GetAtt inside a SAM resource (a policy's TableName, an event's Stream); cfn-lint on
    # the translator's output does.
    output = tmp_path / "translated.json"
    output.write_text(json.dumps(translated_template()), encoding="utf-8")
    result = cfn_lint(output)
    assert result.returncode == 0, (
        f"cfn-lint found problems in the translated template:\n{result.stdout}{result.stderr}"
    )


# --- (c): the table is the one the code creates -------------------------------------


def test_table_matches_the_schema(resources: dict[str, Any]) -> None:
    table = resources["MemoryTable"]
    assert table["Type"] == "AWS::DynamoDB::Table"
    declared = table["Properties"]
    expected = schema.table_definition("X")

    assert declared["BillingMode"] == expected["BillingMode"]
    assert declared["KeySchema"] == expected["KeySchema"]
    assert {(a["AttributeName"], a["AttributeType"]) for a in declared["AttributeDefinitions"]} == {
        (a["AttributeName"], a["AttributeType"]) for a in expected["AttributeDefinitions"]
    }
    assert len(declared["AttributeDefinitions"]) == len(expected["AttributeDefinitions"])

    def indexes(definitions: list[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
        return {d["IndexName"]: (d["KeySchema"], d["Projection"]) for d in definitions}

    assert indexes(declared["GlobalSecondaryIndexes"]) == indexes(
        expected["GlobalSecondaryIndexes"]
    )
    assert len(declared["GlobalSecondaryIndexes"]) == len(expected["GlobalSecondaryIndexes"])

    assert (
        declared["StreamSpecification"]["StreamViewType"]
        == expected["StreamSpecification"]["StreamViewType"]
    )
    assert declared["TimeToLiveSpecification"] == {
        "AttributeName": schema.TTL_ATTRIBUTE,
        "Enabled": True,
    }
    assert declared["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert declared["SSESpecification"]["SSEEnabled"] is True
    assert "TableName" not in declared


# --- (d): every function's handler exists where the template says -----------------


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_handler_module_exists(resources: dict[str, Any], logical_id: str) -> None:
    properties = resources[logical_id]["Properties"]
    assert properties["CodeUri"] == FUNCTIONS[logical_id]
    module, _, attribute = properties["Handler"].rpartition(".")
    source = ROOT / properties["CodeUri"] / (module.replace(".", "/") + ".py")
    assert source.is_file(), f"{logical_id}: Handler {properties['Handler']} needs {source}"
    tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
    defined = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    } | {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert attribute in defined, f"{source} defines no top-level {attribute!r}"


def test_layer_ships_the_package(resources: dict[str, Any]) -> None:
    layer = resources["CoreLayer"]
    content = ROOT / layer["Properties"]["ContentUri"]
    assert (content / "botmemory" / "__init__.py").is_file()
    assert (content / "requirements.txt").is_file()
    # layers/core/Makefile: pip --require-hashes for python3.13 on arm64, then pruned.
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert (content / "Makefile").is_file() and (content / "layer_build.py").is_file()
    assert layer["Metadata"]["BuildArchitecture"] == "arm64"


# --- (e): the stream trigger and the lock ------------------------------------------


def test_consolidation_stream_trigger(template: dict[str, Any], resources: dict[str, Any]) -> None:
    function = resources["ConsolidateFunction"]["Properties"]
    streams = [
        event["Properties"] for event in function["Events"].values() if event["Type"] == "DynamoDB"
    ]
    assert len(streams) == 1
    stream = streams[0]
    assert stream["Stream"] == {"Fn::GetAtt": ["MemoryTable", "StreamArn"]}
    filters = stream["FilterCriteria"]["Filters"]
    assert [json.loads(f["Pattern"]) for f in filters] == [OBSERVATION_INSERTS]
    assert stream["BisectBatchOnFunctionError"] is True
    assert stream["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 0 <= stream["MaximumRetryAttempts"] <= 10
    assert stream["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["ConsolidateDeadLetterQueue", "Arn"]
    }


def test_every_stream_record_that_stales_a_passage_passes_the_search_index_filter(
    dynamodb: Any,
) -> None:
    """The template's FilterCriteria, applied to the records moto's stream produced for a
    channel's whole life (rounds that index messages, facts, episodes and an archived
    summary; a delete in Discord; staff forgetting a fact; expiry; /forgetme): every record
    that names a passage to remove reaches SearchIndexFunction."""
    from botmemory.clock import DAY_MS, ManualClock
    from botmemory.people.erasure import Eraser
    from botmemory.runtime import build_services
    from botmemory.search.index_sync import passages_to_remove
    from botmemory.storage.items import key
    from botmemory.storage.keys import ItemKind, channel_pk, kind_of
    from localrun import gateway as gw
    from localrun.samtemplate import Template, passes_filters
    from localrun.storage import StreamTail
    from tests.botmemory.consolidation.test_summary import T0, chat
    from tests.conftest import CountingModel

    stream = StreamTail(dynamodb)
    clock = ManualClock(T0)
    model = CountingModel()  # the rules model: facts, episodes and a rolling summary
    settings = Settings(
        table_name="MemoryTable",
        memory_model="rules",
        consolidate_every=4,
        bot_user_id=gw.BOT,
        search_index="sqlite::memory:",
    )
    services = build_services(settings, dynamodb=dynamodb, clock=clock, model=model)
    first = [gw.message(gw.ALICE, "I love hiking in the Alps.", T0 - 10_000), *chat(3, T0)]
    for batch in (first, chat(4, T0 + 60_000), [gw.delete(first[0]), *chat(4, T0 + 120_000)]):
        clock.advance(ms=60_000)
        services.recorder.record(batch)
        services.consolidator.consolidate(gw.CHANNEL, force=True)
    clock.advance(ms=60_000)
    services.recorder.record(chat(4, T0 + 240_000, "I use Neovim, note {i}."))
    services.consolidator.consolidate(gw.CHANNEL, force=True)
    for fact in services.repository.all_facts(gw.GUILD, gw.BOB):  # staff forget-fact
        services.repository.delete_facts([fact])
    (episode, *_) = services.repository.recent_episodes(gw.CHANNEL, 1)
    dynamodb.delete_item(  # what TTL expiry does: a REMOVE with the old image
        TableName="MemoryTable", Key=key(channel_pk(gw.CHANNEL), episode.sk)
    )
    Eraser(services.repository, clock, services.opt_outs.hash_of).erase(gw.ALICE, ["Alice"])
    Eraser(services.repository, clock, services.opt_outs.hash_of).erase(gw.BOB, ["Bob"])
    clock.advance(ms=DAY_MS)

    filters = Template.load().stream_filters("SearchIndexFunction")
    stale = [r for r in stream.new_records() if passages_to_remove(r)]
    kinds = {kind_of(r["dynamodb"]["Keys"]["sk"]["S"]) for r in stale}

    assert kinds >= {
        ItemKind.OBSERVATION,
        ItemKind.FACT,
        ItemKind.EPISODE,
        ItemKind.SUMMARY_ARCHIVE,
    }
    assert [r["dynamodb"]["Keys"] for r in stale if not passes_filters(filters, r)] == []


@pytest.mark.parametrize("logical_id", ["ConsolidateWorkerFunction"])
def test_consolidating_functions_time_out_before_the_lock_lease(
    template: dict[str, Any], resources: dict[str, Any], logical_id: str
) -> None:
    lease = template["Parameters"]["LockLeaseSeconds"]
    timeout = resources[logical_id]["Properties"]["Timeout"]
    assert timeout < int(lease["Default"])
    assert timeout < int(lease["MinValue"])
    assert timeout < Settings.model_fields["lock_lease_seconds"].default


# --- the quarantine alarm watches the metric consolidation emits --------------------


def test_quarantined_batches_raise_an_alarm(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics

    emitted = dict(outcome_metrics([Outcome("c", Status.QUARANTINED, consumed=1)]))
    alarm = resources["BatchesQuarantinedAlarm"]
    assert alarm["Type"] == "AWS::CloudWatch::Alarm"
    properties = alarm["Properties"]
    assert emitted[properties["MetricName"]] == 1
    # Powertools emits in its namespace, with the service name as the one dimension.
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    assert properties["Namespace"] == variables["POWERTOOLS_METRICS_NAMESPACE"]
    assert properties["Dimensions"] == [
        {"Name": "service", "Value": variables["POWERTOOLS_SERVICE_NAME"]}
    ]
    assert properties["ComparisonOperator"] == "GreaterThanThreshold"
    assert properties["Threshold"] == 0
    assert properties["TreatMissingData"] == "notBreaching"
    assert properties["AlarmActions"] == [{"Ref": "AlarmTopic"}]


# --- deferred work (erasure) that keeps failing is parked and alarmed ----------------


def test_failed_deferred_work_is_parked_in_an_alarmed_queue(resources: dict[str, Any]) -> None:
    invoke = resources["InteractionsFunction"]["Properties"]["EventInvokeConfig"]
    assert 0 < invoke["MaximumRetryAttempts"] <= 2
    on_failure = invoke["DestinationConfig"]["OnFailure"]
    assert on_failure["Type"] == "SQS"
    assert on_failure["Destination"] == {"Fn::GetAtt": ["InteractionsFailureQueue", "Arn"]}
    assert resources["InteractionsFailureQueue"]["Type"] == "AWS::SQS::Queue"
    alarm = resources["InteractionsFailureQueueAlarm"]["Properties"]
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["InteractionsFailureQueue", "QueueName"]}}
    ]
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold" and alarm["Threshold"] == 0
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]


# --- environment and parameters agree with botmemory.settings.config ------------------------


def test_environment_names_are_known_settings(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    for logical_id in FUNCTIONS:
        names = set(_environment(template, resources[logical_id]))
        assert names <= set(ENVIRONMENT) | OTHER_ENVIRONMENT, (
            f"{logical_id}: unknown {sorted(names - set(ENVIRONMENT) - OTHER_ENVIRONMENT)}"
        )
        assert _environment(template, resources[logical_id])["TABLE_NAME"] == {"Ref": "MemoryTable"}


@pytest.mark.parametrize("parameter", sorted(PARAMETER_DEFAULTS))
def test_parameter_defaults_match_settings(template: dict[str, Any], parameter: str) -> None:
    field = PARAMETER_DEFAULTS[parameter]
    assert int(template["Parameters"][parameter]["Default"]) == Settings.model_fields[field].default


def test_backfill_on_join_is_off_by_default_and_bounded_as_a_backfill(
    template: dict[str, Any],
) -> None:
    parameter = template["Parameters"]["BackfillOnJoinDays"]
    assert (parameter["Default"], parameter["MinValue"]) == (0, 0)
    assert parameter["MaxValue"] == MAX_BACKFILL_DAYS


def test_the_layer_ships_the_projects_runtime_dependencies() -> None:
    """sam build installs layers/core/requirements.txt; it must not drift from pyproject."""
    import re
    import tomllib

    def names(lines: list[str]) -> set[str]:
        return {
            re.split(r"[\[<>=!~; ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
            for line in lines
            if line.strip() and not line.strip().startswith("#")
        }

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    # The layer's file is the hashed closure (make lock): pins and their --hash lines.
    lines = (root / "layers" / "core" / "requirements.txt").read_text().splitlines()
    layer = [line for line in lines if not line.startswith((" ", "-"))]
    # boto3 too: AWS documents no boto3 version for the python3.13 runtime (docs/deploy.md).
    assert names(project) <= names(layer)
    assert "boto3" in names(layer)


# --- operations: alarms for every silent stop, logs kept a bounded time ---------------


def _math_alarm_metrics(alarm: dict[str, Any]) -> dict[str, str]:
    """A metric-math alarm's inputs: query id -> metric name."""
    return {
        query["Id"]: query["MetricStat"]["Metric"]["MetricName"]
        for query in alarm["Properties"]["Metrics"]
        if "MetricStat" in query
    }


def test_model_failures_raise_an_alarm_on_the_metrics_consolidation_emits(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics

    failed = dict(outcome_metrics([Outcome("c", Status.MODEL_FAILED)]))
    done = dict(outcome_metrics([Outcome("c", Status.CONSOLIDATED)]))
    alarm = resources["ModelFailuresAlarm"]
    inputs = _math_alarm_metrics(alarm)
    assert failed[inputs["failed"]] == 1 and inputs["failed"] not in done
    assert done[inputs["done"]] == 1 and inputs["done"] not in failed
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    for query in alarm["Properties"]["Metrics"]:
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            assert metric["Namespace"] == variables["POWERTOOLS_METRICS_NAMESPACE"]
            assert metric["Dimensions"] == [
                {"Name": "service", "Value": variables["POWERTOOLS_SERVICE_NAME"]}
            ]
    (expression,) = [q for q in alarm["Properties"]["Metrics"] if "Expression" in q]
    assert expression["ReturnData"] is True
    assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def _metric_names_in(path: Path) -> set[str]:
    import re

    return set(re.findall(r'add_metric\(\s*name="([A-Za-z_]+)"', path.read_text()))


def test_search_alarms_watch_metrics_the_code_emits(resources: dict[str, Any]) -> None:
    from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics

    recall = _metric_names_in(ROOT / "functions" / "recall" / "app.py")
    recall |= {"RecallRequests", "RecallRejected"}  # emitted through one conditional call
    assert set(_math_alarm_metrics(resources["RecallSearchFailedAlarm"]).values()) <= recall
    index_failed = Outcome("c", Status.CONSOLIDATED, index_failed=True)
    emitted = dict(outcome_metrics([index_failed]))
    assert emitted[resources["SearchIndexWritesFailedAlarm"]["Properties"]["MetricName"]] == 1
    for name in ("RecallSearchFailedAlarm", "SearchIndexWritesFailedAlarm"):
        assert resources[name]["Condition"] == "SearchOn"


def test_passages_written_for_vectors_only_are_alarmed_with_the_command_that_indexes_them(
    resources: dict[str, Any],
) -> None:
    from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics

    alarm = resources["KeywordLegMissedWritesAlarm"]
    missed = Outcome("c", Status.CONSOLIDATED, index_vectors_only=True)
    assert dict(outcome_metrics([missed]))[alarm["Properties"]["MetricName"]] == 1
    assert alarm["Condition"] == "KeywordOn"
    assert "botmemory.ops.reindex_keywords" in alarm["Properties"]["AlarmDescription"]
    assert (ROOT / "layers" / "core" / "botmemory" / "ops" / "reindex_keywords.py").exists()


def test_wrong_embedding_dimensions_are_alarmed_where_both_paths_count_them(
    resources: dict[str, Any],
) -> None:
    from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics

    alarm = resources["EmbeddingDimensionsWrongAlarm"]
    name = alarm["Properties"]["MetricName"]
    assert name in _metric_names_in(ROOT / "functions" / "recall" / "app.py")
    wrong = Outcome("c", Status.CONSOLIDATED, index_failed=True, embedding_dimensions_wrong=True)
    assert dict(outcome_metrics([wrong]))[name] == 1
    assert name not in dict(outcome_metrics([Outcome("c", Status.CONSOLIDATED)]))
    assert alarm["Condition"] == "SearchOn"
    assert alarm["Properties"]["Threshold"] == 0  # the first count alarms


def test_every_asynchronous_invoke_has_an_alarmed_failure_destination(
    resources: dict[str, Any],
) -> None:
    # Invoked asynchronously: by the relay (ingest), by itself (interactions), by ingest and
    # /ask (answer), by a schedule.
    asynchronous = {"IngestFunction", "InteractionsFunction", "AnswerFunction"} | {
        logical_id
        for logical_id, resource in resources.items()
        if resource["Type"] == "AWS::Serverless::Function"
        and any(e["Type"] == "Schedule" for e in resource["Properties"].get("Events", {}).values())
    }
    assert "SweepFunction" in asynchronous
    alarmed_queues = {
        alarm["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for alarm in resources.values()
        if alarm["Type"] == "AWS::CloudWatch::Alarm"
        and alarm["Properties"].get("Namespace") == "AWS/SQS"
    }
    for logical_id in asynchronous:
        on_failure = resources[logical_id]["Properties"]["EventInvokeConfig"]["DestinationConfig"][
            "OnFailure"
        ]
        queue = on_failure["Destination"]["Fn::GetAtt"][0]
        assert resources[queue]["Type"] == "AWS::SQS::Queue"
        assert queue in alarmed_queues, f"{logical_id}: {queue} has no alarm"


def test_failure_queues_outlive_the_stack(resources: dict[str, Any]) -> None:
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::SQS::Queue":
            assert resource["DeletionPolicy"] == "Retain", logical_id
            assert resource["UpdateReplacePolicy"] == "Retain", logical_id


def test_the_table_is_protected_from_deletion_by_default(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    assert template["Parameters"]["TableDeletionProtection"]["Default"] == "true"
    assert template["Conditions"]["TableProtected"] == {
        "Fn::Equals": [{"Ref": "TableDeletionProtection"}, "true"]
    }
    protection = resources["MemoryTable"]["Properties"]["DeletionProtectionEnabled"]
    assert protection == {"Fn::If": ["TableProtected", True, False]}


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_every_function_logs_to_a_group_kept_a_bounded_time(
    resources: dict[str, Any], logical_id: str
) -> None:
    group = resources[logical_id]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    assert resources[group]["Type"] == "AWS::Logs::LogGroup"
    assert resources[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert resources[group].get("Condition") == resources[logical_id].get("Condition")


def test_tracing_is_lambdas_own_and_the_layer_ships_no_xray_sdk(template: dict[str, Any]) -> None:
    assert template["Globals"]["Function"]["Tracing"] == "Active"
    layer = (ROOT / "layers" / "core" / "requirements.txt").read_text()
    assert "[tracer]" not in layer and "xray" not in layer.lower()
    for handler in (ROOT / "functions").glob("*/app.py"):
        assert "Tracer" not in handler.read_text(), handler


def test_the_keyword_database_pauses_keeps_backups_the_least_and_leaves_nothing_behind(
    resources: dict[str, Any], template: dict[str, Any]
) -> None:
    """Aurora PostgreSQL Serverless v2 with the Data API, only with search on and
    KeywordIndex=postgres. Deleted means gone: the shortest backup retention, no final
    snapshot, no deletion protection; encrypted (under the deployment's key when set)."""
    cluster = resources["KeywordDbCluster"]
    assert cluster["Condition"] == "KeywordOn"
    assert cluster["DeletionPolicy"] == cluster["UpdateReplacePolicy"] == "Delete"
    properties = cluster["Properties"]
    assert properties["Engine"] == "aurora-postgresql"
    assert properties["EnableHttpEndpoint"] is True
    assert properties["BackupRetentionPeriod"] == 1  # Aurora's minimum
    assert properties["DeletionProtection"] is False
    assert properties["StorageEncrypted"] is True
    assert properties["KmsKeyId"] == {
        "Fn::If": ["HasKmsKey", {"Ref": "KmsKeyArn"}, {"Ref": "AWS::NoValue"}]
    }
    assert properties["ManageMasterUserPassword"] is True
    scaling = properties["ServerlessV2ScalingConfiguration"]
    assert scaling["MinCapacity"] == 0 and scaling["SecondsUntilAutoPause"] == 300
    instance = resources["KeywordDbInstance"]
    assert instance["Condition"] == "KeywordOn"
    assert instance["Properties"]["DBInstanceClass"] == "db.serverless"
    assert instance["Properties"]["PubliclyAccessible"] is False
    parameter = template["Parameters"]["KeywordIndex"]
    assert parameter["AllowedValues"] == ["postgres", "none"]
    assert template["Conditions"]["KeywordOn"] == {
        "Fn::And": [
            {"Condition": "SearchOn"},
            {"Fn::Equals": [{"Ref": "KeywordIndex"}, "postgres"]},
        ]
    }
    assert not [r for r in resources.values() if r["Type"] == "AWS::S3::Bucket"]  # no shards
    # An account without a default VPC names a subnet group; empty leaves it to Aurora.
    assert properties["DBSubnetGroupName"] == {
        "Fn::If": [
            "HasKeywordDbSubnetGroup",
            {"Ref": "KeywordDbSubnetGroup"},
            {"Ref": "AWS::NoValue"},
        ]
    }
    assert template["Parameters"]["KeywordDbSubnetGroup"]["Default"] == ""
