//! `weft mpiio-lib`: where the MPI-IO library for an MPI is, for
//! `LD_PRELOAD` (built by `make build`, `make run` or
//! `scripts/build-mpiio.sh`). Looked for in `WEFT_MPIIO_LIB_DIR`, beside the
//! `weft` binary, and in `../lib` and `../lib/weft` from it (an installed
//! layout). Builds nothing.

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};

#[derive(Clone, Copy, ValueEnum)]
pub enum Mpi {
    Openmpi,
    Mpich,
}

#[derive(Args)]
pub struct MpiioLibArgs {
    /// Which MPI the program was built with.
    #[arg(long, value_enum, default_value = "openmpi")]
    mpi: Mpi,
}

pub fn mpiio_lib(a: MpiioLibArgs) -> Result<()> {
    let name = match a.mpi {
        Mpi::Openmpi => "libweft-mpiio-openmpi.so",
        Mpi::Mpich => "libweft-mpiio-mpich.so",
    };
    let exe = std::env::current_exe()?;
    let dir = exe.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let mut places: Vec<std::path::PathBuf> = std::env::var_os("WEFT_MPIIO_LIB_DIR").map(std::path::PathBuf::from).into_iter().collect();
    places.extend([dir.clone(), dir.join("../lib"), dir.join("../lib/weft")]);
    if let Some(lib) = places.iter().map(|p| p.join(name)).find(|l| l.is_file()) {
        out!("{}", lib.canonicalize().unwrap_or(lib).display())?;
        return Ok(());
    }
    let flag = if dir.ends_with("release") { " --release" } else { "" };
    let looked: Vec<String> = places.iter().map(|p| p.display().to_string()).collect();
    bail!("{name} is not built (looked in {}); build it with `make build` or `scripts/build-mpiio.sh{flag}` (needs that MPI's development package), or set WEFT_MPIIO_LIB_DIR", looked.join(", "))
}
