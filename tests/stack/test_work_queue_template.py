"""Issue 28, item 1, as deployed: the worker queue, its mapping, its dead letters and who may
send to it, read from template.yaml (and its SAM translation for the roles)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.stack.test_iam import function_statements, listed
from tests.support.sam_tools import TEMPLATE, load_template, translated_template


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


def test_the_work_queue_is_fifo_with_a_visibility_of_six_worker_timeouts(
    template: dict[str, Any],
) -> None:
    resources = template["Resources"]
    queue = resources["ConsolidateWorkQueue"]["Properties"]
    worker = resources["ConsolidateWorkerFunction"]["Properties"]
    assert queue["FifoQueue"] is True
    assert queue["VisibilityTimeout"] >= 6 * worker["Timeout"]
    redrive = queue["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["ConsolidateWorkDeadLetterQueue", "Arn"]
    }
    assert resources["ConsolidateWorkDeadLetterQueue"]["Properties"]["FifoQueue"] is True
    alarm = resources["ConsolidateWorkDeadLetterQueueAlarm"]["Properties"]
    assert alarm["Dimensions"][0]["Value"] == {
        "Fn::GetAtt": ["ConsolidateWorkDeadLetterQueue", "QueueName"]
    }


def test_the_worker_consumes_one_channel_at_a_time_with_a_bounded_concurrency(
    template: dict[str, Any],
) -> None:
    worker = template["Resources"]["ConsolidateWorkerFunction"]["Properties"]
    (event,) = worker["Events"].values()
    source = event["Properties"]
    assert event["Type"] == "SQS"
    assert source["Queue"] == {"Fn::GetAtt": ["ConsolidateWorkQueue", "Arn"]}
    assert source["BatchSize"] == 1
    assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert source["ScalingConfig"]["MaximumConcurrency"] == {"Ref": "ConsolidateWorkerConcurrency"}
    parameter = template["Parameters"]["ConsolidateWorkerConcurrency"]
    assert parameter["MinValue"] == 2 and parameter["MaxValue"] == 1000
    assert 2 <= parameter["Default"] <= 1000


def test_the_stream_consumer_only_hands_work_out(template: dict[str, Any]) -> None:
    consumer = template["Resources"]["ConsolidateFunction"]["Properties"]
    stream = consumer["Events"]["NewObservations"]["Properties"]
    assert stream["ParallelizationFactor"] > 1
    assert consumer["Environment"]["Variables"]["CONSOLIDATE_QUEUE_URL"] == {
        "Ref": "ConsolidateWorkQueue"
    }
    for name in ("MEMORY_MODEL_API_KEY_SECRET", "MEMORY_HASH_KEY_SECRET"):
        assert name not in consumer["Environment"]["Variables"]


def test_only_the_stream_the_sweep_and_the_worker_send_and_only_to_the_work_queue() -> None:
    translated = translated_template()
    queue = {"Fn::GetAtt": ["ConsolidateWorkQueue", "Arn"]}
    senders = {}
    for function in ("ConsolidateFunction", "ConsolidateWorkerFunction", "SweepFunction"):
        sends = [
            s
            for s in function_statements(translated, function)
            if "sqs:SendMessage" in listed(s["Action"])
        ]
        senders[function] = [r for s in sends for r in listed(s["Resource"])]
        assert queue in senders[function], function
    assert senders["ConsolidateFunction"] == [
        queue,
        {"Fn::GetAtt": ["ConsolidateDeadLetterQueue", "Arn"]},
    ]
    # Besides its own failure destination (SAM gives the async invoke config a statement).
    assert senders["SweepFunction"] == [{"Fn::GetAtt": ["SweepFailureQueue", "Arn"]}, queue]
    consumer_actions = {
        a
        for s in function_statements(translated, "ConsolidateFunction")
        for a in listed(s["Action"])
    }
    assert "bedrock:InvokeModel" not in consumer_actions
    assert "secretsmanager:GetSecretValue" not in consumer_actions
