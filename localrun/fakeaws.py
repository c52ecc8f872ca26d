"""The fake-AWS environment of runs without AWS (tests, the bench, the eval): never a real
account.

Fake credentials and a region, no profile or session token a developer's shell may carry,
and the person hash's key given directly (deployed: a Secrets Manager secret; see
`botmemory.people.optout`), so nothing can reach a real account or its secrets.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from botmemory.people.optout import HASH_KEY_ENV, HASH_KEY_SECRET_ENV

REGION = "us-east-1"
# What a developer's shell may set that would point boto3 at a real account (or the hash's
# key at a real secret): removed.
REAL_ACCOUNT_VARIABLES = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    HASH_KEY_SECRET_ENV,
)
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",  # nosec B105 # moto's dummy credentials, local only
    "AWS_DEFAULT_REGION": REGION,
    # moto serves DynamoDB Streams in-process only with account endpoints off.
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}


def fake_aws_environment(hash_key: str) -> dict[str, str | None]:
    """Each variable of the fake-AWS environment: its value, or None where it is removed."""
    removed: dict[str, str | None] = dict.fromkeys(REAL_ACCOUNT_VARIABLES)
    return removed | FAKE_CREDENTIALS | {HASH_KEY_ENV: hash_key}


def use_fake_aws(hash_key: str, environ: MutableMapping[str, str] = os.environ) -> None:
    """Put the fake-AWS environment in `environ` (this process's by default)."""
    for name, value in fake_aws_environment(hash_key).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
