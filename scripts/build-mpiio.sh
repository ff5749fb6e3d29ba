#!/usr/bin/env bash
# Builds Weft's MPI-IO library once per installed MPI:
#   target/<profile>/libweft-mpiio-openmpi.so   (mpicc.openmpi)
#   target/<profile>/libweft-mpiio-mpich.so     (mpicc.mpich)
# from the Rust core (crates/front/mpiio, a static library) and the C shim
# (crates/front/mpiio/shim), which is compiled against each MPI's mpi.h.
# Usage: scripts/build-mpiio.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
profile=debug
cargo_flags=()
if [ "${1:-}" = "--release" ]; then
  profile=release
  cargo_flags=(--release)
fi
cargo build -q -p weft-mpiio "${cargo_flags[@]}"
core="target/$profile/libweft_mpiio.a"
shim=crates/front/mpiio/shim
built=0
for mpi in openmpi mpich; do
  cc="mpicc.$mpi"
  command -v "$cc" >/dev/null || continue
  out="target/$profile/libweft-mpiio-$mpi.so"
  # Rebuild only when an input is newer than the library.
  if [ -f "$out" ] && [ -z "$(find "$shim" "$core" -newer "$out" -print -quit)" ]; then
    built=$((built + 1))
    continue
  fi
  "$cc" -O2 -g -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter \
    -o "$out.tmp" "$shim"/*.c "$core" \
    -Wl,--version-script="$shim/exports.map" -Wl,--no-undefined -ldl -lpthread -lm
  mv "$out.tmp" "$out"
  echo "built $out" >&2
  built=$((built + 1))
done
if [ "$built" -eq 0 ]; then
  echo "error: no MPI found (mpicc.openmpi or mpicc.mpich); install libopenmpi-dev and/or libmpich-dev" >&2
  exit 1
fi
