"""How the keyword leg's statements (botmemory.search.postgres_sql) reach PostgreSQL: the RDS
Data API on AWS (HTTPS, no VPC, no connection to keep), or a local driver (psycopg, the dev
group only: tests, `make dev`, the eval and the bench). Both run the same Statement; each
answers rows of plain values, and maps its failures to the same two errors.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from botmemory.search.postgres_sql import Param, Statement, pyformat

log = logging.getLogger(__name__)

Value = str | int | float | bool | None
Row = tuple[Value, ...]

# Data API error codes that mean "not now" (the cluster resuming from a pause, throttled,
# unavailable, too slow): recall answers from vectors, writes are kept for later.
_UNAVAILABLE = frozenset(
    {
        "DatabaseResumingException",
        "DatabaseUnavailableException",
        "DatabaseNotFoundException",
        "StatementTimeoutException",
        "ServiceUnavailableError",
        "ThrottlingException",
        "TooManyRequestsException",
        "InternalServerErrorException",
    }
)
# How the Data API words PostgreSQL's undefined_table and undefined_column (42P01, 42703):
# a schema older than the code.
_SCHEMA_WORDS = ("does not exist",)


class KeywordIndexUnavailable(Exception):
    """The database did not answer now (paused, throttled, down): try again later."""


class SchemaMissing(Exception):
    """The database lacks a table or column the statement needs (migrations not yet run)."""


class Transport(Protocol):
    def execute(self, statement: Statement) -> list[Row]: ...


# -- the RDS Data API -------------------------------------------------------------------------------


def _parameter(name: str, value: Param) -> dict[str, Any]:
    if value is None:
        return {"name": name, "value": {"isNull": True}}
    if isinstance(value, bool):  # before int: a bool is an int
        return {"name": name, "value": {"booleanValue": value}}
    if isinstance(value, int):
        return {"name": name, "value": {"longValue": value}}
    return {"name": name, "value": {"stringValue": value}}


def _field(field: dict[str, Any]) -> Value:
    if field.get("isNull"):
        return None
    for kind in ("stringValue", "longValue", "doubleValue", "booleanValue"):
        if kind in field:
            value: Value = field[kind]
            return value
    raise ValueError(f"Data API field of an unread type: {sorted(field)}")


def _error_code(error: Exception) -> str | None:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


class DataApiTransport:
    """ExecuteStatement on an Aurora cluster with the Data API enabled, as the secret's user.
    One statement, one call; every value a typed parameter."""

    def __init__(
        self,
        resource_arn: str,
        secret_arn: str,
        database: str,
        client: Any = None,
        region_name: str | None = None,
    ) -> None:
        self._resource_arn = resource_arn
        self._secret_arn = secret_arn
        self._database = database
        self._client = client
        self._region_name = region_name
        self.calls = 0  # Data API calls made (bench and tests count them)

    def _rds_data(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            # No retries of its own: a paused cluster answers DatabaseResumingException, and
            # recall's budget is better spent on the vector leg than on waiting.
            self._client = boto3.client(
                "rds-data",
                region_name=self._region_name,
                config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=30),
            )
        return self._client

    def execute(self, statement: Statement) -> list[Row]:
        request: dict[str, Any] = {
            "resourceArn": self._resource_arn,
            "secretArn": self._secret_arn,
            "database": self._database,
            "sql": statement.sql,
        }
        if statement.params:
            request["parameters"] = [_parameter(n, v) for n, v in statement.params.items()]
        self.calls += 1
        try:
            response = self._rds_data().execute_statement(**request)
        except Exception as error:
            code = _error_code(error)
            if code in _UNAVAILABLE:
                raise KeywordIndexUnavailable(f"{code}: {error}"[:300]) from error
            message = str(error)
            if code == "BadRequestException" and any(w in message for w in _SCHEMA_WORDS):
                raise SchemaMissing(message[:300]) from error
            if code is None and not hasattr(error, "response"):  # connection, timeout
                raise KeywordIndexUnavailable(repr(error)[:300]) from error
            raise
        return [tuple(_field(f) for f in record) for record in response.get("records", [])]


# -- a local PostgreSQL (dev group) ---------------------------------------------------------------


class LocalTransport:
    """One psycopg connection (autocommit: each statement its own transaction, as each Data
    API call is), shared by threads behind a lock, opened again after a failure."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._lock = threading.Lock()
        self._connection: Any = None
        self.calls = 0

    def _connect(self) -> Any:
        import psycopg  # the dev group only: never in the Lambda layer

        if self._connection is None or self._connection.closed:
            self._connection = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
        return self._connection

    def execute(self, statement: Statement) -> list[Row]:
        import psycopg

        sql = pyformat(statement.sql) if statement.params else statement.sql
        with self._lock:
            self.calls += 1
            try:
                with self._connect().cursor() as cursor:
                    cursor.execute(sql, statement.params or None)
                    rows = cursor.fetchall() if cursor.description is not None else []
            except psycopg.errors.UndefinedTable as error:
                raise SchemaMissing(str(error)[:300]) from error
            except psycopg.errors.UndefinedColumn as error:
                raise SchemaMissing(str(error)[:300]) from error
            except psycopg.OperationalError as error:
                self.close_locked()
                raise KeywordIndexUnavailable(repr(error)[:300]) from error
        return [tuple(_plain(v) for v in row) for row in rows]

    def close_locked(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None

    def close(self) -> None:
        with self._lock:
            self.close_locked()


def _plain(value: Any) -> Value:
    """A driver's value as the Data API would answer it (numbers, text, NULL)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
