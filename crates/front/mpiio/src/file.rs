//! One Weft file opened through MPI-IO: its client file, the communicator
//! it was opened on, its view, its individual file pointer and its shared
//! file pointer (a counter in the metadata service), and the MPI semantics
//! of each operation on them.

use crate::comm::CComm;
use crate::errors::{Class, Fail, Result};
use crate::hints::Hints;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use weft_client::comm::{allgather_u64, allgather_u64s, broadcast_vec};
use weft_client::{collective, Client, Communicator, CreateOptions, Datatype, File, FileAttr, PointerOp, View};
use weft_net::ClusterFile;
use weft_wire::Capability;

/// Access modes, as plain bits (the shim translates its MPI's `MPI_MODE_*`).
pub mod amode {
    pub const RDONLY: u32 = 1;
    pub const RDWR: u32 = 2;
    pub const WRONLY: u32 = 4;
    pub const CREATE: u32 = 8;
    pub const EXCL: u32 = 16;
    pub const DELETE_ON_CLOSE: u32 = 32;
    pub const UNIQUE_OPEN: u32 = 64;
    pub const SEQUENTIAL: u32 = 128;
    pub const APPEND: u32 = 256;
    pub const ALL: u32 = 511;
}

/// The caller's memory: read into, or written from.
pub enum Buf<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

/// Where an access starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// An explicit offset, in etypes of the view.
    At(i64),
    /// The individual file pointer, advanced by the access.
    Individual,
    /// The shared file pointer, advanced atomically by the access.
    Shared,
    /// The shared file pointer, collectively, in rank order.
    Ordered,
}

/// The process's connection to the cluster named by `WEFT_CLUSTER`, made at
/// the first open (a failure is retried at the next).
static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

pub(crate) fn client() -> Result<Client> {
    let mut slot = CLIENT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(c) = slot.as_ref() {
        return Ok(c.clone());
    }
    let vars = weft_net::settings::Vars::env();
    let path = ClusterFile::locate(None, &vars).map_err(|e| Fail::new(Class::Io, format!("weft: {e} (the MPI-IO library reads WEFT_CLUSTER; with Open MPI pass it to the ranks with -x WEFT_CLUSTER)")))?;
    let options = weft_client::ClientOptions::from_vars(&vars).map_err(|e| Fail::new(Class::Arg, format!("weft: {e}")))?;
    let cf = ClusterFile::load(&path).map_err(|e| Fail::new(Class::Io, format!("weft: {e}")))?;
    let c = Client::with_options(cf, options).map_err(Fail::from)?;
    *slot = Some(c.clone());
    Ok(c)
}

/// This host, as a number: a hash of its name (one aggregator per node).
fn host_id() -> u64 {
    use std::hash::{Hash, Hasher};
    // Read once: a rank does not move between hosts.
    static HOST: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HOST.get_or_init(|| {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.trim().hash(&mut h);
        h.finish()
    })
}

/// The checks MPI asks of an access mode (MPI-3.1 §13.2.1).
pub fn check_amode(mode: u32) -> Result<()> {
    let rw = [amode::RDONLY, amode::RDWR, amode::WRONLY].iter().filter(|&&b| mode & b != 0).count();
    if mode & !amode::ALL != 0 || rw != 1 {
        return Err(Fail::new(Class::Amode, "access mode needs exactly one of MPI_MODE_RDONLY, MPI_MODE_RDWR, MPI_MODE_WRONLY"));
    }
    if mode & amode::RDONLY != 0 && mode & (amode::CREATE | amode::EXCL) != 0 {
        return Err(Fail::new(Class::Amode, "MPI_MODE_RDONLY cannot be combined with MPI_MODE_CREATE or MPI_MODE_EXCL"));
    }
    if mode & amode::RDWR != 0 && mode & amode::SEQUENTIAL != 0 {
        return Err(Fail::new(Class::Amode, "MPI_MODE_RDWR cannot be combined with MPI_MODE_SEQUENTIAL"));
    }
    if mode & amode::SEQUENTIAL != 0 {
        return Err(Fail::new(Class::UnsupportedOperation, "weft: MPI_MODE_SEQUENTIAL is not supported (Weft files are random-access)"));
    }
    Ok(())
}

/// What rank 0 tells the others after asking the metadata service.
/// Rank 0's open, passed on: the attributes and capability of the file,
/// the shared pointer's token and start.
type Opened = (FileAttr, Capability, u64, u64);

