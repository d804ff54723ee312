#!/usr/bin/env bash
# The whole PufferDB test suite: formatting, lints, every test of the workspace, and the
# Python client's tests against the real server.
# Tests that need ../shared/data skip themselves when it is absent.
# Usage: bash scripts/test.sh   (from any directory)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# shellcheck source=scripts/prerequisites.sh
source "$repo_root/scripts/prerequisites.sh"
puffer_need_packages --with-etcd
puffer_need_moto "$repo_root"

echo "== cargo fmt --all --check"
cargo fmt --all --check

echo "== cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test --workspace"
cargo test --workspace

echo "== Python client"
bash scripts/test-python.sh

echo "== all checks passed"
