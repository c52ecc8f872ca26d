"""`make audit`: the known vulnerabilities of every pin of every lock, or a failure.

First pip-audit (`--strict`: a pin it cannot audit is an error, not a pass) against its
`pypi` service, the package index's JSON API. Where that service cannot answer (this
project's CI reaches the package index but not its per-version JSON pages), the offline
source: security/advisories.json, the PyPA advisory database's records for every package
the locks pin, taken from a checkout of it (`--vendor PATH`). A pin of a package the
snapshot does not cover cannot be audited, and fails the run too. The output says which
source answered. Ignored advisories are listed in pyproject.toml's [tool.audit], each
with its reason.

    python scripts/audit.py                      # audit (make audit, make test)
    python scripts/audit.py --vendor ADVISORY_DB  # refresh security/advisories.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
SCAN_BIN = ROOT / ".venv-scan" / "bin"
ADVISORIES = ROOT / "security" / "advisories.json"
LOCKS = (
    ROOT / "requirements-dev.lock",
    ROOT / "layers" / "core" / "requirements.txt",
    ROOT / "relay" / "requirements.txt",
    ROOT / "requirements-sam.lock",
    ROOT / "requirements-scan.lock",
)
Pin = tuple[str, str]


def lock_pins(path: Path) -> list[Pin]:
    """(canonical name, version) of each `name==version [; marker] [\\]` line; --hash lines
    continue the pin above them."""
    found = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line or line.startswith("--"):
            continue
        requirement = line.split(";", 1)[0].strip()
        if "==" not in requirement:
            raise SystemExit(f"{path.name}: not an exact pin: {raw!r}")
        name, version = requirement.split("==", 1)
        found.append((str(canonicalize_name(name.strip())), version.strip()))
    return found


def all_pins(locks: Iterable[Path] = LOCKS) -> list[Pin]:
    return sorted({pin for lock in locks for pin in lock_pins(lock)})


def ignored() -> dict[str, str]:
    """{advisory id: reason} from pyproject.toml's [tool.audit] ignore list."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {}).get("audit", {})
    reasons = {}
    for entry in table.get("ignore", []):
        if len(str(entry.get("reason", "")).split()) < 3:
            raise SystemExit(f"[tool.audit] ignores {entry.get('id')!r} without a reason")
        reasons[str(entry["id"])] = str(entry["reason"])
    return reasons


def _in_range(version: Version, events: list[dict[str, str]]) -> bool:
    """OSV ECOSYSTEM events: affected from each `introduced` up to a `fixed` (excluded) or
    a `last_affected` (included)."""
    affected = False
    for event in sorted(events, key=lambda e: _order(next(iter(e.values())))):
        (kind, value), *_ = event.items()
        if kind == "introduced" and (value == "0" or version >= Version(value)):
            affected = True
        elif (kind == "fixed" and version >= Version(value)) or (
            kind == "last_affected" and version > Version(value)
        ):
            affected = False
    return affected


def _order(value: str) -> Version:
    return Version("0") if value == "0" else Version(value)


def affects(advisory: dict[str, Any], name: str, version: str) -> bool:
    for affected in advisory.get("affected", []):
        if canonicalize_name(affected.get("package", {}).get("name", "")) != name:
            continue
        if version in affected.get("versions", []):
            return True
        try:
            parsed = Version(version)
            for span in affected.get("ranges", []):
                if span.get("type") == "ECOSYSTEM" and _in_range(parsed, span.get("events", [])):
                    return True
        except InvalidVersion:
            continue
    return False