fn encode_opened(r: &Result<Opened>) -> Vec<u8> {
    let mut e = weft_wire::Encoder::new();
    match r {
        Ok((attr, cap, token, start)) => {
            e.u8(0).u64(*token).u64(*start);
            attr.encode(&mut e);
            cap.encode(&mut e);
        }
        Err(f) => {
            e.u8(1).u32(f.class as u32).str(&f.message);
        }
    }
    e.finish()
}

fn decode_opened(b: &[u8]) -> Result<Opened> {
    let corrupt = |e: weft_wire::DecodeError| Fail::new(Class::Intern, format!("weft: open result from rank 0 undecodable: {e}"));
    let mut d = weft_wire::Decoder::new(b);
    match d.u8().map_err(corrupt)? {
        0 => {
            let (token, start) = (d.u64().map_err(corrupt)?, d.u64().map_err(corrupt)?);
            Ok((FileAttr::decode(&mut d).map_err(corrupt)?, Capability::decode(&mut d).map_err(corrupt)?, token, start))
        }
        _ => {
            let class = d.u32().map_err(corrupt)?;
            let message = d.str("message", 1 << 16).map_err(corrupt)?;
            Err(Fail::new(class_of(class), message))
        }
    }
}

fn class_of(v: u32) -> Class {
    use Class::*;
    [NoSuchFile, FileExists, Access, Amode, ReadOnly, NotSame, Io, NoSpace, UnsupportedOperation, UnsupportedDatarep, Arg, Count, Type, BadFile, Comm, Intern, Other]
        .into_iter()
        .find(|c| *c as u32 == v)
        .unwrap_or(Io)
}

/// Broadcasts rank 0's outcome of a step only it performed, so that every
/// rank returns the same result from a collective call.
fn agree(comm: &CComm, mine: Result<()>) -> Result<()> {
    let mut msg = if comm.rank() == 0 {
        let r: Result<Opened> = mine.map(|()| (placeholder_attr(), Capability::none(weft_wire::FileId(0)), 0, 0));
        encode_opened(&r)
    } else {
        Vec::new()
    };
    broadcast_vec(comm, &mut msg, 0)?;
    decode_opened(&msg).map(|_| ())
}

fn placeholder_attr() -> FileAttr {
    FileAttr { id: weft_wire::FileId(0), kind: weft_wire::FileKind::Dir, mode: 0, uid: 0, gid: 0, mtime_ns: 0, ctime_ns: 0, nlink: 1, layout: None }
}

/// An open Weft file and its MPI-IO state.
pub struct OpenFile {
    pub file: File,
    pub comm: CComm,
    pub amode: u32,
    view: View,
    /// Individual file pointer, in etypes of the view (atomic: moved by
    /// nonblocking accesses posted under the file's read lock).
    pos: AtomicU64,
    /// Names this open's shared file pointer in the metadata service.
    token: u64,
    pub hints: Hints,
    /// Rank 0's write open, counted by the metadata service as the job's
    /// one writer: closed (with the file's size) after every rank is done.
    registration: Option<File>,
}

