"""Credentials given directly or by a Secrets Manager secret: one rule for all of them.

Every credential the core reads (the bot token, the person hash key, the memory model's and
the embedder's API keys) comes from a pair of environment variables:

- `NAME`: the value itself (local runs, tests);
- `NAME_SECRET`: the name or ARN of a Secrets Manager secret holding it (deployments),
  read through Powertools Parameters, cached for `max_age` seconds, and only when the
  credential is first needed, never at import;
- at most one of the two is set (`set NAME or NAME_SECRET, not both`); a secret that cannot
  be read, or holds nothing, is an error naming `NAME_SECRET` and the secret.

Whether neither is allowed, and what a value must look like beyond "not empty", is the
caller's rule (the bot token's JSON form, the hash key's length).
"""

from __future__ import annotations

from collections.abc import Callable

from botmemory.settings.environment import ConfigError

# Powertools serves a secret from its cache this long: repeated reads (the bot token, read
# for each deferred answer) cost one call per five minutes, and a rotated value arrives
# within them. The API keys are read once per container, when the services are built.
DEFAULT_MAX_AGE_SECONDS = 300
SECRET_SUFFIX = "_SECRET"  # nosec B105 # the suffix of variable names, no secret
_DETAIL_CHARS = 200

ErrorType = Callable[[str], Exception]


class SecretError(ConfigError):
    """A credential's two forms are both set, or its secret cannot be read or is empty."""


def secret_variable(variable: str) -> str:
    """The variable that names the secret holding `variable`'s value."""
    return variable + SECRET_SUFFIX


def one_form(
    variable: str, value: str | None, secret_id: str | None, *, error: ErrorType = SecretError
) -> None:
    """Raises when both `variable` and `variable_SECRET` are set (blank counts as unset)."""
    if (value or "").strip() and (secret_id or "").strip():
        raise error(f"set {variable} or {secret_variable(variable)}, not both")


def value_or_secret(
    variable: str,
    value: str | None,
    secret_id: str | None,
    *,
    what: str,
    max_age: int = DEFAULT_MAX_AGE_SECONDS,
    error: ErrorType = SecretError,
) -> str | None:
    """The credential: `value` when given, else the secret's content, else None.

    `value` and `secret_id` are what `variable` and `variable_SECRET` hold (blank counts as
    unset). `what` names the credential in messages ("bot token"); `error` is the caller's
    error type, so each keeps its own.
    """
    direct = (value or "").strip()
    secret = (secret_id or "").strip()
    one_form(variable, direct, secret, error=error)
    if direct:
        return direct
    if not secret:
        return None
    return read_secret(
        secret, variable=secret_variable(variable), what=what, max_age=max_age, error=error
    )


def read_secret(
    secret_id: str,
    *,
    variable: str,
    what: str,
    max_age: int = DEFAULT_MAX_AGE_SECONDS,
    error: ErrorType = SecretError,
) -> str:
    """The content of secret `secret_id` (named by `variable`), stripped; never empty."""
    # Imported here: Powertools' parameters utility loads boto3, which a caller given the
    # value directly should not pay for.
    from aws_lambda_powertools.utilities import parameters
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
    from botocore.exceptions import BotoCoreError

    try:
        raw = parameters.get_secret(secret_id, max_age=max_age)
    except (GetParameterError, BotoCoreError) as exc:
        # Powertools wraps the SDK's error (not found, access denied) in GetParameterError;
        # creating its client can fail on its own (no region). Neither quotes the value.
        detail = " ".join(str(exc).split())[:_DETAIL_CHARS]
        raise error(
            f"{variable}: could not read the {what} from secret {secret_id!r}: "
            f"{type(exc).__name__}: {detail}"
        ) from exc
    text = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)).strip()
    if not text:
        raise error(f"{variable}: secret {secret_id!r} holds no {what}")
    return text
