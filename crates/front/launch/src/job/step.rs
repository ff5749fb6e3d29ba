//! A later step of a running job: one process per node, started the way
//! its servers were (the same launcher, nodes and options, as
//! `launcher.toml` records them), e.g. the workers of a spread stage-in
//! or stage-out. Each process finds its rank as a server does.

use super::file::{self, JobFile, LauncherRecord};
use super::launcher;
use crate::{fail, LaunchError};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// The processes of one step.
pub struct Step {
    children: Vec<Child>,
    /// The step's nodes, rank k on node k.
    pub nodes: Vec<String>,
    pub launcher: &'static str,
    pub log: PathBuf,
}

/// How the job's servers were launched, from its launcher record.
fn launched(dir: &Path, job: &JobFile) -> Result<(LauncherRecord, file::LaunchedWith), LaunchError> {
    let rec = file::read::<LauncherRecord>(&file::launcher_path(dir))?.filter(|r| r.start == job.start).ok_or_else(|| fail(format!("the job in {} has no launcher record of its start", dir.display())))?;
    let how = rec.how.clone().ok_or_else(|| fail(format!("the job in {} was started by an older weft that did not record its launcher: pass --stage-here", dir.display())))?;
    if rec.nodes.len() != job.servers as usize {
        return Err(fail(format!("the launcher record in {} names {} nodes, the job has {}", dir.display(), rec.nodes.len(), job.servers)));
    }
    Ok((rec, how))
}

impl Step {
    /// Starts `args(weft binary)` on every node of the job in `dir`, its
    /// output in `DIR/logs/<log_name>`.
    pub fn start(dir: &Path, job: &JobFile, args: impl Fn(&Path) -> Vec<String>, log_name: &str) -> Result<Step, LaunchError> {
        let (rec, how) = launched(dir, job)?;
        let log = dir.join("logs").join(log_name);
        let out = file::create_nofollow(&log).map_err(|e| fail(format!("cannot write {}: {e}", log.display())))?;
        let argv = args(&how.weft_bin);
        let mut step = Step { children: Vec::new(), nodes: rec.nodes.clone(), launcher: how.launcher.name(), log };
        for argv in launcher::commands(&how.launcher, &rec.nodes, &argv, &how.args, how.as_root) {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(out.try_clone().map_err(|e| fail(e.to_string()))?).stderr(out.try_clone().map_err(|e| fail(e.to_string()))?);
            // Its own process group, so `end` reaches what it started.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            match cmd.spawn() {
                Ok(c) => step.children.push(c),
                Err(e) => {
                    step.end();
                    return Err(fail(format!("cannot run the launcher {}: {e}", argv[0])));
                }
            }
        }
        Ok(step)
    }

    /// `Some(Err)` as soon as a launcher process failed (one ssh of
    /// many), `Some(Ok)` once all exited with success, else `None`.
    pub fn exited(&mut self) -> Option<Result<(), ExitStatus>> {
        let mut running = false;
        for c in &mut self.children {
            match c.try_wait() {
                Ok(Some(st)) if !st.success() => return Some(Err(st)),
                Ok(Some(_)) => {}
                _ => running = true,
            }
        }
        (!running).then_some(Ok(()))
    }

    /// The end of the step's log, for an error message.
    pub fn log_tail(&self) -> String {
        super::start::tail_of(&self.log)
    }

    /// Ends what still runs (SIGTERM to each launcher's group, SIGKILL
    /// 2 s later) and reaps it.
    pub fn end(&mut self) {
        super::stop::end_groups(self.children.iter_mut().filter_map(|c| matches!(c.try_wait(), Ok(None)).then_some(c.id())).collect());
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        // Whatever still runs (one launcher may have failed while others run).
        if !matches!(self.exited(), Some(Ok(()))) {
            self.end();
        }
    }
}
