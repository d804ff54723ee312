#!/usr/bin/env bash
# Tests the Python client (clients/python) against the real server binary.
# Builds `puffer`, makes a virtualenv in target/pyenv if missing, installs pytest, pandas, pyarrow and the
# package into it, and runs the suite. Usage: bash scripts/test-python.sh [pytest args]
# With --setup-only first, only makes the virtualenv and installs into it (no build, no
# test): scripts/test.sh does that from PyPI while the workspace builds.
set -euo pipefail

setup_only=0
if [[ "${1:-}" == "--setup-only" ]]; then
    setup_only=1
    shift
fi

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

if ! command -v python3 >/dev/null 2>&1; then
    echo "error: python3 is missing; install Python 3.9 or newer (e.g. apt-get install python3 python3-venv)" >&2
    exit 1
fi
if ! python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)'; then
    echo "error: the Python client needs Python >= 3.9; python3 is $(python3 --version 2>&1)" >&2
    exit 1
fi

build_server() {
    echo "== building the server binary"
    # The test profile and the whole workspace's features: the binary `cargo test --workspace`
    # already built for the integration tests (with `-p puffer` alone, features resolve for
    # that package only and half the dependencies build again: 2 minutes here).
    cargo build --profile test --workspace --bin puffer
    target_dir="${CARGO_TARGET_DIR:-target}"
    case "$target_dir" in
        /*) ;;
        *) target_dir="$repo_root/$target_dir" ;;
    esac
    export PUFFER_BIN="${PUFFER_BIN:-$target_dir/debug/puffer}"
}
if [[ "$setup_only" -eq 0 ]]; then
    build_server
fi

venv="$repo_root/target/pyenv"
python="$venv/bin/python"
pip_user=()
if [ ! -x "$python" ]; then
    echo "== creating the virtualenv $venv"
    mkdir -p "$repo_root/target"
    if ! python3 -m venv "$venv"; then
        rm -rf "$venv"
        # No venv module (Debian's python3-venv missing): install for the user instead.
        echo "warning: 'python3 -m venv' failed (is python3-venv installed?); using pip --user" >&2
        python="python3"
        pip_user=(--user)
        if python3 -m pip install --help 2>/dev/null | grep -- --break-system-packages >/dev/null; then
            pip_user+=(--break-system-packages)
        fi
    fi
fi

echo "== installing pytest, pandas and pyarrow (for the DataFrame and Arrow tests) and the client"
"$python" -m pip install -q --disable-pip-version-check ${pip_user[@]+"${pip_user[@]}"} pytest pandas pyarrow ./clients/python

if [[ "$setup_only" -eq 1 ]]; then
    exit 0
fi

echo "== running the Python client tests (PUFFER_BIN=$PUFFER_BIN)"
# The package has a src/ layout, so the installed copy is what the tests import.
"$python" -m pytest -q -p no:cacheprovider clients/python/tests "$@"
