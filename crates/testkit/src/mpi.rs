//! The installed MPIs, and Weft's MPI-IO library built for each.

use crate::{target_dir, weft};
use std::path::PathBuf;
use std::process::Command;

/// One installed MPI and how to drive it.
pub struct Mpi {
    pub name: &'static str,
    pub cc: &'static str,
    pub fc: &'static str,
    pub exec: &'static str,
    pub ranks: u32,
}

pub const OPENMPI: Mpi = Mpi { name: "openmpi", cc: "mpicc.openmpi", fc: "mpif90.openmpi", exec: "mpiexec.openmpi", ranks: 4 };
/// MPICH busy-polls: no more ranks than cores.
pub const MPICH: Mpi = Mpi { name: "mpich", cc: "mpicc.mpich", fc: "mpif90.mpich", exec: "mpiexec.mpich", ranks: 2 };

pub fn sources() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../front/mpiio/tests/c")
}

/// Builds both MPI-IO libraries (once per test binary run: the script
/// skips what is up to date) and returns this MPI's.
pub fn library(mpi: &Mpi) -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-mpiio.sh");
        let mut c = Command::new(script);
        if target_dir().ends_with("release") {
            c.arg("--release");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "build-mpiio.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    });
    let out = Command::new(weft()).args(["mpiio-lib", "--mpi", mpi.name]).output().unwrap();
    assert!(out.status.success(), "weft mpiio-lib: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

