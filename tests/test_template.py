"""template.yaml: lint, the real SAM translator, and agreement with the code it deploys."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import cfn_yaml

from botmemory import schema
from botmemory.config import ENVIRONMENT, Settings

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
SAM_VENV = ROOT / ".venv-sam" / "bin"
SAM = SAM_VENV / "sam"
MISSING_SAM = (
    ".venv-sam/bin/sam is missing: run `make sam-venv` "
    "(aws-sam-cli lives in its own virtualenv; `make test` builds it)"
)
# Run by .venv-sam's python: the real SAM translator, local code paths swapped for S3 URIs
# the way `sam package` would, the translated CloudFormation template on stdout.
TRANSLATE = """
import json, sys
from samcli.yamlhelper import yaml_parse
from samtranslator.translator.transform import transform

class NoManagedPolicies:
    def load(self):
        raise AssertionError("the translator asked IAM for managed policies")

template = yaml_parse(open(sys.argv[1], encoding="utf-8").read())
for resource in template.get("Resources", {}).values():
    properties = resource.get("Properties", {})
    for key in ("CodeUri", "ContentUri"):
        if isinstance(properties.get(key), str) and not properties[key].startswith("s3://"):
            properties[key] = "s3://artifact-bucket/" + properties[key].strip("/")
json.dump(transform(template, {}, NoManagedPolicies()), sys.stdout, indent=1, default=str)
"""

FUNCTIONS = {
    "InteractionsFunction": "functions/interactions/",
    "IngestFunction": "functions/ingest/",
    "ConsolidateFunction": "functions/consolidate/",
    "RecallFunction": "functions/recall/",
    "SweepFunction": "functions/sweep/",
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
    "MEMORY_HASH_KEY_SECRET",
    "DISCORD_TIMESTAMP_TOLERANCE_SECONDS",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
}
# Template parameter -> Settings field whose default it must repeat.
PARAMETER_DEFAULTS = {
    "ConsolidateEvery": "consolidate_every",
    "EpisodesPerChannel": "episodes_per_channel",
    "FactRetentionDays": "fact_retention_days",
    "IdleFlushMinutes": "idle_flush_minutes",
    "LockLeaseSeconds": "lock_lease_seconds",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    # CloudFormation short forms (!Ref, !GetAtt, !Sub) need cfn-lint's loader, not yaml.safe_load.
    loaded: dict[str, Any] = cfn_yaml.loads(TEMPLATE.read_text(encoding="utf-8"), str(TEMPLATE))
    return loaded


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = template["Resources"]
    return found


def _environment(template: dict[str, Any], function: dict[str, Any]) -> dict[str, Any]:
    names = dict(template["Globals"]["Function"]["Environment"]["Variables"])
    names.update(function["Properties"].get("Environment", {}).get("Variables", {}))
    return names


# --- (a) and (b): static checks -----------------------------------------------------


def _cfn_lint(path: Path) -> subprocess.CompletedProcess[str]:
    # cfn-lint has no `python -m cfnlint`; run its console entry point with this interpreter.
    return subprocess.run(
        [sys.executable, "-c", "import sys; from cfnlint.runner import main; sys.exit(main())"]
        + [str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _sam_environment() -> dict[str, str]:
    """Dummy credentials, no profile, no telemetry: the SAM tools run offline."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in {"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"}
    }
    environment.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        SAM_CLI_TELEMETRY="0",
    )
    return environment


def test_cfn_lint_is_clean() -> None:
    result = _cfn_lint(TEMPLATE.relative_to(ROOT))
    assert result.returncode == 0, f"cfn-lint found problems:\n{result.stdout}{result.stderr}"


