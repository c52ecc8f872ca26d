"""The scanners' accepted findings are recorded with reasons (scripts/scan.py), and the
template answers the rest: a KmsKeyArn parameter for data at rest, reserved concurrency
against denial of wallet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scripts import scan
from tests.support.sam_tools import load_template, translated_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
RELAY = load_template(ROOT / "relay" / "template.yaml")
RESOURCES = TEMPLATE["Resources"]
KEY = {"Fn::If": ["HasKmsKey", {"Ref": "KmsKeyArn"}, {"Ref": "AWS::NoValue"}]}
FUNCTIONS = sorted(k for k, v in RESOURCES.items() if v["Type"] == "AWS::Serverless::Function")
RESERVED = {
    "InteractionsFunction": ("InteractionsConcurrency", "InteractionsUnreserved"),
    "AnswerFunction": ("AnswerConcurrency", "AnswerUnreserved"),
    "ConsolidateFunction": ("ConsolidateConcurrency", "ConsolidateUnreserved"),
    "SearchIndexFunction": ("SearchIndexConcurrency", "SearchIndexUnreserved"),
}


def of_type(kind: str) -> list[str]:
    return sorted(k for k, v in RESOURCES.items() if v["Type"] == kind)


# --- KmsKeyArn ------------------------------------------------------------------------


def test_kms_key_arn_defaults_to_the_aws_managed_keys() -> None:
    parameter = TEMPLATE["Parameters"]["KmsKeyArn"]
    assert parameter["Default"] == ""
    assert TEMPLATE["Conditions"]["HasKmsKey"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "KmsKeyArn"}, ""]}]
    }


def test_the_table_uses_the_key_when_set() -> None:
    sse = RESOURCES["MemoryTable"]["Properties"]["SSESpecification"]
    assert sse["SSEEnabled"] is True
    assert sse["KMSMasterKeyId"] == KEY
    assert sse["SSEType"] == {"Fn::If": ["HasKmsKey", "KMS", {"Ref": "AWS::NoValue"}]}


@pytest.mark.parametrize("queue", of_type("AWS::SQS::Queue"))
def test_every_queue_uses_the_key_when_set_and_sqs_managed_encryption_otherwise(queue: str) -> None:
    properties = RESOURCES[queue]["Properties"]
    assert properties["KmsMasterKeyId"] == KEY
    assert properties["SqsManagedSseEnabled"] == {
        "Fn::If": ["HasKmsKey", {"Ref": "AWS::NoValue"}, True]
    }


@pytest.mark.parametrize("group", of_type("AWS::Logs::LogGroup"))
def test_every_log_group_uses_the_key_when_set(group: str) -> None:
    assert RESOURCES[group]["Properties"]["KmsKeyId"] == KEY


def test_the_hash_key_secret_and_the_environment_use_the_key_when_set() -> None:
    assert RESOURCES["HashKeySecret"]["Properties"]["KmsKeyId"] == KEY
    assert TEMPLATE["Globals"]["Function"]["KmsKeyArn"] == KEY


def test_the_relays_log_group_uses_its_key_when_set() -> None:
    assert RELAY["Parameters"]["KmsKeyArn"]["Default"] == ""
    assert RELAY["Resources"]["LogGroup"]["Properties"]["KmsKeyId"] == KEY


def test_the_key_policy_exists_only_with_a_key_and_allows_only_its_use() -> None:
    policy = RESOURCES["KmsKeyPolicy"]
    assert policy["Condition"] == "HasKmsKey"
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert statement["Resource"] == {"Ref": "KmsKeyArn"}


def _role_of(translated: dict[str, Any], function: str) -> dict[str, Any]:
    role = translated["Resources"][function]["Properties"]["Role"]
    resource: dict[str, Any] = translated["Resources"][role["Fn::GetAtt"][0]]
    return resource


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_functions_role_gets_the_key_policy_only_when_the_key_is_set(function: str) -> None:
    role = _role_of(translated_template(), function)
    attached = role["Properties"]["ManagedPolicyArns"]
    assert {"Fn::If": ["HasKmsKey", {"Ref": "KmsKeyPolicy"}, {"Ref": "AWS::NoValue"}]} in attached


# --- reserved concurrency -------------------------------------------------------------


@pytest.mark.parametrize("function", sorted(RESERVED))
def test_reserved_concurrency_is_a_parameter_and_zero_leaves_it_unreserved(function: str) -> None:
    parameter, condition = RESERVED[function]
    declared = TEMPLATE["Parameters"][parameter]
    assert declared["Type"] == "Number" and declared["MinValue"] == 0
    assert 1 <= int(declared["Default"]) <= 10, "a small server's default"
    assert TEMPLATE["Conditions"][condition] == {"Fn::Equals": [{"Ref": parameter}, 0]}
    assert RESOURCES[function]["Properties"]["ReservedConcurrentExecutions"] == {
        "Fn::If": [condition, {"Ref": "AWS::NoValue"}, {"Ref": parameter}]
    }


def test_the_defaults_fit_an_account_with_the_default_quota() -> None:
    # An account keeps 100 unreserved; the default quota is 1,000.
    total = sum(int(TEMPLATE["Parameters"][p]["Default"]) for p, _ in RESERVED.values())
    assert total <= 1000 - 100


def test_the_throttle_runbook_names_the_concurrency_parameters() -> None:
    runbook = (ROOT / "docs" / "operations.md").read_text()
    for parameter, _ in RESERVED.values():
        assert parameter in runbook, parameter
    assert "0" in runbook and "unreserved" in runbook


# --- recorded findings ----------------------------------------------------------------


@pytest.mark.parametrize("template", [TEMPLATE, RELAY], ids=["template.yaml", "relay"])
def test_every_checkov_skip_names_a_check_and_its_reason(template: dict[str, Any]) -> None:
    assert scan.checkov_skips(template)
    assert scan.unexplained_skips(template) == []


def test_a_skip_without_a_reason_is_reported() -> None:
    bad = {
        "Resources": {
            "A": {"Type": "X", "Metadata": {"checkov": {"skip": [{"id": "CKV_AWS_1"}]}}},
            "B": {"Type": "X", "Metadata": {"checkov": {"skip": [{"comment": "a b c d"}]}}},
        }
    }
    problems = scan.unexplained_skips(bad)
    assert len(problems) == 2
    assert "gives no reason" in problems[0] and "names no check id" in problems[1]


def test_the_translated_template_keeps_every_skip() -> None:
    translated = translated_template()["Resources"]
    for logical_id, skips in scan.checkov_skips(TEMPLATE).items():
        assert translated[logical_id]["Metadata"]["checkov"]["skip"] == skips, logical_id


def test_the_function_urls_skip_reaches_the_url_sam_generates() -> None:
    translated = {"Resources": {k: dict(v) for k, v in translated_template()["Resources"].items()}}
    assert "Metadata" not in translated["Resources"]["InteractionsFunctionUrl"]
    scan.carry_generated_skips(TEMPLATE, translated)
    skips = translated["Resources"]["InteractionsFunctionUrl"]["Metadata"]["checkov"]["skip"]
    assert "CKV_AWS_258" in {s["id"] for s in skips}


def test_every_nosec_in_the_code_names_a_test_and_its_reason() -> None:
    files = scan.code_files()
    assert any("# nosec B" in p.read_text() for p in files)
    assert scan.nosec_problems(files) == []


@pytest.mark.parametrize(
    "line",
    ["x = 1  # nosec", "x = 1  # nosec B101", "x = 1  # nosec: why", "x = 1  # nosec B101 #"],
)
def test_a_nosec_without_a_test_id_or_a_reason_is_reported(tmp_path: Path, line: str) -> None:
    source = tmp_path / "probe.py"
    source.write_text(line + "\n")
    assert len(scan.nosec_problems([source])) == 1
    source.write_text("x = 1  # nosec B101 # narrows a type for mypy\n")
    assert scan.nosec_problems([source]) == []
