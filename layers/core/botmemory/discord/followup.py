"""Finishing deferred interactions: the work runs after the 3-second answer, then edits it.

In Lambda the function invokes itself asynchronously with `{"deferred": job}` (the
sandbox freezes once a response is returned, so a thread would not run); locally the
job runs on a thread. Either way the result replaces the "thinking…" answer through
the interaction webhook, which needs no bot token.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from botmemory.clock import Clock, SystemClock
from botmemory.discord.errors import DiscordApiError
from botmemory.discord.rest import DiscordApi, api_base_from_environment
from botmemory.snowflake import snowflake_ms

log = logging.getLogger(__name__)

# How Discord refuses an interaction webhook whose 15-minute token has expired
# (401 Invalid Webhook Token, 404 Unknown Webhook).
EXPIRED_TOKEN_STATUSES = (401, 404)
# Discord honours an interaction's token for 15 minutes from the interaction, whose id is
# a snowflake holding that moment.
TOKEN_LIFETIME_MS = 15 * 60 * 1000

FAILED = (
    "Sorry, something went wrong before I could finish. Nothing was left half done: "
    "please run the command again."
)


def finish_and_reply(
    job: dict[str, Any],
    finish: Callable[[dict[str, Any]], dict[str, Any]],
    clock: Clock | None = None,
) -> None:
    api = DiscordApi(base_url=api_base_from_environment())
    now = clock or SystemClock()
    try:
        edit = finish(job)  # what replaces the "thinking…" answer (commands.webhook_edit)
    except Exception:
        log.exception("deferred work failed", extra={"work": job.get("work")})
        # The job may say what to tell the person (an erasure is retried, not undone).
        # Raised again so an asynchronous invoke is retried, then sent to its failure queue.
        _tell(api, job, {"content": str(job.get("failed") or FAILED), "components": []}, now)
        raise
    _tell(api, job, edit, now)


def token_expired(interaction: dict[str, Any], now_ms: int) -> bool:
    """Whether the interaction's token is past its 15 minutes; False when its id is unknown."""
    ident = interaction.get("id")
    if not isinstance(ident, str) or not ident.isdigit() or len(ident) > 20:
        return False
    return now_ms - snowflake_ms(ident) >= TOKEN_LIFETIME_MS


def _tell(api: DiscordApi, job: dict[str, Any], edit: dict[str, Any], clock: Clock) -> None:
    """Edit the deferred answer. Its token lasts 15 minutes: past them (a job replayed from
    the failure queue, a long erasure) the work stands (an erasure finished late is still
    finished) and the edit is skipped and logged, never sent to be refused (a refusal counts
    toward Discord's invalid-request limit). A refusal of a token thought alive is logged too.
    The person cannot be told otherwise: a DM needs the bot token, which only AnswerFunction
    may read."""
    interaction = job["interaction"]
    if token_expired(interaction, clock.now_ms()):
        log.warning(
            "the interaction's token expired before the answer; follow-up skipped, "
            "the person was not told",
            extra={"work": job.get("work"), "interaction": interaction.get("id")},
        )
        return
    try:
        api.edit_original_response(interaction["application_id"], interaction["token"], edit)
    except DiscordApiError as refused:
        if refused.status not in EXPIRED_TOKEN_STATUSES:
            raise
        log.warning(
            "the interaction's token expired before the answer; the person was not told",
            extra={"work": job.get("work"), "status": refused.status},
        )


def deferrer(
    finish: Callable[[dict[str, Any]], dict[str, Any]],
) -> Callable[[dict[str, Any]], None]:
    """How this process hands off deferred work: DEFERRED_WORK=invoke|thread; in Lambda,
    invoke is the default."""
    mode = os.environ.get("DEFERRED_WORK") or (
        "invoke" if os.environ.get("AWS_LAMBDA_FUNCTION_NAME") else "thread"
    )
    if mode == "invoke":
        import boto3

        client = boto3.client("lambda")
        function = os.environ["AWS_LAMBDA_FUNCTION_NAME"]

        def invoke(job: dict[str, Any]) -> None:
            client.invoke(
                FunctionName=function, InvocationType="Event", Payload=json.dumps({"deferred": job})
            )

        return invoke

    def run_on_thread(job: dict[str, Any]) -> None:
        def work() -> None:
            with contextlib.suppress(Exception):  # already logged and answered
                finish_and_reply(job, finish)

        threading.Thread(target=work, name="deferred-interaction").start()

    return run_on_thread