impl OpenFile {
    /// MPI_File_open, collective over `comm`: rank 0 alone asks the
    /// metadata service (creating if asked), then passes the file's
    /// attributes to the others. Every rank returns the same outcome.
    pub fn open(comm: CComm, path: &str, mode: u32, hints: Vec<(String, String)>) -> Result<OpenFile> {
        let client = client();
        // One exchange settles what every rank must agree on (the mode, and
        // whether each reached the cluster file) and tells each rank's host
        // (for the hints).
        let mine = u64::from(mode) | (u64::from(client.is_ok()) << 32);
        let (all, hosts): (Vec<u64>, Vec<u64>) = allgather_u64s(&comm, [mine, host_id()])?.into_iter().map(|[m, h]| (m, h)).unzip();
        if all.iter().any(|&m| m as u32 != mode) {
            return Err(Fail::new(Class::NotSame, format!("weft: ranks opened {path} with different access modes")));
        }
        if let Some(r) = all.iter().position(|&m| m >> 32 == 0) {
            return Err(match client {
                Err(e) if r == comm.rank() => e,
                _ => Fail::new(Class::Io, format!("weft: rank {r} could not load the cluster file")),
            });
        }
        let client = client?;
        check_amode(mode)?;
        let writable = mode & (amode::WRONLY | amode::RDWR) != 0;
        let mut msg = Vec::new();
        let mut registration = None;
        if comm.rank() == 0 {
            let resolved = Self::resolve(&client, path, mode, &hints).and_then(|(f, token, start)| {
                let (attr, cap) = (f.attr().clone(), f.capability()?);
                registration = Some(f);
                Ok((attr, cap, token, start))
            });
            msg = encode_opened(&resolved);
        }
        broadcast_vec(&comm, &mut msg, 0)?;
        let (attr, cap, token, start) = decode_opened(&msg)?;
        // Every rank must end up with a handle, or none may.
        let adopted = client.adopt(path, attr, cap, writable);
        let oks = allgather_u64(&comm, u64::from(adopted.is_ok()))?;
        if let Some(r) = oks.iter().position(|&ok| ok == 0) {
            return Err(match adopted {
                Err(e) => e.into(),
                Ok(_) => Fail::new(Class::Io, format!("weft: rank {r} could not open {path}")),
            });
        }
        let mut file = adopted?;
        let mut h = Hints::new(hosts);
        // Cannot fail: nothing is held yet.
        let _ = file.set_write_behind(h.write_behind());
        file.set_read_ahead(h.read_ahead());
        h.apply(&mut file, &hints);
        Ok(OpenFile { file, comm, amode: mode, view: View::bytes(), pos: start.into(), token, hints: h, registration })
    }

    /// Rank 0's part of open: create or open, and start the shared pointer.
    fn resolve(client: &Client, path: &str, mode: u32, hints: &[(String, String)]) -> Result<(File, u64, u64)> {
        let writable = mode & (amode::WRONLY | amode::RDWR) != 0;
        let file = if mode & amode::CREATE != 0 {
            let (stripe_size, stripe_count) = Hints::layout(hints);
            let opts = CreateOptions { mode: 0o644, exclusive: mode & amode::EXCL != 0, stripe_size, stripe_count };
            client.create(path, opts)?
        } else {
            client.open(path, writable)?
        };
        let start = if mode & amode::APPEND != 0 { file.size()? } else { 0 };
        let token = rand::random::<u64>();
        client.shared_pointer(token, PointerOp::Set(start))?;
        Ok((file, token, start))
    }

