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

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


class LocalLambda:
    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, dict[str, str]]
    ) -> None:
        self._monkeypatch = monkeypatch
        self._overrides = overrides
        self.template = Template(_template_body(), {"MemoryTable": TABLE})

    def invoke(self, logical_id: str, event: Any) -> Any:
        spec = self.template.function(logical_id)
        environment = {
            **spec.environment,
            **self._overrides.get("Parameters", {}),
            **self._overrides.get(logical_id, {}),
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
        return handler(event, LambdaContext(function_name=logical_id))


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
