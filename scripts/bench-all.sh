#!/usr/bin/env bash
# Runs the benchmarks at the sizes docs/benchmarks.md reports, each with its
# own temporary cluster. Do not build or run anything else meanwhile: on two
# cores a compile slows a benchmark severalfold.
set -euo pipefail
cd "$(dirname "$0")/.."
weft=target/release/weft
mkdir -p bench-results
"$weft" bench net | tee bench-results/net.txt
"$weft" bench concurrent-write | tee bench-results/concurrent-write.txt
"$weft" bench noncontig | tee bench-results/noncontig.txt
"$weft" bench sched | tee bench-results/sched.txt
"$weft" bench lock | tee bench-results/lock.txt
"$weft" bench atomic | tee bench-results/atomic.txt
