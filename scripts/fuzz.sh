#!/usr/bin/env bash
# Runs PufferDB's coverage-guided fuzz targets (fuzz/, cargo fuzz on the nightly
# toolchain, libFuzzer with AddressSanitizer), each for a bounded time, from its checked-in
# corpus. A crash leaves its input in fuzz/artifacts/<target>/ and fails the script.
# Usage: bash scripts/fuzz.sh [--dev] [seconds per target, default 20] [target ...]
# (`cargo +nightly fuzz list` names the targets; with none given, all of them run.)
# --dev builds without optimisation: the build takes less than half the time, each target
# then runs 5 to 9 times fewer inputs a second. The test suite uses it for its short smoke
# run; long runs should not.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root/fuzz"

profile_flag=()
if [[ "${1:-}" == "--dev" ]]; then
    profile_flag=(--dev)
    shift
fi
seconds="${1:-20}"
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || (( seconds < 1 || seconds > 86400 )); then
    echo "fuzz: seconds per target must be 1 to 86400, got $seconds" >&2
    exit 2
fi
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
targets=("$@")
if (( ${#targets[@]} == 0 )); then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

cargo +nightly fuzz build "${profile_flag[@]}"
for target in "${targets[@]}"; do
    # New inputs go to a scratch corpus, so the checked-in one changes only by hand
    # (cargo fuzz cmin, then copy what is worth keeping).
    scratch="$(mktemp -d)"
    echo "== fuzz $target for ${seconds} s"
    cargo +nightly fuzz run "${profile_flag[@]}" "$target" "$scratch" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
        -print_final_stats=1 2>&1 | grep -E "^(#|stat::|INFO: (seed|loaded))|ERROR|panicked|SUMMARY|Done" | tail -8
    status="${PIPESTATUS[0]}"
    rm -rf "$scratch"
    if (( status != 0 )); then
        echo "fuzz: $target failed (status $status); its input is in fuzz/artifacts/$target/" >&2
        exit 1
    fi
done
echo "== fuzz: every target ran ${seconds} s without a finding"
