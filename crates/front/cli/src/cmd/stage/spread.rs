//! A stage spread over the job's nodes: this node walks the sources and
//! writes the plan; the job's launcher starts `weft job stage-worker` on
//! every node, each copies its pieces and rewrites its progress record;
//! this node shows the sum as one progress bar and names any node that
//! failed. The sources (stage-in) and destinations (stage-out) must be on
//! a file system every node sees, as the job directory is.
//!
//! A stage ends when every worker reported its part done, or every
//! launcher process exited with success (a worker exits 0 only after its
//! last record, which a shared file system may show late). It fails when
//! a worker reports an error, a launcher process fails, no record comes
//! from a node within the start deadline, or a node's bytes stand still
//! for [`STALL`]. Removing the plan is what ends the workers: each one
//! looks for it with every record it writes (a signal to ssh does not
//! reach the remote command).

use super::{bytes_bar, collect, copy_pieces, Staged};
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weft_client::Client;
use weft_launch::job::file::JobFile;
use weft_launch::job::stage_plan::{self, StagePlan, StageRecord};
use weft_launch::job::step::Step;

/// How often a worker rewrites its record (and looks for its plan).
const REPORT_EVERY: Duration = Duration::from_millis(250);

/// How long the coordinator waits for the last records once every
/// launcher process has exited with success.
const LATE_RECORDS: Duration = Duration::from_secs(5);

/// How long a node's bytes may stand still before the stage fails.
const STALL: Duration = Duration::from_secs(600);

/// Copies `pairs` with every node of the job in `dir` (see the module's
/// documentation). Setting `cancel` ends the workers.
pub fn stage(c: &Client, dir: &Path, pairs: &[(String, String)], into_weft: bool, chunk: u64, cancel: &AtomicBool) -> Result<Staged> {
    let dir = &dir.canonicalize().with_context(|| format!("no job directory {}", dir.display()))?;
    let job = JobFile::load(dir)?.with_context(|| format!("no job in {}", dir.display()))?;
    let items = collect(c, pairs, into_weft, chunk)?;
    let sizes: Vec<u64> = items.iter().map(|i| i.size).collect();
    let bytes: u64 = sizes.iter().sum();
    let plan = StagePlan { id: format!("{:016x}", rand::random::<u64>()), into_weft, parts: stage_plan::plan(&sizes, job.servers as usize, chunk), items };
    let files = plan.items.len();
    stage_plan::save(dir, &plan)?;
    let result = run(dir, &job, &plan, bytes, cancel);
    // Also the workers' signal to stop, if any still runs.
    let _ = std::fs::remove_dir_all(stage_plan::stage_dir(dir, &plan.id));
    result.map(|by_node| Staged { bytes, files, by_node })
}

/// Per node: its record, and when its bytes last moved.
struct Watch {
    record: Option<StageRecord>,
    moved_at: Instant,
}

