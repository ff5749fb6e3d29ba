//! What a server lets in: connections that prove the servers' secret or,
//! in MUNGE mode, a user's uid and gid (the handshake, run by
//! the message layer's server machine, `weft_net::link::server`); namespace requests only as the identity the
//! connection proved; and data requests whose capability allows them
//! (checked here, as the request is decoded: before a rendezvous write's
//! data is granted, and before any work is queued).

use std::time::{SystemTime, UNIX_EPOCH};
use weft_net::link::{Admission, Identity, MungeOutcome};
use weft_net::munge::Munge;
use weft_wire::{rights, CapKey, Challenge, Cred, DataReq, ErrorCode, Hello, Request, Secret, MAX_GROUPS};

/// The keys a server checks peers and requests with.
pub struct Gate {
    secret: Secret,
    caps: CapKey,
    /// MUNGE mode: the `munged` that checks clients' credentials and
    /// makes the server's own, and this server's address as clients dial it.
    munge: Option<(Munge, String)>,
}

/// The right a data operation needs (any one bit of it).
fn needed(op: &DataReq) -> u8 {
    match op {
        DataReq::Write { .. } | DataReq::LeasedWrite { .. } | DataReq::CollWrite { .. } | DataReq::Truncate { .. } => rights::WRITE,
        DataReq::Read { .. } | DataReq::CollRead { .. } | DataReq::Lend { .. } => rights::READ,
        // fsync(2) works on a descriptor open for reading too.
        DataReq::Fsync { .. } => rights::READ | rights::WRITE,
        DataReq::Size { .. } => rights::SIZE,
        DataReq::Delete { .. } => rights::DELETE,
    }
}

/// Unix time in seconds, as capabilities count it.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The supplementary groups of `uid` (at most [`MAX_GROUPS`], as NFS's
/// AUTH_SYS), `gid` first; just `gid` for a uid this system does not know.
fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    use nix::unistd::{getgrouplist, Gid, Uid, User};
    let mut groups = vec![gid];
    if let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid))
        && let Ok(name) = std::ffi::CString::new(user.name)
        && let Ok(list) = getgrouplist(&name, Gid::from_raw(gid))
    {
        groups.extend(list.into_iter().map(Gid::as_raw).filter(|&g| g != gid));
    }
    groups.truncate(MAX_GROUPS + 1);
    groups
}

impl Gate {
    pub fn new(secret: Secret) -> Self {
        Gate { caps: CapKey::derive(&secret), secret, munge: None }
    }

    /// MUNGE mode: clients' credentials are checked with `munge`; they
    /// must name `me`, this server's address in the cluster file.
    pub fn with_munge(secret: Secret, munge: Munge, me: std::net::SocketAddr) -> Self {
        Gate { munge: Some((munge, me.to_string())), ..Gate::new(secret) }
    }

    /// Checks a client's MUNGE credential for this handshake; returns who
    /// it proved and the server's own credential for the `Welcome`. Blocks
    /// on `munged`: called on the verifier thread (`workers::Verifier`).
    pub fn munge_proof(&self, hello: &Hello, challenge: &Challenge, cred: &[u8]) -> MungeOutcome {
        let Some((m, me)) = &self.munge else {
            return Err((ErrorCode::Permission, "this cluster authenticates with its secret, not MUNGE credentials".into()));
        };
        let theirs = m.decode(cred).map_err(|e| (ErrorCode::Permission, format!("credential refused: {e}")))?;
        if theirs.payload != hello.munge_payload(challenge, false, me) {
            return Err((ErrorCode::Permission, format!("the credential was made for another connection or server than this one ({me})")));
        }
        let ours = m.encode(&hello.munge_payload(challenge, true, me)).map_err(|e| (ErrorCode::Internal, format!("the server cannot make its credential: {e}")))?;
        Ok((Identity::Verified { uid: theirs.uid, gid: theirs.gid, groups: groups_of(theirs.uid, theirs.gid) }, ours.into_bytes()))
    }


    /// The key capabilities are issued and checked with.
    pub fn cap_key(&self) -> &CapKey {
        &self.caps
    }

}

impl Admission for Gate {
    /// The secret connections must prove.
    fn secret(&self) -> &Secret {
        &self.secret
    }

