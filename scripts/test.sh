#!/usr/bin/env bash
# Runs every test of the workspace (one shared cargo build) and ends with
# one summary line over all test binaries: "N passed, N failed", plus
# "N skipped (need root)" when not run as root.
#
# Tests that need root (FUSE mounts, network namespaces, tmpfs and loop
# devices, processes as other users) are `#[ignore = "needs root: ..."]`:
# as root they run with the rest (`--include-ignored`); otherwise they are
# counted and named as skipped, never as passed. Ignored tests with
# "child" in their names are child processes other tests start: never run
# on their own.
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
if [ "$(id -u)" = 0 ]; then
  cargo test --workspace --color never -- --include-ignored --skip child 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  skipped=""
else
  cargo test --workspace --color never 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  # The root-only tests, by name (listing runs nothing).
  listing=$(cargo test --workspace --color never -q -- --list --ignored 2>/dev/null) || { echo "the listing of root-only tests failed" >&2; status=1; }
  mapfile -t root_only < <(printf '%s\n' "$listing" | sed -n 's/: test$//p' | grep -v child)
  skipped=", ${#root_only[@]} skipped (need root)"
  if [ "${#root_only[@]}" -gt 0 ]; then
    echo
    echo "skipped, need root (run make test as root to include them):"
    printf '  %s\n' "${root_only[@]}"
  fi
fi
read -r passed failed < <(awk '/^test result:/ {
  for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i }
} END { print p + 0, f + 0 }' "$log")
echo
echo "${passed:-0} passed, ${failed:-0} failed${skipped}"
if [ "$status" -ne 0 ] && [ "${failed:-0}" -eq 0 ]; then
  echo "cargo test exited with $status (build error or crashed test binary)" >&2
fi
exit "$status"