/// Runs the workers and follows them; returns each node's bytes.
fn run(dir: &Path, job: &JobFile, plan: &StagePlan, bytes: u64, cancel: &AtomicBool) -> Result<Vec<(String, u64)>> {
    let log = format!("stage-{}.log", plan.id);
    let mut step = Step::start(dir, job, |weft| weft_launch::job::launcher::stage_worker_args(weft, dir, &plan.id), &log)?;
    let n = job.servers;
    let nodes = step.nodes.clone();
    let node = |k: u32| format!("rank {k} ({})", nodes.get(k as usize).map_or("?", |s| s.as_str()));
    let planned = |k: u32| plan.parts.get(k as usize).map_or(0, |p| p.iter().map(|p| p.len).sum::<u64>());
    let began = Instant::now();
    let first_deadline = weft_launch::job::start::default_timeout(n as usize);
    let mut watch: Vec<Watch> = (0..n).map(|_| Watch { record: None, moved_at: began }).collect();
    let bar = bytes_bar(bytes);
    let mut ended_ok: Option<Instant> = None;
    let result = loop {
        if cancel.load(Ordering::Relaxed) {
            break Err(anyhow!("interrupted: the stage's workers were stopped"));
        }
        let exited = step.exited();
        // Records after the exit status, so a worker's own word is seen.
        for (k, w) in watch.iter_mut().enumerate() {
            if let Some(r) = stage_plan::read_record(dir, &plan.id, k as u32) {
                if w.record.as_ref().is_none_or(|o| o.bytes != r.bytes || o.done != r.done) {
                    w.moved_at = Instant::now();
                }
                w.record = Some(r);
            }
        }
        bar.set_position(watch.iter().filter_map(|w| w.record.as_ref()).map(|r| r.bytes).sum());
        if let Some(bad) = watch.iter().filter_map(|w| w.record.as_ref()).find(|r| r.error.is_some()) {
            let why = bad.error.as_deref().unwrap_or_default();
            let hint = if why.contains("No such file") { " (stage sources and destinations must be on a file system every node sees, or pass --stage-here)" } else { "" };
            break Err(anyhow!("{} failed: {why}{hint}", node(bad.rank)));
        }
        let not_done = || -> Vec<u32> { (0..n).filter(|&k| watch[k as usize].record.as_ref().is_none_or(|r| !r.done)).collect() };
        let named = |ks: Vec<u32>| ks.into_iter().take(8).map(node).collect::<Vec<_>>().join(", ");
        if not_done().is_empty() {
            break Ok(watch.iter().enumerate().map(|(k, w)| (nodes[k].clone(), w.record.as_ref().map_or(0, |r| r.bytes))).collect());
        }
        match exited {
            Some(Err(st)) => break Err(anyhow!("{} exited ({st}) before every node had copied its part; not done: {}; {}", step.launcher, named(not_done()), step.log_tail())),
            Some(Ok(())) => {
                let at = *ended_ok.get_or_insert_with(Instant::now);
                if at.elapsed() > LATE_RECORDS {
                    // Every worker exited 0, which it does only after its
                    // last record: the records are late, not missing.
                    break Ok(watch.iter().enumerate().map(|(k, w)| (nodes[k].clone(), w.record.as_ref().filter(|r| r.done).map_or_else(|| planned(k as u32), |r| r.bytes))).collect());
                }
            }
            None => {}
        }
        let silent: Vec<u32> = (0..n).filter(|&k| watch[k as usize].record.is_none()).collect();
        if !silent.is_empty() && began.elapsed() > first_deadline {
            break Err(anyhow!("no word within {first_deadline:?} from {}: is the node reachable, and weft at {} on it?; {}", named(silent), dir.display(), step.log_tail()));
        }
        let stalled: Vec<u32> = not_done().into_iter().filter(|&k| watch[k as usize].record.is_some() && watch[k as usize].moved_at.elapsed() > STALL).collect();
        if !stalled.is_empty() {
            break Err(anyhow!("no progress for {STALL:?} on {}: a source or destination may hang there", named(stalled)));
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
    // Here at once: the coordinator knows this node reached its part.
    stage_plan::write_record(dir, plan_id, &rec)?;
    let result = (|| -> Result<()> {
        let plan = stage_plan::load(dir, plan_id)?;
        if plan.parts.len() != job.servers as usize {
            bail!("the plan has {} parts for a job of {} nodes", plan.parts.len(), job.servers);
        }
        let part = &plan.parts[me.rank as usize];
        let c = crate::cmd::client_of(&weft_launch::cluster_path(dir)).context("cannot reach the job's servers")?;
        let (moved, pieces, finished, ended) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false), AtomicBool::new(false));
        let plan_file = stage_plan::plan_path(dir, plan_id);
        std::thread::scope(|s| {
            // The progress record, rewritten while the pieces are copied;
            // a plan that is gone means the stage was ended.
            let mut r = rec.clone();
            let (moved, pieces, finished, ended, plan_file) = (&moved, &pieces, &finished, &ended, &plan_file);
            s.spawn(move || {
                while !finished.load(Ordering::Relaxed) {
                    std::thread::sleep(REPORT_EVERY);
                    if std::fs::metadata(plan_file).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
                        ended.store(true, Ordering::Relaxed);
                        return;
                    }
                    r.bytes = moved.load(Ordering::Relaxed);
                    r.pieces = pieces.load(Ordering::Relaxed);
                    let _ = stage_plan::write_record(dir, plan_id, &r);
                }
            });
            let r = copy_pieces(
                &c,
                plan.into_weft,
                &plan.items,
                part,
                &|n| {
                    moved.fetch_add(n, Ordering::Relaxed);
                },
                &|| {
                    pieces.fetch_add(1, Ordering::Relaxed);
                },
                ended,
            );
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
    // The last word, after the reporter stopped: done, or why not (into a
    // step directory that may be gone, when the stage was ended).
    let _ = stage_plan::write_record(dir, plan_id, &rec);
    result
}