    /// `Err(why)` if `req` may not be served: a data request without a
    /// valid capability for its file and operation, or a namespace request
    /// of a MUNGE-verified connection as someone else. A verified user's
    /// request gets the groups the server knows for the uid; verified root
    /// may act for any user (a FUSE mount serving its node's users, as an
    /// NFS client host does).
    fn admit(&self, req: &mut Request, who: &Identity) -> Result<(), String> {
        match req {
            Request::Data { cap, op } => self.caps.check(cap, op.file(), needed(op), unix_now()).map_err(|why| format!("file {}: {why}", op.file().0)),
            // Shared or exclusive alike (flock(2) takes either on any open
            // file): only someone who may open the file locks it.
            Request::Lock(weft_wire::LockReq::Acquire { cap, file, .. } | weft_wire::LockReq::Reclaim { cap, file, .. }) => {
                self.caps.check(cap, *file, rights::READ | rights::WRITE, unix_now()).map_err(|why| format!("lock on file {}: {why}", file.0))
            }
            Request::Meta { cred, .. } => match who {
                Identity::Trusted | Identity::Verified { uid: 0, .. } => Ok(()),
                Identity::Verified { uid, gid, groups } => {
                    if cred.uid != *uid || cred.gid != *gid {
                        return Err(format!("this connection proved uid {uid} gid {gid}; a request as uid {} gid {} is refused", cred.uid, cred.gid));
                    }
                    *cred = Cred::with_groups(*uid, *gid, &groups[1..]);
                    Ok(())
                }
            },
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_wire::{Capability, FileId, Piece};

    #[test]
    fn each_data_operation_needs_its_right() {
        let g = Gate::new(Secret::new(vec![3u8; 32]));
        let f = FileId(5);
        let read = g.cap_key().issue(f, rights::READ, u64::MAX);
        let admit = |mut r: Request| g.admit(&mut r, &Identity::Trusted);
        let write = Request::data(read, DataReq::Write { file: f, pieces: vec![Piece { offset: 0, len: 1 }] });
        assert!(admit(write).unwrap_err().contains("needs write"), "a read capability wrote");
        assert!(admit(Request::data(read, DataReq::Read { file: f, pieces: vec![], order: Default::default() })).is_ok());
        assert!(admit(Request::data(read, DataReq::Fsync { file: f })).is_ok());
        assert!(admit(Request::data(read, DataReq::Delete { file: f })).is_err(), "a read capability deleted");
        assert!(admit(Request::data(read, DataReq::Size { file: f })).is_err());
        assert!(admit(Request::data(Capability::none(f), DataReq::Size { file: f })).is_err());
        let old = g.cap_key().issue(f, rights::SIZE, unix_now() - 1);
        assert!(admit(Request::data(old, DataReq::Size { file: f })).unwrap_err().contains("expired"));
        assert!(admit(Request::Ping).is_ok());
    }

    #[test]
    fn a_verified_user_acts_only_as_itself_with_the_servers_groups() {
        let g = Gate::new(Secret::new(vec![3u8; 32]));
        let alice = Identity::Verified { uid: 1000, gid: 100, groups: vec![100, 7, 8] };
        let stat = |uid, gid, groups: &[u32]| Request::Meta { cred: Cred::with_groups(uid, gid, groups), op: weft_wire::MetaReq::Stat { path: "/".into() } };
        let mut r = stat(1000, 100, &[0, 4242]);
        assert!(g.admit(&mut r, &alice).is_ok());
        // The groups she claimed are replaced by those the server knows.
        assert_eq!(r, stat(1000, 100, &[7, 8]));
        assert!(g.admit(&mut stat(0, 0, &[]), &alice).unwrap_err().contains("proved uid 1000"));
        assert!(g.admit(&mut stat(1000, 0, &[]), &alice).is_err(), "another primary group");
        // Root (a mount serving its node's users) and servers may act for anyone.
        let root = Identity::Verified { uid: 0, gid: 0, groups: vec![0] };
        assert!(g.admit(&mut stat(1000, 100, &[]), &root).is_ok());
        assert!(g.admit(&mut stat(0, 0, &[]), &Identity::Trusted).is_ok());
    }
}
