"""`make dev` as a faithful local stack: it keeps consolidating after a refused transaction,
honours the template's settings given in the shell, and its README walkthrough runs as
written. Each test starts `python -m localrun.dev` (what the Makefile's dev target runs) on
free ports of 127.0.0.1 and talks to it over HTTP, and to its DynamoDB with boto3."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from botmemory.storage.schema import PENDING_INDEX
from localrun.motoserver import free_port
from localrun.stack import LocalStack
from tests.localrun.test_localrun import (
    EVENTS,
    ROOT,
    clean_environment,
    moto_pid,
    pid_alive,
    request,
)

TABLE = "MemoryTable"
CONSOLIDATED_WITHIN_SECONDS = 60  # the template's batching window is 10 s; the rest is slack
# The tests that are not about the batching window run make dev without it: records reach
# ConsolidateFunction at the stream's next read (the walkthrough keeps the template's 10 s).
NO_WINDOW = ("--batch-window", "0")
READER_ATTACHED_SECONDS = 3.0  # make dev reads the stream every second


@dataclass
class Dev:
    base: str
    http_port: int
    dynamodb: Any
    process: subprocess.Popen[str]
    banner: str


@contextmanager
def running_dev(
    environment: dict[str, str] | None = None, arguments: tuple[str, ...] = ()
) -> Iterator[Dev]:
    """`make dev` with these shell settings and ARGS, stopped with Ctrl-C (SIGINT) afterwards."""
    http_port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "localrun.dev", "--http-port", str(http_port)]
        + ["--port", str(free_port()), *arguments],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**clean_environment(), **(environment or {})},
    )
    pid = 0
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith("Ready:"):
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        banner = "".join(lines)
        pid = moto_pid(banner)
        match = re.search(r"^Local DynamoDB: (\S+) ", banner, re.M)
        assert match, banner
        dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=match.group(1),
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        yield Dev(f"http://127.0.0.1:{http_port}", http_port, dynamodb, process, banner)
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    assert not pid_alive(pid)


def messages(count: int, first_id: int, text: str) -> dict[str, Any]:
    """`count` messages in the sample's channel, as the relay sends them."""
    sample = json.loads((EVENTS / "ingest/gateway-batch.json").read_text())["events"][0]
    events = []
    for n in range(count):
        event = json.loads(json.dumps(sample))
        event["d"].update(id=str(first_id + n), content=f"{text} number {n}.")
        events.append(event)
    return {"events": events}


def pending(dynamodb: Any) -> int:
    """Observations not yet consolidated (the table's sparse `pending` index)."""
    answer = dynamodb.scan(TableName=TABLE, IndexName=PENDING_INDEX, Select="COUNT")
    return int(answer["Count"])


def wait_for_no_pending(dynamodb: Any) -> int:
    deadline = time.monotonic() + CONSOLIDATED_WITHIN_SECONDS
    while (left := pending(dynamodb)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def ingest(dev: Dev, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = request(f"{dev.base}/ingest", body)
    assert status == 200, answer
    result: dict[str, Any] = json.loads(answer)
    return result


def test_dev_keeps_consolidating_after_a_refused_transaction() -> None:
    """The issue's case: after one refused transaction (a forget racing a consolidation),
    make dev read a dead copy of the stream, and no later message was ever consolidated."""
    with running_dev(arguments=NO_WINDOW) as dev:
        # The stream's reader polls every second: by now it reads the table's stream.
        time.sleep(READER_ATTACHED_SECONDS)
        with pytest.raises(ClientError) as refused:
            dev.dynamodb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": TABLE,
                            "Item": {"pk": {"S": "CH#1"}, "sk": {"S": "OBS#refused"}},
                        }
                    },
                    {
                        "ConditionCheck": {
                            "TableName": TABLE,
                            "Key": {"pk": {"S": "CH#1"}, "sk": {"S": "LOCK"}},
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    },
                ]
            )
        assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
        # The 20 messages the template's MEMORY_CONSOLIDATE_EVERY waits for, in two batches.
        first = ingest(dev, messages(10, 1456074443980900000, "I like tea"))
        second = ingest(dev, messages(10, 1456074443981000000, "I like coffee"))
        assert first["stored"] == second["stored"] == 10

        assert wait_for_no_pending(dev.dynamodb) == 0


def test_dev_honours_a_template_setting_given_in_the_shell() -> None:
    """MEMORY_CONSOLIDATE_EVERY=3 make dev consolidates at 3 messages, not the template's 20."""
    with running_dev({"MEMORY_CONSOLIDATE_EVERY": "3"}, NO_WINDOW) as dev:
        assert "From your shell, over template.yaml: MEMORY_CONSOLIDATE_EVERY" in dev.banner
        assert "Stream batching window: 0 s for every function (template.yaml: 10 s" in dev.banner
        assert ingest(dev, messages(3, 1456074443980900000, "I like tea"))["stored"] == 3

        assert wait_for_no_pending(dev.dynamodb) == 0


