//! The command lines that start one `weft serve --bootstrap job` per node
//! through a launcher: Slurm's srun, an MPI's mpiexec (Open MPI or MPICH's
//! Hydra), or ssh. Pure: the caller says which programs to use.

use std::path::Path;

/// Which mpiexec it is (their options differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MpiFlavor {
    OpenMpi,
    Hydra,
}

impl MpiFlavor {
    /// From `mpiexec --version`'s output.
    pub fn from_version(text: &str) -> Option<Self> {
        if text.contains("Open MPI") || text.contains("OpenRTE") {
            Some(MpiFlavor::OpenMpi)
        } else if text.contains("HYDRA") || text.contains("Hydra") {
            Some(MpiFlavor::Hydra)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Launcher {
    /// Inside a Slurm allocation: one task per node of the job.
    Srun { srun: String },
    Mpiexec { mpiexec: String, flavor: MpiFlavor },
    /// One ssh per host; `ssh` is the command and its options.
    Ssh { ssh: Vec<String> },
}

impl Launcher {
    pub fn name(&self) -> &'static str {
        match self {
            Launcher::Srun { .. } => "srun",
            Launcher::Mpiexec { .. } => "mpiexec",
            Launcher::Ssh { .. } => "ssh",
        }
    }
}

/// The server command every node runs.
pub fn serve_args(weft: &Path, dir: &Path) -> Vec<String> {
    vec![weft.display().to_string(), "serve".into(), "--bootstrap".into(), "job".into(), "--rendezvous".into(), dir.display().to_string()]
}

/// The stage worker every node runs for one copy (`weft job stage-worker`).
pub fn stage_worker_args(weft: &Path, dir: &Path, plan: &str) -> Vec<String> {
    vec![weft.display().to_string(), "job".into(), "stage-worker".into(), "--dir".into(), dir.display().to_string(), "--plan".into(), plan.into()]
}

/// Quotes `s` for a POSIX shell (ssh runs its command through one).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-=:,".contains(&b)) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The processes to start: one command for srun and mpiexec, one per host
/// for ssh. `nodes` are the hosts (srun: the allocation's nodes), `extra`
/// options go to the launcher, `as_root`: Open MPI refuses root unless told.
pub fn commands(launcher: &Launcher, nodes: &[String], serve: &[String], extra: &[String], as_root: bool) -> Vec<Vec<String>> {
    let n = nodes.len().to_string();
    match launcher {
        Launcher::Srun { srun } => {
            let mut c = vec![srun.clone(), "--overlap".into(), "--ntasks-per-node=1".into(), format!("--nodes={n}"), format!("--ntasks={n}"), "--kill-on-bad-exit=0".into(), "--label".into()];
            c.extend(extra.iter().cloned());
            c.extend(serve.iter().cloned());
            vec![c]
        }
        Launcher::Mpiexec { mpiexec, flavor } => {
            let hosts = nodes.join(",");
            let mut c = vec![mpiexec.clone(), "-np".into(), n];
            match flavor {
                MpiFlavor::OpenMpi => {
                    c.extend(["--host".into(), hosts, "--map-by".into(), "node".into(), "--tag-output".into()]);
                    if as_root {
                        c.push("--allow-run-as-root".into());
                    }
                }
                MpiFlavor::Hydra => c.extend(["-hosts".into(), hosts, "-ppn".into(), "1".into(), "-prepend-rank".into()]),
            }
            c.extend(extra.iter().cloned());
            c.extend(serve.iter().cloned());
            vec![c]
        }
        Launcher::Ssh { ssh } => nodes
            .iter()
            .enumerate()
            .map(|(k, host)| {
                let mut c = ssh.clone();
                c.extend(extra.iter().cloned());
                c.push(host.clone());
                let remote: Vec<String> = ["env".to_string(), format!("WEFT_RANK={k}"), format!("WEFT_GROUP_SIZE={}", nodes.len())].into_iter().chain(serve.iter().map(|a| shell_quote(a))).collect();
                c.push(remote.join(" "));
                c
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<String> {
        vec!["n1".into(), "n2".into()]
    }

    #[test]
    fn each_launcher_starts_one_server_per_node() {
        let serve = serve_args(Path::new("/opt/weft"), Path::new("/scratch/job 1"));
        let srun = commands(&Launcher::Srun { srun: "srun".into() }, &nodes(), &serve, &[], false);
        assert_eq!(srun.len(), 1);
        assert!(srun[0].starts_with(&["srun".into(), "--overlap".into(), "--ntasks-per-node=1".into(), "--nodes=2".into(), "--ntasks=2".into()]));
        assert!(srun[0].ends_with(&serve));
        let ompi = commands(&Launcher::Mpiexec { mpiexec: "mpiexec".into(), flavor: MpiFlavor::OpenMpi }, &nodes(), &serve, &["--mca".into(), "x".into()], true);
        let joined = ompi[0].join(" ");
        assert!(joined.contains("-np 2 --host n1,n2 --map-by node") && joined.contains("--allow-run-as-root --mca x"), "{joined}");
        let hydra = commands(&Launcher::Mpiexec { mpiexec: "mpiexec.mpich".into(), flavor: MpiFlavor::Hydra }, &nodes(), &serve, &[], true);
        assert!(hydra[0].join(" ").contains("-np 2 -hosts n1,n2 -ppn 1"), "{:?}", hydra[0]);
        assert!(!hydra[0].iter().any(|a| a == "--allow-run-as-root"));
        let ssh = commands(&Launcher::Ssh { ssh: vec!["ssh".into(), "-oBatchMode=yes".into()] }, &nodes(), &serve, &[], false);
        assert_eq!(ssh.len(), 2);
        assert_eq!(ssh[1][2], "n2");
        assert_eq!(ssh[1][3], "env WEFT_RANK=1 WEFT_GROUP_SIZE=2 /opt/weft serve --bootstrap job --rendezvous '/scratch/job 1'");
    }

    #[test]
    fn quoting_survives_a_shell() {
        for s in ["plain", "with space", "it's", "$(x)`y`", ""] {
            let out = std::process::Command::new("sh").arg("-c").arg(format!("printf %s {}", shell_quote(s))).output().unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), s);
        }
        assert_eq!(MpiFlavor::from_version("mpiexec (OpenRTE) 4.1.4"), Some(MpiFlavor::OpenMpi));
        assert_eq!(MpiFlavor::from_version("HYDRA build details:\n    Version: 4.0.2"), Some(MpiFlavor::Hydra));
        assert_eq!(MpiFlavor::from_version("something else"), None);
    }
}
