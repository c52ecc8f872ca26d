"""A temporary PostgreSQL cluster for the keyword leg off AWS (the tests, `make dev`, the eval
and the bench): initdb in a fresh folder, the server on a free port of 127.0.0.1 and a socket
in that folder, stopped and removed when done.

`initdb` refuses to run as root, so as root the cluster belongs to the `postgres` user (the
Debian package creates it) and every command runs through `runuser`. The binaries are found on
PATH or under /usr/lib/postgresql/<version>/bin (`make postgres` installs the package when
neither has them). Nothing here reaches the network.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess  # nosec B404 # initdb and pg_ctl, with fixed arguments
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_START_SECONDS = 60
# Durability is not what a throwaway cluster is for: no fsync, so tests stay fast.
_SERVER_OPTIONS = (
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
    "-c listen_addresses=127.0.0.1 -c max_connections=40"
)


class PostgresUnavailable(Exception):
    """No PostgreSQL server could be started here (and why)."""


@dataclass(frozen=True)
class Cluster:
    port: int
    directory: str

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


def binaries() -> str:
    """The folder holding initdb and pg_ctl."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in candidates:
        if os.access(os.path.join(folder, "initdb"), os.X_OK):
            return folder
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    raise PostgresUnavailable(
        "no initdb found: install PostgreSQL (`make postgres`, or apt-get install postgresql)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_owner(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    if shutil.which("runuser") is None:
        raise PostgresUnavailable("running as root without runuser: cannot run initdb")
    return ["runuser", "-u", "postgres", "--", *command]


def _run(command: list[str]) -> None:
    done = subprocess.run(  # nosec B603 # fixed binaries, arguments of our own
        _as_owner(command), capture_output=True, text=True, timeout=_START_SECONDS, check=False
    )
    if done.returncode != 0:
        raise PostgresUnavailable(
            f"{os.path.basename(command[0])} failed ({done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-600:]}"
        )


@contextmanager
def temporary_cluster() -> Iterator[Cluster]:
    """A running cluster (user `postgres`, trust authentication on 127.0.0.1), stopped and
    deleted on exit."""
    folder = binaries()
    directory = tempfile.mkdtemp(prefix="botmemory-pg-")
    data = os.path.join(directory, "data")
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    port = _free_port()
    started = False
    try:
        _run([f"{folder}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
              "--no-sync", "--locale=C"])  # fmt: skip
        options = f"{_SERVER_OPTIONS} -p {port} -k {directory}"
        _run([f"{folder}/pg_ctl", "-D", data, "-l", os.path.join(directory, "log"), "-w",
              "-t", str(_START_SECONDS), "-o", options, "start"])  # fmt: skip
        started = True
        yield Cluster(port, directory)
    finally:
        if started:
            with contextlib.suppress(PostgresUnavailable):  # removed below all the same
                _run([f"{folder}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"])
        shutil.rmtree(directory, ignore_errors=True)


def create_database(cluster: Cluster, name: str) -> str:
    """A fresh database in the cluster; its DSN."""
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')  # nosec B608 # our own names
        connection.execute(f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8'")  # nosec B608 # our own names
    return cluster.dsn(name)
