"""One observability setup: the core's records come out as the handlers' do (structured JSON
with their fields, the invocation's context and its correlation id), at the configured level,
in every invocation; a missing setting fails the cold start with one line naming it.

Each check runs a handler in a fresh interpreter, as Lambda would, and reads what it prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "core"

# Runs in the fresh interpreter: loads a handler as Lambda does and invokes it twice.
INVOKE_TWICE = """
import importlib.util, json, logging, sys

spec = importlib.util.spec_from_file_location("app", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)


class Context:
    function_name = "IngestFunction"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:IngestFunction"

    def __init__(self, request_id):
        self.aws_request_id = request_id

    def get_remaining_time_in_millis(self):
        return 30000


event = json.loads(sys.argv[2])
for request_id in ("request-one", "request-two"):
    module.handler(event, Context(request_id))
level = logging.getLogger("botmemory.ingest.observe").getEffectiveLevel()
print(json.dumps({"core_level": logging.getLevelName(level)}))
"""


def environment(**extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(LAYER),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "TABLE_NAME": "MemoryTable",
        "MEMORY_MODEL": "rules",
        "MEMORY_HASH_KEY": "observability-test-hash-key-0123456789",
        "POWERTOOLS_SERVICE_NAME": "discord-memory",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }
    env.update(extra)
    return env


def run(handler: str, event: dict[str, Any], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", INVOKE_TWICE, str(ROOT / handler), json.dumps(event)],
        env=environment(**extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines


def test_core_warnings_are_structured_with_their_fields_and_the_invocation() -> None:
    # An event that cannot parse: observe.py (the core) logs why, with `extra` fields.
    bad = {"events": [{"t": "MESSAGE_CREATE", "d": "not an object"}]}
    result = run("functions/ingest/app.py", bad)
    assert result.returncode == 0, result.stderr
    records = json_lines(result.stdout)
    rejected = [r for r in records if r.get("message") == "rejected gateway event"]
    assert len(rejected) == 2, result.stdout  # one per invocation, none lost after the first
    for record, request_id in zip(rejected, ("request-one", "request-two"), strict=True):
        assert record["level"] == "WARNING"
        assert record["reason"] == "event has no payload object (d)"
        assert record["index"] == 0 and record["event"] == "MESSAGE_CREATE"
        assert record["service"] == "discord-memory"
        assert record["function_request_id"] == request_id
        # Ingest's correlation id is its request id: observations keep it for consolidation.
        assert record["correlation_id"] == request_id
    # Nothing printed as bare text, the way a stdlib logger without a handler would.
    assert "rejected gateway event" not in result.stderr
    assert records[-1] == {"core_level": "INFO"}


def test_the_core_follows_the_configured_log_level() -> None:
    bad = {"events": [{"t": "MESSAGE_CREATE", "d": "not an object"}]}
    result = run("functions/ingest/app.py", bad, POWERTOOLS_LOG_LEVEL="ERROR")
    assert result.returncode == 0, result.stderr
    assert not [
        r for r in json_lines(result.stdout) if r.get("message") == "rejected gateway event"
    ]
    assert json_lines(result.stdout)[-1] == {"core_level": "ERROR"}


def test_metrics_flush_without_a_namespace_setting() -> None:
    # The namespace has a default: flushing never fails, so it never hides another error.
    bad = {"events": [{"t": "MESSAGE_CREATE", "d": "not an object"}]}
    result = run("functions/ingest/app.py", bad)
    assert "POWERTOOLS_METRICS_NAMESPACE" not in environment()
    namespaces = {
        metric["Namespace"]
        for record in json_lines(result.stdout)
        for metric in record.get("_aws", {}).get("CloudWatchMetrics", [])
    }
    assert namespaces == {"DiscordMemory"}


def cold_start(handler: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Only the init: import the handler module as Lambda does."""
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('app', sys.argv[1])\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
    )
    env = environment(**extra)
    return subprocess.run(
        [sys.executable, "-c", code, str(ROOT / handler)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_a_missing_public_key_fails_the_cold_start_naming_it() -> None:
    result = cold_start("functions/interactions/app.py")
    assert result.returncode != 0
    assert last_line(result) == (
        "botmemory.settings.environment.ConfigError: DISCORD_PUBLIC_KEY is not set"
    )
    malformed = cold_start("functions/interactions/app.py", DISCORD_PUBLIC_KEY="abc")
    assert last_line(malformed).endswith("DISCORD_PUBLIC_KEY must be 64 hexadecimal characters")


def test_a_malformed_tolerance_fails_the_cold_start_naming_it() -> None:
    result = cold_start(
        "functions/interactions/app.py",
        DISCORD_PUBLIC_KEY="a" * 64,
        DISCORD_TIMESTAMP_TOLERANCE_SECONDS="five minutes",
    )
    assert result.returncode != 0
    assert "DISCORD_TIMESTAMP_TOLERANCE_SECONDS must be a whole number" in last_line(result)


def test_ingest_request_ids_follow_observations_into_consolidation_logs(
    dynamodb: Any, monkeypatch: Any
) -> None:
    """Ingest keeps its request id on each observation; the consolidation that consumes
    them names those ids in its log line, so a message can be followed across functions."""
    from localrun import gateway as gw
    from localrun.samtemplate import passes_filters
    from tests.stack.test_sam_local import stream_records
    from tests.support.lambda_local import LocalLambda, sample_env

    local = LocalLambda(monkeypatch, sample_env())
    talk = [gw.message(gw.ALICE, f"line {i}", 1_767_225_600_000 + i * 1000) for i in range(20)]
    local.invoke("IngestFunction", {"events": talk[:10]})
    local.invoke("IngestFunction", {"events": talk[10:]})
    stored = dynamodb.scan(TableName="MemoryTable")["Items"]
    ingest_ids = {item["ingest_id"]["S"] for item in stored if item["sk"]["S"].startswith("OBS#")}
    assert len(ingest_ids) == 2  # one per ingest invocation

    from botmemory import observability

    logged: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        observability.logger, "info", lambda message, extra: logged.append((message, extra))
    )
    stream_arn = dynamodb.describe_table(TableName="MemoryTable")["Table"]["LatestStreamArn"]
    filters = local.template.stream_filters("ConsolidateFunction")
    records = [r for r in stream_records(dynamodb, stream_arn, set()) if passes_filters(filters, r)]
    assert local.invoke("ConsolidateFunction", {"Records": records}) == {"batchItemFailures": []}
    # The stream consumer names the ingest invocations per channel; the worker that
    # consolidated that channel (from the queue) names the channel and its rounds.
    (line,) = [extra for message, extra in logged if message == "channel work handed out"]
    assert set(line["ingest_ids"]) == ingest_ids
    (worked,) = [extra for message, extra in logged if message == "channel worked on"]
    assert worked["channel_id"] == line["channel_id"]
    assert worked["rounds"] == ["consolidated"]


def test_a_malformed_setting_fails_every_other_cold_start_naming_it() -> None:
    for handler in (
        "consolidate",
        "consolidate_worker",
        "ingest",
        "recall",
        "sweep",
        "search_index",
    ):
        result = cold_start(f"functions/{handler}/app.py", MEMORY_CONSOLIDATE_EVERY="twenty")
        assert result.returncode != 0, handler
        line = last_line(result)
        assert line.startswith("botmemory.settings.environment.ConfigError: "), line
        assert "MEMORY_CONSOLIDATE_EVERY='twenty'" in line, line