    /// MPI_File_close, collective: after every rank is done, rank 0 forgets
    /// the shared pointer and, with MPI_MODE_DELETE_ON_CLOSE, deletes the file.
    pub fn close(&mut self) -> Result<()> {
        if std::env::var_os("WEFT_COLL_REPORT").is_some() {
            use std::io::Write;
            let [two, server, own] = weft_client::collective::calls_taken();
            // One write: ranks' lines must not interleave mid-line.
            let line = format!("weft: rank {}: collective calls so far: two-phase {two}, server-directed {server}, independent {own}\n", self.comm.rank());
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        // This rank's held writes land before rank 0 measures the size; a
        // send that failed earlier (at a barrier, say) is this close's error.
        let sent = self.file.send_and_report_writes().map_err(Fail::from);
        self.comm.barrier()?;
        let mine = if self.comm.rank() == 0 {
            (|| {
                let client = client()?;
                let _ = client.shared_pointer(self.token, PointerOp::Release);
                // Every rank is done writing: the job's one write open ends.
                let closed = self.registration.take().map_or(Ok(()), File::close_after_writes_elsewhere);
                if self.amode & amode::DELETE_ON_CLOSE != 0 {
                    client.unlink(self.file.path())?;
                }
                closed.map_err(Into::into)
            })()
        } else {
            Ok(())
        };
        sent.and(agree(&self.comm, mine))
    }

    /// MPI_File_set_view, collective: resets both file pointers to zero.
    /// `types` is `Err` when this rank's own arguments were refused: it
    /// still takes part in the collective steps, then returns that error.
    pub fn set_view(&mut self, disp: i64, types: Result<(Datatype, Datatype)>) -> Result<()> {
        let view = types.and_then(|(etype, filetype)| View::new(disp, etype, filetype).map_err(|e| Fail::new(Class::Arg, format!("weft: {e}"))));
        // Every rank takes part in the reset even if its own view is bad.
        self.comm.barrier()?;
        let reset = if self.comm.rank() == 0 { self.shared(PointerOp::Set(0)).map(|_| ()) } else { Ok(()) };
        agree(&self.comm, reset)?;
        self.view = view?;
        *self.pos.get_mut() = 0;
        Ok(())
    }

    fn etype_size(&self) -> u64 {
        self.view.etype().size()
    }

    fn shared(&self, op: PointerOp) -> Result<u64> {
        client()?.shared_pointer(self.token, op).map_err(|e| {
            // The pointer is gone (a metadata restart), not the file.
            let f = Fail::from(e);
            if f.class == Class::NoSuchFile { Fail::new(Class::Io, f.message) } else { f }
        })
    }

    fn check_dir(&self, write: bool) -> Result<()> {
        match write {
            true if self.amode & amode::RDONLY != 0 => Err(Fail::new(Class::ReadOnly, format!("weft: {} was opened MPI_MODE_RDONLY", self.file.path()))),
            false if self.amode & amode::WRONLY != 0 => Err(Fail::new(Class::Access, format!("weft: {} was opened MPI_MODE_WRONLY", self.file.path()))),
            _ => Ok(()),
        }
    }

    /// One read or write of `count` copies of `memtype`, laid out in `buf`
    /// as `memtype` says (`buf` starts at the copies' true lower bound, see
    /// [`crate::memory::memory_span`]), at `pos` in the view. Returns the bytes moved.
    ///
    /// `access` is `Err` when this rank's own arguments were refused before
    /// reaching here; for an ordered access the rank still takes part in
    /// the collective steps (adding nothing), so the others do not wait.
    ///
    /// `collective` marks the `_all` forms: with explicit offsets or the
    /// individual pointer they go through [`weft_client::collective`] (in
    /// atomic mode under one lock for the whole collective), and a rank
    /// whose own arguments were refused still takes part, moving nothing.
    pub fn access(&self, pos: Position, collective: bool, write: bool, access: Result<(Buf<'_>, &Datatype)>) -> Result<u64> {
        let esize = self.etype_size();
        // Everything this rank can check on its own, first.
        let local = access.and_then(|(buf, memtype)| Ok((buf, memtype, self.etypes_of(write, memtype)?)));
        let start: Result<u64> = match pos {
            Position::Ordered => {
                // Every rank takes part, whatever its own access; a rank
                // whose access is refused adds nothing.
                let n = local.as_ref().map_or(0, |l| l.2);
                let all = allgather_u64(&self.comm, n)?;
                let total = all.iter().try_fold(0u64, |a, &b| a.checked_add(b)).ok_or_else(|| Fail::new(Class::Arg, "weft: ordered access sizes overflow"));
                let base = if self.comm.rank() == 0 { total.and_then(|t| self.shared(PointerOp::FetchAdd(t))) } else { Ok(0) };
                let mut b = base.as_ref().map_or(u64::MAX, |&v| v).to_le_bytes();
                self.comm.broadcast(&mut b, 0)?;
                let base = match u64::from_le_bytes(b) {
                    u64::MAX => return Err(base.err().unwrap_or_else(|| Fail::new(Class::Io, "weft: rank 0 could not advance the shared file pointer"))),
                    v => v,
                };
                local.as_ref().map_err(Clone::clone)?;
                Ok(base.checked_add(all[..self.comm.rank()].iter().sum::<u64>()).ok_or_else(|| Fail::new(Class::Arg, "weft: shared file pointer overflows"))?)
            }
            Position::At(o) => u64::try_from(o).map_err(|_| Fail::new(Class::Arg, format!("weft: negative offset {o}"))),
            Position::Individual => Ok(self.pos.load(Relaxed)),
            Position::Shared => match &local {
                Err(e) => return Err(e.clone()),
                Ok((_, _, 0)) => return Ok(0),
                Ok((_, _, n)) => self.shared(PointerOp::FetchAdd(*n)),
            },
        };
        let prepared = local.and_then(|l| start.map(|s| (l, s)));
        let gathered = collective && matches!(pos, Position::At(_) | Position::Individual);
        let moved = if gathered {
            self.collective_access(write, prepared.map(|((buf, memtype, _), start)| (buf, memtype, start)))?
        } else {
            let ((buf, memtype, etypes), start) = prepared?;
            if etypes == 0 {
                return Ok(0);
            }
            match buf {
                Buf::Write(b) => self.file.write_view(&self.view, start, b, memtype, 1)? as u64,
                Buf::Read(b) => self.file.read_view(&self.view, start, b, memtype, 1)? as u64,
            }
        };
        if pos == Position::Individual {
            self.pos.fetch_add(moved / esize, Relaxed);
        }
        Ok(moved)
    }

    /// The etypes an access of `memtype` moves, after the checks that need
    /// no other rank: the access mode allows it, a write's view has no
    /// overlapping pieces, and it is a whole number of etypes.
    fn etypes_of(&self, write: bool, memtype: &Datatype) -> Result<u64> {
        let esize = self.etype_size();
        self.check_dir(write)?;
        if write {
            self.view.check_writable().map_err(|e| Fail::new(Class::Arg, format!("weft: {e}")))?;
        }
        let bytes = memtype.size();
        if !bytes.is_multiple_of(esize) {
            return Err(Fail::new(Class::Arg, format!("weft: access of {bytes} bytes is not a whole number of {esize}-byte etypes")));
        }
        Ok(bytes / esize)
    }

    /// Claims a nonblocking independent access's place at its posting, as
    /// MPI orders (the call that initiates the access moves the pointer):
    /// the individual or the shared file pointer moves on at once by the
    /// etypes requested, and the access runs at the offset it had, so later
    /// calls see it moved whenever the access completes. Errors found here
    /// are the call's own.
    pub fn claim(&self, pos: Position, write: bool, memtype: &Datatype) -> Result<Position> {
        let etypes = self.etypes_of(write, memtype)?;
        match pos {
            Position::Individual => {
                let fits = |p: u64| p.checked_add(etypes).filter(|&end| i64::try_from(end).is_ok());
                let at = self.pos.fetch_update(Relaxed, Relaxed, fits).map_err(|_| Fail::new(Class::Arg, "weft: file pointer past the largest offset"))?;
                Ok(Position::At(at as i64))
            }
            // Nothing to move: the access moves nothing either.
            Position::Shared if etypes == 0 => Ok(Position::At(0)),
            Position::Shared => {
                let at = self.shared(PointerOp::FetchAdd(etypes))?;
                Ok(Position::At(i64::try_from(at).map_err(|_| Fail::new(Class::Arg, "weft: shared file pointer past the largest offset"))?))
            }
            Position::At(o) if o < 0 => Err(Fail::new(Class::Arg, format!("weft: negative offset {o}"))),
            Position::Ordered => Err(Fail::new(Class::Arg, "weft: an ordered access has no nonblocking form")),
            p => Ok(p),
        }
    }

    /// A collective read or write through two-phase I/O; a rank with an
    /// error of its own takes part with nothing to move, then reports it.
    fn collective_access(&self, write: bool, prepared: Result<(Buf<'_>, &Datatype, u64)>) -> Result<u64> {
        let hints = self.hints.collective(write);
        let prepared = prepared.and_then(|(buf, memtype, start)| {
            let len = match &buf {
                Buf::Write(b) => b.len(),
                Buf::Read(b) => b.len(),
            };
            let segs = self.file.view_segments(&self.view, start, len, memtype, 1).map_err(Fail::from)?;
            Ok((buf, segs))
        });
        let (buf, segs) = match prepared {
            Ok(p) => p,
            Err(e) => {
                let _ = if write { collective::write_all(&self.file, &self.comm, &[], &[], &hints) } else { collective::read_all(&self.file, &self.comm, &[], &mut [], &hints) };
                return Err(e);
            }
        };
        Ok(match buf {
            Buf::Write(b) => collective::write_all(&self.file, &self.comm, &segs, b, &hints)?,
            Buf::Read(b) => collective::read_all(&self.file, &self.comm, &segs, b, &hints)?,
        })
    }

    /// MPI_File_seek (`shared` false) and MPI_File_seek_shared: `whence` 0
    /// set, 1 current, 2 end. The shared form is collective.
    /// Under the file's read lock: nonblocking accesses posted earlier hold
    /// it while they run (one waiting for a byte-range lock, for as long as
    /// that takes), and a seek must not wait for them: their places were
    /// claimed when they were posted.
    pub fn seek(&self, offset: i64, whence: i32, shared: bool) -> Result<()> {
        if !shared {
            let to = self.seek_target(offset, whence, self.pos.load(Relaxed))?;
            self.pos.store(to, Relaxed);
            return Ok(());
        }
        // Collective, all ranks giving the same offset and whence: once every
        // rank's earlier shared accesses are done, rank 0 alone reads the
        // pointer, moves it, and tells the others the outcome.
        self.comm.barrier()?;
        let set = if self.comm.rank() == 0 {
            let current = if whence == 1 { self.shared(PointerOp::FetchAdd(0)) } else { Ok(0) };
            current.and_then(|c| self.seek_target(offset, whence, c)).and_then(|t| self.shared(PointerOp::Set(t)).map(|_| ()))
        } else {
            Ok(())
        };
        agree(&self.comm, set)
    }

    /// Where a seek lands, in etypes; `current` is the pointer being moved.
    fn seek_target(&self, offset: i64, whence: i32, current: u64) -> Result<u64> {
        let base = match whence {
            0 => 0,
            1 => current,
            2 => self.end_in_etypes()?,
            w => return Err(Fail::new(Class::Arg, format!("weft: seek whence {w}"))),
        };
        let t = i64::try_from(base).ok().and_then(|b| b.checked_add(offset));
        t.and_then(|t| u64::try_from(t).ok()).ok_or_else(|| Fail::new(Class::Arg, format!("weft: seek to {base} + {offset} is before the start of the view")))
    }

    /// The individual (or shared) file pointer, in etypes.
    pub fn position(&self, shared: bool) -> Result<u64> {
        if shared { self.shared(PointerOp::FetchAdd(0)) } else { Ok(self.pos.load(Relaxed)) }
    }

    /// MPI_File_get_byte_offset: the file byte an etype offset of the view lands on.
    pub fn byte_offset(&self, offset: i64) -> Result<u64> {
        let o = u64::try_from(offset).map_err(|_| Fail::new(Class::Arg, format!("weft: negative offset {offset}")))?;
        let start = o.checked_mul(self.etype_size()).ok_or_else(|| Fail::new(Class::Arg, "weft: offset overflows"))?;
        Ok(self.view.file_regions(start, 1).next().map_or(self.view.disp(), |(at, _)| at))
    }

    /// The end of file as an etype offset of the view: the etypes of the
    /// data stream that lie before the file's size.
    fn end_in_etypes(&self) -> Result<u64> {
        let size = self.file.size()?;
        let v = &self.view;
        let ft = v.filetype();
        if size <= v.disp() || ft.size() == 0 {
            return Ok(0);
        }
        let ext = ft.extent() as u64;
        let tiles = (size - v.disp()) / ext;
        let base = v.disp() + tiles * ext;
        let partial: u64 = ft.regions(base as i64).map(|(o, l)| (size.saturating_sub(o as u64)).min(l)).sum();
        Ok((tiles * ft.size() + partial) / self.etype_size())
    }

    /// MPI_File_set_size and MPI_File_preallocate (`grow_only`), collective:
    /// rank 0 changes the size, every rank returns its outcome.
    pub fn set_size(&self, size: i64, grow_only: bool) -> Result<()> {
        // Every rank's held writes come before the change, in each rank's
        // program order: sent, then rank 0 changes the size.
        let sent = self.file.flush_writes().map_err(Fail::from);
        self.comm.barrier()?;
        let size = u64::try_from(size).map_err(|_| Fail::new(Class::Arg, format!("weft: negative size {size}")));
        let mine = match (self.comm.rank(), &size) {
            (0, Ok(s)) if self.amode & amode::RDONLY != 0 => Err(Fail::new(Class::ReadOnly, format!("weft: {} was opened MPI_MODE_RDONLY (size {s})", self.file.path()))),
            (0, Ok(s)) => (|| {
                if !grow_only || self.file.size()? < *s {
                    self.file.truncate(*s)?;
                }
                Ok(())
            })(),
            (0, Err(e)) => Err(e.clone()),
            _ => Ok(()),
        };
        let r = sent.and(agree(&self.comm, mine));
        // Rank 0's truncate dropped its own read-ahead; the size changed
        // for every rank.
        self.file.drop_read_ahead();
        r
    }

    /// MPI_File_sync, collective: every rank's data durable, then a barrier.
    pub fn sync(&self) -> Result<()> {
        let r = self.file.fsync().map_err(Fail::from);
        self.comm.barrier()?;
        r
    }

    pub fn set_atomicity(&mut self, on: bool) -> Result<()> {
        let r = self.file.set_atomicity(on).map_err(Fail::from);
        self.comm.barrier()?;
        r
    }

    pub fn view(&self) -> &View {
        &self.view
    }
}

/// MPI_File_delete of a Weft path: not collective, any rank may call it.
pub fn delete(path: &str) -> Result<()> {
    Ok(client()?.unlink(path)?)
}
