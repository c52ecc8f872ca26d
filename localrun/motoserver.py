"""DynamoDB on this machine: moto's server (with localrun.fastmoto's transaction
backups) as a child process, on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import socket
import subprocess  # nosec B404 # starts the local moto server with fixed arguments
import sys
import time
import urllib.error
import urllib.request


class LocalRunError(RuntimeError):
    """Something the local run cannot go on without; the message says what and what to do."""


LOOPBACK = "127.0.0.1"
# Listening here means every interface; this process still talks to it over loopback.
ANY_ADDRESS = "0.0.0.0"  # nosec B104 # only when asked with --host (make dev defaults to 127.0.0.1)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server could listen there now. As servers do (moto's included), the probe
    ignores connections of a stopped server still closing (TIME_WAIT), so a quick restart
    is not refused; a live listener still takes the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class MotoServer:
    """Starts moto's server, waits until it answers, and always stops it."""

    def __init__(self, port: int = 0, startup_seconds: float = 20.0, host: str = LOOPBACK) -> None:
        if port and not port_is_free(port, host):
            raise LocalRunError(
                f"port {port} on {host} is already taken; choose another with --port "
                "(0: any free port)"
            )
        self.host = host
        self.port = port or free_port()
        self._startup_seconds = startup_seconds
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Where this process reaches the server."""
        return f"http://{LOOPBACK if self.host == ANY_ADDRESS else self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid if self._process else 0

    def start(self) -> MotoServer:
        self._process = subprocess.Popen(  # nosec B603 # fixed argv: this interpreter, a module of ours, host and port
            [sys.executable, "-m", "localrun.fastmoto", "-H", self.host, "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + self._startup_seconds
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LocalRunError(
                    f"the local DynamoDB (moto server) exited at start with code "
                    f"{self._process.returncode}; is port {self.port} free?"
                )
            if self.answering():
                return self
            time.sleep(0.1)
        self.stop()
        raise LocalRunError(
            f"the local DynamoDB did not answer on {self.url} within {self._startup_seconds:.0f} s"
        )

    def answering(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1):  # nosec B310 # our own http:// URL on this machine
                return True
        except urllib.error.HTTPError:
            return True  # it answered, even if not with a page
        except OSError:
            return False

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def check(self) -> None:
        """Raise a clear error when the server has died under us."""
        if not self.alive():
            code = self._process.returncode if self._process else None
            raise LocalRunError(
                f"the local DynamoDB (moto server, port {self.port}) stopped (exit code {code})"
            )

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
