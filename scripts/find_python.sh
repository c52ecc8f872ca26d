#!/bin/sh
# Print the path of a Python of the given minor version (`scripts/find_python.sh 3.13`) that
# runs here, or nothing. Looked for, in order: pythonX.Y on PATH (a pyenv shim counts only
# when it runs: without a selected version it fails), then the versions pyenv installed
# (`pyenv root`, $PYENV_ROOT, ~/.pyenv), then uv's, the newest patch release first. The
# Makefile asks it for 3.13 (the Lambda runtime's) and 3.11 (`make lock`).
set -u
want=${1:?usage: find_python.sh X.Y}

runs() {
    [ -n "$1" ] && "$1" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$want')" \
        >/dev/null 2>&1
}

on_path=$(command -v "python$want" 2>/dev/null || true)
if runs "$on_path"; then
    echo "$on_path"
    exit 0
fi

pyenv_root=$(pyenv root 2>/dev/null || true)
for root in "$pyenv_root/versions" "${PYENV_ROOT:-}/versions" "$HOME/.pyenv/versions" \
    "$HOME/.local/share/uv/python"; do
    [ -d "$root" ] || continue
    # 3.13.10 before 3.13.9: sort by version, newest first.
    for candidate in $(ls -d "$root"/*"$want".*/bin/"python$want" 2>/dev/null | sort -r -V); do
        if runs "$candidate"; then
            echo "$candidate"
            exit 0
        fi
    done
done
exit 0
