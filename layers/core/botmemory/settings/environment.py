"""Reading the process environment without loading the settings model.

`ConfigError` lives here, not in config.py, so that a handler whose cold start must stay
light (InteractionsFunction answers PING without pydantic) can still check its variables
at import and fail with the same error type, in one line naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


class ConfigError(ValueError):
    """The environment holds a setting that cannot be used, or lacks one that is needed."""


def required_env(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of environment variable `name`, stripped; blank counts as unset.

    Raises ConfigError("NAME is not set") when it is missing, so a handler calling this at
    import fails its cold start with one line naming the variable, before any request (and
    before anything else, such as a metrics flush, can fail first and hide it).
    """
    env = os.environ if environ is None else environ
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is not set")
    return value
