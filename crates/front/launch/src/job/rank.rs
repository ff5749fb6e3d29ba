//! Which server of a job this process is: rank and size from the
//! launcher's variables. Pure: it reads a lookup function, not the
//! environment, so every launcher's case is a unit test.
//!
//! The trap this avoids (GekkoFS and UnifyFS users report it): a server
//! that finds no rank variable believing it is rank 0, so several servers
//! place data as rank 0 and files read back with the right size and wrong
//! bytes. Here a size above 1 without a rank is an error.

use std::fmt;

/// Rank and group size, in the order they are tried: Weft's own first (an
/// explicit choice wins), then Slurm, Open MPI, PMIx, Hydra (PMI).
const SOURCES: [(&str, &str, &str); 5] = [
    ("Weft", "WEFT_RANK", "WEFT_GROUP_SIZE"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIx", "PMIX_RANK", "PMIX_SIZE"),
    ("Hydra", "PMI_RANK", "PMI_SIZE"),
];

/// The largest job this build starts (the cluster file names every server).
pub const MAX_SERVERS: u32 = 65_536;

/// This process's place in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRank {
    pub rank: u32,
    pub size: u32,
    /// The launcher whose variables said so.
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankError {
    /// A variable is set but is not a number in range.
    Invalid { var: &'static str, value: String },
    /// A rank at or past the size.
    OutOfRange { source: &'static str, rank: u32, size: u32 },
    /// The group has more than one server but no variable says which this is.
    NoRank { size: u32 },
    /// No launcher variable at all and no size given.
    NoSource,
}

impl fmt::Display for RankError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RankError::Invalid { var, value } => write!(f, "{var}={value:?} is not a rank or size (0 to {MAX_SERVERS})"),
            RankError::OutOfRange { source, rank, size } => write!(f, "{source} says rank {rank} of {size}: the rank must be below the size"),
            RankError::NoRank { size } => write!(
                f,
                "the job has {size} servers but no launcher variable names this one's rank ({}): refusing to start, since every server would act as rank 0 and place data wrongly",
                names()
            ),
            RankError::NoSource => write!(f, "no launcher variable gives this server's rank ({}): start it with srun, mpiexec or `weft job start`, or set WEFT_RANK and WEFT_GROUP_SIZE", names()),
        }
    }
}

impl std::error::Error for RankError {}

fn names() -> String {
    SOURCES.iter().map(|(_, r, _)| *r).collect::<Vec<_>>().join(", ")
}

fn number(var: &'static str, value: String) -> Result<u32, RankError> {
    value.trim().parse::<u32>().ok().filter(|&n| n <= MAX_SERVERS).ok_or(RankError::Invalid { var, value })
}

/// The sources a launcher sets: only those are read, since variables of an
/// enclosing job are inherited (Hydra inside a Slurm allocation passes on
/// `SLURM_PROCID=0` to every rank; Open MPI's daemons under srun carry
/// srun's, not the MPI ranks). `None` (a hand-made job): every source.
fn sources_of(launcher: Option<&str>) -> &'static [(&'static str, &'static str, &'static str)] {
    match launcher {
        Some("srun") => &SOURCES[1..2],
        Some("mpiexec") => &SOURCES[2..5],
        Some("ssh") => &SOURCES[0..1],
        _ => &SOURCES,
    }
}

