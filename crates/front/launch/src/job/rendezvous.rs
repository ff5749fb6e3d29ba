//! The rendezvous: each server writes its rank file, then waits until all
//! are there, and every server derives the same cluster file from them,
//! ordered by rank (so a restart on the same data maps it the same way).
//!
//! A server that cannot start writes its rank file with the error, so its
//! peers and `weft job start` stop waiting at once and can name it.

use super::file::{self, JobFile, RankRecord};
use crate::{fail, LaunchError};
use std::path::Path;
use std::time::{Duration, Instant};
use weft_net::cluster::AuthMode;
use weft_net::{ClusterFile, ServerEntry, Service};

/// What the rank files of a start say now.
#[derive(Debug, Default)]
pub struct Progress {
    /// By rank: the record, if its file is there.
    pub ranks: Vec<Option<RankRecord>>,
}

impl Progress {
    /// Ranks whose file is not there yet.
    pub fn missing(&self) -> Vec<u32> {
        self.ranks.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(k, _)| k as u32).collect()
    }

    /// The first server that reported an error.
    pub fn failed(&self) -> Option<&RankRecord> {
        self.ranks.iter().flatten().find(|r| r.error.is_some())
    }

    /// Every server's record, when all are there and none failed.
    pub fn complete(&self) -> Option<Vec<RankRecord>> {
        if self.failed().is_some() {
            return None;
        }
        self.ranks.iter().cloned().collect()
    }
}

/// Reads the rank files of `job`'s start in `dir`. A file that does not
/// parse, or claims another rank or size, counts as that rank's error.
pub fn read(dir: &Path, job: &JobFile) -> Progress {
    Progress { ranks: (0..job.servers).map(|k| read_rank(dir, job, k)).collect() }
}

fn read_rank(dir: &Path, job: &JobFile, k: u32) -> Option<RankRecord> {
    match file::read::<RankRecord>(&file::rank_path(dir, &job.start, k)) {
        Ok(None) => None,
        Ok(Some(r)) if r.rank == k && r.size == job.servers => Some(r),
        Ok(Some(r)) => Some(RankRecord { error: Some(format!("its rank file says rank {} of {}", r.rank, r.size)), ..r }),
        Err(e) => Some(RankRecord { rank: k, size: job.servers, host: "?".into(), addr: None, metrics: None, pid: 0, dir: Default::default(), bound_ms: 0, fresh: false, error: Some(e.to_string()) }),
    }
}

/// Publishes this server's record. The first record of a rank is made with
/// a link, which fails if the rank already has one: two servers claiming
/// one rank (variables inherited from an enclosing job) are caught, not
/// silently overwritten. `replace`: this server's own record, updated.
pub fn publish(dir: &Path, job: &JobFile, me: &RankRecord, replace: bool) -> Result<(), LaunchError> {
    let rdv = file::rendezvous_dir(dir, &job.start);
    std::fs::create_dir_all(&rdv).map_err(|e| fail(format!("cannot create the rendezvous directory {}: {e}", rdv.display())))?;
    let path = file::rank_path(dir, &job.start, me.rank);
    if replace {
        return file::write(&path, me, false);
    }
    let tmp = rdv.join(format!(".new-rank-{}-{}", me.rank, std::process::id()));
    file::write(&tmp, me, false)?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let other = file::read::<RankRecord>(&path).ok().flatten().map_or_else(String::new, |o| format!(" (pid {} on {})", o.pid, o.host));
            Err(fail(format!("rank {} already has a server{other}: two servers claim one rank; were the launcher's rank variables inherited from an enclosing job?", me.rank)))
        }
        Err(e) => Err(fail(format!("cannot write {}: {e}", path.display()))),
    }
}

/// Reads the rank files not yet in `known` (a record once read stays: a
/// server's file changes only to report its failure, which [`read`] of
/// its own rank sees when it matters).
pub fn read_missing(dir: &Path, job: &JobFile, known: &mut Progress) {
    if known.ranks.len() != job.servers as usize {
        known.ranks = vec![None; job.servers as usize];
    }
    for k in 0..job.servers {
        if known.ranks[k as usize].is_none() {
            known.ranks[k as usize] = read_rank(dir, job, k);
        }
    }
}

