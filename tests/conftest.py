from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.botocore_stubber import BotocoreStubber
from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.dynamodb.models.table import Table

from botmemory.clock import ManualClock
from botmemory.consolidation.model.contract import ConsolidationAnswer, MemoryModelError, ModelInput
from botmemory.consolidation.model.rules import RulesModel
from botmemory.runtime import build_services
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage.schema import create_table
from localrun.fakeaws import REGION, fake_aws_environment
from localrun.fastmoto import fast_dynamodb

# The fake Discord REST server, for every test that asks for `fake_discord`.
from tests.support.fake_discord import fake_discord_fixture  # noqa: F401

# An OpenAI-compatible embeddings endpoint, for every test that asks for `embedding_server`.
from tests.support.fake_embeddings import embedding_server_fixture  # noqa: F401

# A scripted chat or memory model endpoint, for every test that asks for `chat_server`.
from tests.support.fake_providers import chat_server  # noqa: F401

# A temporary PostgreSQL cluster (the keyword leg), for tests that ask for `pg_index`.
from tests.support.postgres import pg_cluster, pg_dsn, pg_index  # noqa: F401

TABLE = "MemoryTable"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and a region; never the developer's real AWS account."""
    # The key of the person hash (botmemory.people.optout): a deployed function reads it from
    # Secrets Manager; tests give it directly.
    for name, value in fake_aws_environment("test-person-hash-key-0123456789").items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    # The first answer's privacy notice (botmemory.answering.notices) is proved by its own
    # tests; the others compare answers word for word.
    monkeypatch.setenv("MEMORY_PRIVACY_NOTICE", "false")


@pytest.fixture(autouse=True)
def one_table_backup_per_transaction() -> Iterator[None]:
    """moto backs a table up before a TransactWriteItems by deep-copying it once per action:
    identical copies, all taken before the first write. `localrun.fastmoto` (the demo's and
    the bench's moto) keeps one; a failed transaction still restores it, so what a test sees
    is unchanged, only the copying (most of a consolidation test's time) is gone.
    Transactions run one at a time, as DynamoDB isolates them, so that one backup is always
    the transaction's own even when a test runs work in threads."""
    with fast_dynamodb():
        shimmed = DynamoDBBackend.transact_write_items
        lock = threading.Lock()

        def isolated(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
            with lock:
                shimmed(self, transact_items)

        DynamoDBBackend.transact_write_items = isolated  # type: ignore[method-assign]
        try:
            yield
        finally:
            DynamoDBBackend.transact_write_items = shimmed  # type: ignore[method-assign]


# botocore's service models (JSON files, read-only once parsed), parsed once for the run.
_SERVICE_MODELS: dict[Any, Any] = {}
# The one default session of this worker (see `shared_default_session`).
_WORKER_SESSION: list[boto3.Session] = []


def shared_default_session() -> boto3.Session:
    """The default session the code under test gets, one per worker process: building a
    botocore session registers its hundreds of built-in handlers (about a fifth of a typical
    test's time), and every test runs with the same fake credentials and region
    (`aws_environment`). Its loader reuses the run's parsed service models. A test that
    registers a hook on the session's events must take it off when it ends
    (`request.addfinalizer`), or it would act on later tests; hooks on a client's
    `meta.events` are the client's own copy."""
    if not _WORKER_SESSION:
        core = botocore.session.get_session()
        loader = botocore.loaders.create_loader(core.get_config_variable("data_path"))
        loader._cache = _SERVICE_MODELS  # the loader's own memo of parsed files
        core.register_component("data_loader", loader)
        _WORKER_SESSION.append(boto3.Session(botocore_session=core))
    return _WORKER_SESSION[0]


# The table as `create_table` leaves it, empty, made once per worker (see `empty_table`).
_EMPTY_TABLE: list[Table] = []


def empty_table(client: Any) -> None:
    """The project's table in this test's fresh moto backend: created (three requests, each
    describing five indexes and a stream) by the worker's first test, a deep copy of that
    empty table for every other, as moto copies a table for a backup."""
    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION]
    if _EMPTY_TABLE:
        backend.tables[TABLE] = copy.deepcopy(_EMPTY_TABLE[0])
        return
    create_table(client, TABLE)
    _EMPTY_TABLE.append(copy.deepcopy(backend.tables[TABLE]))


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        # moto has set boto3's default session aside (and restores it on exit); the code under
        # test gets the worker's shared one, whose requests this mock answers.
        boto3.DEFAULT_SESSION = shared_default_session()
        client = boto3.client("dynamodb", region_name=REGION)
        empty_table(client)
        yield client