def test_sam_translator_accepts_the_template() -> None:
    # cfn-lint does not run the real SAM translator; `sam validate` (no --lint) does, offline.
    assert SAM.exists(), MISSING_SAM
    result = subprocess.run(
        [str(SAM), "validate", "--region", "us-east-1", "--template", str(TEMPLATE.name)],
        cwd=ROOT,
        env=_sam_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"sam validate failed:\n{output}"
    assert "is a valid SAM Template" in output, output


def test_translated_template_is_lint_clean(tmp_path: Path) -> None:
    # Neither cfn-lint on the SAM template nor `sam validate` catches a broken !Ref or
    # !GetAtt inside a SAM resource (a policy's TableName, an event's Stream); cfn-lint on
    # the translator's output does.
    assert SAM.exists(), MISSING_SAM
    translated = subprocess.run(
        [str(SAM_VENV / "python"), "-c", TRANSLATE, str(TEMPLATE)],
        cwd=ROOT,
        env=_sam_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert translated.returncode == 0, f"SAM translation failed:\n{translated.stderr}"
    output = tmp_path / "translated.json"
    output.write_text(translated.stdout, encoding="utf-8")
    result = _cfn_lint(output)
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
    assert layer["Metadata"]["BuildMethod"] == "python3.13"
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


@pytest.mark.parametrize("logical_id", ["ConsolidateFunction", "SweepFunction"])
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
    from botmemory.consolidation_outcome import Outcome, Status, outcome_metrics

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


# --- environment and parameters agree with botmemory.config ------------------------


def test_environment_names_are_known_settings(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    for logical_id in FUNCTIONS:
        names = set(_environment(template, resources[logical_id]))
        assert names <= set(ENVIRONMENT) | OTHER_ENVIRONMENT, (
            f"{logical_id}: unknown {sorted(names - set(ENVIRONMENT) - OTHER_ENVIRONMENT)}"
        )
        assert _environment(template, resources[logical_id])["TABLE_NAME"] == {"Ref": "MemoryTable"}


def test_model_api_key_reaches_only_the_model_callers(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    holders = {
        logical_id
        for logical_id in FUNCTIONS
        if "MEMORY_MODEL_API_KEY" in _environment(template, resources[logical_id])
    }
    assert holders == {"ConsolidateFunction", "SweepFunction"}
    assert template["Parameters"]["MemoryModelApiKey"]["NoEcho"] is True


# Functions that hash a person's id (opt-outs, erasure markers) and so read the hash key.
HASHERS = {"InteractionsFunction", "IngestFunction", "ConsolidateFunction", "SweepFunction"}


def _statements(resource: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        statement
        for policy in resource["Properties"].get("Policies", [])
        if isinstance(policy, dict)
        for statement in policy.get("Statement", [])
    ]


def test_the_hash_key_is_a_generated_secret_kept_with_the_table(
    resources: dict[str, Any],
) -> None:
    secret = resources["HashKeySecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["PasswordLength"] >= 32
    assert "SecretString" not in secret["Properties"]  # nobody types it
    # Without the key the retained table's opt-out list can no longer be matched.
    assert secret["DeletionPolicy"] == resources["MemoryTable"]["DeletionPolicy"] == "Retain"


def test_the_hash_key_reaches_only_the_functions_that_hash(
    template: dict[str, Any], resources: dict[str, Any]
) -> None:
    holders = {
        logical_id
        for logical_id in FUNCTIONS
        if "MEMORY_HASH_KEY_SECRET" in _environment(template, resources[logical_id])
    }
    assert holders == HASHERS
    for logical_id in FUNCTIONS:
        environment = _environment(template, resources[logical_id])
        assert "MEMORY_HASH_KEY" not in environment  # never a key in plain sight
        readers = [
            s
            for s in _statements(resources[logical_id])
            if s.get("Resource") == {"Ref": "HashKeySecret"}
        ]
        if logical_id in HASHERS:
            assert environment["MEMORY_HASH_KEY_SECRET"] == {"Ref": "HashKeySecret"}
            assert [s["Action"] for s in readers] == ["secretsmanager:GetSecretValue"]
        else:
            assert readers == []
    # No function may read every secret of the account.
    for logical_id in FUNCTIONS:
        for statement in _statements(resources[logical_id]):
            if "secretsmanager" in str(statement.get("Action")):
                assert statement["Resource"] != "*"


@pytest.mark.parametrize("parameter", sorted(PARAMETER_DEFAULTS))
def test_parameter_defaults_match_settings(template: dict[str, Any], parameter: str) -> None:
    field = PARAMETER_DEFAULTS[parameter]
    assert int(template["Parameters"][parameter]["Default"]) == Settings.model_fields[field].default


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

    root = Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    layer = (root / "layers" / "core" / "requirements.txt").read_text().splitlines()
    # boto3 comes with the Lambda runtime.
    assert names(layer) == names(project) - {"boto3"}
