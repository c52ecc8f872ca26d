"""A batch DynamoDB leaves partly unprocessed is retried with growing, jittered waits, until
everything arrived or the attempts run out; then an error, never a silent loss.

The table is moto's; a wrapper around its client plays a throttled DynamoDB by processing
only the first request of a batch for its first few calls. Waits are recorded, not slept.
"""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.records import Named
from botmemory.storage import keys
from botmemory.storage.items import from_item
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.table import UNPROCESSED_BACKOFF, Backoff, UnprocessedItemsError
from tests.conftest import TABLE

PEOPLE = 30  # more than one BatchWriteItem (25)


class Throttled:
    """The client, except that its first `times` batch calls process one request only
    (`times=None`: every call) and hand the rest back as unprocessed."""

    def __init__(self, client: Any, times: int | None) -> None:
        self._client = client
        self._times = times
        self.write_calls: list[int] = []  # requests sent, per call
        self.get_calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _throttle(self) -> bool:
        if self._times is None:
            return True
        self._times -= 1
        return self._times >= 0

    def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        requests = RequestItems[TABLE]
        self.write_calls.append(len(requests))
        if not self._throttle():
            return dict(self._client.batch_write_item(RequestItems=RequestItems))
        self._client.batch_write_item(RequestItems={TABLE: requests[:1]})
        return {"UnprocessedItems": {TABLE: requests[1:]} if requests[1:] else {}}

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        wanted = RequestItems[TABLE]
        self.get_calls.append(len(wanted["Keys"]))
        if not self._throttle():
            return dict(self._client.batch_get_item(RequestItems=RequestItems))
        first, rest = wanted["Keys"][:1], wanted["Keys"][1:]
        answer = self._client.batch_get_item(RequestItems={TABLE: {**wanted, "Keys": first}})
        unprocessed = {TABLE: {**wanted, "Keys": rest}} if rest else {}
        return {"Responses": answer["Responses"], "UnprocessedKeys": unprocessed}


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def pointers(count: int) -> list[Named]:
    return [
        Named(scope="g1", user_id=f"{100 + n}", channel_id="c1", target_sk=f"OBS#{n:04d}")
        for n in range(count)
    ]


def stored_pointers(dynamodb: Any) -> int:
    people = {keys.user_pk(n.scope, n.user_id) for n in pointers(PEOPLE)}
    items = [from_item(i) for i in dynamodb.scan(TableName=TABLE)["Items"]]
    return sum(1 for i in items if i["pk"] in people)


def test_a_throttled_write_backs_off_longer_each_time_and_everything_arrives(
    dynamodb: Any,
) -> None:
    client = Throttled(dynamodb, times=3)
    sleeps = Sleeps()
    repository = MemoryRepository(client, TABLE, sleep=sleeps)

    assert repository.put_named(pointers(PEOPLE)) == PEOPLE

    assert stored_pointers(dynamodb) == PEOPLE
    # First batch of 25: three calls process one each, the fourth the remaining 22.
    assert client.write_calls[:4] == [25, 24, 23, 22]
    assert len(sleeps) == 3
    assert sleeps == sorted(sleeps) and sleeps[0] < sleeps[-1]
    for retry, wait in enumerate(sleeps):
        ceiling = min(UNPROCESSED_BACKOFF.cap_seconds, UNPROCESSED_BACKOFF.first_seconds * 2**retry)
        assert ceiling / 2 <= wait <= ceiling


def test_a_throttled_read_backs_off_and_finds_every_item(dynamodb: Any) -> None:
    seed = MemoryRepository(dynamodb, TABLE)
    hashes = [f"hash-{n:03d}" for n in range(5)]
    for h in hashes:
        seed.add_opt_out(h, 1_000)
    client = Throttled(dynamodb, times=2)
    sleeps = Sleeps()
    repository = MemoryRepository(client, TABLE, sleep=sleeps)

    opted, erased = repository.marks(hashes, [], 1_000)

    assert opted == set(hashes) and erased == set()
    assert client.get_calls == [5, 4, 3]
    assert len(sleeps) == 2 and sleeps[0] <= sleeps[1]


def test_a_batch_never_processed_ends_in_an_error_not_silence(dynamodb: Any) -> None:
    client = Throttled(dynamodb, times=None)
    sleeps = Sleeps()
    backoff = Backoff(first_seconds=0.05, cap_seconds=0.2, max_attempts=5)
    repository = MemoryRepository(client, TABLE, sleep=sleeps, backoff=backoff)

    with pytest.raises(UnprocessedItemsError) as caught:
        repository.put_named(pointers(10))

    assert caught.value.operation == "BatchWriteItem"
    assert caught.value.attempts == 5 and caught.value.left == 5  # one processed per attempt
    assert f"BatchWriteItem on table {TABLE!r}: 5 requests still unprocessed" in str(caught.value)
    assert len(client.write_calls) == 5 and len(sleeps) == 4
    assert max(sleeps) <= 0.2  # capped


def test_an_unprocessed_read_ends_in_an_error_too(dynamodb: Any) -> None:
    client = Throttled(dynamodb, times=None)
    repository = MemoryRepository(
        client,
        TABLE,
        sleep=Sleeps(),
        backoff=Backoff(max_attempts=2),
    )

    with pytest.raises(UnprocessedItemsError, match="BatchGetItem"):
        repository.marks(["a", "b", "c"], [], 1_000)


def test_a_batch_processed_at_once_never_waits(dynamodb: Any) -> None:
    sleeps = Sleeps()
    repository = MemoryRepository(dynamodb, TABLE, sleep=sleeps)

    assert repository.put_named(pointers(PEOPLE)) == PEOPLE

    assert stored_pointers(dynamodb) == PEOPLE and sleeps == []


@pytest.mark.parametrize("retry", range(12))
def test_every_wait_is_between_half_and_all_of_its_capped_ceiling(retry: int) -> None:
    backoff = Backoff(first_seconds=0.05, cap_seconds=1.0, max_attempts=8)
    ceiling = min(1.0, 0.05 * 2**retry)

    waits = [backoff.wait(retry) for _ in range(50)]

    assert all(ceiling / 2 <= w <= ceiling for w in waits)