@pytest.mark.parametrize(("window", "at_once"), [(None, False), (0.0, True)])
def test_the_stream_batching_window_is_the_template_s_unless_given(
    window: float | None, at_once: bool
) -> None:
    """make dev waits the template's 10 s before a new record reaches ConsolidateFunction,
    and delivers at the next read with --batch-window 0."""
    stack = LocalStack("http://127.0.0.1:1", batching_window=window)
    delivered: list[int] = []
    stack._deliver = lambda _id, batch, _retries: delivered.append(len(batch))  # type: ignore[method-assign]
    records = json.loads((EVENTS / "consolidate/stream-batch.json").read_text())["Records"]

    stack._pump("ConsolidateFunction", records[:1], flush=False)

    assert stack.template_batching_window() == 10
    assert stack.batching_window("ConsolidateFunction") == (0 if at_once else 10)
    assert delivered == ([1] if at_once else [])


def test_a_batching_window_outside_lambda_s_bounds_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "localrun.dev", "--batch-window", "301"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=clean_environment(),
        timeout=30,
    )
    assert done.returncode == 2
    assert "--batch-window: between 0 and 300 seconds" in done.stderr


def test_the_shell_wins_for_declared_settings_except_what_the_stack_wires() -> None:
    shell = {
        "MEMORY_CONSOLIDATE_EVERY": "3",  # declared by every function (Globals)
        "CHAT_MODEL": "openai:local",  # declared by AnswerFunction only
        "MEMORY_IDLE_FLUSH_MINUTES": " ",  # blank counts as unset, as deployed
        "TABLE_NAME": "SomeoneElsesTable",  # the stack's own table, whatever the shell says
        "AWS_ENDPOINT_URL_DYNAMODB": "http://elsewhere:8000",
    }
    dev = LocalStack("http://127.0.0.1:1", shell=shell)
    environment = dev.environment()
    # make demo passes no shell: the template's values, on every machine.
    demo = LocalStack("http://127.0.0.1:1").environment()

    assert environment["MEMORY_CONSOLIDATE_EVERY"] == "3"
    assert environment["CHAT_MODEL"] == "openai:local"
    assert environment["MEMORY_IDLE_FLUSH_MINUTES"] == demo["MEMORY_IDLE_FLUSH_MINUTES"]
    assert environment["TABLE_NAME"] == TABLE
    assert environment["AWS_ENDPOINT_URL_DYNAMODB"] == "http://127.0.0.1:1"
    assert dev.shell_ignored() == ["AWS_ENDPOINT_URL_DYNAMODB", "TABLE_NAME"]
    assert demo["MEMORY_CONSOLIDATE_EVERY"] == "20"
    assert demo["CHAT_MODEL"] != "openai:local"


# The README's walkthrough --------------------------------------------------------------


def readme_walkthrough() -> list[tuple[str, str]]:
    """The fenced block of the README's `make dev` section that starts `make dev`: each
    line's command and the note after its `#`."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Local development: `make dev`", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"^```\n(.*?)^```", section, re.M | re.S):
        lines = [line for line in block.splitlines() if line.strip()]
        if lines and " make dev" in f" {lines[0].split('#')[0]}":
            return [(c.strip(), n.strip()) for c, _, n in (line.partition(" # ") for line in lines)]
    raise AssertionError("the README's make dev section has no walkthrough block")


def test_the_makefile_dev_target_is_what_the_walkthrough_test_runs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^dev: venv\n\t\$\(PY\) -m localrun\.dev \$\(ARGS\)$", makefile, re.M)


def test_the_readme_walkthrough_of_make_dev_runs_command_by_command() -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("the walkthrough's commands are curl commands; no curl on PATH")
    (start, _), *steps = readme_walkthrough()
    *settings, make, target = shlex.split(start)
    assert (make, target) == ("make", "dev"), start
    shell = dict(setting.split("=", 1) for setting in settings)
    assert steps, "the walkthrough has no commands after make dev"

    with running_dev(shell) as dev:
        for command, note in steps:
            words = shlex.split(command)
            if words[0] == "sleep":
                (seconds,) = words[1:]
                time.sleep(float(seconds))
                continue
            assert words[0] == "curl", f"the walkthrough runs only curl and sleep: {command}"
            # The README's port, moved to this run's free one.
            arguments = [w.replace("localhost:8787", f"127.0.0.1:{dev.http_port}") for w in words]
            done = subprocess.run(
                [curl, "--silent", "--show-error", "--write-out", "\n%{http_code}", *arguments[1:]],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=30,
            )
            body, _, status = done.stdout.rpartition("\n")
            assert done.returncode == 0 and status == "200", (command, done.stderr, body)
            json.loads(body)
            for fragment in filter(None, (part.strip() for part in note.split("..."))):
                assert fragment in body, (command, fragment, body[:2000])
