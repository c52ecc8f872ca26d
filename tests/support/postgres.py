"""A real PostgreSQL for the keyword leg's tests: one temporary cluster per test process
(localrun.postgres), a fresh database per test. No PostgreSQL is a failure, never a skip:
`make test` installs it (`make postgres`) where it is missing."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from botmemory.clock import ManualClock
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_transport import LocalTransport
from localrun.postgres import Cluster, PostgresUnavailable, create_database, temporary_cluster

_numbers = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    try:
        with temporary_cluster() as cluster:
            yield cluster
    except PostgresUnavailable as error:
        pytest.fail(f"PostgreSQL could not start ({error}); run `make postgres`", pytrace=False)


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    return create_database(pg_cluster, f"t{os.getpid()}_{next(_numbers)}")


@pytest.fixture
def pg_index(pg_dsn: str) -> Iterator[PostgresKeywordIndex]:
    transport = LocalTransport(pg_dsn)
    index = PostgresKeywordIndex(transport, clock=ManualClock(1_767_225_600_000))
    index.migrate()
    yield index
    transport.close()