@pytest.fixture
def s3(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Moto's S3 in process, with the test module's `BUCKET` (the keyword shards' tests)."""
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=getattr(request.module, "BUCKET", "test-bucket"))
        yield client


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def settings() -> Settings:
    return Settings(
        table_name=TABLE,
        memory_model="rules",
        bot_user_id="399999999999999999",
        privacy_notice=False,  # proved by its own tests (see aws_environment)
    )


class CountingModel:
    """Wraps a model (the rules model by default) and counts its calls."""

    def __init__(self, inner: Any | None = None) -> None:
        self.inner = inner or RulesModel()
        self.name = "counting"
        self.calls: list[ModelInput] = []
        self.recompressions: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        with self._lock:
            self.calls.append(batch)
        return self.inner.consolidate(batch)

    def recompress(self, summary: str, target_chars: int) -> str:
        with self._lock:
            self.recompressions.append((summary, target_chars))
        return str(self.inner.recompress(summary, target_chars))


class ScriptedModel:
    """Answers with whatever the test scripts: an answer, a callable of the input, or an exception."""

    def __init__(
        self, *script: ConsolidationAnswer | Exception | Callable[[ModelInput], ConsolidationAnswer]
    ) -> None:
        self.name = "scripted"
        self.script = list(script)
        self.calls: list[ModelInput] = []
        # What `recompress` answers, in turn: a text, or an exception to raise.
        self.recompressed: list[str | Exception] = []
        self.recompressions: list[tuple[str, int]] = []

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        self.calls.append(batch)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, Exception):
            raise step
        if callable(step):
            return step(batch)
        return step

    def recompress(self, summary: str, target_chars: int) -> str:
        self.recompressions.append((summary, target_chars))
        step = self.recompressed.pop(0) if self.recompressed else MemoryModelError("unscripted")
        if isinstance(step, Exception):
            raise step
        return step


@pytest.fixture
def model() -> CountingModel:
    return CountingModel()


@pytest.fixture
def services(
    dynamodb: Any, settings: Settings, clock: ManualClock, model: CountingModel
) -> MemoryServices:
    return build_services(settings, dynamodb=dynamodb, clock=clock, model=model)


@pytest.fixture
def index() -> Iterator[SqliteSearchIndex]:
    """The embedded search index, in memory, for one test."""
    search_index = SqliteSearchIndex(":memory:")
    yield search_index
    search_index.close()


@pytest.fixture
def searching(
    dynamodb: Any, settings: Settings, clock: ManualClock, index: SqliteSearchIndex
) -> MemoryServices:
    """The services with that index: consolidation writes passages, recall searches them."""
    return build_services(
        settings, dynamodb=dynamodb, clock=clock, model=CountingModel(), search_index=index
    )


@pytest.fixture
def serialized_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's backend takes no lock; serialize its request handling so a race test
    exercises the code's conditional writes, not moto's thread safety."""
    original = BotocoreStubber.__call__
    lock = threading.Lock()

    def locked(self: BotocoreStubber, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    monkeypatch.setattr(BotocoreStubber, "__call__", locked)


class RequestCounter:
    """Counts DynamoDB API calls made through a client, by operation."""

    def __init__(self, client: Any) -> None:
        self.calls: list[str] = []
        client.meta.events.register("before-call.dynamodb.*", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)

    def reset(self) -> None:
        self.calls.clear()

    def count(self, *operations: str) -> int:
        return sum(1 for c in self.calls if not operations or c in operations)


WRITE_OPERATIONS = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
READ_OPERATIONS = ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")


def scan_all(client: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": TABLE}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
