#!/usr/bin/env bash
# PufferDB quick start: builds the release binary and serves the bundled sample table
# (`bookings`, 5,000 generated hotel bookings) on http://127.0.0.1:7878 until Ctrl-C.
# Usage: bash scripts/demo.sh [--listen ADDR]   (from any directory)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

target_dir="${CARGO_TARGET_DIR:-target}"
puffer="$target_dir/release/puffer"
data_dir="$target_dir/demo-data"

# shellcheck source=scripts/prerequisites.sh
source "$repo_root/scripts/prerequisites.sh"
puffer_need_packages

printf '== building the release binary\n'
cargo build --release -p puffer --bin puffer

cat <<USAGE

== serving $data_dir (the sample table is created on the first run)
While it runs, from another terminal:
  curl -s http://127.0.0.1:7878/v1/sql -d '{"query": "SELECT COUNT(*) FROM bookings WHERE country = '\''PRT'\'' FRESHNESS 5"}'
  curl -s http://127.0.0.1:7878/v1/tables/bookings/records/b00042
  $puffer sql --url http://127.0.0.1:7878 -e "SELECT id, hotel, adr FROM bookings WHERE hotel LIKE 'City%' AND adr > 200 LIMIT 5"
  $puffer sql --url http://127.0.0.1:7878 -e "SELECT hotel, COUNT(*), AVG(adr) FROM bookings GROUP BY hotel"
  $puffer sql --url http://127.0.0.1:7878          (an interactive shell)
Index and query raw text files with: $puffer text --help

USAGE
exec "$puffer" serve --data "$data_dir" --sample "$@"
