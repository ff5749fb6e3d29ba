#!/usr/bin/env bash
# Installs what Weft needs on a fresh Debian machine; does nothing when all
# is present. Rust comes from the machine's rustup toolchain (edition 2024
# needs cargo >= 1.85); crates come from crates.io through cargo.
set -euo pipefail

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# The power-cut and full-disk tests make an ext4 image and mount it.
command -v mkfs.ext4 >/dev/null || need_apt+=(e2fsprogs)
command -v losetup >/dev/null || need_apt+=(mount)
# MPI-IO: both MPIs (the library is built once per MPI), Fortran, and the
# parallel HDF5 and PnetCDF the MPI-IO tests run.
command -v mpicc.openmpi >/dev/null || need_apt+=(openmpi-bin libopenmpi-dev)
command -v mpicc.mpich >/dev/null || need_apt+=(mpich libmpich-dev)
command -v gfortran >/dev/null || need_apt+=(gfortran)
command -v h5pcc.openmpi >/dev/null || need_apt+=(libhdf5-openmpi-dev)
command -v h5pcc.mpich >/dev/null || need_apt+=(libhdf5-mpich-dev)
[ -f /usr/include/pnetcdf.h ] || need_apt+=(libpnetcdf-dev)
# Real tools on the FUSE mount (crates/front/fuse/tests/fuse_tools.rs): git, sqlite3 (fcntl
# locks), fio (verified I/O), h5py (serial HDF5 from Python).
command -v git >/dev/null || need_apt+=(git)
command -v sqlite3 >/dev/null || need_apt+=(sqlite3)
command -v fio >/dev/null || need_apt+=(fio)
# MUNGE mode (crates/services/tests/munge.rs): munged and libmunge.so.2 (loaded at run
# time); setpriv runs clients as other users.
command -v munged >/dev/null || need_apt+=(munge)
command -v setpriv >/dev/null || need_apt+=(util-linux)
# Weft in a batch job (crates/front/cli/tests/job.rs): a real Slurm (slurmctld, slurmd,
# srun, salloc), started by the test in network namespaces.
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v salloc >/dev/null || need_apt+=(slurm-wlm)
# The emulated cluster (crates/front/launch/tests/emulate.rs): ip and tc from iproute2.
command -v ip >/dev/null && command -v tc >/dev/null || need_apt+=(iproute2)
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import h5py' 2>/dev/null || need_apt+=(python3-h5py)
# The message layer's instruction counts (crates/front/bench/tests/icount.rs) run under callgrind.
command -v valgrind >/dev/null || need_apt+=(valgrind)
# The metrics port (crates/services/tests/metrics.rs): a real Prometheus scrapes it, and
# promtool checks the page.
command -v prometheus >/dev/null && command -v promtool >/dev/null || need_apt+=(prometheus)
# `weft bench everyday`'s FUSE floor: the same work through bindfs, a FUSE
# passthrough to a local directory.
command -v bindfs >/dev/null || need_apt+=(bindfs)
# Benchmark plots draw their text with DejaVu.
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_apt+=(fonts-dejavu-core)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing: ${need_apt[*]}" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
  echo "error: cargo not found. Install Rust >= 1.85 (rustup) and re-run." >&2
  exit 1
fi
ver=$(cargo --version | awk '{print $2}')
major=${ver%%.*}; rest=${ver#*.}; minor=${rest%%.*}
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 85 ]; }; then
  echo "error: cargo $ver is too old; Weft needs >= 1.85 (edition 2024)." >&2
  exit 1
fi
