//! The data service: each file's stripe object on this server is one local
//! file, `objects/<file id as 16 hex digits>`, made on first write (a local
//! create costs 0.3-1 ms here, so objects are not made for every file up
//! front): from a spare made ahead of need when one is ready ([`spares`]).
//!
//! Reads past an object's end return zeros; the response carries the object's
//! size so the client can tell a hole from the end of the file.

mod block_cache;
pub mod coll_plan;
mod sieve;
mod spares;
mod tombstones;
mod write_back;

pub use sieve::sieve_extent;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use weft_wire::{FileId, Piece};

/// Most object files kept open; past it the cache is cleared (opens are cheap,
/// running out of descriptors is not).
const MAX_OPEN_OBJECTS: usize = 512;

/// An open stripe object.
pub struct Object {
    file: File,
    /// Writes hold it shared; a sieving read-modify-write holds it alone, so
    /// no other write can land between its read and its write-back. This
    /// server is the only writer of its objects, so the lock is enough.
    rmw: RwLock<()>,
}

pub struct DataService {
    objects: PathBuf,
    /// One `Object` per open file id: all threads share its `rmw` lock.
    open: Mutex<HashMap<FileId, Arc<Object>>>,
    /// Set when an object file was created since the last directory fsync:
    /// a new file is durable only once its directory entry is.
    dir_dirty: AtomicBool,
    /// Start write-back of large writes right away (`WEFT_WRITE_BEHIND=0` turns it off).
    write_behind: bool,
    /// Files deleted here: their objects are never created again.
    deleted: Mutex<tombstones::Tombstones>,
    /// Paper 001's traditional caching mode (`WEFT_DATA_CACHE`), if on.
    cache: Option<block_cache::BlockCache>,
    /// When the cache's dirty blocks were last all written back.
    flushed: Mutex<std::time::Instant>,
    /// Empty objects made ahead of need (`None`: their directory could not
    /// be made; objects are then created as they come).
    spares: Option<Arc<spares::Spares>>,
}

impl DataService {
    /// Opens the service in `dir`, as `config` says (its caching mode
    /// and write-behind).
    pub fn open(dir: &Path, config: &crate::ServerConfig) -> io::Result<Self> {
        Self::open_with(dir, config.data_cache.map(|c| block_cache::BlockCache::new(c.bytes, c.block)), config.write_behind)
    }

    fn open_with(dir: &Path, cache: Option<block_cache::BlockCache>, write_behind: bool) -> io::Result<Self> {
        let objects = dir.join("objects");
        std::fs::create_dir_all(&objects)?;
        // Dirty at start: objects created before a crash may not have had
        // their directory entries synced, and nothing remembers that across
        // the restart, so the first fsync syncs the directory too.
        let deleted = Mutex::new(tombstones::Tombstones::open(&dir.join("deleted.log"))?);
        if let Some(c) = &cache {
            tracing::info!(target: "weft::server", block = c.block(), "data service in traditional caching mode");
        }
        let spares = spares::Spares::start(&dir.join("spare"))
            .inspect_err(|e| tracing::warn!(target: "weft::server", error = %e, "no spare objects: each object is created at its first write"))
            .ok();
        Ok(DataService { objects, open: Mutex::new(HashMap::new()), dir_dirty: AtomicBool::new(true), write_behind, deleted, cache, flushed: Mutex::new(std::time::Instant::now()), spares })
    }

    /// An object by id for the cache's write-backs.
    fn existing(&self, file: FileId) -> io::Result<Option<Arc<Object>>> {
        self.object(file, false)
    }

    /// Write-behind: the next request after [`block_cache::FLUSH_EVERY`]
    /// writes every dirty block back.
    fn flush_if_due(&self, c: &block_cache::BlockCache) {
        let mut last = lock(&self.flushed);
        if last.elapsed() >= block_cache::FLUSH_EVERY {
            *last = std::time::Instant::now();
            drop(last);
            c.flush_all(&|id| self.existing(id));
        }
    }

