"""Cold start of InteractionsFunction: what a first PING costs before Discord's 3 s deadline.

Each figure is a fresh Python process (the closest local stand-in for a cold Lambda
sandbox), timed whole, median of several runs. The naive line imports what a handler
would pull in without care: boto3 (with a DynamoDB client), pydantic, httpx and
Powertools' Logger and Metrics.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 7
PING_EVENT = ROOT / "events" / "interactions" / "ping.json"
ENV_VARS = ROOT / "events" / "env.json"

BASELINE = "pass"
HANDLER_IMPORT = f"""
import importlib.util, sys
sys.path.insert(0, {str(ROOT / "layers" / "core")!r})
spec = importlib.util.spec_from_file_location("app", {str(ROOT / "functions" / "interactions" / "app.py")!r})
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
"""
PING = (
    HANDLER_IMPORT
    + f"""
import json
class Context:
    function_name = "InteractionsFunction"; memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:InteractionsFunction"
    aws_request_id = "cold-start"
response = module.handler(json.load(open({str(PING_EVENT)!r})), Context())
assert json.loads(response["body"]) == {{"type": 1}}, response
print(json.dumps({{"boto3_loaded": "boto3" in sys.modules, "client_loaded": "botocore.client" in sys.modules,
                  "pydantic_loaded": "pydantic" in sys.modules}}))
"""
)
NAIVE = """
import boto3, pydantic, httpx
from aws_lambda_powertools import Logger, Metrics
Logger(); Metrics()
boto3.client("dynamodb", region_name="us-east-1")
"""


def _environment() -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_SERVICE_NAME": "discord-memory",
        "POWERTOOLS_METRICS_NAMESPACE": "DiscordMemory",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    env.update(json.loads(ENV_VARS.read_text())["InteractionsFunction"])
    return env


def _time(code: str) -> tuple[float, str]:
    """Median wall time of a fresh interpreter running `code`, and its last output."""
    samples = []
    output = ""
    for _ in range(RUNS):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=_environment(),
            capture_output=True,
            text=True,
            check=True,
        )
        samples.append(time.perf_counter() - started)
        output = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return statistics.median(samples), output


def bench_cold_start() -> None:
    baseline, _ = _time(BASELINE)
    handler, _ = _time(HANDLER_IMPORT)
    ping, loaded = _time(PING)
    naive, _ = _time(NAIVE)
    rows = [
        ("empty interpreter (python -c pass)", baseline),
        ("import InteractionsFunction's handler module", handler),
        ("import it and answer a signed PING", ping),
        ("naive: boto3 + client, pydantic, httpx, Powertools", naive),
    ]
    title = f"5. Cold start of InteractionsFunction (whole process, median of {RUNS})"
    print(title)
    print("=" * len(title))
    width = max(len(name) for name, _ in rows)
    print(f"{'figure':<{width}}  {'ms':>6}  {'vs naive':>8}")
    print(f"{'-' * width}  {'-' * 6}  {'-' * 8}")
    for name, seconds in rows:
        print(f"{name:<{width}}  {seconds * 1000:>6.0f}  {seconds / naive:>7.2f}x")
    flags = json.loads(loaded)
    print(
        "  During the PING: boto3 imported: {boto3_loaded}, botocore.client imported: {client_loaded},"
        " pydantic imported: {pydantic_loaded}.".format(**flags)
    )
    print(
        "  No AWS client, and no Powertools event resolver, exists before a command arrives."
        " Target: below 100 ms on a quiet machine."
    )
    print()


if __name__ == "__main__":
    bench_cold_start()
