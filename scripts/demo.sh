#!/usr/bin/env bash
# PufferDB demo: builds the release binary, indexes a sample corpus made of the
# project's own sources and documents, and runs a few queries on it.
# Usage: bash scripts/demo.sh   (from any directory)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# Paths are relative to the repository root, where the script runs.
target_dir="${CARGO_TARGET_DIR:-target}"
target_dir="${target_dir#"$repo_root"/}"
puffer="$target_dir/release/puffer"
demo_dir="target/demo"
corpus="$demo_dir/corpus.txt"
index="$demo_dir/corpus.pidx"

step() {
    printf '\n== %s\n' "$*"
}

# Prints a command, then runs it.
show() {
    printf '$'
    printf ' %q' "$@"
    printf '\n'
    "$@"
}

step "building the release binary"
cargo build --release -p puffer --bin puffer

step "generating the sample corpus"
mkdir -p "$demo_dir"
# The project ships its own sample: every Rust source file, the documents and the README,
# in a stable order, concatenated.
{
    find crates -name '*.rs' -type f
    find docs -name '*.md' -type f 2>/dev/null || true
    for doc in README.md ARCHITECTURE.md; do
        if [[ -f "$doc" ]]; then
            echo "$doc"
        fi
    done
} | LC_ALL=C sort | while IFS= read -r file; do
    cat -- "$file"
done >"$corpus"
corpus_files="$(find crates -name '*.rs' -type f | wc -l | tr -d ' ')"
echo "$corpus: $(wc -c <"$corpus" | tr -d ' ') bytes ($corpus_files Rust files plus documents)"

step "building the index"
show "$puffer" text build "$corpus" --out "$index"

step "queries"
show "$puffer" text count "$index" impl
show "$puffer" text count "$index" "TextIndex"
show "$puffer" text search "$index" "TextIndex" --limit 5
first_offset="$("$puffer" text search "$index" "TextIndex" --limit 1)"
if [[ -n "$first_offset" ]]; then
    show "$puffer" text extract "$index" "$first_offset" 60
    printf '\n'
fi
show "$puffer" text count "$index" 50554646 --hex

step "index footprint"
show "$puffer" text info "$index"

step "try it yourself"
cat <<USAGE
The index stays in $index. From the repository root ($repo_root), try:
  $puffer text count   $index 'unsafe'
  $puffer text search  $index 'Psi' --limit 10
  $puffer text extract $index 0 200
  $puffer text info    $index
Index any other file with:
  $puffer text build FILE --out FILE.pidx
USAGE
