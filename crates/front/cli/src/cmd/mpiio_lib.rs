//! `weft mpiio-lib`: where the MPI-IO library for an MPI is, for
//! `LD_PRELOAD` (built by `make` / `scripts/build-mpiio.sh`, beside the
//! `weft` binary). Builds nothing.

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
    let lib = dir.join(name);
    if !lib.is_file() {
        let flag = if dir.ends_with("release") { " --release" } else { "" };
        bail!("{} is not built; build it with `scripts/build-mpiio.sh{flag}` (needs that MPI's development package)", lib.display());
    }
    out!("{}", lib.display())?;
    Ok(())
}
