"""What is deployed is what was tested: the layer, the relay image and the tool virtualenvs
install exact, hashed pins from `make lock`, and the relay's base image is pinned by digest.
The audit (scripts/audit.py) fails when it cannot audit."""

from __future__ import annotations

import datetime
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from scripts import audit

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LAYER = ROOT / "layers" / "core" / "requirements.txt"
RELAY = ROOT / "relay" / "requirements.txt"
DEV_LOCK = ROOT / "requirements-dev.lock"
TOOL_LOCKS = {"sam": ROOT / "requirements-sam.lock", "scan": ROOT / "requirements-scan.lock"}
DEPLOYED = {"python_version": "3.13", "python_full_version": "3.13.0", "extra": ""}


def hashed_pins(path: Path) -> list[tuple[Requirement, list[str]]]:
    """Each pin of a hashed requirements file with its --hash values."""
    text = path.read_text().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip() if line.lstrip().startswith("#") else line.strip()
        if not line:
            continue
        spec, *hashes = re.split(r"\s+--hash=", line)
        found.append((Requirement(spec.strip()), [h.strip() for h in hashes]))
    return found


def versions(path: Path, environment: dict[str, str]) -> dict[str, Version]:
    pinned = {}
    for requirement, _ in hashed_pins(path):
        if requirement.marker is None or requirement.marker.evaluate(environment):
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", requirement
            name = canonicalize_name(requirement.name)
            assert name not in pinned, f"{path.name}: {name} pinned twice for {environment}"
            pinned[name] = Version(specifier.version)
    return pinned


def runtime() -> list[Requirement]:
    return [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]


def required_by(name: str) -> list[Requirement]:
    """What an installed distribution requires for the deployed Python, extras aside (none
    known for a pin only Python 3.13 installs, when this venv is 3.11: audioop-lts)."""
    from importlib import metadata

    try:
        distribution = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return []
    return [
        requirement
        for requirement in map(Requirement, distribution.requires or [])
        if requirement.marker is None or requirement.marker.evaluate(DEPLOYED)
    ]


def assert_is_closed_subset_of_the_lock(path: Path, roots: list[Requirement]) -> None:
    pinned = versions(path, DEPLOYED)
    lock = versions(DEV_LOCK, DEPLOYED)
    for name, version in pinned.items():
        assert lock.get(name) == version, (
            f"{path.name} pins {name}=={version}, the lock {lock.get(name)}: run `make lock`"
        )
    for root in roots:
        name = canonicalize_name(root.name)
        assert name in pinned, f"{root} is missing from {path.name}: run `make lock`"
        assert root.specifier.contains(pinned[name], prereleases=True), (root, pinned[name])
    for name in pinned:
        for requirement in required_by(name):
            dependency = canonicalize_name(requirement.name)
            assert dependency in pinned, f"{name} requires {requirement}, missing from {path.name}"


@pytest.mark.parametrize("path", [LAYER, RELAY, *TOOL_LOCKS.values()], ids=lambda p: p.name)
def test_every_pin_is_exact_and_hashed(path: Path) -> None:
    pins = hashed_pins(path)
    assert pins
    for requirement, hashes in pins:
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", requirement
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), requirement


def test_the_layer_is_the_runtime_dependencies_at_the_locks_versions() -> None:
    """boto3 included: AWS documents no boto3 version for the python3.13 runtime, so the
    layer ships the one the suite runs with."""
    assert_is_closed_subset_of_the_lock(LAYER, runtime())
    assert {"boto3", "botocore"} <= set(versions(LAYER, DEPLOYED))


def test_the_relay_image_is_the_relay_group_and_its_sinks_clients_at_the_locks_versions() -> None:
    clients = [r for r in runtime() if canonicalize_name(r.name) in {"boto3", "httpx"}]
    relay = [Requirement(r) for r in PYPROJECT["dependency-groups"]["relay"]]
    assert_is_closed_subset_of_the_lock(RELAY, relay + clients)


def test_a_layer_pin_that_drifts_from_the_lock_fails(tmp_path: Path) -> None:
    drifted = tmp_path / "requirements.txt"
    drifted.write_text(
        re.sub(r"^pydantic==[^ ]+", "pydantic==2.7.0", LAYER.read_text(), flags=re.M)
    )
    roots = runtime()
    with pytest.raises(AssertionError, match="run `make lock`"):
        assert_is_closed_subset_of_the_lock(drifted, roots)


