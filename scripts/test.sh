#!/usr/bin/env bash
# The whole PufferDB test suite: formatting, lints, every test of the workspace (the
# fuzz corpora replayed among them), and the Python client's tests against the real server.
# Tests that need ../shared/data skip themselves when it is absent.
# Usage: bash scripts/test.sh   (from any directory)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# shellcheck source=scripts/prerequisites.sh
source "$repo_root/scripts/prerequisites.sh"
puffer_need_packages --with-etcd

# PyPI's installs (moto, the S3 server of the deep-storage tests; the Python client's
# test dependencies) take network time, not CPU (moto's alone took 72 s here), and ran
# before and after the build. They run while the workspace builds, logged to a file
# shown after it, and are waited for before any test runs.
mkdir -p "$repo_root/target"
python_setup_log="$repo_root/target/python-setup.log"
{
    puffer_need_moto "$repo_root"
    bash scripts/test-python.sh --setup-only
} >"$python_setup_log" 2>&1 &
python_setup=$!

# The fuzz targets are not run here: their nightly build with sanitizers and a 5 s smoke
# run a target took 4 min 10 s on this project's machine (CI is kept under 30 minutes),
# and the smoke run found nothing in any CI run.
# Their oracles (fuzz/src/harness.rs) and corpora are replayed on stable by the
# fuzz_corpora test below; fuzzing itself is scripts/fuzz.sh (240 s a target, nightly).

echo "== cargo fmt --all --check"
cargo fmt --all --check

# Clippy lints the workspace while the tests build. `cargo clippy` would type-check every
# dependency a second time, in check mode, which nothing else reuses (8.6 of CI's minutes
# on two cores). Clippy's driver as the workspace's compiler wrapper is what `cargo clippy`
# does itself, here over the test build: the same lints, with warnings as errors, on the
# same targets (libraries, binaries, tests, examples; the workspace has no benches), the
# dependencies compiled once and never linted. Exported, so that the Python step's build
# of the server binary finds the same fingerprints and builds nothing again.
# `cargo clippy --workspace --all-targets -- -D warnings` checks the same by hand.
clippy_driver="$(command -v clippy-driver || true)"
if [[ -z "$clippy_driver" ]]; then
    echo "test: clippy-driver is missing (rustup component add clippy)" >&2
    exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
# The driver reads its own arguments from CLIPPY_ARGS, each ended by this separator
# (the form cargo-clippy passes them in).
export CLIPPY_ARGS="-Dwarnings__CLIPPY_HACKERY__"

echo "== cargo test --workspace (linted by clippy, warnings as errors)"
cargo test --workspace --no-run
echo "== waiting for the Python environments (PyPI, $python_setup_log)"
if ! wait "$python_setup"; then
    cat "$python_setup_log" >&2
    echo "test: setting up the Python environments failed (log above)" >&2
    exit 1
fi
cat "$python_setup_log"
# Exports PUFFER_MOTO_BIN here (the background job's export died with it); installs
# nothing when the job did.
puffer_need_moto "$repo_root"
cargo test --workspace

echo "== Python client"
bash scripts/test-python.sh

echo "== all checks passed"
