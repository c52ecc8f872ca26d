"""requirements-dev.lock, which `make venv` installs, must not drift from pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements-dev.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def lock_pythons() -> list[str]:
    """The versions of the interpreters `make lock` resolves with: the lock holds for each."""
    line = re.search(r"^LOCK_PYTHONS := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert line, "the Makefile sets no LOCK_PYTHONS"
    return re.findall(r"python(\d+\.\d+)", line.group(1))


PYTHON_VERSIONS = lock_pythons()


def declared() -> list[str]:
    """Every requirement of the runtime, dev and relay groups."""
    groups = PYPROJECT["dependency-groups"]
    return [
        *PYPROJECT["project"]["dependencies"],
        *(r for group in ("dev", "relay") for r in groups[group] if isinstance(r, str)),
    ]


def pins() -> list[tuple[str, Version, Marker | None]]:
    found = []
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", line
        assert not requirement.extras, line
        found.append(
            (canonicalize_name(requirement.name), Version(specifier.version), requirement.marker)
        )
    return found


def pinned_for(name: str, python: str) -> list[Version]:
    environment = {"python_version": python, "python_full_version": f"{python}.0"}
    return [
        version
        for pinned, version, marker in pins()
        if pinned == name and (marker is None or marker.evaluate(environment))
    ]


def test_the_lock_is_resolved_for_the_oldest_python_and_the_lambda_runtime() -> None:
    assert {"3.11", "3.13"} <= set(PYTHON_VERSIONS)
    header = LOCK.read_text().split("\n", 2)[1]
    assert f"Python {', '.join(PYTHON_VERSIONS)} " in header, "run `make lock`"


@pytest.mark.parametrize("python", PYTHON_VERSIONS)
@pytest.mark.parametrize("dependency", declared())
def test_every_dependency_is_pinned_within_its_specifier(dependency: str, python: str) -> None:
    requirement = Requirement(dependency)
    environment = {"python_version": python, "python_full_version": f"{python}.0"}
    if requirement.marker is not None and not requirement.marker.evaluate(environment):
        return
    versions = pinned_for(canonicalize_name(requirement.name), python)
    assert len(versions) == 1, (
        f"{requirement.name}: pinned {versions} for Python {python}; run `make lock`"
    )
    assert requirement.specifier.contains(versions[0], prereleases=True), (
        f"{requirement.name}=={versions[0]} is outside {requirement.specifier}; run `make lock`"
    )


def test_every_pin_is_unique_per_python_version_and_the_project_is_not_pinned() -> None:
    names = {name for name, _, _ in pins()}
    assert canonicalize_name(PYPROJECT["project"]["name"]) not in names
    for python in PYTHON_VERSIONS:
        for name in names:
            assert len(pinned_for(name, python)) <= 1, (name, python)
