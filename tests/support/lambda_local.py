"""Invoke a function the way `sam local invoke` would: the template's CodeUri, Handler and
environment, the layer on the path, against the in-process DynamoDB of the test."""

from __future__ import annotations

import copy
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from botmemory.clock import Clock
from botmemory.consolidation.work import local_event, register_local_queue
from botmemory.runtime import forget_environment
from localrun.samtemplate import Template, load_handler, load_template

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
TABLE = "MemoryTable"


@dataclass
class LambdaContext:
    function_name: str
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # The function's Timeout from the template; a test never waits on it (no clock runs).
    timeout_ms: int = 30_000
    # A simulated clock, if the test runs one: the time left is then the Timeout less what
    # that clock moved since the invocation began (a slow model call uses it up).
    clock: Clock | None = None
    started_ms: int = 0

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        if self.clock is None:
            return self.timeout_ms
        return self.timeout_ms - (self.clock.now_ms() - self.started_ms)


WORKER = "ConsolidateWorkerFunction"
WORK_QUEUE = "ConsolidateWorkQueue"  # CONSOLIDATE_QUEUE_URL as the template resolves locally
MAX_QUEUED_INVOKES = 1_000  # a worker that keeps enqueueing itself is a bug, not a wait


class LocalLambda:
    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        overrides: dict[str, dict[str, str]],
        clock: Clock | None = None,
    ) -> None:
        self._monkeypatch = monkeypatch
        self._overrides = overrides
        self._clock = clock
        self.template = Template(_template_body(), {"MemoryTable": TABLE})
        # The worker queue, in process (botmemory.consolidation.work): what a function sends
        # is delivered to ConsolidateWorkerFunction once that function returns, as the
        # queue's event source would; `follow_queue = False` leaves it in `queued`.
        self.queued: list[tuple[str, str, str]] = []  # (body, group, sender)
        self.follow_queue = True
        self._running: str | None = None
        self._settings_of = ""  # whose test settings the running function has
        self._sequence = 0
        register_local_queue(WORK_QUEUE, self._enqueue)

    def _enqueue(self, body: str, group: str) -> None:
        self.queued.append((body, group, self._settings_of))

    def invoke(self, logical_id: str, event: Any) -> Any:
        outer = self._running is None
        result = self._invoke(logical_id, event, logical_id)
        if outer and self.follow_queue:
            self.drain_queue()
        return result

    def drain_queue(self) -> list[Any]:
        """Deliver what waits on the worker queue, one message per invoke, in order; the
        worker runs with the settings the test gave the function that sent the work."""
        answers = []
        for _ in range(MAX_QUEUED_INVOKES):
            if not self.queued:
                return answers
            body, group, sender = self.queued.pop(0)
            self._sequence += 1
            event = local_event(body, group, self._sequence)
            answers.append(self._invoke(WORKER, event, sender))
        raise AssertionError("the worker queue never drained")

    def _invoke(self, logical_id: str, event: Any, settings_of: str) -> Any:
        spec = self.template.function(logical_id)
        environment = {
            **spec.environment,
            **self._overrides.get("Parameters", {}),
            **self._overrides.get(logical_id, {}),
            # The worker does what its sender did before the queue: the sender's settings win.
            **self._overrides.get(settings_of, {}),
        }
        if environment.get("MEMORY_HASH_KEY_SECRET"):
            # As deployed: the key comes from the template's secret (here, moto's).
            _stand_in_secret(environment["MEMORY_HASH_KEY_SECRET"])
            self._monkeypatch.delenv("MEMORY_HASH_KEY", raising=False)
        for name in MAKE_DEV_VARIABLES:
            # Declared blank by the template (for sam local); the test's own stand in.
            if not environment.get(name):
                environment.pop(name, None)
        for name, value in environment.items():
            self._monkeypatch.setenv(name, value)
        # A fresh process per invoke, as far as the caches are concerned.
        forget_environment()
        handler = load_handler(spec)
        timeout_ms = int(spec.properties.get("Timeout", 3)) * 1000
        context = LambdaContext(function_name=logical_id, timeout_ms=timeout_ms)
        if self._clock is not None:
            context.clock, context.started_ms = self._clock, self._clock.now_ms()
        self._running, self._settings_of = logical_id, settings_of
        try:
            return handler(event, context)
        finally:
            self._running = None


_PARSED: list[dict[str, Any]] = []


def _template_body() -> dict[str, Any]:
    """template.yaml as `Template.load` reads it: parsed once per run (pure-Python YAML, a
    about a tenth of a second each time), each caller getting a copy of its own to change."""
    if not _PARSED:
        _PARSED.append(load_template())
    return copy.deepcopy(_PARSED[0])


def _stand_in_secret(name: str) -> None:
    """The template's generated secret, in the in-process Secrets Manager."""
    import boto3

    client = boto3.client("secretsmanager", region_name="us-east-1")
    try:
        client.describe_secret(SecretId=name)
    except client.exceptions.ResourceNotFoundException:
        # The same key the test's other "containers" use, as every function of a deployment
        # reads the one secret.
        value = os.environ.get("MEMORY_HASH_KEY") or "sam-local-person-hash-key-" + "x" * 40
        client.create_secret(Name=name, SecretString=value)


# events/env.json points every function at `make dev`'s server and gives the key make dev
# hashes people with. In a test the in-process moto stands in for that server (it intercepts
# only the default endpoints) and the test's own key (conftest) for make dev's, so the test
# and the functions hash alike.
MAKE_DEV_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "MEMORY_HASH_KEY")


def sample_env() -> dict[str, dict[str, str]]:
    """events/env.json (what `--env-vars` gives sam local), on the test's in-process AWS."""
    env: dict[str, dict[str, str]] = json.loads((EVENTS / "env.json").read_text())
    for variables in env.values():
        for name in MAKE_DEV_VARIABLES:
            variables.pop(name, None)
        # Each test gets an index of its own, never a file another run left behind.
        if variables.get("MEMORY_SEARCH_INDEX", "").startswith("sqlite:"):
            variables["MEMORY_SEARCH_INDEX"] = "sqlite::memory:"
    env["Parameters"] = {"POWERTOOLS_TRACE_DISABLED": "true"}
    return env
