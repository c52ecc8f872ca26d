"""`make bench` table 8: the cost arithmetic on a tiny known input, worked by hand; the
shipped price table holds every price and assumption the arithmetic reads; the memory sizes
and the relay's task size come from the templates."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from cost import (  # noqa: E402
    Costs,
    Deployment,
    Prices,
    Usage,
    cost_rows,
    deployment,
    load_prices,
    others_rows,
    write_units,
)
from keyword_db_cost import LOADS, monthly, per_million_messages, per_thousand_recalls  # noqa: E402
from meter import Request  # noqa: E402

PRICES = Prices(
    date="test",
    prices={
        "lambda_requests_per_million": 0.2,
        "lambda_arm_gb_second": 0.00001,
        "dynamodb_write_units_per_million": 1.0,
        "dynamodb_read_units_per_million": 0.5,
        "dynamodb_stream_reads_per_million": 0.0,
        "dynamodb_storage_gb_month": 0.25,
        "s3vectors_put_per_gb": 0.2,
        "s3vectors_storage_gb_month": 0.06,
        "s3vectors_queries_per_million": 2.5,
        "s3vectors_processed_per_tb": 0.002,
        "s3_storage_gb_month": 0.023,
        "s3_put_per_thousand": 0.005,
        "s3_get_per_thousand": 0.0004,
        "s3_list_per_thousand": 0.005,
        "embedding_tokens_per_million": 0.02,
        "memory_model_input_per_million": 1.0,
        "memory_model_output_per_million": 5.0,
        "chat_model_input_per_million": 1.0,
        "chat_model_output_per_million": 5.0,
        "fargate_arm_vcpu_hour": 0.04,
        "fargate_arm_gb_hour": 0.004,
        "public_ipv4_hour": 0.005,
        "secret_month": 0.4,
    },
    assumptions={
        "messages_per_month": 1_000_000,
        "events_per_invoke": 1,
        "memory_model_ms": 3000,
        "chat_model_ms": 2000,
        "embedding_ms": 200,
        "request_ms": 20,
        "memory_model_output_tokens": 500,
        "chat_output_tokens": 100,
        "chars_per_token": 4,
        "sweeps_per_month": 8640,
        "secrets": 2,
        "hours_per_month": 730,
        "retention_months": 12,
    },
    others={
        "mem0": {
            "calls_per_message": 2,
            "context_tokens": 1000,
            "output_tokens": 150,
            "embeddings_per_message": 2,
        }
    },
)
SETUP = Deployment(
    memory_mb={
        "IngestFunction": 512,
        "ConsolidateFunction": 1024,
        "SearchIndexFunction": 512,
        "SweepFunction": 512,
        "AnswerFunction": 1024,
    },
    relay_vcpu=0.25,
    relay_gb=0.5,
)
# Ten messages: eight triggers wait, two consolidate; two mentions answered.
USAGE = Usage(
    messages=10,
    triggers_waiting=8,
    rounds=2,
    ingest_requests=10,
    waiting_requests=16,
    round_requests=20,
    write_units=30,
    read_units=20,
    stream_records=25,
    stored_bytes=1024**3 // 100_000,
    model_input_tokens=4000,
    passages=15,
    passage_tokens=300,
    vector_bytes=2 * 1024**3 // 100_000,
    message_tokens=100,
    answers=2,
    answer_requests=10,
    answer_write_units=6,
    answer_read_units=8,
    chat_input_tokens=2000,
    query_tokens=20,
)


def dollars(rows: list, item: str) -> float:
    (row,) = [r for r in rows if r.item == item]
    return float(row.dollars)


def test_a_million_messages_cost_what_the_hand_worked_figures_say() -> None:
    rows = cost_rows(USAGE, SETUP, PRICES).per_million  # x 100,000 the ten messages

    # A million invokes of 20 ms (10 requests / 10 messages x 20 ms) at 0.5 GB.
    assert dollars(rows, "Lambda IngestFunction") == pytest.approx(0.2 + 10_000 * 0.00001)
    # A million triggers, mean (20 ms x 36 requests + 2 rounds x 3,200 ms) / 10 = 712 ms, 1 GB.
    assert dollars(rows, "Lambda ConsolidateFunction") == pytest.approx(0.2 + 712_000 * 0.00001)
    assert dollars(rows, "DynamoDB writes") == pytest.approx(3.0)  # 3,000,000 WRU
    assert dollars(rows, "DynamoDB reads") == pytest.approx(1.0)  # 2,000,000 RRU at 0.5
    assert dollars(rows, "DynamoDB stream reads") == 0.0
    assert dollars(rows, "DynamoDB storage") == pytest.approx(0.25 * 12, rel=1e-4)  # 1 GB
    assert dollars(rows, "S3 Vectors PutVectors") == pytest.approx(0.4, rel=1e-4)  # 2 GB
    assert dollars(rows, "S3 Vectors storage") == pytest.approx(2 * 0.06 * 12, rel=1e-4)
    assert dollars(rows, "embeddings") == pytest.approx(30_000_000 / 1e6 * 0.02)
    assert dollars(rows, "memory model input") == pytest.approx(400.0)  # 400M tokens
    assert dollars(rows, "memory model output") == pytest.approx(500.0)  # 200,000 rounds x 500
    # 730 h of 0.25 vCPU, 0.5 GB and a public IPv4 address, for a month of a million.
    assert dollars(rows, "relay on Fargate") == pytest.approx(730 * 0.017)
    assert dollars(rows, "Secrets Manager") == pytest.approx(0.8)
    assert Costs.total(rows) == pytest.approx(sum(r.dollars for r in rows))


def test_fixed_monthly_costs_are_spread_over_the_months_messages() -> None:
    busy = Prices(
        PRICES.date,
        PRICES.prices,
        {**PRICES.assumptions, "messages_per_month": 4_000_000},
        PRICES.others,
    )
    quiet = cost_rows(USAGE, SETUP, PRICES).per_million
    rows = cost_rows(USAGE, SETUP, busy).per_million

    assert dollars(rows, "relay on Fargate") == pytest.approx(
        dollars(quiet, "relay on Fargate") / 4
    )
    assert dollars(rows, "DynamoDB writes") == dollars(quiet, "DynamoDB writes")


def test_the_answer_path_per_thousand_mentions() -> None:
    rows = cost_rows(USAGE, SETUP, PRICES).per_thousand_mentions  # x 500 the two answers

    # 20 ms x 5 requests + 200 ms embedding + 2,000 ms model = 2,300 ms at 1 GB.
    assert dollars(rows, "Lambda AnswerFunction") == pytest.approx(0.0002 + 2300 * 0.00001)
    assert dollars(rows, "chat model input") == pytest.approx(1.0)  # 1,000,000 tokens
    assert dollars(rows, "chat model output") == pytest.approx(0.5)  # 100,000 tokens
    assert dollars(rows, "DynamoDB writes") == pytest.approx(3000 / 1e6)
    # 1,000 queries over the index of a million messages (2 GB of vectors).
    processed_tb = 1000 * 2 / 1024  # each query reads the whole 2 GB
    assert dollars(rows, "S3 Vectors QueryVectors") == pytest.approx(
        1000 / 1e6 * 2.5 + processed_tb * 0.002, rel=1e-4
    )


def test_mem0_costs_its_calls_on_the_same_messages_at_the_same_prices() -> None:
    (ours, mem0) = others_rows(USAGE, PRICES)

    assert ours == ("this layer", 200_000, pytest.approx(900.0), pytest.approx(0.6))
    # 2,000,000 calls of (10 message tokens + 1,000) in and 150 out; 2 embeddings of 10 tokens.
    assert mem0 == (
        "mem0",
        2_000_000,
        pytest.approx(2_020.0 + 1_500.0),
        pytest.approx(20_000_000 / 1e6 * 0.02),
    )


def test_write_units_count_kilobytes_and_double_in_transactions() -> None:
    big = {"pk": {"S": "x"}, "text": {"S": "a" * 1500}}  # 2 KB units
    small = {"pk": {"S": "y"}}
    put = Request("PutItem", {"Item": big}, 0.0)
    transaction = Request(
        "TransactWriteItems",
        {"TransactItems": [{"Put": {"Item": big}}, {"Update": {"Key": small}}]},
        0.0,
    )
    batch = Request(
        "BatchWriteItem",
        {
            "RequestItems": {
                "T": [{"PutRequest": {"Item": small}}, {"DeleteRequest": {"Key": small}}]
            }
        },
        0.0,
    )

    assert write_units(put) == 2
    assert write_units(transaction) == 2 * (2 + 1)
    assert write_units(batch) == 2


def test_the_keyword_database_idles_at_nothing_and_costs_its_floor_when_steady() -> None:
    p = PRICES.prices | {
        "aurora_acu_hour": 0.12,
        "aurora_storage_gb_month": 0.10,
        "aurora_io_per_million": 0.20,
        "data_api_per_million": 0.35,
    }
    idle, light, busy = (monthly(load, p) for load in LOADS)
    assert sum(idle.values()) == 0.0
    assert light["capacity"] == pytest.approx(0.5 * 730 * 0.12)  # $43.80: the floor, all month
    assert busy["capacity"] == pytest.approx(2.0 * 730 * 0.12)
    # A million messages: 50,000 calls (0.0175 + 0.2 at 20 I/O) and 1.86 GB for a month.
    assert per_million_messages(p) == pytest.approx(0.0175 + 0.2 + 1e6 * 2000 / 1024**3 * 0.10)
    assert per_thousand_recalls(p) == pytest.approx(0.00035 + 0.004)


def dollars_of(lines: list[tuple[str, str, float, str]], item: str) -> float:
    (line,) = [line for line in lines if line[0] == item]
    return line[2]


def test_the_shipped_prices_hold_everything_the_table_reads_and_the_templates_give_sizes() -> None:
    shipped = load_prices()
    setup = deployment()

    # A KeyError here: a price or assumption missing.
    costs = cost_rows(USAGE, setup, shipped)
    assert len(costs.per_million) == 15 and len(costs.per_thousand_mentions) == 7
    assert monthly(LOADS[1], shipped.prices)
    assert {"mem0", "graphiti"} <= set(shipped.others)
    assert shipped.others["graphiti"]["calls_per_message"] >= 5
    assert shipped.others["mem0"]["calls_per_message"] == 2
    assert shipped.date
    assert setup.memory_mb["InteractionsFunction"] == 1024
    assert setup.memory_mb["IngestFunction"] == 512
    assert (setup.relay_vcpu, setup.relay_gb) == (0.25, 0.5)
