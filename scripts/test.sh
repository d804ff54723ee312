#!/usr/bin/env bash
# The whole PufferDB test suite: formatting, lints, and every test of the workspace.
# Tests that need ../shared/data skip themselves when it is absent.
# Usage: bash scripts/test.sh   (from any directory)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

echo "== cargo fmt --all --check"
cargo fmt --all --check

echo "== cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test --workspace"
cargo test --workspace

echo "== all checks passed"
