#!/usr/bin/env bash
# The whole PufferDB test suite: the fuzz targets for a bounded time, formatting, lints,
# every test of the workspace, and the Python client's tests against the real server.
# Tests that need ../shared/data skip themselves when it is absent.
# Usage: bash scripts/test.sh   (from any directory)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# shellcheck source=scripts/prerequisites.sh
source "$repo_root/scripts/prerequisites.sh"
puffer_need_packages --with-etcd
puffer_need_moto "$repo_root"

# Fuzzing first: in CI its build is removed afterwards, so the disk never holds it and
# the workspace's test build at once.
# A smoke run: an unoptimised build (half the build time) and 5 s a target (CI is kept
# under 30 minutes; 10 s a target took 40 s more for no finding in any run); the corpora's
# seeds are replayed on stable by the fuzz_corpora test, long runs are scripts/fuzz.sh 240.
echo "== fuzz targets, 5 s each (scripts/fuzz.sh --dev 5)"
if cargo +nightly --version >/dev/null 2>&1; then
    bash scripts/fuzz.sh --dev 5
    if [[ "${PUFFER_REQUIRE_SERVICES:-}" == "1" ]]; then
        rm -rf fuzz/target
    fi
elif [[ "${PUFFER_REQUIRE_SERVICES:-}" == "1" ]]; then
    echo "test: the nightly toolchain is missing, and PUFFER_REQUIRE_SERVICES=1 forbids skipping the fuzz targets" >&2
    exit 1
else
    echo "*** SKIPPED: the fuzz targets need the nightly toolchain (rustup toolchain install nightly) ***" >&2
fi

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
cargo test --workspace

echo "== Python client"
bash scripts/test-python.sh

echo "== all checks passed"
