//! Whom the mount acts as: the user behind each request, for every
//! request that names a path (lookups, listings, opens, creates, changes,
//! removals), so new files are the user's, the metadata service checks
//! the user's rights (again, after the kernel), capabilities carry them,
//! and a cluster with root_squash (where the mount's own root is `nobody`)
//! works for its users.

use crate::fs::WeftFs;
use crate::handle::lock;
use fuser::Request;
use std::time::{Duration, Instant};
use weft_client::Client;

/// A process's groups as read from /proc: for that uid and gid, at that time.
pub(crate) struct SeenGroups {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    at: Instant,
}

/// How long a process's groups read from /proc are reused: every request
/// (each lookup and getattr) would otherwise open and parse the file.
const GROUPS_FRESH: Duration = Duration::from_secs(1);

impl WeftFs {
    /// The client acting as the process behind `req`: its uid, gid and
    /// supplementary groups (from /proc). The kernel has already checked
    /// the permissions (`default_permissions`); the metadata service
    /// checks them again.
    pub(crate) fn caller(&self, req: &Request) -> Client {
        let (uid, gid) = (req.uid(), req.gid());
        if uid == 0 {
            return self.client.clone();
        }
        let pid = req.pid();
        let seen = lock(&self.groups_of_pid).get(&pid).filter(|g| g.uid == uid && g.gid == gid && g.at.elapsed() < GROUPS_FRESH).map(|g| g.groups.clone());
        let groups = seen.or_else(|| self.read_groups(pid, uid, gid)).unwrap_or_default();
        let cred = weft_client::Cred::with_groups(uid, gid, &groups);
        let mut callers = lock(&self.callers);
        if callers.len() >= 256 {
            callers.clear();
        }
        callers.entry(cred).or_insert_with(|| self.client.with_cred(cred)).clone()
    }

    /// The supplementary groups of process `pid` from /proc, if it still
    /// has the request's file-system identity; remembered a moment.
    fn read_groups(&self, pid: u32, uid: u32, gid: u32) -> Option<Vec<u32>> {
        let groups = std::fs::read_to_string(format!("/proc/{pid}/status")).ok().and_then(|status| {
            let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.split_whitespace().filter_map(|x| x.parse::<u32>().ok()).collect::<Vec<_>>());
            // The pid may have been reused since the request: only a process
            // with the request's file-system identity lends its groups.
            let (ids_uid, ids_gid) = (field("Uid:")?, field("Gid:")?);
            (ids_uid.get(3) == Some(&uid) && ids_gid.get(3) == Some(&gid)).then(|| field("Groups:")).flatten()
        })?;
        let mut seen = lock(&self.groups_of_pid);
        if seen.len() >= 1024 {
            seen.clear();
        }
        seen.insert(pid, SeenGroups { uid, gid, groups: groups.clone(), at: Instant::now() });
        Some(groups)
    }
}
