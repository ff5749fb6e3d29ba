//! `weft bench job`: how long `weft job start` takes to have every server
//! answering, and `weft job stop` to end them, as the server count grows
//! (issue 22). Servers run as processes on this machine, or each in a
//! network namespace of its own (`--netns`: nodes with their own
//! addresses); they are started through an ssh stand-in that runs the
//! command locally (or enters the node's namespace), so the numbers are
//! Weft's own start (rendezvous, cluster file, readiness), not a
//! launcher's fan-out, or through Open MPI's mpiexec with that stand-in
//! as its remote agent.

use crate::median;
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_launch::job::launcher::{Launcher, MpiFlavor};
use weft_launch::job::start::JobSpec;

pub struct Params {
    pub servers: Vec<usize>,
    pub repeats: usize,
    /// Each server in a network namespace of its own (root).
    pub netns: bool,
    /// Start through Open MPI's mpiexec instead of the ssh stand-in.
    pub mpiexec: bool,
    /// Where the job directory and the servers' data go.
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub servers: usize,
    pub placement: &'static str,
    pub launcher: &'static str,
    /// Median seconds from launch to every server answering.
    pub ready_s: f64,
    /// Median seconds from the last server binding its address to every server answering.
    pub after_last_bind_s: f64,
    /// Median seconds `weft job stop` took.
    pub stop_s: f64,
}

/// The ssh stand-in: skips ssh's options, then runs the command here or
/// inside the named network namespace.
fn agent(dir: &Path, netns: bool) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(if netns { "agent-netns" } else { "agent-local" });
    let run = if netns { r#"exec nsenter --net=/run/netns/"$host" unshare --uts sh -c 'hostname "$0"; exec sh -c "$1"' "$host" "$*""# } else { r#"exec sh -c "$*""# };
    std::fs::write(&p, format!("#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in -o|-p|-l|-i) shift 2;; -*) shift;; *) break;; esac; done\nhost=$1; shift\n{run}\n"))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    Ok(p)
}

pub fn run(exe: &Path, p: &Params, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
    std::fs::create_dir_all(&p.dir)?;
    let agent = agent(&p.dir, p.netns)?;
    let mut rows = Vec::new();
    for &n in &p.servers {
        // Namespaces live as long as this size's runs.
        let emu = if p.netns { Some(weft_launch::emulate::Emulation::create(n, None, None)?) } else { None };
        let nodes: Vec<String> = (0..n).map(|k| emu.as_ref().map_or_else(|| format!("node{k}"), |e| e.namespace(k))).collect();
        let launcher = if p.mpiexec { Launcher::Mpiexec { mpiexec: "mpiexec.openmpi".into(), flavor: MpiFlavor::OpenMpi } } else { Launcher::Ssh { ssh: vec![agent.display().to_string()] } };
        // Namespace names are not in DNS, so Open MPI's daemons route
        // direct; and all "nodes" are this machine, so they share no
        // topology segment (concurrent writes of it crash hwloc).
        let launcher_args =
            if p.mpiexec { ["--mca", "plm_rsh_agent", &agent.display().to_string(), "--mca", "routed", "direct", "--mca", "rtc_hwloc_vmhole", "none"].map(String::from).to_vec() } else { Vec::new() };
        let dir = p.dir.join(format!("job-{n}"));
        let spec = JobSpec {
            dir: dir.clone(),
            weft_bin: exe.to_path_buf(),
            launcher,
            nodes,
            launcher_args,
            meta_shards: 1,
            stripe_size: 64 * 1024,
            data: p.dir.join(format!("data-{n}")),
            data_default: false,
            iface: None,
            port: 0,
            metrics_port: Some(0),
            timeout: None,
            as_root: nix::unistd::geteuid().is_root(),
        };
        let (mut ready, mut bind, mut stop) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..p.repeats {
            progress(&format!("{n} servers, run {}/{}", r + 1, p.repeats));
            let started = weft_launch::job::start::start(&spec, &std::sync::atomic::AtomicBool::new(false)).map_err(|e| anyhow!("{n} servers: {e}"))?;
            ready.push(started.elapsed.as_secs_f64());
            bind.push(started.after_last_bind.as_secs_f64());
            let stopped = weft_launch::job::stop::stop(&dir, false).map_err(|e| anyhow!("{n} servers: {e}"))?;
            stop.push(stopped.elapsed.as_secs_f64());
            // The next start finds the previous one's processes gone.
            std::thread::sleep(Duration::from_millis(100));
        }
        rows.push(Row {
            servers: n,
            placement: if p.netns { "namespaces" } else { "processes" },
            launcher: if p.mpiexec { "mpiexec (Open MPI)" } else { "ssh stand-in" },
            ready_s: median(ready),
            after_last_bind_s: median(bind),
            stop_s: median(stop),
        });
        drop(emu);
    }
    Ok(rows)
}

/// `weft job start` and stop as `weft bench job` times them; its directory
/// is removed afterwards.
pub struct JobStart<'a> {
    pub exe: &'a Path,
    pub params: Params,
}

impl crate::experiment::Experiment for JobStart<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "job"
    }

    fn run(&mut self, progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        let rows = run(self.exe, &self.params, progress);
        let _ = std::fs::remove_dir_all(&self.params.dir);
        rows
    }

    fn plots(&self, stem: &Path, rows: &[Row]) -> Result<Option<Vec<PathBuf>>> {
        let bars: Vec<crate::plot::Bar> = rows.iter().map(|r| crate::plot::Bar { name: format!("{} servers", r.servers), value: r.ready_s, goal: None }).collect();
        crate::plot::write_bars(stem, "weft job start: seconds until every server answers", "seconds", &bars, 1.0).map(Some)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let table = rows
            .iter()
            .map(|r| vec![r.servers.to_string(), r.placement.to_string(), r.launcher.to_string(), format!("{:.3}", r.ready_s), format!("{:.3}", r.after_last_bind_s), format!("{:.3}", r.stop_s)])
            .collect();
        crate::experiment::Report::table(
            format!("weft job start and stop, median of {}", self.params.repeats),
            &["servers", "placement", "launcher", "ready s", "after last bind s", "stop s"],
            table,
        )
        .note("(issue 22's targets: ready within 2 s of the last server binding; stop within 5 s)")
    }
}
