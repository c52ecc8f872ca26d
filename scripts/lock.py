"""Regenerate the locks: requirements-dev.lock and the hashed locks of what is deployed.

Resolved by pip's own resolver (`pip install --dry-run --report`) in a throwaway virtualenv,
once per interpreter given (by default python3.11, the oldest supported, and python3.13, the
Lambda runtime), because pip evaluates dependency markers against the interpreter it runs on.
A pin that only some of them need gets a `python_version` marker. The project itself is left
out: `make venv` installs it with `--no-deps --editable .` after the lock.

From the same run, with every file's sha256 from the package index (pip's `--require-hashes`):
- layers/core/requirements.txt: the layer, the runtime dependencies (boto3 included: AWS
  documents no boto3 version for the python3.13 runtime), at the dev lock's versions for
  Python 3.13;
- relay/requirements.txt: the relay image, the relay group plus boto3 and httpx (its sinks'
  clients), at the dev lock's versions for Python 3.13;
- requirements-sam.lock and requirements-scan.lock: the `sam` and `scan` groups (aws-sam-cli
  with cfn-lint; checkov, bandit, pip-audit), each resolved on its own: they pin their own
  versions of shared dependencies, so each gets its own virtualenv.

    python scripts/lock.py [--python python3.11 --python python3.13] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = ("dev", "relay")
DEFAULT_PYTHONS = ("python3.11", "python3.13")
# The Lambda runtime and the relay image's Python: the layer and the relay are pinned for it.
DEPLOYED_PYTHON = (3, 13)
# The clients of the relay's two sinks (Lambda invoke, HTTP), from the runtime dependencies.
RELAY_CLIENTS = ("boto3", "httpx")
LAYER = ROOT / "layers" / "core" / "requirements.txt"
RELAY = ROOT / "relay" / "requirements.txt"
# Tool groups of pyproject.toml, each locked on its own: {group: lock file}.
TOOL_LOCKS = {"sam": ROOT / "requirements-sam.lock", "scan": ROOT / "requirements-scan.lock"}
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def python_version(python: str) -> tuple[int, int]:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        message = (
            f"{python} does not run here ({error}); name the interpreters to resolve with: "
            "`make lock LOCK_PYTHONS=...` or --python"
        )
        raise SystemExit(message) from error
    major, minor = out.split()
    return int(major), int(minor)


@dataclass(frozen=True)
class Interpreter:
    """A throwaway virtualenv of one interpreter, with an up-to-date pip."""

    python: Path
    tmp: Path

    def report(self, *args: str) -> dict[str, str]:
        """{canonical name: version} of what `pip install ARGS` would install."""
        report = self.tmp / "report.json"
        subprocess.run(
            [
                str(self.python),
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(report),
                *args,
            ],
            check=True,
            cwd=ROOT,
        )
        installs = json.loads(report.read_text())["install"]
        return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


@contextmanager
def interpreter(python: str) -> Iterator[Interpreter]:
    with tempfile.TemporaryDirectory(prefix="lock-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
        yield Interpreter(venv / "bin" / "python", Path(tmp))


def groups(*names: str) -> list[str]:
    return [arg for group in names for arg in ("--group", group)]


def constrained(env: Interpreter, pins: dict[str, str], roots: list[str]) -> dict[str, str]:
    """What `roots` need, at the versions of `pins` (pip resolves, the pins constrain)."""
    constraints = env.tmp / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    found = env.report("--constraint", str(constraints), *roots)
    missing = sorted(set(found) - set(pins))
    if missing:
        raise SystemExit(f"{missing} are needed but not in the lock: run `make lock` again")
    return found


def index_url(env: Interpreter) -> str:
    """The package index pip is configured with (pip's own default when none is)."""
    configured = (
        os.environ.get("PIP_INDEX_URL")
        or subprocess.run(
            [str(env.python), "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    if configured:
        return configured.rstrip("/")
    default = subprocess.run(
        [
            str(env.python),
            "-c",
            "from pip._internal.models.index import PyPI; print(PyPI.simple_url)",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return default.rstrip("/")


def file_version(filename: str) -> str | None:
    """The version in a wheel's or an sdist's file name."""
    if filename.endswith(".whl"):
        return filename.split("-")[1]
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            return filename[: -len(suffix)].rsplit("-", 1)[-1]
    return None


def hashes(index: str, name: str, version: str) -> list[str]:
    """sha256 of every file of name==version on the index (PEP 691 JSON), for any platform:
    `sam build` and `docker build` download on whatever machine runs them."""
    request = urllib.request.Request(f"{index}/{name}/", headers={"Accept": SIMPLE_JSON})
    with urllib.request.urlopen(request, timeout=60) as response:  # nosec B310 # pip's own https index
        files = json.load(response)["files"]
    found = sorted(
        {
            f["hashes"]["sha256"]
            for f in files
            if "sha256" in f.get("hashes", {}) and file_version(f["filename"]) == version
        }
    )
    if not found:
        raise SystemExit(f"{name}=={version}: the index lists no file with a sha256")
    return found


def hashed_lines(index: str, lines: list[tuple[str, str, str]]) -> list[str]:
    """`name==version ; marker` lines with every --hash pip's --require-hashes checks."""
    out = []
    for name, version, where in lines:
        digests = hashes(index, name, version)
        out.append(f"{name}=={version}{where} \\")
        out.extend(
            f"    --hash=sha256:{digest}" + (" \\" if i + 1 < len(digests) else "")
            for i, digest in enumerate(digests)
        )
    return out


def marker(present: list[bool], versions: list[tuple[int, int]]) -> str:
    """The python_version marker of the versions where `present` holds; each version stands
    for itself and everything up to the next one."""
    if all(present):
        return ""
    ranges = []
    for i, here in enumerate(present):
        if not here or (i and present[i - 1]):
            continue
        end = i
        while end + 1 < len(present) and present[end + 1]:
            end += 1
        bounds = []
        if i > 0:
            bounds.append(f'python_version >= "{versions[i][0]}.{versions[i][1]}"')
        if end + 1 < len(versions):
            upper = versions[end + 1]
            bounds.append(f'python_version < "{upper[0]}.{upper[1]}"')
        ranges.append(" and ".join(bounds))
    if len(ranges) == 1:
        return f" ; {ranges[0]}"
    return " ; " + " or ".join(f"({r})" for r in ranges)


def merged(
    resolutions: list[dict[str, str]], versions: list[tuple[int, int]]
) -> list[tuple[str, str, str]]:
    """(name, version, marker) of every pin over the interpreters' resolutions."""
    lines = []
    for name in sorted(set().union(*resolutions)):
        for version in sorted({r[name] for r in resolutions if name in r}):
            present = [r.get(name) == version for r in resolutions]
            lines.append((name, version, marker(present, versions)))
    return lines


def write(path: Path, header: list[str], lines: list[str]) -> None:
    path.write_text("\n".join([*(f"# {line}" for line in header), *lines]) + "\n")
    print(
        f"{path.relative_to(ROOT)}: {sum(not line.startswith(' ') for line in lines)} pins",
        file=sys.stderr,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", help="an interpreter to resolve with")
    parser.add_argument("--output", type=Path, default=ROOT / "requirements-dev.lock")
    args = parser.parse_args()
    pythons = args.python or list(DEFAULT_PYTHONS)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = canonical(pyproject["project"]["name"])
    runtime = pyproject["project"]["dependencies"]

    by_version = sorted((python_version(python), python) for python in pythons)
    versions = [version for version, _ in by_version]
    if len(set(versions)) != len(versions):
        raise SystemExit(f"two interpreters of the same version: {pythons}")
    if DEPLOYED_PYTHON not in versions:
        raise SystemExit(
            f"the layer and the relay run Python {DEPLOYED_PYTHON}: resolve with it too"
        )
    resolutions: list[dict[str, str]] = []
    tools: dict[str, list[dict[str, str]]] = {group: [] for group in TOOL_LOCKS}
    for version, python in by_version:
        with interpreter(python) as env:
            pins = env.report("--editable", ".", *groups(*GROUPS))
            pins.pop(project, None)
            resolutions.append(pins)
            for group in TOOL_LOCKS:
                tools[group].append(env.report(*groups(group)))
            if version == DEPLOYED_PYTHON:
                index = index_url(env)
                layer = constrained(env, pins, runtime)
                relay_roots = [*pyproject["dependency-groups"]["relay"]] + [
                    r for r in runtime if canonical(re.split(r"[\[<>=!~; ]", r)[0]) in RELAY_CLIENTS
                ]
                relay = constrained(env, pins, relay_roots)

    names = ", ".join(f"{major}.{minor}" for major, minor in versions)
    write(
        args.output,
        [
            "Exact pins of the runtime, dev and relay dependency groups of pyproject.toml, for",
            f"Python {names} on Linux. Generated by `make lock` (scripts/lock.py); do not edit.",
            "`make venv` installs this file, then the project with --no-deps --editable .",
        ],
        [f"{name}=={version}{where}" for name, version, where in merged(resolutions, versions)],
    )
    deployed = f"{DEPLOYED_PYTHON[0]}.{DEPLOYED_PYTHON[1]}"
    write(
        LAYER,
        [
            "The core layer: the runtime dependencies of ../../pyproject.toml, boto3 included (AWS",
            f"documents no boto3 version for the python{deployed} runtime: docs/deploy.md), at",
            f"requirements-dev.lock's versions for Python {deployed}, every file's hash.",
            "Generated by `make lock` (scripts/lock.py); do not edit. `sam build` installs it with",
            "--require-hashes (layers/core/Makefile).",
        ],
        hashed_lines(index, [(n, v, "") for n, v in sorted(layer.items())]),
    )
    write(
        RELAY,
        [
            "The relay image: the relay group of ../pyproject.toml (discord.py) plus boto3 and httpx,",
            f"the clients of its sinks, at requirements-dev.lock's versions for Python {deployed}.",
            "Generated by `make lock` (scripts/lock.py); do not edit. The Dockerfile installs it",
            "with --require-hashes.",
        ],
        hashed_lines(index, [(n, v, "") for n, v in sorted(relay.items())]),
    )
    for group, path in TOOL_LOCKS.items():
        write(
            path,
            [
                f"The `{group}` dependency group of pyproject.toml, for Python {names} on Linux, every",
                "file's hash. Generated by `make lock` (scripts/lock.py); do not edit.",
            ],
            hashed_lines(index, merged(tools[group], versions)),
        )


if __name__ == "__main__":
    main()
