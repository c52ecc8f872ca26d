"""InteractionsFunction: Discord slash commands over a Function URL.

Every request's Ed25519 signature is checked first (401 on any failure: Discord probes
with bad signatures), and so is its signed timestamp: one further than
DISCORD_TIMESTAMP_TOLERANCE_SECONDS from this function's clock gets 401 too, so a captured
request replayed later does nothing. A signed body that is not a JSON object with an
integer `type` gets 400, whatever it holds. PING is answered from this module alone, before
Powertools' event resolver (whose package loads every resolver it has) is imported: that, the
memory core, pydantic and boto3 load only when a command arrives, so a cold PING stays far
inside Discord's 3 seconds (tests/stack/test_interactions_cold_start.py checks it in a fresh
interpreter; `make bench` table 5 times it). Its settings are read at cold start: a missing or malformed one fails the
init with one line naming the variable, before any request is answered.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.clock import Clock, SystemClock
from botmemory.discord.interactions import (
    DEFAULT_TIMESTAMP_TOLERANCE_SECONDS,
    InteractionResponseType,
    InteractionType,
    Refusal,
    SignatureVerifier,
    ephemeral_message,
    parse_interaction,
    public_key_from_environment,
)
from botmemory.observability import logger, metrics
from botmemory.settings.environment import ConfigError

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig

    from botmemory.commands.router import Commands

# The function's clock: signed timestamps are judged against it (tests set a ManualClock).
clock: Clock = SystemClock()
TOLERANCE_ENV = "DISCORD_TIMESTAMP_TOLERANCE_SECONDS"


def timestamp_tolerance_seconds() -> int:
    """DISCORD_TIMESTAMP_TOLERANCE_SECONDS, a whole number of seconds; blank counts as unset."""
    value = os.environ.get(TOLERANCE_ENV, "").strip()
    if not value:
        return DEFAULT_TIMESTAMP_TOLERANCE_SECONDS
    if not (value.isascii() and value.isdigit()):
        raise ConfigError(f"{TOLERANCE_ENV} must be a whole number of seconds, not {value[:40]!r}")
    return int(value)


# Read at cold start, so a bad deployment fails its init naming the variable.
PUBLIC_KEY = public_key_from_environment(os.environ)
TOLERANCE_SECONDS = timestamp_tolerance_seconds()


@lru_cache(maxsize=1)
def verifier() -> SignatureVerifier:
    return SignatureVerifier(PUBLIC_KEY, clock, tolerance_seconds=TOLERANCE_SECONDS)


def raw_body(event: dict[str, Any]) -> bytes:
    body = event.get("body") or ""
    return base64.b64decode(body) if event.get("isBase64Encoded") else body.encode("utf-8")


def as_json(status: int, body: dict[str, Any]) -> Response[str]:
    from aws_lambda_powertools.event_handler import Response, content_types

    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


def checked(event: dict[str, Any]) -> tuple[dict[str, Any], int] | Refusal | None:
    """The signed interaction (payload and type), the signature's refusal, or None for a
    signed body that is not an interaction."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    try:
        body = raw_body(event)
    except ValueError:
        body = b""
    refusal = verifier().refusal(
        headers.get("x-signature-ed25519"), headers.get("x-signature-timestamp"), body
    )
    return refusal if refusal is not None else parse_interaction(body)


def pong(event: dict[str, Any]) -> dict[str, Any] | None:
    """A signed PING to POST / answered here, as a Function URL response; None for anything
    else, which the resolver answers (and, for a bad signature, refuses)."""
    http = (event.get("requestContext") or {}).get("http") or {}
    if http.get("method") != "POST" or event.get("rawPath", "/") != "/":
        return None
    found = checked(event)
    if not isinstance(found, tuple) or found[1] != InteractionType.PING:
        return None
    metrics.add_metric(name="Interactions", unit=MetricUnit.Count, value=1)
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"type": InteractionResponseType.PONG}),
        "isBase64Encoded": False,
    }


@lru_cache(maxsize=1)
def resolver() -> LambdaFunctionUrlResolver:
    """Powertools' Function URL resolver with the one route, made at the first request that
    is not a PING."""
    from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver

    app = LambdaFunctionUrlResolver()
    app.post("/")(interaction)
    return app


