"""One observability setup for every handler and the core they call.

Handlers import `logger` and `metrics` from here, never make their own. The core logs
through standard-library loggers under `botmemory` (`logging.getLogger(__name__)`); this
module gives that family the Powertools logger's handler, level and JSON formatter, so a
core record ("memory model failed") is printed with its `extra` fields, the invocation's
context and its correlation id, like the handler's own records. Submodules imported later
(the interactions function loads the core lazily) propagate to the `botmemory` logger, so
they are covered too.

Tracing is Lambda's own (`Tracing: Active` in the template): the invocation's segments
without an SDK in the layer. Powertools' Tracer would bring the X-Ray SDK and its own
copy of botocore (two thirds of the layer), so there is none here.

Imports stay light: the interactions function answers PING from this module's logger
without pydantic or boto3 (tests/stack/test_interactions_cold_start.py).
"""

from __future__ import annotations

import logging
import os

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

# The template sets both; these defaults keep a local run, and the alarms, on the same names.
SERVICE = "discord-memory"
METRICS_NAMESPACE = "DiscordMemory"
CORE_LOGGER = "botmemory"

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME") or SERVICE)
# A namespace is always set: without one, flushing metrics raises and hides the error that
# ended the invocation (a missing setting, say) behind a metrics schema error.
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or METRICS_NAMESPACE)


def connect_core_logs() -> None:
    """Route the `botmemory` loggers through the Powertools logger (idempotent)."""
    logging.getLogger(CORE_LOGGER)  # registered, so the copy below finds it
    copy_config_to_registered_loggers(source_logger=logger, include={CORE_LOGGER})


connect_core_logs()