/// Waits until every rank's file is there. Polls with a growing interval
/// (20 ms to 1 s), opening only the files not yet seen, so a thousand
/// servers do not hammer a shared directory.
pub fn wait_all(dir: &Path, job: &JobFile, timeout: Duration) -> Result<Vec<RankRecord>, LaunchError> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(20);
    let mut p = Progress::default();
    loop {
        read_missing(dir, job, &mut p);
        if let Some(bad) = p.failed() {
            return Err(fail(format!("server {} on {} could not start: {}", bad.rank, bad.host, bad.error.as_deref().unwrap_or("?"))));
        }
        if let Some(all) = p.complete() {
            return Ok(all);
        }
        if file::stop_path(dir, &job.start).exists() {
            return Err(fail("the start was called off (`weft job stop`, or `weft job start` gave up)"));
        }
        if start.elapsed() > timeout {
            let missing: Vec<String> = p.missing().iter().map(u32::to_string).collect();
            return Err(fail(format!("servers {} did not write their rank files within {timeout:?}", missing.join(", "))));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// The services rank `k` hosts: every rank data (each node stores), the
/// first `meta_shards` ranks a metadata shard and a lock server each.
pub fn services_of(rank: u32, meta_shards: u32) -> Vec<Service> {
    match rank {
        r if r < meta_shards.max(1) => vec![Service::Meta, Service::Lock, Service::Data],
        _ => vec![Service::Data],
    }
}

/// The cluster file every server derives from the same records.
pub fn derive(job: &JobFile, records: &[RankRecord]) -> Result<ClusterFile, LaunchError> {
    let servers = records
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let addr = r.addr.ok_or_else(|| fail(format!("server {k} on {} gave no address", r.host)))?;
            Ok(ServerEntry { id: k as u32, addr, services: services_of(k as u32, job.meta_shards), dir: r.dir.clone(), metrics: r.metrics })
        })
        .collect::<Result<Vec<_>, LaunchError>>()?;
    Ok(ClusterFile {
        auth: AuthMode::Secret,
        secret: job.secret.clone(),
        key_file: None,
        munge_socket: None,
        server_uid: 0,
        default_stripe_size: job.stripe_size,
        lock_ttl_ms: 10_000,
        root_squash: false,
        meta_sync_window_ms: weft_net::cluster::DEFAULT_META_SYNC_WINDOW_MS,
        servers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u32) -> JobFile {
        JobFile { launcher: None, data_default: false, start: "s1".into(), servers: n, meta_shards: 1, stripe_size: 65536, secret: "00112233445566778899aabbccddeeff".into(), data: "/tmp/d".into(), iface: None, port: 0, metrics_port: None, bootstrap_timeout_ms: 1000 }
    }

    fn rec(k: u32, n: u32) -> RankRecord {
        RankRecord { rank: k, size: n, host: format!("n{k}"), addr: Some(format!("198.18.0.{}:7100", 10 + k).parse().unwrap()), metrics: None, pid: 100 + k, dir: format!("/tmp/d/rank{k}").into(), bound_ms: 0, fresh: true, error: None }
    }

    #[test]
    fn files_written_in_any_order_give_one_cluster_file_ordered_by_rank() {
        let dir = std::env::temp_dir().join(format!("weft-rdv-{}", rand::random::<u64>()));
        let j = job(3);
        for k in [2, 0, 1] {
            assert!(read(&dir, &j).complete().is_none());
            publish(&dir, &j, &rec(k, 3), false).unwrap();
        }
        let all = wait_all(&dir, &j, Duration::from_secs(1)).unwrap();
        let cf = derive(&j, &all).unwrap();
        assert_eq!(cf.servers.iter().map(|s| s.addr.to_string()).collect::<Vec<_>>(), ["198.18.0.10:7100", "198.18.0.11:7100", "198.18.0.12:7100"]);
        assert_eq!(cf.servers[0].services, [Service::Meta, Service::Lock, Service::Data]);
        assert_eq!(cf.data_servers().len(), 3);
        // A file another start wrote never counts.
        let other = JobFile { start: "s2".into(), ..j.clone() };
        assert_eq!(read(&dir, &other).missing(), [0, 1, 2]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_or_lying_server_ends_the_wait_at_once() {
        let dir = std::env::temp_dir().join(format!("weft-rdv-{}", rand::random::<u64>()));
        let j = job(3);
        publish(&dir, &j, &RankRecord { error: Some("cannot listen on 198.18.0.11:7100: Address in use".into()), addr: None, ..rec(1, 3) }, false).unwrap();
        let t = Instant::now();
        let e = wait_all(&dir, &j, Duration::from_secs(30)).unwrap_err().to_string();
        assert!(e.contains("server 1 on n1") && e.contains("Address in use"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        // A file at rank 2 that claims rank 0: that rank's error.
        let j2 = JobFile { start: "s3".into(), ..j };
        publish(&dir, &j2, &rec(0, 3), false).unwrap();
        // A second server claiming rank 0 is refused, naming the first.
        let e = publish(&dir, &j2, &RankRecord { pid: 999, ..rec(0, 3) }, false).unwrap_err().to_string();
        assert!(e.contains("rank 0 already has a server (pid 100 on n0)"), "{e}");
        std::fs::copy(file::rank_path(&dir, "s3", 0), file::rank_path(&dir, "s3", 2)).unwrap();
        assert!(read(&dir, &j2).failed().unwrap().error.as_deref().unwrap().contains("says rank 0"));
        let e = wait_all(&dir, &JobFile { start: "s4".into(), ..job(2) }, Duration::from_millis(50)).unwrap_err().to_string();
        assert!(e.contains("servers 0, 1 did not"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
