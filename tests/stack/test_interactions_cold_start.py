"""The PING rule: InteractionsFunction answers a signed PING without loading pydantic, boto3
(or botocore) or the memory repository, so a cold start stays far inside Discord's 3 s.

The check runs in a fresh interpreter, the closest local stand-in for a cold Lambda
sandbox: in this process pytest and the other tests have long since imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from scripts.make_events import function_url_event

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "functions" / "interactions" / "app.py"
# What a PING must not pull in (each name also stands for its submodules).
# Powertools' event_handler package loads every resolver it holds (AppSync, API Gateway,
# asyncio...): most of a cold import, so a PING is answered before it (make bench, table 5).
HEAVY = (
    "pydantic",
    "boto3",
    "botocore",
    "botmemory.storage.repository",
    "aws_lambda_powertools.event_handler",
)
# Except this: Powertools' own __init__ imports the bare `botocore` package, only to learn
# whether it can tag SDK calls (aws_lambda_powertools/shared/user_agent.py). That costs well
# under a millisecond and makes no client; any submodule of botocore (session, client, ...)
# means an SDK client is on its way, and fails the test.
POWERTOOLS_PROBE = "botocore"
REPORT_MARK = "PING-REPORT "

# Runs in the fresh interpreter: the event arrives on stdin, one marked JSON line goes out.
# Powertools prints its own lines (logs, metrics) to stdout too, hence the mark.
COLD_PING = f"""
import importlib.util
import json
import sys

spec = importlib.util.spec_from_file_location("interactions_app", {str(APP)!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)


class Context:
    function_name = "InteractionsFunction"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:InteractionsFunction"
    aws_request_id = "cold-ping"

    def get_remaining_time_in_millis(self):
        return 3000


response = module.handler(json.load(sys.stdin), Context())
loaded = sorted(
    name
    for name in sys.modules
    if any(name == heavy or name.startswith(heavy + ".") for heavy in {HEAVY!r})
)
report = {{"status": response["statusCode"], "body": response["body"], "loaded": loaded}}
print({REPORT_MARK!r} + json.dumps(report))
"""


def signed_ping(key: SigningKey) -> dict[str, Any]:
    """A Function URL event (payload 2.0) carrying a PING signed as Discord signs it:
    Ed25519 over the timestamp followed by the raw body."""
    body = json.dumps(
        {"id": "1500000000000000077", "application_id": "1", "type": 1, "token": "t", "version": 1},
        separators=(",", ":"),
    )
    timestamp = str(int(time.time()))
    signature = key.sign((timestamp + body).encode()).signature.hex()
    headers = {"x-signature-ed25519": signature, "x-signature-timestamp": timestamp}
    return function_url_event(body, headers, "cold-ping")


def cold_ping() -> dict[str, Any]:
    """Answer one signed PING in a fresh interpreter; its report."""
    key = SigningKey.generate()
    environment = {
        "PYTHONPATH": str(ROOT / "layers" / "core"),
        "DISCORD_PUBLIC_KEY": key.verify_key.encode().hex(),
        "POWERTOOLS_SERVICE_NAME": "discord-memory",
        "POWERTOOLS_METRICS_NAMESPACE": "DiscordMemory",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "TABLE_NAME": "MemoryTable",
    }
    done = subprocess.run(
        [sys.executable, "-c", COLD_PING],
        input=json.dumps(signed_ping(key)),
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    reports = [line for line in done.stdout.splitlines() if line.startswith(REPORT_MARK)]
    assert len(reports) == 1, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(reports[0].removeprefix(REPORT_MARK))
    return report


def test_a_cold_ping_gets_a_pong_without_loading_pydantic_boto3_the_repository_or_the_resolver() -> (
    None
):
    report = cold_ping()

    assert report["status"] == 200
    assert json.loads(report["body"]) == {"type": 1}  # PONG
    loaded = [name for name in report["loaded"] if name != POWERTOOLS_PROBE]
    assert loaded == [], f"a PING loaded {loaded}"