@lru_cache(maxsize=1)
def command_runner() -> tuple[Commands, Callable[..., dict[str, Any]], IdempotencyConfig]:
    """The commands, a replay-safe way to run the ones that change something (keyed on the
    interaction id, so a replayed request does its work once), and its idempotency config."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    from botmemory.commands.router import Commands
    from botmemory.discord.followup import deferrer
    from botmemory.runtime import answer_requests_from_environment, services_from_environment
    from botmemory.storage import keys

    services = services_from_environment()

    def finish(job: dict[str, Any]) -> dict[str, Any]:
        return commands.finish(job)

    # /ask starts AnswerFunction (asynchronously); without ANSWER_FUNCTION it says so.
    asker = answer_requests_from_environment()
    commands = Commands(services, deferrer(finish), ask=asker.ask if asker.enabled else None)
    persistence = DynamoDBPersistenceLayer(
        table_name=services.settings.table_name,
        key_attr="pk",
        sort_key_attr="sk",
        static_pk_value=keys.IDEMPOTENCY_PK,
        expiry_attr="expires_at",
        boto3_client=services.repository.client,
    )
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=3600)

    def run_once(interaction: dict[str, Any]) -> dict[str, Any]:
        return commands.handle(interaction)

    # What the decorator would do; idempotent_function is typed as returning Any.
    replay_safe: Callable[..., dict[str, Any]] = idempotent_function(
        data_keyword_argument="interaction", persistence_store=persistence, config=config
    )(run_once)
    return commands, replay_safe, config


def interaction() -> Response[str]:
    from aws_lambda_powertools.event_handler import Response, content_types

    metrics.add_metric(name="Interactions", unit=MetricUnit.Count, value=1)
    parsed = checked(resolver().current_event.raw_event)
    if isinstance(parsed, Refusal):
        metrics.add_metric(name="InteractionsUnauthorized", unit=MetricUnit.Count, value=1)
        if parsed is Refusal.TIMESTAMP:  # Discord's signature on an old request: a replay
            metrics.add_metric(name="InteractionsStale", unit=MetricUnit.Count, value=1)
        return Response(
            status_code=401, content_type=content_types.TEXT_PLAIN, body="invalid request signature"
        )
    if parsed is None:
        metrics.add_metric(name="InteractionsMalformed", unit=MetricUnit.Count, value=1)
        return as_json(400, {"error": "malformed interaction"})
    payload, kind = parsed
    # Discord's interaction id: the deferred invoke that finishes this command logs it too.
    logger.set_correlation_id(str(payload.get("id") or "") or None)
    if kind == InteractionType.PING:
        return as_json(200, {"type": InteractionResponseType.PONG})
    if kind in (
        InteractionType.APPLICATION_COMMAND,
        InteractionType.MESSAGE_COMPONENT,
        InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE,
    ):
        metrics.add_metric(name="Commands", unit=MetricUnit.Count, value=1)
        return as_json(200, run_command(payload))
    return as_json(200, ephemeral_message("This kind of interaction is not supported."))


def run_command(payload: dict[str, Any]) -> dict[str, Any]:
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
    )

    commands, run_once, config = command_runner()
    if commands.changes_nothing(payload):
        return commands.handle(payload)  # reads are safe to repeat; their answers are not stored
    config.register_lambda_context(resolver().lambda_context)
    try:
        return run_once(interaction=payload)
    except IdempotencyAlreadyInProgressError:
        return ephemeral_message("I'm already working on that request.")


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.LAMBDA_FUNCTION_URL, clear_state=True
)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if "deferred" in event:  # our own asynchronous invoke: finish a deferred answer
        from botmemory.discord.followup import finish_and_reply

        logger.set_correlation_id(str(event["deferred"].get("interaction", {}).get("id") or ""))

        commands, _, _ = command_runner()
        # Long work (an erasure) stops in time and continues in another deferred invoke;
        # a failure is raised, so Lambda retries it, then parks it in the failure queue.
        finish_and_reply(
            event["deferred"],
            lambda job: commands.finish(job, time_left_ms=context.get_remaining_time_in_millis),
        )
        return {"finished": event["deferred"].get("work")}
    return pong(event) or resolver().resolve(event, context)
