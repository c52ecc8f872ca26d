"""localrun.fastmoto's update expressions checked once: an update moto applies is applied
the same, and one it refuses (clause counts, overlapping or repeated paths) is refused with
moto's own error."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser  # type: ignore[attr-defined]

import localrun.fastmoto as fastmoto
from tests.localrun.test_fastmoto_items import hash_key_table

NAMES = {"#a": "a", "#m": "m"}
VALUES = {":one": {"N": "1"}, ":s": {"S": "x"}, ":m": {"M": {"k": {"S": "v"}}}}
UPDATES = [
    "SET a = :s, b = :one, c = if_not_exists(c, :one) ADD n :one REMOVE gone, stale",
    "SET #m = :m, z = :s REMOVE y ADD tally :one",
    "SET a = :s SET b = :s",  # two SET clauses
    "ADD n :one ADD p :one",  # two ADD clauses
    "REMOVE x REMOVE y",  # two REMOVE clauses
    "SET m = :m, m.k = :s",  # overlapping paths
    "SET #a = :s, b = :s REMOVE #a",  # one path twice, through a name
    "SET a = :s REMOVE a",  # one path twice
]


def outcome(update: str) -> Any:
    """What the update leaves on a fresh item, or moto's error for it."""
    with mock_aws():
        client = hash_key_table("Updated")
        key = {"pk": {"S": "p"}}
        client.put_item(TableName="Updated", Item={**key, "gone": {"S": "g"}, "y": {"N": "2"}})
        names = {n: v for n, v in NAMES.items() if n in update}
        values = {n: v for n, v in VALUES.items() if n in update}
        try:
            client.update_item(
                TableName="Updated",
                Key=key,
                UpdateExpression=update,
                **({"ExpressionAttributeNames": names} if names else {}),
                **({"ExpressionAttributeValues": values} if values else {}),
            )
        except ClientError as error:
            return error.response["Error"]
        return client.get_item(TableName="Updated", Key=key)["Item"]


@pytest.mark.parametrize("update", UPDATES)
def test_an_update_is_applied_or_refused_as_moto_does(
    update: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = outcome(update)  # the tests run under fast_dynamodb (tests/conftest.py)
    with monkeypatch.context() as moto_s:
        for check in fastmoto.WHOLE_EXPRESSION_CHECKS:
            moto_s.setattr(check, "traverse", DepthFirstTraverser.traverse)
        theirs = outcome(update)

    assert ours == theirs
    assert ("Code" in ours) == (UPDATES.index(update) >= 2)


def test_the_checks_are_moto_s_own_again_after_nested_use() -> None:
    with fastmoto.fast_dynamodb(), fastmoto.fast_dynamodb():
        pass
    for check in fastmoto.WHOLE_EXPRESSION_CHECKS:
        assert check.traverse is fastmoto._at_the_root  # the conftest's own use still holds
    with fastmoto.update_expressions_checked_once():
        pass
    assert all(c.traverse is fastmoto._at_the_root for c in fastmoto.WHOLE_EXPRESSION_CHECKS)
