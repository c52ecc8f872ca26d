"""Cost benchmark of the memory layer: what each operation costs, and whether it grows.

Run it from the repository root:

    .venv/bin/python bench/bench.py

Everything runs in-process against moto's DynamoDB (no network, no AWS account) with
the offline `rules` memory model and an embedded search index (SQLite FTS5 in memory), as
local runs have; the deployed search path (3g, 8d) on moto's S3 and make eval's in-memory
S3 Vectors. It measures and prints; it asserts nothing and exits 0.

How the figures are taken:

- DynamoDB requests: every API call the client makes, counted by botocore's
  `before-call.dynamodb.*` event (a BatchWriteItem or a TransactWriteItems is one request);
  S3's likewise (`before-call.s3.*`), with the status each was answered (a 304 is one).
- Model calls: a wrapper around RulesModel counts them and keeps the last input.
- Sequential round trips (recall): every request is timed with `before-call` and
  `after-call` hooks, and each is held for a simulated network latency so that
  requests issued side by side really overlap. The figure is the longest chain of
  requests in which each one started only after the previous one had finished: the
  number of round trips a caller waits for, whatever runs concurrently beside them.
- Read units: estimated from the items each read returned (see the footnotes).
- Dollars (table 8): those counts at the prices of bench/prices.toml, with the assumptions
  it names (model latencies, output tokens, batching).

How to read the tables: in the "history" comparisons the left column is a young
channel and the right one a channel 100 times older; the ratio column is right/left.
A ratio of about 1.00 means the operation's cost does not grow with history.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "core"), str(ROOT)]

from localrun.fakeaws import REGION, use_fake_aws  # noqa: E402

# Fake credentials and a region before boto3 is imported: never a real AWS account.
use_fake_aws("bench-person-hash-key-0123456789")

import boto3  # noqa: E402
from backfill import bench_backfill  # noqa: E402  (beside this script)
from catch_up import bench_catch_up  # noqa: E402
from cold_start import bench_cold_start  # noqa: E402
from cost import bench_cost  # noqa: E402
from dates import bench_dates  # noqa: E402
from deployed_recall import bench_deployed_recall  # noqa: E402
from export import bench_export  # noqa: E402
from keyword_postgres import bench_keyword_postgres  # noqa: E402
from layer_size import bench_layer  # noqa: E402
from model_calls import bench_model_calls  # noqa: E402
from moto import mock_aws  # noqa: E402
from raid import bench_raid  # noqa: E402
from reads import bench_answer, bench_recall  # noqa: E402
from relay_fleet import bench_relay_fleet  # noqa: E402
from scale import bench_scale  # noqa: E402
from world import Lab  # noqa: E402
from writes import (  # noqa: E402
    bench_erasure,
    bench_hostile,
    bench_ingest,
    bench_model_input,
    bench_stream,
)

from localrun.fastmoto import fast_dynamodb  # noqa: E402


def main() -> int:
    started = time.perf_counter()
    with mock_aws(), fast_dynamodb():
        lab = Lab(boto3.client("dynamodb", region_name=REGION))
        bench_ingest(lab)
        bench_stream(lab)
        bench_model_input(lab)
        bench_model_calls(lab)
        bench_hostile(lab)
        bench_recall(lab)
        bench_deployed_recall(lab)  # table 3g: the deployed path, embedding included
        bench_dates(lab)  # table 3t: what the dates cost in characters
        bench_erasure(lab)
        bench_export(lab)  # table 4x: exports of 10,000 and 100,000 messages, measured
        lab.close()
    bench_keyword_postgres()  # tables 3f and 3h: the keyword leg on PostgreSQL
    bench_cold_start()
    bench_layer()
    with mock_aws(), fast_dynamodb():
        lab = Lab(boto3.client("dynamodb", region_name=REGION))
        bench_answer(lab)
        lab.close()
    with mock_aws(), fast_dynamodb():
        lab = Lab(boto3.client("dynamodb", region_name=REGION))
        fleet_rate = bench_scale(lab)  # table 9 first: 8 prices its fleet's model calls
        bench_cost(lab, fleet_rate)  # table 8, prices.toml's prices
        bench_raid(lab)  # table 9d: the raid of 10,000 (the tests run 1,000)
        lab.close()
    bench_relay_fleet()  # table 10: restarts and IDENTIFY storms of the relay's fleet
    bench_catch_up()  # table 10c: an unresumable gap read back through REST
    bench_backfill()  # table 10d: a backfill staff start, its model calls per 1,000 messages
    print(f"(bench finished in {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