def offline(pins: list[Pin], snapshot: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(vulnerabilities, pins the snapshot cannot speak for)."""
    covered = set(snapshot["packages"])
    unaudited = [f"{n}=={v}" for n, v in pins if n not in covered]
    found = [
        f"{name}=={version}: {advisory['id']} {advisory.get('summary', '')}".rstrip()
        for name, version in pins
        for advisory in snapshot["advisories"]
        if affects(advisory, name, version)
    ]
    return found, unaudited


def pip_audit(lock: Path) -> tuple[int, str, str]:
    """pip-audit on one lock (one at a time: a hashed and an unhashed file do not mix)."""
    args = [str(SCAN_BIN / "pip-audit"), "--strict", "--no-deps", "--disable-pip"]
    args += ["--progress-spinner", "off", "--vulnerability-service", "pypi", "--format", "json"]
    result = subprocess.run(
        [*args, "--requirement", str(lock)], capture_output=True, text=True, timeout=900
    )
    return result.returncode, result.stdout, result.stderr


def pip_audit_vulnerabilities(stdout: str) -> list[str] | None:
    """The vulnerabilities of pip-audit's JSON report; None when it printed no report."""
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        return None
    return [
        f"{d['name']}=={d['version']}: {v['id']} (fixed in {', '.join(v.get('fix_versions', [])) or 'nothing yet'})"
        for d in report.get("dependencies", [])
        for v in d.get("vulns", [])
    ]


def report(source: str, found: list[str], ignore: dict[str, str], pins: int) -> int:
    kept = [f for f in found if f.split(": ", 1)[1].split()[0] not in ignore]
    print(f"audit source: {source}")
    print(
        f"{pins} pins audited: {len(kept)} known vulnerabilities, {len(found) - len(kept)} ignored"
    )
    for advisory, reason in ignore.items():
        print(f"  ignored {advisory}: {reason}")
    for line in kept:
        print(f"  {line}", file=sys.stderr)
    return 1 if kept else 0


def snapshot_age(snapshot: dict[str, Any], today: datetime.date) -> str:
    """The offline snapshot's line: its source, commit and date, and how old it is."""
    days = (today - datetime.date.fromisoformat(snapshot["date"])).days
    return (
        f"offline advisory snapshot: {snapshot['source']} at {snapshot['commit'][:12]} of "
        f"{snapshot['date']} ({days} days old; docs/development.md says how to refresh it)"
    )


def audit() -> int:
    pins = all_pins()
    ignore = ignored()
    if not (SCAN_BIN / "pip-audit").exists():
        raise SystemExit(".venv-scan/bin/pip-audit is missing: run `make scan-venv`")
    if ADVISORIES.is_file():
        # Printed whichever source answers: what the audit falls back on, and its age.
        print(snapshot_age(json.loads(ADVISORIES.read_text("utf-8")), datetime.date.today()))
    vulnerabilities: list[str] = []
    reason = ""
    for lock in LOCKS:
        code, stdout, stderr = pip_audit(lock)
        found = pip_audit_vulnerabilities(stdout)
        if found is None or (code != 0 and not found):
            reason = f"{lock.name}: " + (stderr.strip().splitlines() or ["no output"])[-1]
            break
        vulnerabilities += found
    else:
        return report("pip-audit --strict, its pypi service", vulnerabilities, ignore, len(pins))
    print(f"pip-audit could not audit here ({reason[:200]}); using the offline source")
    if not ADVISORIES.is_file():
        print(f"audit: no offline source ({ADVISORIES.name}): cannot audit", file=sys.stderr)
        return 1
    snapshot = json.loads(ADVISORIES.read_text(encoding="utf-8"))
    found, unaudited = offline(pins, snapshot)
    if unaudited:
        print(
            "audit: the offline source does not cover "
            f"{', '.join(unaudited)}: cannot audit them; refresh it with --vendor",
            file=sys.stderr,
        )
        return 1
    source = f"{snapshot['source']} at {snapshot['commit'][:12]} ({snapshot['date']}), offline"
    return report(source, found, ignore, len(pins))


def vendor(database: Path) -> None:
    """Keep the advisories of every package the locks pin (PyPA advisory database layout:
    vulns/<package>/<id>.yaml), and which packages were looked up."""
    import yaml

    names = sorted({name for name, _ in all_pins()})
    commit, date = subprocess.run(
        ["git", "-C", str(database), "log", "-1", "--format=%H %cs"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    folders = {str(canonicalize_name(p.name)): p for p in (database / "vulns").iterdir()}
    advisories = []
    for name in names:
        for path in sorted(folders[name].glob("*.yaml")) if name in folders else []:
            record = yaml.safe_load(path.read_text(encoding="utf-8"))
            if record.get("withdrawn"):
                continue
            advisories.append(
                {
                    "id": record["id"],
                    "aliases": record.get("aliases", []),
                    "summary": " ".join(str(record.get("details", "")).split())[:160],
                    "affected": [
                        {
                            "package": {"name": a["package"]["name"]},
                            "ranges": [
                                r for r in a.get("ranges", []) if r.get("type") == "ECOSYSTEM"
                            ],
                            "versions": a.get("versions", []),
                        }
                        for a in record.get("affected", [])
                    ],
                }
            )
    snapshot = {
        "source": "PyPA advisory database",
        "license": "CC-BY-4.0: the PyPA advisory database (github.com/pypa/advisory-database), "
        "records trimmed to id, summary and affected versions",
        "commit": commit,
        "date": date,
        "packages": names,
        "advisories": advisories,
    }
    ADVISORIES.parent.mkdir(exist_ok=True)
    ADVISORIES.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{ADVISORIES.relative_to(ROOT)}: {len(advisories)} advisories for {len(names)} packages")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vendor", type=Path, help="a checkout of the PyPA advisory database")
    args = parser.parse_args()
    if args.vendor:
        vendor(args.vendor)
        return
    raise SystemExit(audit())


if __name__ == "__main__":
    main()
