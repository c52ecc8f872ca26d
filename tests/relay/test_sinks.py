"""The two sinks: the exact Invoke call, and how each answer is classified."""

from __future__ import annotations

import json
import socket
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from localrun import gateway as gw
from relay.batch import body_of, encode_event
from relay.sinks import HttpSink, LambdaSink, Outcome, lambda_client
from tests.relay.helpers import FakeLambda, IngestServer, throttled, unreachable

T0 = 1_767_225_600_000


def body() -> bytes:
    events = gw.every_event_type(T0)
    return body_of([encode_event(e["t"], e["d"]) for e in events])


def test_invoke_is_async_with_the_batch_as_payload_checked_against_the_api_model() -> None:
    # botocore's Stubber validates the parameters against Lambda's service model,
    # without moto and without a network.
    client = boto3.client("lambda", region_name="us-east-1")
    payload = body()
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {"StatusCode": 202},
            expected_params={
                "FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:IngestFunction",
                "InvocationType": "Event",
                "Payload": payload,
            },
        )
        sink = LambdaSink(client, "arn:aws:lambda:us-east-1:123456789012:function:IngestFunction")
        assert sink.send(payload).outcome is Outcome.DELIVERED
        stub.assert_no_pending_responses()


def test_the_relays_lambda_client_leaves_retries_to_the_relay() -> None:
    client = lambda_client(region="us-east-1", timeout_seconds=7)
    assert client.meta.config.read_timeout == 7
    assert client.meta.config.retries["total_max_attempts"] == 2


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        ("TooManyRequestsException", Outcome.RETRY),
        ("ServiceException", Outcome.RETRY),
        ("ResourceNotFoundException", Outcome.RETRY),  # an operator fixes it; nothing is lost
        ("AccessDeniedException", Outcome.RETRY),
        ("RequestTooLargeException", Outcome.REJECTED),
        ("InvalidRequestContentException", Outcome.REJECTED),
    ],
)
def test_invoke_errors_are_retried_unless_the_body_itself_is_refused(
    code: str, outcome: Outcome
) -> None:
    client = boto3.client("lambda", region_name="us-east-1")
    with Stubber(client) as stub:
        stub.add_client_error("invoke", service_error_code=code, service_message="no")
        result = LambdaSink(client, "IngestFunction").send(body())
    assert result.outcome is outcome
    assert code in result.reason


def test_unreachable_lambda_and_odd_statuses_are_retried() -> None:
    client = FakeLambda()
    client.failures = [unreachable(), throttled()]
    sink = LambdaSink(client, "IngestFunction")
    assert sink.send(b"{}").outcome is Outcome.RETRY
    assert sink.send(b"{}").outcome is Outcome.RETRY
    odd = FakeLambda()
    odd.invoke = lambda **_: {"StatusCode": 200}  # type: ignore[method-assign]
    assert LambdaSink(odd, "IngestFunction").send(b"{}").outcome is Outcome.RETRY


def test_http_sink_reads_rejections_from_ingests_answer() -> None:
    server = IngestServer()
    try:
        good = gw.message(gw.ALICE, "fine", T0)
        bad: dict[str, Any] = {"t": "MESSAGE_DELETE", "d": {"id": "x", "channel_id": "1"}}
        payload = json.dumps({"events": [good, bad]}).encode()
        result = HttpSink(server.url).send(payload)
        assert result.outcome is Outcome.DELIVERED
        (rejection,) = result.rejected
        assert (rejection.index, rejection.event) == (1, "MESSAGE_DELETE")
        assert "id" in rejection.reason
        server.mode = "reject"
        refused = HttpSink(server.url).send(payload)
        assert refused.outcome is Outcome.REJECTED
        assert refused.reason == "HTTP 400: the body must be JSON"
        server.mode = "unwell"
        assert HttpSink(server.url).send(payload).outcome is Outcome.RETRY
    finally:
        server.down()


def test_http_sink_retries_a_refused_connection_and_a_timeout() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    refused = HttpSink(f"http://127.0.0.1:{port}/ingest", timeout_seconds=1).send(body())
    assert refused.outcome is Outcome.RETRY

    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/ingest"
        timed_out = HttpSink(url, timeout_seconds=0.2).send(body())
    assert timed_out.outcome is Outcome.RETRY
    assert "Timeout" in timed_out.reason
