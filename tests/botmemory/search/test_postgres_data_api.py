"""The keyword leg's Data API transport (botmemory.search.postgres_transport) on botocore's
Stubber: the requests ExecuteStatement gets (the same SQL the local transport runs, every
value a typed parameter, none formatted into the SQL), the answers it reads, and the errors
that mean "not now"."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from botmemory.search import postgres_sql
from botmemory.search.keywords import query_terms
from botmemory.search.port import SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_transport import DataApiTransport, KeywordIndexUnavailable
from tests.support.passages import message_passage

CLUSTER = "arn:aws:rds:us-east-1:123456789012:cluster:memory-keywords"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:memory-keywords-AbCdEf"
HOSTILE = "Robert'); DROP TABLE kw_passages;-- :scope"


def stubbed() -> tuple[PostgresKeywordIndex, Stubber]:
    client = boto3.client("rds-data", region_name="us-east-1")
    stubber = Stubber(client)
    transport = DataApiTransport(CLUSTER, SECRET, "botmemory", client=client)
    return PostgresKeywordIndex(transport), stubber


def expected(sql: str, parameters: list[dict[str, Any]] | Any = ANY) -> dict[str, Any]:
    request = {"resourceArn": CLUSTER, "secretArn": SECRET, "database": "botmemory", "sql": sql}
    if parameters is not None:
        request["parameters"] = parameters
    return request


def requests_of(stubber: Stubber) -> list[dict[str, Any]]:
    """Every ExecuteStatement request the client is about to send, as sent."""
    seen: list[dict[str, Any]] = []
    stubber.client.meta.events.register(
        "provide-client-params.rds-data.ExecuteStatement",
        lambda params, **_: seen.append(params),
    )
    return seen


def test_a_round_s_write_is_one_execute_statement_with_typed_parameters() -> None:
    index, stubber = stubbed()
    seen = requests_of(stubber)
    passage = message_passage("1", HOSTILE, "200", "100")
    stubber.add_response(
        "execute_statement",
        {"records": [[{"stringValue": "written"}, {"stringValue": "1"}]]},
        expected(postgres_sql.upsert("x", 0, None, 0).sql),
    )
    with stubber:
        assert index.write([passage], reembed=64) == []
    stubber.assert_no_pending_responses()

    (request,) = seen
    parameters = {p["name"]: p["value"] for p in request["parameters"]}
    (row,) = json.loads(parameters["rows"]["stringValue"])
    assert row["passage"] == passage.model_dump_json() and row["server"] == "100"
    assert parameters["pending_server"] == {"stringValue": "100"}
    assert parameters["pending_limit"] == {"longValue": 64}
    assert HOSTILE not in request["sql"]


def test_the_request_carries_values_only_as_parameters() -> None:
    index, stubber = stubbed()
    seen = requests_of(stubber)
    stubber.add_response("execute_statement", {"records": []})
    with stubber:
        index.search(SearchQuery(scope="100", text=HOSTILE, now_s=5, channel_ids=["200"]))

    (request,) = seen
    assert HOSTILE not in request["sql"] and "robert" not in request["sql"]
    parameters = {p["name"]: p["value"] for p in request["parameters"]}
    assert parameters["scope"] == {"stringValue": "100"}
    assert parameters["now"] == {"longValue": 5}
    assert json.loads(parameters["terms"]["stringValue"]) == query_terms(HOSTILE)
    assert json.loads(parameters["channels"]["stringValue"]) == ["200"]
    assert set(parameters) == set(postgres_sql.placeholders(request["sql"]))


def test_records_are_read_back_as_passages() -> None:
    index, stubber = stubbed()
    passage = message_passage("1", "Thaddeus on the ferry", "200", "100")
    stubber.add_response(
        "execute_statement",
        {
            "records": [
                [{"longValue": 1}, {"longValue": 1}, {"stringValue": passage.id}, {"isNull": True}],
                [
                    {"longValue": 0},
                    {"longValue": 0},
                    {"stringValue": passage.id},
                    {"stringValue": passage.model_dump_json()},
                ],
            ]
        },
        expected(ANY),
    )
    with stubber:
        hits = index.search(SearchQuery(scope="100", text="Thaddeus", now_s=0))
    assert [h.passage for h in hits] == [passage]


@pytest.mark.parametrize(
    "code", ["DatabaseResumingException", "StatementTimeoutException", "ServiceUnavailableError"]
)
def test_a_paused_or_busy_cluster_is_unavailable_not_a_crash(code: str) -> None:
    index, stubber = stubbed()
    stubber.add_client_error("execute_statement", service_error_code=code, http_status_code=400)
    with stubber, pytest.raises(KeywordIndexUnavailable):
        index.search(SearchQuery(scope="100", text="Thaddeus", now_s=0))


def test_a_schema_older_than_the_code_is_migrated_then_the_statement_runs_again() -> None:
    index, stubber = stubbed()
    stubber.add_client_error(
        "execute_statement",
        service_error_code="BadRequestException",
        service_message='ERROR: relation "kw_passages" does not exist; SQLState: 42P01',
    )
    stubber.add_response(
        "execute_statement", {"records": []}, expected(postgres_sql.migrate().sql, None)
    )
    stubber.add_response(
        "execute_statement",
        {"records": [[{"longValue": postgres_sql.SCHEMA_VERSION}]]},
        expected(postgres_sql.schema_version().sql, None),
    )
    stubber.add_response("execute_statement", {"records": []})
    with stubber:
        assert index.search(SearchQuery(scope="100", text="Thaddeus", now_s=0)) == []
    stubber.assert_no_pending_responses()