    /// Runs `op`, direct I/O on `file` (a collective's runs, a truncate),
    /// past the cache: its cached writes go to disk first and its blocks
    /// are forgotten, with no cached access running meanwhile.
    fn direct<R>(&self, file: FileId, op: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match &self.cache {
            Some(c) => {
                let o = self.object(file, false)?;
                c.bypass(file, o.as_ref().map(|o| &o.file), op)
            }
            None => op(),
        }
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.objects.join(format!("{:016x}", file.0))
    }

    /// The open object, created if `create`; `None` if absent and not created.
    fn object(&self, file: FileId, create: bool) -> io::Result<Option<Arc<Object>>> {
        if let Some(f) = lock(&self.open).get(&file) {
            return Ok(Some(f.clone()));
        }
        let path = self.path(file);
        let f = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && create && lock(&self.deleted).contains(file) => {
                return Err(io::Error::new(io::ErrorKind::NotFound, format!("file {} was deleted; its data is gone", file.0)));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                let f = match self.spares.as_ref().map(|s| s.take_as(&path)).transpose()?.flatten() {
                    Some(f) => f,
                    None => OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path)?,
                };
                self.dir_dirty.store(true, Ordering::Release);
                f
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut open = lock(&self.open);
        if open.len() >= MAX_OPEN_OBJECTS {
            // Objects in use stay: a second `Object` for the same file would
            // have a second `rmw` lock.
            open.retain(|_, o| Arc::strong_count(o) > 1);
        }
        // Another thread may have opened it meanwhile: its entry wins.
        let o = open.entry(file).or_insert_with(|| Arc::new(Object { file: f, rmw: RwLock::new(()) }));
        Ok(Some(o.clone()))
    }

