//! An open file: its life (open, capability, hints, atomic mode, size,
//! truncate, fsync, close). Its accesses are split by concept:
//! `plan.rs` (pure: segments to requests), `order.rs` (sending order),
//! `access.rs` (the read and write calls) and `transfer.rs` (moving the
//! bytes).

mod access;
mod local_reads;
mod order;
mod plan;
mod read_ahead;
mod transfer;
mod write_behind;

pub(crate) use plan::{bytes_before, Chunk};
pub use read_ahead::MOST_READ_AHEAD;
pub use write_behind::MOST_WRITE_BEHIND;

use crate::atomic::LockGranularity;
use crate::lock_session::LockGuard;
use crate::session::Session;
use crate::{Error, Result, Schedule};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use weft_layout::{Segment, Striping};
use weft_net::Call;
use weft_wire::limits::MAX_PIECES;
use weft_wire::{Capability, DataReq, FileAttr, Request, Response};

/// [`File`]'s `exact_size` when the handle does not know the size.
pub(crate) const UNKNOWN_SIZE: u64 = u64::MAX;

/// An open Weft file. Reads and writes are positioned (`pread`/`pwrite`
/// style); the handle has no file pointer. Small writes are held to be sent
/// together, and small steady reads read ahead, only if
/// [`File::set_write_behind`] and [`File::set_read_ahead`] ask.
pub struct File {
    session: Arc<Session>,
    path: String,
    attr: FileAttr,
    striping: Striping,
    /// Address of each server in the layout, in stripe order.
    servers: Vec<SocketAddr>,
    writable: bool,
    /// Request size, order and pacing for this file's accesses.
    schedule: Schedule,
    /// MPI atomic mode: every access locks the bytes it touches.
    atomic: bool,
    granularity: LockGranularity,
    /// This handle's write open counts as a writer at the metadata
    /// service (`create`, `open(.., true)`; not `adopt`): its
    /// [`File::close`] reports the size, and until then stat asks the data
    /// servers.
    writer: bool,
    /// Bytes written or truncated through this handle.
    wrote: std::sync::atomic::AtomicBool,
    /// The file's size, when this handle knows it exactly: it made the file
    /// (an exclusive create) and every change since went through it and
    /// succeeded (writes only; a truncate, a failed write or a collective
    /// forgets it: [`UNKNOWN_SIZE`]). Its close reports it instead of asking
    /// the data servers when the metadata service says it was the file's
    /// sole writer.
    exact_size: std::sync::atomic::AtomicU64,
    /// The capability every data request carries, and when to renew it.
    cap: Mutex<Granted>,
    /// Small writes held to be sent together (off unless asked for).
    /// Taken after `read_ahead` when both are (a read-ahead's fetch sends
    /// held writes first), never before it.
    write_behind: Mutex<write_behind::WriteBehind>,
    /// Records fetched ahead of small steady reads (off unless asked for).
    read_ahead: Mutex<read_ahead::ReadAhead>,
    /// The file's name now, when it was renamed since the open (a mount
    /// knows): renewals walk it (see [`File::renamed`]).
    renamed: Mutex<Option<String>>,
    /// The objects this node's servers lent, by layout index (empty until
    /// the first read; see `local_reads.rs`).
    lent: Mutex<Vec<local_reads::Lent>>,
}

/// A handle dropped without [`File::close`] still sends the writes it
/// holds; a failure can only be logged.
impl Drop for File {
    fn drop(&mut self) {
        if let Err(e) = self.flush_writes() {
            tracing::warn!(target: "weft::client", file = self.attr.id.0, error = %e, "writes held by a file dropped without close could not be sent");
        }
    }
}

/// A capability and the instant (this process's clock) past which it is
/// renewed before use: half its lifetime as received, so neither clock
/// skew nor a slow transfer lets it expire in flight.
struct Granted {
    cap: Capability,
    renew_at: Option<Instant>,
}

impl Granted {
    fn new(cap: Capability) -> Self {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let renew_at = (cap.expires != u64::MAX).then(|| Instant::now() + std::time::Duration::from_secs(cap.expires.saturating_sub(now) / 2));
        Granted { cap, renew_at }
    }
}

