#!/usr/bin/env bash
# Weft's main job at small scale: build, start a local cluster (1 meta/lock
# server + 4 data servers on 127.0.0.1), run the concurrent-write benchmark
# (paper 002) against it and against the local file system on the same disk,
# show the servers' status, and stop the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin weft 2>&1 | tail -n 1
# The MPI-IO library too, so `weft mpiio-lib` answers after `make run`.
scripts/build-mpiio.sh --release >/dev/null 2>&1 || echo "note: the MPI-IO library was not built (an MPI's development package missing?); see scripts/build-mpiio.sh" >&2
weft=target/release/weft
dir=$(mktemp -d "${TMPDIR:-/tmp}/weft-demo.XXXXXX")
cleanup() { "$weft" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT INT TERM

"$weft" up --detach --servers 4 --dir "$dir"
export WEFT_CLUSTER="$dir/cluster.toml"
"$weft" bench concurrent-write --procs 1,2,4,8 --size "${WEFT_DEMO_SIZE:-16m}" --transfer 1m --repeats 3
echo
"$weft" status
echo
"$weft" down --dir "$dir"
