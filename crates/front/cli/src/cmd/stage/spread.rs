//! A stage spread over the job's nodes: this node walks the sources and
//! writes the plan; the job's launcher starts `weft job stage-worker` on
//! every node, each copies its pieces and rewrites its progress record;
//! this node shows the sum as one progress bar and names any node that
//! failed. The sources (stage-in) and destinations (stage-out) must be on
//! a file system every node sees, as the job directory is.

use super::{bytes_bar, collect, copy_pieces, Staged};
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_client::Client;
use weft_launch::job::file::JobFile;
use weft_launch::job::stage_plan::{self, StagePlan, StageRecord};
use weft_launch::job::step::Step;

/// How often a worker rewrites its record.
const REPORT_EVERY: Duration = Duration::from_millis(250);

/// How long the coordinator waits for the last records once every
/// launcher process has exited (a shared file system may show a file late).
const LATE_RECORDS: Duration = Duration::from_secs(5);

/// Copies `pairs` with every node of the job in `dir` (see the module's
/// documentation). Setting `cancel` ends the workers.
pub fn stage(c: &Client, dir: &Path, pairs: &[(String, String)], into_weft: bool, chunk: u64, cancel: &AtomicBool) -> Result<Staged> {
    let job = JobFile::load(dir)?.with_context(|| format!("no job in {}", dir.display()))?;
    let items = collect(c, pairs, into_weft, chunk)?;
    let sizes: Vec<u64> = items.iter().map(|i| i.size).collect();
    let bytes: u64 = sizes.iter().sum();
    let plan = StagePlan { id: format!("{:016x}", rand::random::<u64>()), into_weft, parts: stage_plan::plan(&sizes, job.servers as usize, chunk), items };
    let files = plan.items.len();
    stage_plan::save(dir, &plan)?;
    let step_dir = stage_plan::stage_dir(dir, &plan.id);
    let result = run(dir, &job, &plan, bytes, cancel);
    let _ = std::fs::remove_dir_all(&step_dir);
    result.map(|by_node| Staged { bytes, files, by_node })
}

/// Runs the workers and follows them; returns each node's bytes.
fn run(dir: &Path, job: &JobFile, plan: &StagePlan, bytes: u64, cancel: &AtomicBool) -> Result<Vec<(String, u64)>> {
    let log = format!("stage-{}.log", plan.id);
    let mut step = Step::start(dir, job, |weft| weft_launch::job::launcher::stage_worker_args(weft, dir, &plan.id), &log)?;
    let n = job.servers;
    let nodes = step.nodes.clone();
    let node = |k: u32| nodes.get(k as usize).cloned().unwrap_or_else(|| format!("rank {k}"));
    let bar = bytes_bar(bytes);
    let mut exited_at: Option<Instant> = None;
    let result = loop {
        if cancel.load(Ordering::Relaxed) {
            break Err(anyhow!("interrupted: the stage's workers were stopped"));
        }
        let records: Vec<Option<StageRecord>> = (0..n).map(|k| stage_plan::read_record(dir, &plan.id, k)).collect();
        bar.set_position(records.iter().flatten().map(|r| r.bytes).sum());
        if let Some(bad) = records.iter().flatten().find(|r| r.error.is_some()) {
            let why = bad.error.as_deref().unwrap_or_default();
            break Err(anyhow!("rank {} ({}) failed: {why}{}", bad.rank, node(bad.rank), if why.contains("No such file") { " (stage sources and destinations must be on a file system every node sees, or pass --stage-here)" } else { "" }));
        }
        if records.iter().all(|r| r.as_ref().is_some_and(|r| r.done)) {
            break Ok(records.into_iter().flatten().map(|r| (node(r.rank), r.bytes)).collect());
        }
        match (step.exited(), exited_at) {
            (Some(st), None) => {
                exited_at = Some(Instant::now());
                if let Err(st) = st {
                    let missing: Vec<String> = (0..n).filter(|&k| records[k as usize].as_ref().is_none_or(|r| !r.done)).map(|k| format!("rank {k} ({})", node(k))).collect();
                    break Err(anyhow!("{} exited ({st}) before every node had copied its part; not done: {}; {}", step.launcher, missing.join(", "), step.log_tail()));
                }
            }
            (Some(_), Some(t)) if t.elapsed() > LATE_RECORDS => {
                let missing: Vec<String> = (0..n).filter(|&k| records[k as usize].as_ref().is_none_or(|r| !r.done)).map(|k| format!("rank {k} ({})", node(k))).collect();
                break Err(anyhow!("{} ended but these nodes did not report their part done: {}; {}", step.launcher, missing.join(", "), step.log_tail()));
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    bar.finish_and_clear();
    if result.is_err() {
        step.end();
    }
    result
}

/// `weft job stage-worker`: one node's part of a spread stage.
pub fn worker(dir: &Path, plan_id: &str) -> Result<()> {
    let job = JobFile::load(dir)?.with_context(|| format!("no job in {}", dir.display()))?;
    let me = weft_launch::job::rank::detect(|k| std::env::var(k).ok(), Some(job.servers), job.launcher.as_deref()).map_err(|e| anyhow!("{e}"))?;
    if me.size != job.servers {
        bail!("{} started {} stage workers but the job has {} nodes", me.source, me.size, job.servers);
    }
    let host = std::env::var("SLURMD_NODENAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(weft_launch::job::file::hostname);
    let mut rec = StageRecord { rank: me.rank, host, bytes: 0, pieces: 0, done: false, error: None };
    let result = (|| -> Result<()> {
        let plan = stage_plan::load(dir, plan_id)?;
        let part = plan.parts.get(me.rank as usize).with_context(|| format!("the plan has no part for rank {}", me.rank))?;
        let c = Client::connect(&weft_launch::cluster_path(dir)).context("cannot reach the job's servers")?;
        let moved = AtomicU64::new(0);
        let pieces = AtomicU64::new(0);
        let finished = AtomicBool::new(false);
        std::thread::scope(|s| {
            // The progress record, rewritten while the pieces are copied.
            let mut r = rec.clone();
            let (moved, pieces, finished) = (&moved, &pieces, &finished);
            s.spawn(move || {
                while !finished.load(Ordering::Relaxed) {
                    std::thread::sleep(REPORT_EVERY);
                    r.bytes = moved.load(Ordering::Relaxed);
                    r.pieces = pieces.load(Ordering::Relaxed);
                    let _ = stage_plan::write_record(dir, plan_id, &r);
                }
            });
            let r = copy_pieces(&c, plan.into_weft, &plan.items, part, &|n| { moved.fetch_add(n, Ordering::Relaxed); }, &|| { pieces.fetch_add(1, Ordering::Relaxed); });
            finished.store(true, Ordering::Relaxed);
            rec.bytes = moved.load(Ordering::Relaxed);
            rec.pieces = pieces.load(Ordering::Relaxed);
            r
        })
    })();
    match &result {
        Ok(()) => rec.done = true,
        Err(e) => rec.error = Some(format!("{e:#}")),
    }
    // The last word, after the reporter stopped: done, or why not.
    stage_plan::write_record(dir, plan_id, &rec)?;
    result
}