impl File {
    pub(crate) fn new(session: Arc<Session>, path: &str, attr: FileAttr, cap: Capability, writable: bool) -> Result<Self> {
        let meta = session.cluster.meta_server().addr;
        let layout = attr.layout.clone().ok_or_else(|| Error::IsDir(path.into()))?;
        let striping = Striping::new(layout.stripe_size, layout.servers.len()).map_err(|e| Error::Protocol { addr: meta, what: format!("bad layout: {e}") })?;
        let servers = layout.servers.iter().map(|&s| session.addr_of(s)).collect::<Result<_>>()?;
        let schedule = session.options.schedule.clone();
        let granularity = session.options.lock_granularity;
        Ok(File {
            session,
            path: path.into(),
            attr,
            striping,
            servers,
            writable,
            schedule,
            atomic: false,
            granularity,
            writer: false,
            wrote: std::sync::atomic::AtomicBool::new(false),
            exact_size: std::sync::atomic::AtomicU64::new(UNKNOWN_SIZE),
            cap: Mutex::new(Granted::new(cap)),
            write_behind: Mutex::default(),
            read_ahead: Mutex::default(),
            renamed: Mutex::new(None),
            lent: Mutex::default(),
        })
    }

    /// The capability for this file's data requests, renewed from the
    /// metadata service (in exchange for the old one; rights the file's
    /// mode no longer gives are dropped) when half its lifetime has passed.
    pub fn capability(&self) -> Result<Capability> {
        let mut g = self.cap.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.renew_at.is_some_and(|t| Instant::now() >= t) {
            let meta = self.session.cluster.meta_server().addr;
            // Renewals walk the file's name: a mount may rename it while
            // one is under way, and then it is asked once more by the new one.
            let mut name = self.name();
            let mut answer = self.session.meta(weft_wire::MetaReq::Renew { old: g.cap, path: name.clone() });
            if matches!(answer, Err(Error::Permission(_))) && self.name() != name {
                name = self.name();
                answer = self.session.meta(weft_wire::MetaReq::Renew { old: g.cap, path: name });
            }
            match answer? {
                Response::Cap(cap) => *g = Granted::new(cap),
                other => return Err(Error::Protocol { addr: meta, what: format!("expected a capability, got {other:?}") }),
            }
        }
        Ok(g.cap)
    }

    /// The encoded body of data request `op` on this file, with its capability.
    pub(crate) fn body(&self, op: DataReq) -> Result<Vec<u8>> {
        Ok(Request::data(self.capability()?, op).encode())
    }

    /// Marks a write open the metadata service counted (see `writer`).
    pub(crate) fn registered(mut self) -> Self {
        self.writer = self.writable;
        self
    }

    /// A handle whose exclusive create made the file: empty, and known so.
    pub(crate) fn made_empty(self) -> Self {
        self.exact_size.store(0, std::sync::atomic::Ordering::Relaxed);
        self
    }

    pub fn attr(&self) -> &FileAttr {
        &self.attr
    }

    /// The name the file was opened by.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The file's name now: the one it was opened by, or the last one
    /// [`File::renamed`] gave.
    pub fn name(&self) -> String {
        self.renamed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_else(|| self.path.clone())
    }

    /// The file has name `path` now (renamed since the open). Renewing a
    /// capability walks the file's name again and must find the file
    /// there: a mount that renamed a file, or a directory above it, or set
    /// it aside (removed while open) tells its open handles.
    pub fn renamed(&self, path: &str) {
        *self.renamed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(path.to_string());
    }

    pub fn stripe_size(&self) -> u64 {
        self.striping.stripe_size()
    }

    /// The file's id.
    pub fn id(&self) -> weft_wire::FileId {
        self.attr.id
    }

