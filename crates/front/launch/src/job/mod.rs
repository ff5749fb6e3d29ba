//! Weft inside a batch job across nodes (`weft job`, `weft serve
//! --bootstrap job`): one server per node started by the job's launcher
//! (srun, mpiexec or ssh), which find each other through files in the
//! job's shared directory. See docs/job.md.
//!
//! - [`rank`]: which server this is, from the launcher's variables;
//! - [`hosts`]: host files and Slurm node lists;
//! - [`iface`]: the address a server binds;
//! - [`file`]: the job directory's files;
//! - [`rendezvous`]: rank files, waiting for peers, the derived cluster file;
//! - [`launcher`]: the launchers' command lines;
//! - [`mounts`]: FUSE mounts of the job, unmounted by its stop;
//! - [`serve`]: one server's side of a start;
//! - [`step`]: a later step on every node (the same launcher);
//! - [`stage_plan`]: a stage-in or stage-out spread over the nodes;
//! - [`start`], [`stop`]: `weft job start`, `stop` and `status`.

pub mod file;
pub mod hosts;
pub mod iface;
pub mod launcher;
pub mod mounts;
pub mod rank;
pub mod rendezvous;
pub mod serve;
pub mod stage_plan;
pub mod start;
pub mod step;
pub mod stop;