def test_a_layer_missing_a_runtime_dependency_fails(tmp_path: Path) -> None:
    text = LAYER.read_text()
    missing = tmp_path / "requirements.txt"
    missing.write_text(re.sub(r"^pynacl==.*?(?=^\S)", "", text, flags=re.M | re.S))
    roots = runtime()
    with pytest.raises(AssertionError, match="pynacl"):
        assert_is_closed_subset_of_the_lock(missing, roots)


def lock_pythons() -> list[str]:
    line = re.search(r"^LOCK_PYTHONS := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert line
    return re.findall(r"python(\d+\.\d+)", line.group(1))


@pytest.mark.parametrize("python", lock_pythons())
@pytest.mark.parametrize("group", sorted(TOOL_LOCKS))
def test_each_tool_lock_pins_its_group_within_pyproject(group: str, python: str) -> None:
    environment = {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    pinned = versions(TOOL_LOCKS[group], environment)
    for declared in map(Requirement, PYPROJECT["dependency-groups"][group]):
        name = canonicalize_name(declared.name)
        assert name in pinned, f"{declared} is not in {TOOL_LOCKS[group].name}: run `make lock`"
        assert declared.specifier.contains(pinned[name], prereleases=True), (declared, pinned[name])


def test_sam_cli_and_cfn_lint_are_pinned_for_the_sam_virtualenv() -> None:
    for python in lock_pythons():
        environment = {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
        pinned = versions(TOOL_LOCKS["sam"], environment)
        assert {"aws-sam-cli", "aws-sam-translator", "cfn-lint"} <= set(pinned)


def makefile_recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no recipe for {target}"
    return match.group(1)


@pytest.mark.parametrize(
    ("target", "lock"),
    [("$(SAM_VENV)/.installed", "$(SAM_LOCK)"), ("$(SCAN_VENV)/.installed", "$(SCAN_LOCK)")],
)
def test_the_tool_virtualenvs_install_their_hashed_locks(target: str, lock: str) -> None:
    recipe = makefile_recipe(target)
    installs = [
        line
        for line in recipe.splitlines()
        if "pip install" in line and "--upgrade pip" not in line
    ]
    assert installs and all(f"--require-hashes --requirement {lock}" in line for line in installs)


def test_make_test_scans_and_audits() -> None:
    test = re.search(r"^test: (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert test and {"scan", "audit"} <= set(test.group(1).split())


def test_the_relay_image_is_built_from_a_digest_with_hashed_requirements() -> None:
    dockerfile = (ROOT / "relay" / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
    assert re.fullmatch(r"python:3\.13-slim@sha256:[0-9a-f]{64}", base), base
    installs = re.findall(r"^RUN pip install .*$", dockerfile, re.M)
    assert installs == ["RUN pip install --require-hashes --requirement requirements.txt"]


def test_the_layer_build_installs_with_require_hashes_for_the_lambda_runtime() -> None:
    from localrun.samtemplate import Template
    from tests.support.layer import layer_build

    source = (ROOT / "layers" / "core" / "layer_build.py").read_text()
    assert '"--require-hashes"' in source and layer_build.PYTHON == ("--python-version", "3.13")
    # By default for the architecture the template deploys (the twin is asked for by name).
    template = Template.load()
    assert template.body["Globals"]["Function"]["Architectures"] == [
        layer_build.DEPLOYED_ARCHITECTURE
    ]
    assert "manylinux2014_aarch64" in layer_build.platform(layer_build.DEPLOYED_ARCHITECTURE)
    assert "manylinux_2_28_x86_64" in layer_build.platform("x86_64")
    assert "layer_build.py" in (ROOT / "layers" / "core" / "Makefile").read_text()


# --- the audit ------------------------------------------------------------------------


def snapshot(advisories: list[dict[str, Any]], packages: list[str]) -> dict[str, Any]:
    return {"packages": packages, "advisories": advisories}


def advisory(name: str, events: list[dict[str, str]], listed: list[str] = []) -> dict[str, Any]:  # noqa: B006
    return {
        "id": "PYSEC-0000-1",
        "summary": "a test advisory",
        "affected": [
            {
                "package": {"name": name},
                "ranges": [{"type": "ECOSYSTEM", "events": events}],
                "versions": listed,
            }
        ],
    }


def test_the_offline_audit_finds_a_pin_inside_an_advisorys_range() -> None:
    db = snapshot([advisory("Requests", [{"introduced": "0"}, {"fixed": "2.31.0"}])], ["requests"])
    found, unaudited = audit.offline([("requests", "2.25.0")], db)
    assert found == ["requests==2.25.0: PYSEC-0000-1 a test advisory"] and not unaudited
    assert audit.offline([("requests", "2.31.0")], db) == ([], [])


def test_the_offline_audit_reads_last_affected_and_listed_versions() -> None:
    db = snapshot(
        [advisory("pkg", [{"introduced": "1.0"}, {"last_affected": "1.2"}], listed=["0.9"])],
        ["pkg"],
    )
    assert audit.offline([("pkg", "1.2")], db)[0]
    assert audit.offline([("pkg", "0.9")], db)[0]
    assert not audit.offline([("pkg", "1.3")], db)[0]


def test_a_pin_the_offline_source_does_not_cover_cannot_be_audited() -> None:
    found, unaudited = audit.offline([("newcomer", "1.0")], snapshot([], ["requests"]))
    assert not found and unaudited == ["newcomer==1.0"]


def test_the_vendored_snapshot_covers_every_pin_of_every_lock() -> None:
    db = json.loads(audit.ADVISORIES.read_text())
    assert db["commit"] and db["date"] and db["source"]
    _, unaudited = audit.offline(audit.all_pins(), db)
    assert not unaudited, "refresh security/advisories.json: scripts/audit.py --vendor"


def test_pip_audits_unreadable_output_is_not_a_pass() -> None:
    assert audit.pip_audit_vulnerabilities("") is None
    report = {
        "dependencies": [
            {"name": "a", "version": "1", "vulns": [{"id": "X", "fix_versions": ["2"]}]}
        ]
    }
    assert audit.pip_audit_vulnerabilities(json.dumps(report)) == ["a==1: X (fixed in 2)"]


def test_the_audit_fails_when_pip_audit_cannot_audit_and_there_is_no_offline_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(audit, "SCAN_BIN", tmp_path)
    (tmp_path / "pip-audit").touch()
    monkeypatch.setattr(audit, "pip_audit", lambda lock: (1, "", "ERROR: could not be audited"))
    monkeypatch.setattr(audit, "ADVISORIES", tmp_path / "missing.json")
    assert audit.audit() == 1
    assert "cannot audit" in capsys.readouterr().err


def test_the_audit_says_which_source_answered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(audit, "SCAN_BIN", tmp_path)
    (tmp_path / "pip-audit").touch()
    monkeypatch.setattr(audit, "pip_audit", lambda lock: (1, "", "ERROR: could not be audited"))
    date = json.loads(audit.ADVISORIES.read_text())["date"]
    assert audit.audit() == 0
    out = capsys.readouterr().out
    assert "audit source: PyPA advisory database at" in out and f"({date}), offline" in out
    monkeypatch.setattr(audit, "pip_audit", lambda lock: (0, json.dumps({"dependencies": []}), ""))
    assert audit.audit() == 0
    out = capsys.readouterr().out
    assert "audit source: pip-audit --strict" in out
    # The snapshot's date is printed either way: what the audit would fall back on.
    assert "offline advisory snapshot: PyPA advisory database at" in out and date in out


def test_the_snapshots_line_says_how_old_it_is() -> None:
    snapshot = {"source": "PyPA advisory database", "commit": "3ccb61257" + "0" * 31}
    line = audit.snapshot_age({**snapshot, "date": "2024-10-10"}, datetime.date(2024, 11, 9))
    assert line.startswith("offline advisory snapshot: PyPA advisory database at 3ccb61257000")
    assert "of 2024-10-10 (30 days old; docs/development.md says how to refresh it)" in line


def test_an_ignored_advisory_needs_a_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.audit]\nignore = [{id = "PYSEC-1", reason = ""}]\n'
    )
    monkeypatch.setattr(audit, "ROOT", tmp_path)
    with pytest.raises(SystemExit, match="without a reason"):
        audit.ignored()


def test_marker_lines_of_the_locks_parse() -> None:
    for path in TOOL_LOCKS.values():
        for requirement, _ in hashed_pins(path):
            if requirement.marker is not None:
                assert isinstance(requirement.marker, Marker)


def test_a_known_vulnerability_of_a_pin_fails_the_audit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(audit, "SCAN_BIN", tmp_path)
    (tmp_path / "pip-audit").touch()
    monkeypatch.setattr(audit, "pip_audit", lambda lock: (1, "", "ERROR: could not be audited"))
    db = json.loads(audit.ADVISORIES.read_text())
    name, version = audit.all_pins()[0]
    db["advisories"].append(advisory(name, [{"introduced": "0"}], listed=[version]))
    (tmp_path / "advisories.json").write_text(json.dumps(db))
    monkeypatch.setattr(audit, "ADVISORIES", tmp_path / "advisories.json")
    assert audit.audit() == 1
    assert f"{name}=={version}: PYSEC-0000-1" in capsys.readouterr().err