    pub fn stripe_count(&self) -> usize {
        self.striping.count()
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    pub fn set_schedule(&mut self, schedule: Schedule) {
        self.schedule = schedule;
    }

    /// Applies an MPI-style hint (`weft_sched`, `weft_sched_block`,
    /// `weft_sched_window`, `weft_lock_granularity`); `Ok(false)` for keys
    /// that are not Weft's.
    pub fn set_hint(&mut self, key: &str, value: &str) -> Result<bool> {
        if key == "weft_lock_granularity" {
            self.granularity = value.parse()?;
            return Ok(true);
        }
        self.schedule.set_hint(key, value)
    }

    /// MPI_File_set_atomicity: in atomic mode every access locks exactly
    /// the bytes it touches (or more, per the granularity) for its duration.
    /// Turning it on starts this client's lock session now (connections,
    /// handshakes, first lease), so the first access does not pay for it.
    pub fn set_atomicity(&mut self, on: bool) -> Result<()> {
        if on {
            self.flush_writes()?;
            self.drop_read_ahead();
            self.session.lock_session(self.attr.id)?;
        }
        self.atomic = on;
        Ok(())
    }

    pub fn atomicity(&self) -> bool {
        self.atomic
    }

    pub fn set_lock_granularity(&mut self, g: LockGranularity) {
        self.granularity = g;
    }

    pub fn lock_granularity(&self) -> LockGranularity {
        self.granularity
    }

    /// The extents an atomic access of `segments` locks.
    pub fn lock_extents(&self, segments: &[Segment]) -> Result<Vec<weft_lock::Extent>> {
        // Segments are cut at memory boundaries too; join what touches in the
        // file first, so a million 8-byte memory pieces become a few regions.
        let mut regions: Vec<(u64, u64)> = Vec::new();
        for s in segments {
            match regions.last_mut() {
                Some((o, l)) if *o + *l == s.file => *l += s.len,
                _ => regions.push((s.file, s.len)),
            }
        }
        self.granularity.extents(&regions)
    }

    /// In atomic mode, locks the access's bytes; the guard releases them.
    fn lock_access(&self, segments: &[Segment], exclusive: bool) -> Result<Option<LockGuard>> {
        if !self.atomic {
            return Ok(None);
        }
        let extents = self.lock_extents(segments)?;
        if extents.is_empty() {
            return Ok(None);
        }
        self.session.acquire_lock(self.attr.id, &|| self.capability(), exclusive, &extents, None).map(Some)
    }

    /// How long this file's calls ride through a server's restart
    /// (`ClientOptions::recovery`).
    pub(crate) fn recovery_window(&self) -> std::time::Duration {
        self.session.options.recovery
    }

    /// Whether `e` is a server of this client's going away, which a call
    /// waits for within the recovery window (`Session::may_ride_through`).
    pub(crate) fn may_ride_through(&self, e: &Error) -> bool {
        self.session.may_ride_through(e)
    }

    /// Remembers that this handle changed the file (its close reports the
    /// size) in a way it cannot follow (others' bytes, a truncate): the
    /// size must be measured.
    pub(crate) fn note_write(&self) {
        self.wrote.store(true, std::sync::atomic::Ordering::Relaxed);
        self.forget_size();
        self.drop_read_ahead();
    }

    /// A write was held to be sent later: the handle changed the file.
    fn note_held(&self) {
        self.wrote.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn forget_size(&self) {
        self.exact_size.store(UNKNOWN_SIZE, std::sync::atomic::Ordering::Relaxed);
    }

    /// The file size: the largest object end over the data servers.
    pub fn size(&self) -> Result<u64> {
        self.flush_writes()?;
        let mut size = 0;
        for (server, r) in self.broadcast(DataReq::Size { file: self.attr.id })?.into_iter().enumerate() {
            match r {
                Response::Size { object_size } => size = size.max(self.striping.file_end(server, object_size)),
                other => return Err(Error::Protocol { addr: self.servers[server], what: format!("expected a size, got {other:?}") }),
            }
        }
        Ok(size)
    }

    /// Sets the file size; bytes past it are dropped, bytes up to it read as
    /// zeros where never written.
    pub fn truncate(&self, size: u64) -> Result<()> {
        if !self.writable {
            return Err(Error::BadRequest(format!("{} is open read-only", self.path)));
        }
        self.flush_writes()?;
        self.note_write();
        let cap = self.capability()?;
        let body: Vec<Vec<u8>> = (0..self.servers.len())
            .map(|k| Request::data(cap, DataReq::Truncate { file: self.attr.id, size: self.striping.object_size_for(k, size) }).encode())
            .collect();
        let mut calls: Vec<Call<'_>> = self.servers.iter().zip(body).map(|(&a, b)| Call::new(a, b)).collect();
        self.session.run(&mut calls);
        calls.into_iter().try_for_each(|c| Session::response(c).map(|_| ()))
    }

    /// Returns once every data server has made this file's data durable.
    pub fn fsync(&self) -> Result<()> {
        // MPI's sync is also the reader's half of seeing others' writes.
        self.drop_read_ahead();
        self.send_and_report_writes()?;
        self.broadcast(DataReq::Fsync { file: self.attr.id })?;
        // The file's name and attributes too, as fsync(2) does.
        self.session.sync_meta()
    }

    /// Closes the file, first sending the writes it holds (if
    /// [`File::set_write_behind`] asked for that); use [`File::fsync`] for
    /// durability. A handle opened for writing tells
    /// the metadata service it is closed, with the file's size (asked of
    /// the data servers) if it wrote, so that stat can answer without
    /// asking them. A handle dropped without `close` leaves the service
    /// counting a writer: stat then always asks the data servers (correct,
    /// slower).
    pub fn close(self) -> Result<()> {
        use weft_wire::{MetaReq, Response};
        let sent = self.send_and_report_writes();
        if !self.writer {
            return sent;
        }
        let file = self.attr.id;
        let wrote = self.wrote.load(std::sync::atomic::Ordering::Relaxed);
        // Sent with the close: taken if this handle was alone since the
        // file last had no writer (it then knows every change).
        let exact = self.exact_size.load(std::sync::atomic::Ordering::Relaxed);
        let r = match self.session.meta(MetaReq::Close { file, wrote, size: (exact != UNKNOWN_SIZE).then_some(exact) }) {
            // The last writer is gone: every write is done, so the size
            // measured now is the file's. (A sole writer that knew the
            // size gave it with the close, and was answered `Ok`.)
            Ok(Response::Measure { epoch, .. }) => self.size().and_then(|size| self.session.meta(MetaReq::SetSize { file, epoch, size })).map(|_| ()),
            other => other.map(|_| ()),
        };
        let closed = match r {
            // Removed meanwhile, or no longer ours to write: the data is
            // unaffected; the file's stats just keep asking the data servers.
            Err(Error::NotFound(_) | Error::Permission(_)) => Ok(()),
            // The metadata server went away with the close unanswered (it
            // is not sent again: a second one could leave another writer
            // uncounted). Nothing is lost: the data is on the data servers,
            // and a writer left counted only makes stats ask them.
            Err(e @ Error::Net(weft_net::NetError::Unreachable { .. } | weft_net::NetError::Closed { .. } | weft_net::NetError::Stopping { .. })) => {
                tracing::warn!(target: "weft::client", file = file.0, error = %e, "a write close went unanswered; stats of the file ask the data servers from now on (until the metadata service restarts)");
                Ok(())
            }
            other => other,
        };
        sent.and(closed)
    }

    /// [`File::close`] for a handle whose writes other processes made (MPI-IO's
    /// rank 0 closes for the job after a barrier): reports the size as if
    /// this handle had written.
    pub fn close_after_writes_elsewhere(self) -> Result<()> {
        self.note_write();
        self.close()
    }

    /// An access's requests (see [`plan::plan`]), at most `block` bytes and
    /// `MAX_PIECES` pieces each.
    pub(crate) fn plan(&self, segments: &[Segment], block: u64) -> Result<Vec<Chunk>> {
        self.plan_capped(segments, block, MAX_PIECES)
    }

    /// [`File::plan`] with at most `most_pieces` pieces per request.
    pub(crate) fn plan_capped(&self, segments: &[Segment], block: u64, most_pieces: usize) -> Result<Vec<Chunk>> {
        plan::plan(&self.striping, segments, block, most_pieces, self.session.options.list_io)
    }
}
