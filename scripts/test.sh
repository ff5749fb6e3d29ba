#!/usr/bin/env bash
# Runs every test of the workspace (one shared cargo build) and ends with
# one summary line over all test binaries: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
# Lints first: warnings are errors (clippy's default set).
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets --color never -q -- -D warnings || { echo "0 passed, 1 failed (clippy)"; exit 1; }
else
  echo "clippy not installed: lints skipped" >&2
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --color never 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
read -r passed failed < <(awk '/^test result:/ {
  for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i }
} END { print p + 0, f + 0 }' "$log")
echo
echo "${passed:-0} passed, ${failed:-0} failed"
if [ "$status" -ne 0 ] && [ "${failed:-0}" -eq 0 ]; then
  echo "cargo test exited with $status (build error or crashed test binary)" >&2
fi
exit "$status"
