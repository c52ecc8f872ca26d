"""RecallFunction: the memory block for the bot's prompt.

Invoked directly (Lambda Invoke, payload = the request) or over an IAM-authenticated
Function URL (POST / with the request as JSON body).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import LambdaFunctionUrlResolver, Response, content_types
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.observability import logger, metrics
from botmemory.recall.recaller import respond
from botmemory.recall.search_leg import SearchStatus
from botmemory.runtime import services_from_environment
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()

app = LambdaFunctionUrlResolver()
SEARCH_FAILURES = {SearchStatus.TIMEOUT.value, SearchStatus.FAILED.value}
# The vector leg failed; the keyword leg answered alone where the index has one.
VECTOR_FAILURES = {SearchStatus.KEYWORDS_ONLY.value, SearchStatus.WRONG_DIMENSIONS.value}


def recall(payload: Any) -> tuple[int, dict[str, Any]]:
    status, body = respond(services_from_environment().recaller, payload)
    metrics.add_metric(
        name="RecallRequests" if status == 200 else "RecallRejected", unit=MetricUnit.Count, value=1
    )
    if status != 200:
        logger.warning("rejected recall request", extra={"fields": body.get("fields")})
    elif body.get("search") in SEARCH_FAILURES:
        # Fail-open: the caller got its block without passages; the alarm sees this count.
        metrics.add_metric(name="RecallSearchFailed", unit=MetricUnit.Count, value=1)
        logger.warning("recalled without passages", extra={"search": body["search"]})
    elif body.get("search") in VECTOR_FAILURES:
        metrics.add_metric(name="RecallVectorLegFailed", unit=MetricUnit.Count, value=1)
        if body["search"] == SearchStatus.WRONG_DIMENSIONS.value:
            # A setting to fix (EMBEDDING_DIMENSIONS): alarmed at the first count.
            metrics.add_metric(name="EmbeddingDimensionsWrong", unit=MetricUnit.Count, value=1)
        logger.warning("recalled without the vector leg", extra={"search": body["search"]})
    elif body.get("search") == SearchStatus.VECTORS_ONLY.value:
        # The keyword leg's database paused, throttled or down: the vectors answered alone.
        metrics.add_metric(name="RecallKeywordLegFailed", unit=MetricUnit.Count, value=1)
        logger.warning("recalled without the keyword leg", extra={"search": body["search"]})
    return status, body


@app.post("/")
def recall_over_http() -> Response[str]:
    try:
        payload = json.loads(app.current_event.decoded_body or "")
    except ValueError:
        status, body = 400, {"error": "the body must be a JSON object", "fields": []}
    else:
        status, body = recall(payload)
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.LAMBDA_FUNCTION_URL, clear_state=True
)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if isinstance(event, dict) and "http" in (event.get("requestContext") or {}):
        return app.resolve(event, context)
    return recall(event)[1]
