"""`make build` and `make test` find Python 3.13 (the Lambda runtime's) wherever it is
installed, .venv runs on it, and a machine without it is told what to install.

scripts/find_python.sh is run with a PATH and a pyenv root made for each case (links to this
machine's own 3.13); the Makefile in a copy of the project's files that decide, with
`make -n` (what it would run) where it would otherwise install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIND = ROOT / "scripts" / "find_python.sh"
THIS_IS_313 = sys.version_info[:2] == (3, 13)
needs_313 = pytest.mark.skipif(not THIS_IS_313, reason="links to this machine's Python 3.13")


def find(want: str, path: str, home: Path, pyenv_root: Path | None = None) -> str:
    environment = {"PATH": path, "HOME": str(home)}
    if pyenv_root is not None:
        environment["PYENV_ROOT"] = str(pyenv_root)
    result = subprocess.run(
        ["/bin/sh", str(FIND), want], env=environment, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def tool_path(tmp_path: Path) -> str:
    """A PATH with the shell's tools (sort, ls) and no Python at all."""
    bin_ = tmp_path / "tools"
    bin_.mkdir()
    for tool in ("ls", "sort", "sh"):
        found = shutil.which(tool)
        assert found, tool
        (bin_ / tool).symlink_to(found)
    return str(bin_)


def a_python(folder: Path, name: str = "python3.13") -> Path:
    """`name` in `folder`, running this interpreter (3.13)."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / name
    link.symlink_to(sys.executable)
    return link


def a_failing_shim(folder: Path) -> Path:
    """What pyenv puts on PATH: python3.13 that fails while no 3.13 is selected."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "python3.13"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    return shim


@needs_313
def test_python313_on_path_is_taken_first(tmp_path: Path) -> None:
    on_path = a_python(tmp_path / "bin")
    a_python(tmp_path / "pyenv" / "versions" / "3.13.9" / "bin")

    found = find("3.13", f"{tmp_path / 'bin'}:{tool_path(tmp_path)}", tmp_path, tmp_path / "pyenv")

    assert found == str(on_path)


@needs_313
def test_a_pyenv_install_is_found_behind_a_shim_that_fails(tmp_path: Path) -> None:
    """This machine's case: pyenv's shim is on PATH, 3.13 is installed, none is selected."""
    a_failing_shim(tmp_path / "shims")
    installed = a_python(tmp_path / "pyenv" / "versions" / "3.13.0" / "bin")
    path = f"{tmp_path / 'shims'}:{tool_path(tmp_path)}"

    assert find("3.13", path, tmp_path, tmp_path / "pyenv") == str(installed)


@needs_313
def test_the_newest_patch_release_wins_and_home_pyenv_counts(tmp_path: Path) -> None:
    versions = tmp_path / ".pyenv" / "versions"
    for version in ("3.13.2", "3.13.10", "3.13.9"):
        a_python(versions / version / "bin")

    found = find("3.13", tool_path(tmp_path), home=tmp_path)

    assert found == str(versions / "3.13.10" / "bin" / "python3.13")


@needs_313
def test_an_install_of_another_version_is_not_taken(tmp_path: Path) -> None:
    a_python(tmp_path / "pyenv" / "versions" / "3.12.1" / "bin", "python3.12")
    a_python(tmp_path / "pyenv" / "versions" / "3.14.0" / "bin", "python3.13")  # mislabelled

    assert find("3.13", tool_path(tmp_path), tmp_path, tmp_path / "pyenv") == ""


def test_no_python313_anywhere_finds_nothing(tmp_path: Path) -> None:
    a_failing_shim(tmp_path / "shims")
    path = f"{tmp_path / 'shims'}:{tool_path(tmp_path)}"

    assert find("3.13", path, tmp_path, tmp_path / "no-pyenv") == ""


# --- the Makefile -----------------------------------------------------------------------


def project_copy(tmp_path: Path) -> Path:
    """The files that decide which Python make uses, and an empty lock."""
    copy = tmp_path / "project"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", copy)
    shutil.copy(FIND, copy / "scripts")
    for name in ("pyproject.toml", "requirements-dev.lock"):
        (copy / name).write_text("")
    return copy


def make(copy: Path, *args: str, path: str) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": path, "HOME": str(copy), "PYENV_ROOT": str(copy / "no-pyenv")}
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=copy,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def system_path(tmp_path: Path) -> str:
    """The system's tools, and a python3 of 3.11 or newer to fall back on, but no 3.13."""
    bin_ = tmp_path / "system"
    bin_.mkdir()
    for tool in ("make", "sh", "bash", "ls", "sort", "test", "cat", "rm", "touch", "find"):
        found = shutil.which(tool)
        if found:
            (bin_ / tool).symlink_to(found)
    a_python(bin_, "python3")
    return str(bin_)


@pytest.mark.parametrize("target", ["test", "build"])
def test_make_without_python313_fails_naming_what_to_install(tmp_path: Path, target: str) -> None:
    copy = project_copy(tmp_path)

    result = make(copy, target, path=system_path(tmp_path))  # stops at its first prerequisite

    assert result.returncode != 0
    assert "no Python 3.13 found" in result.stderr
    assert "pyenv install 3.13" in result.stderr and "uv python install 3.13" in result.stderr


@needs_313
def test_a_venv_of_another_python_is_made_again_with_313(tmp_path: Path) -> None:
    copy = project_copy(tmp_path)
    a_python(copy / "no-pyenv" / "versions" / "3.13.0" / "bin")
    old = copy / ".venv" / "bin" / "python"
    old.parent.mkdir(parents=True)
    old.write_text("#!/bin/sh\necho 3.11\n")  # what a 3.11 venv's python prints here
    old.chmod(0o755)
    (copy / ".venv" / ".installed").write_text("python 3.11.7\n")

    result = make(copy, "-n", "venv", path=system_path(tmp_path))

    assert result.returncode == 0, result.stderr
    assert ".venv runs Python 3.11: making it again with" in result.stdout
    assert "rm -rf .venv" in result.stdout
    assert "versions/3.13.0/bin/python3.13 -m venv .venv" in result.stdout


@needs_313
def test_a_venv_of_313_is_kept(tmp_path: Path) -> None:
    copy = project_copy(tmp_path)
    a_python(copy / "no-pyenv" / "versions" / "3.13.0" / "bin")
    a_python(copy / ".venv" / "bin", "python")
    (copy / ".venv" / ".installed").write_text("python 3.13.0\n")
    os.utime(copy / ".venv" / ".installed", (2**31 - 1, 2**31 - 1))  # newer than its sources

    result = make(copy, "-n", "venv", path=system_path(tmp_path))

    assert result.returncode == 0, result.stderr
    assert "rm -rf" not in result.stdout and "-m venv" not in result.stdout
