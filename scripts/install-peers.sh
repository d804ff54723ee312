#!/usr/bin/env bash
# Installs the peers that `puffer-bench peers` compares PufferDB with: ripgrep (the
# data-scan baseline), the PostgreSQL server with pg_trgm (Debian's postgresql package;
# the benchmark starts its own private server, so the system service is not needed) and
# a TrueType font for the chart's labels. SQLite needs nothing: it is built into the
# benchmark (rusqlite, bundled).
# Idempotent: packages already installed are left alone. Uses sudo only when not root.
# Usage: bash scripts/install-peers.sh
set -euo pipefail

packages=(ripgrep postgresql fonts-dejavu-core)

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep "install ok installed" >/dev/null; then
        missing+=("$package")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "peers already installed: ${packages[*]}"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "apt-get not found: install ${missing[*]} with your system's package manager" >&2
    exit 1
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    as_root=(sudo)
fi

echo "installing: ${missing[*]}"
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
