//! Whom the mount acts as: the user behind each request, for every
//! request that names a path (lookups, listings, opens, creates, changes,
//! removals), so new files are the user's, the metadata service checks
//! the user's rights (again, after the kernel), capabilities carry them,
//! and a cluster with root_squash (where the mount's own root is `nobody`)
//! works for its users.

use crate::fs::WeftFs;
use crate::handle::lock;
use fuser::Request;
use weft_client::Client;

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
        let groups = std::fs::read_to_string(format!("/proc/{}/status", req.pid())).ok().and_then(|status| {
            let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.split_whitespace().filter_map(|x| x.parse::<u32>().ok()).collect::<Vec<_>>());
            // The pid may have been reused since the request: only a process
            // with the request's file-system identity lends its groups.
            let (ids_uid, ids_gid) = (field("Uid:")?, field("Gid:")?);
            (ids_uid.get(3) == Some(&uid) && ids_gid.get(3) == Some(&gid)).then(|| field("Groups:")).flatten()
        });
        let groups = groups.unwrap_or_default();
        let cred = weft_client::Cred::with_groups(uid, gid, &groups);
        let mut callers = lock(&self.callers);
        if callers.len() >= 256 {
            callers.clear();
        }
        callers.entry(cred).or_insert_with(|| self.client.with_cred(cred)).clone()
    }
}