/// Finds rank and size from the variables `launcher` sets (`srun`,
/// `mpiexec`, `ssh`; `None`: any). `expected` is the job's server count
/// when known (from the job file): it is the size when a launcher gives a
/// rank but no size, and a job of one server needs no rank.
pub fn detect(get: impl Fn(&str) -> Option<String>, expected: Option<u32>, launcher: Option<&str>) -> Result<JobRank, RankError> {
    let sources = sources_of(launcher);
    for &(source, rank_var, size_var) in sources {
        let Some(rank) = get(rank_var) else { continue };
        let rank = number(rank_var, rank)?;
        let size = match get(size_var) {
            Some(s) => number(size_var, s)?,
            None => match expected {
                Some(n) => n,
                None => continue,
            },
        };
        if rank >= size {
            return Err(RankError::OutOfRange { source, rank, size });
        }
        return Ok(JobRank { rank, size, source });
    }
    // Sizes without ranks: a group launched without rank variables.
    let size = sources.iter().find_map(|(_, _, v)| get(v).map(|s| number(v, s))).transpose()?.or(expected);
    match size {
        Some(1) => Ok(JobRank { rank: 0, size: 1, source: "a job of one server" }),
        Some(n) => Err(RankError::NoRank { size: n }),
        None => Err(RankError::NoSource),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn each_launcher_is_understood() {
        type Case<'a> = (&'a [(&'a str, &'a str)], u32, u32, &'a str);
        let cases: [Case; 5] = [
            (&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4")], 3, 4, "Slurm"),
            (&[("PMI_RANK", "1"), ("PMI_SIZE", "2")], 1, 2, "Hydra"),
            (&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "8")], 0, 8, "Open MPI"),
            (&[("PMIX_RANK", "5"), ("PMIX_SIZE", "6")], 5, 6, "PMIx"),
            (&[("WEFT_RANK", "2"), ("WEFT_GROUP_SIZE", "3")], 2, 3, "Weft"),
        ];
        for (vars, rank, size, source) in cases {
            assert_eq!(detect(env(vars), None, None), Ok(JobRank { rank, size, source }), "{vars:?}");
        }
    }

    #[test]
    fn weft_variables_win_and_a_missing_size_comes_from_the_job() {
        let e = env(&[("WEFT_RANK", "1"), ("WEFT_GROUP_SIZE", "2"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "9")]);
        assert_eq!(detect(e, None, None).unwrap().rank, 1);
        // PMIx without PMIX_SIZE: the job file's count.
        assert_eq!(detect(env(&[("PMIX_RANK", "3")]), Some(4), None), Ok(JobRank { rank: 3, size: 4, source: "PMIx" }));
    }

    #[test]
    fn only_the_launchers_own_variables_count() {
        // Hydra inside a Slurm allocation: every rank inherits SLURM_PROCID=0.
        let e = env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("PMI_RANK", "3"), ("PMI_SIZE", "4")]);
        assert_eq!(detect(&e, Some(4), Some("mpiexec")).unwrap().rank, 3);
        // A WEFT_RANK the user exported does not override srun's.
        let e = env(&[("WEFT_RANK", "0"), ("WEFT_GROUP_SIZE", "4"), ("SLURM_PROCID", "2"), ("SLURM_NTASKS", "4")]);
        assert_eq!(detect(&e, Some(4), Some("srun")).unwrap().rank, 2);
        assert_eq!(detect(env(&[("PMI_RANK", "1"), ("PMI_SIZE", "4")]), Some(4), Some("srun")), Err(RankError::NoRank { size: 4 }));
    }

    #[test]
    fn no_rank_with_more_than_one_server_is_refused() {
        assert_eq!(detect(env(&[("SLURM_NTASKS", "4")]), None, None), Err(RankError::NoRank { size: 4 }));
        assert_eq!(detect(env(&[]), Some(4), None), Err(RankError::NoRank { size: 4 }));
        assert_eq!(detect(env(&[]), None, None), Err(RankError::NoSource));
        assert!(RankError::NoRank { size: 4 }.to_string().contains("refusing"));
        // One server needs no rank.
        assert_eq!(detect(env(&[]), Some(1), None).unwrap().rank, 0);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(matches!(detect(env(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")]), None, None), Err(RankError::Invalid { var: "PMI_RANK", .. })));
        assert!(matches!(detect(env(&[("PMI_RANK", "-1"), ("PMI_SIZE", "2")]), None, None), Err(RankError::Invalid { .. })));
        assert_eq!(detect(env(&[("PMI_RANK", "2"), ("PMI_SIZE", "2")]), None, None), Err(RankError::OutOfRange { source: "Hydra", rank: 2, size: 2 }));
        assert!(matches!(detect(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "99999999")]), None, None), Err(RankError::Invalid { .. })));
    }
}