    /// A read-only descriptor of `file`'s object, for a client on this
    /// node to read it itself (`DataReq::Lend`); `None` while the object
    /// does not exist. Not in caching mode, whose writes may not be in the
    /// object yet. A descriptor of its own, never the service's (which is
    /// open for writing too).
    pub fn lend(&self, file: FileId) -> io::Result<Option<File>> {
        if self.cache.is_some() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "objects are not lent in caching mode"));
        }
        match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(self.path(file)) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes `payload` to the pieces in list order (pieces were validated
    /// by the decoder; `payload.len()` equals their total).
    ///
    /// Write-behind: a large write asks the kernel to start writing its pages
    /// back now (`POSIX_FADV_DONTNEED` starts write-back of dirty pages and
    /// leaves them cached until clean), so the disk works while the next
    /// requests are still on the network and a later fsync has little left.
    ///
    /// Many small pieces close together are written by data sieving (see
    /// [`sieve`]): one read and one write of the extent that covers them.
    pub fn write(&self, file: FileId, pieces: &[Piece], payload: &[u8]) -> io::Result<u64> {
        let o = self.object(file, true)?.expect("created");
        if let Some(c) = &self.cache {
            let mut pos = 0usize;
            for p in pieces {
                c.write(file, &o.file, p.offset, &payload[pos..pos + p.len as usize], &|id| self.existing(id))?;
                pos += p.len as usize;
            }
            self.flush_if_due(c);
            return Ok(payload.len() as u64);
        }
        if let Some(extent) = sieve_extent(pieces) {
            let _alone = alone(&o.rmw);
            sieve::write(&o.file, extent, pieces, payload)?;
        } else {
            let _shared = shared(&o.rmw);
            for (p, pos) in in_offset_order(pieces) {
                o.file.write_all_at(&payload[pos..pos + p.len as usize], p.offset)?;
            }
        }
        self.start_write_back(&o.file, pieces);
        Ok(payload.len() as u64)
    }

    /// Starts the write-back of what a write of `pieces` just put in the
    /// page cache (`write_back.rs` says which runs).
    fn start_write_back(&self, f: &File, pieces: &[Piece]) {
        if !self.write_behind {
            return;
        }
        for (start, end) in write_back::runs(pieces) {
            // Advisory: a failure changes only timing, never data.
            let _ = nix::fcntl::posix_fadvise(f, start as i64, (end - start) as i64, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED);
        }
    }

    /// Reads the pieces into `out` (resized to their total), zero-filled past
    /// the object's end; returns the object size.
    pub fn read(&self, file: FileId, pieces: &[Piece], out: &mut Vec<u8>) -> io::Result<u64> {
        let total: u64 = pieces.iter().map(|p| p.len).sum();
        out.clear();
        out.resize(total as usize, 0);
        let Some(o) = self.object(file, false)? else { return Ok(0) };
        let f = &o.file;
        if let Some(c) = &self.cache {
            let mut pos = 0usize;
            let mut size = 0;
            for p in pieces {
                size = c.read(file, Some(f), p.offset, &mut out[pos..pos + p.len as usize], &|id| self.existing(id))?;
                pos += p.len as usize;
            }
            if pieces.is_empty() {
                size = c.size(file, Some(f))?;
            }
            self.flush_if_due(c);
            return Ok(size);
        }
        let size = f.metadata()?.len();
        if let Some(extent) = sieve_extent(pieces) {
            sieve::read(f, size, extent, pieces, out)?;
            return Ok(size);
        }
        debug_assert_eq!(out.len() as u64, pieces.iter().map(|p| p.len).sum::<u64>());
        for (p, pos) in in_offset_order(pieces) {
            let avail = size.saturating_sub(p.offset).min(p.len) as usize;
            let mut done = 0;
            while done < avail {
                match f.read_at(&mut out[pos + done..pos + avail], p.offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(size)
    }

    /// Writes `bufs` back to back from object offset `offset`, with as few
    /// vectored writes as the kernel allows (a collective's run).
    pub fn write_run(&self, file: FileId, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.direct(file, || self.write_run_direct(file, offset, bufs))
    }

    fn write_run_direct(&self, file: FileId, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let o = self.object(file, true)?.expect("created");
        let _shared = shared(&o.rmw);
        let mut slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
        let mut rest = &mut slices[..];
        let (mut at, total) = (offset, bufs.iter().map(|b| b.len() as u64).sum::<u64>());
        while !rest.is_empty() {
            match nix::sys::uio::pwritev(&o.file, rest, at as i64) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "vectored write wrote nothing")),
                Ok(n) => {
                    io::IoSlice::advance_slices(&mut rest, n);
                    at += n as u64;
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.start_write_back(&o.file, &[Piece { offset, len: total }]);
        Ok(())
    }

    /// Asks the kernel to start reading `len` bytes at `offset` of the
    /// object now (a collective reads the next run while it sends this one).
    pub fn prefetch(&self, file: FileId, offset: u64, len: u64) {
        if let Ok(Some(o)) = self.object(file, false) {
            // Advisory: a failure changes only timing, never data.
            let _ = nix::fcntl::posix_fadvise(&o.file, offset as i64, len as i64, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_WILLNEED);
        }
    }

    /// Reads from object offset `offset` into `bufs` back to back, with as
    /// few vectored reads as the kernel allows; bytes past the object's end
    /// are left as they are (the caller zeroes them). `None`: no object.
    pub fn read_run(&self, file: FileId, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<Option<()>> {
        self.direct(file, || self.read_run_direct(file, offset, bufs))
    }

    fn read_run_direct(&self, file: FileId, offset: u64, bufs: &mut [&mut [u8]]) -> io::Result<Option<()>> {
        let Some(o) = self.object(file, false)? else { return Ok(None) };
        let mut slices: Vec<io::IoSliceMut<'_>> = bufs.iter_mut().map(|b| io::IoSliceMut::new(b)).collect();
        let mut rest = &mut slices[..];
        let mut at = offset;
        while !rest.is_empty() {
            match nix::sys::uio::preadv(&o.file, rest, at as i64) {
                Ok(0) => break,
                Ok(n) => {
                    io::IoSliceMut::advance_slices(&mut rest, n);
                    at += n as u64;
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Some(()))
    }

    pub fn size(&self, file: FileId) -> io::Result<u64> {
        if let Some(c) = &self.cache {
            return match self.object(file, false)? {
                Some(o) => c.size(file, Some(&o.file)),
                None => Ok(0),
            };
        }
        match std::fs::metadata(self.path(file)) {
            Ok(m) => Ok(m.len()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    pub fn truncate(&self, file: FileId, size: u64) -> io::Result<()> {
        self.direct(file, || match self.object(file, size > 0)? {
            Some(o) => {
                let _alone = alone(&o.rmw);
                o.file.set_len(size)
            }
            None => Ok(()),
        })
    }

    /// Makes the object's data, and its existence, durable.
    pub fn fsync(&self, file: FileId) -> io::Result<()> {
        if let Some(o) = self.object(file, false)? {
            if let Some(c) = &self.cache {
                c.flush_file(file, &o.file)?;
            }
            o.file.sync_data()?;
        }
        if self.dir_dirty.swap(false, Ordering::AcqRel)
            && let Err(e) = File::open(&self.objects).and_then(|d| d.sync_all()) {
                self.dir_dirty.store(true, Ordering::Release);
                return Err(e);
            }
        Ok(())
    }

    pub fn delete(&self, file: FileId) -> io::Result<()> {
        // First the tombstone, so no write after this can recreate the object.
        lock(&self.deleted).insert(file);
        if let Some(c) = &self.cache {
            c.forget(file);
        }
        lock(&self.open).remove(&file);
        match std::fs::remove_file(self.path(file)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// (object count, bytes stored), by listing the object directory.
    pub fn usage(&self) -> (u64, u64) {
        let mut objects = 0;
        let mut bytes = 0;
        if let Ok(rd) = std::fs::read_dir(&self.objects) {
            for e in rd.flatten() {
                if let Ok(m) = e.metadata() {
                    objects += 1;
                    bytes += m.len();
                }
            }
        }
        (objects, bytes)
    }
}

// A panic while serving one request (caught by the worker pool) must not
// make every later request of the object fail: the guarded data is the
// object file itself, which a panic leaves no less consistent than an I/O
// error would, so a poisoned lock is simply taken over.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn alone(l: &RwLock<()>) -> RwLockWriteGuard<'_, ()> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

fn shared(l: &RwLock<()>) -> RwLockReadGuard<'_, ()> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// True when the pieces come in increasing offset order.
pub fn is_sorted(pieces: &[Piece]) -> bool {
    pieces.windows(2).all(|w| w[0].offset <= w[1].offset)
}

/// Each piece with its position in the payload, in object-offset order: the
/// disk sees one forward sweep whatever order the list came in.
fn in_offset_order(pieces: &[Piece]) -> Vec<(Piece, usize)> {
    let mut pos = 0usize;
    let mut v: Vec<(Piece, usize)> = pieces
        .iter()
        .map(|p| {
            let at = pos;
            pos += p.len as usize;
            (*p, at)
        })
        .collect();
    if !is_sorted(pieces) {
        v.sort_by_key(|(p, _)| p.offset);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_round_trip_and_holes_read_as_zero() {
        let dir = std::env::temp_dir().join(format!("weft-data-unit-{}", std::process::id()));
        let d = DataService::open(&dir, &crate::ServerConfig::default()).unwrap();
        let f = FileId(7);
        let pieces = [Piece { offset: 10, len: 3 }, Piece { offset: 2, len: 2 }];
        assert_eq!(d.write(f, &pieces, b"abcxy").unwrap(), 5);
        let mut out = Vec::new();
        let size = d.read(f, &[Piece { offset: 0, len: 16 }], &mut out).unwrap();
        assert_eq!(size, 13);
        assert_eq!(&out, b"\0\0xy\0\0\0\0\0\0abc\0\0\0");
        // Unsorted lists land (and read back) by offset, payload in list order.
        let g = FileId(8);
        let unsorted = [Piece { offset: 6, len: 2 }, Piece { offset: 0, len: 3 }, Piece { offset: 3, len: 3 }];
        d.write(g, &unsorted, b"GHabcdef").unwrap();
        let mut back = Vec::new();
        d.read(g, &[Piece { offset: 0, len: 8 }], &mut back).unwrap();
        assert_eq!(&back, b"abcdefGH");
        d.read(g, &unsorted, &mut back).unwrap();
        assert_eq!(&back, b"GHabcdef");
        d.truncate(f, 3).unwrap();
        assert_eq!(d.size(f).unwrap(), 3);
        d.fsync(f).unwrap();
        d.delete(f).unwrap();
        assert_eq!(d.size(f).unwrap(), 0);
        assert_eq!(d.read(f, &[Piece { offset: 0, len: 4 }], &mut out).unwrap(), 0);
        assert_eq!(out, vec![0; 4]);
        // Best effort: the spares thread may still be making one.
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The caching mode against a plain model of the bytes: any sequence of
    /// writes, reads, truncates and fsyncs through a cache of three
    /// 512-byte blocks (so blocks are evicted and written back all the
    /// time) reads back what the model holds, sizes included; and after an
    /// fsync the object file itself holds it (read without the cache).
    mod caching {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Write(u64, Vec<u8>),
            Read(u64, u64),
            Truncate(u64),
            Fsync,
            /// A collective's direct run, past the cache.
            WriteRun(u64, Vec<u8>),
            ReadRun(u64, u64),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u64..4000, proptest::collection::vec(any::<u8>(), 1..1500)).prop_map(|(at, d)| Op::Write(at, d)),
                3 => (0u64..5000, 1u64..2000).prop_map(|(at, n)| Op::Read(at, n)),
                1 => (0u64..5000).prop_map(Op::Truncate),
                1 => Just(Op::Fsync),
                1 => (0u64..4000, proptest::collection::vec(any::<u8>(), 1..1500)).prop_map(|(at, d)| Op::WriteRun(at, d)),
                1 => (0u64..5000, 1u64..2000).prop_map(|(at, n)| Op::ReadRun(at, n)),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            #[test]
            fn the_cache_reads_back_what_was_written(ops in proptest::collection::vec(op(), 1..40)) {
                static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let dir = std::env::temp_dir().join(format!("weft-cache-unit-{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed)));
                let d = DataService::open_with(&dir, Some(block_cache::BlockCache::new(3 * 512, 512)), true).unwrap();
                let f = FileId(3);
                let mut model: Vec<u8> = Vec::new();
                for op in ops {
                    match op {
                        Op::WriteRun(at, data) => {
                            d.write_run(f, at, &[&data]).unwrap();
                            let end = at as usize + data.len();
                            if model.len() < end {
                                model.resize(end, 0);
                            }
                            model[at as usize..end].copy_from_slice(&data);
                        }
                        Op::ReadRun(at, n) => {
                            let mut buf = vec![0u8; n as usize];
                            d.read_run(f, at, &mut [&mut buf[..]]).unwrap();
                            let want: Vec<u8> = (at..at + n).map(|i| model.get(i as usize).copied().unwrap_or(0)).collect();
                            prop_assert!(buf == want, "direct read {} at {} differs", n, at);
                        }
                        Op::Write(at, data) => {
                            d.write(f, &[Piece { offset: at, len: data.len() as u64 }], &data).unwrap();
                            let end = at as usize + data.len();
                            if model.len() < end {
                                model.resize(end, 0);
                            }
                            model[at as usize..end].copy_from_slice(&data);
                        }
                        Op::Read(at, n) => {
                            let mut out = Vec::new();
                            let size = d.read(f, &[Piece { offset: at, len: n }], &mut out).unwrap();
                            let want: Vec<u8> = (at..at + n).map(|i| model.get(i as usize).copied().unwrap_or(0)).collect();
                            prop_assert_eq!(size, model.len() as u64);
                            prop_assert!(out == want, "read {} at {} differs", n, at);
                        }
                        Op::Truncate(size) => {
                            d.truncate(f, size).unwrap();
                            model.resize(size as usize, 0);
                        }
                        Op::Fsync => {
                            d.fsync(f).unwrap();
                            let on_disk = std::fs::read(d.path(f)).unwrap_or_default();
                            prop_assert!(on_disk == model, "the object file after fsync differs from what was written");
                        }
                    }
                    prop_assert_eq!(d.size(f).unwrap(), model.len() as u64);
                }
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
}
