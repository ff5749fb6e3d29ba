//! Paper 001's "traditional caching" data service (issue 13), for
//! comparison with Weft's own paths: a block cache per server in front of
//! the objects, LRU replacement, the next block read ahead on a miss, and
//! write-behind (dirty blocks go to disk when evicted, on fsync, and from a
//! flusher every [`FLUSH_EVERY`]). Selected per server with
//! `WEFT_DATA_CACHE=<bytes>` (block size `WEFT_CACHE_BLOCK`, default 64
//! KiB); clients then send one request per piece (`WEFT_LIST_IO=0`), as a
//! traditional file system's clients send one per block.
//!
//! As with any write-behind cache, data written and not yet fsync'd is
//! lost if the server dies; fsync'd data is not.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use weft_wire::FileId;

/// How often the flusher writes dirty blocks back.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// One cached block.
struct Slot {
    data: Box<[u8]>,
    dirty: bool,
    /// Its place in the LRU order.
    tick: u64,
}

#[derive(Default)]
struct Inner {
    blocks: HashMap<(FileId, u64), Slot>,
    lru: BTreeMap<u64, (FileId, u64)>,
    tick: u64,
    /// Each object's size as the cache knows it (written bytes included).
    sizes: HashMap<FileId, u64>,
}

/// The cache of one server. Every access to a cached object goes through
/// it (the server is its objects' only writer).
pub struct BlockCache {
    block: u64,
    capacity: usize,
    inner: Mutex<Inner>,
}

/// Reads up to `buf.len()` bytes at `at`, short only at the end of file.
fn read_full(f: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

impl BlockCache {
    /// A cache of `bytes` in blocks of `block` bytes (at least 2 blocks).
    pub fn new(bytes: u64, block: u64) -> Self {
        let block = block.clamp(512, 16 << 20);
        BlockCache { block, capacity: (bytes / block).max(2) as usize, inner: Mutex::new(Inner::default()) }
    }

    pub fn block(&self) -> u64 {
        self.block
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object's size: the cache's knowledge, else the file's.
    fn size_of(&self, g: &mut Inner, file: FileId, f: Option<&File>) -> io::Result<u64> {
        if let Some(&s) = g.sizes.get(&file) {
            return Ok(s);
        }
        let s = match f {
            Some(f) => f.metadata()?.len(),
            None => 0,
        };
        g.sizes.insert(file, s);
        Ok(s)
    }

    /// Writes a dirty block back: only the bytes below the object's size
    /// (a block past the end must not grow the file).
    fn write_back(g: &Inner, f: &File, file: FileId, b: u64, block: u64, slot: &Slot) -> io::Result<()> {
        let size = g.sizes.get(&file).copied().unwrap_or(0);
        let start = b * block;
        let n = size.saturating_sub(start).min(block) as usize;
        if n > 0 {
            f.write_all_at(&slot.data[..n], start)?;
        }
        Ok(())
    }

    /// Makes room for one more block: the least recently used goes,
    /// written back first if dirty (through `open`, which gives a block's
    /// object file). A block whose write-back fails stays cached and dirty
    /// (its file's next fsync meets the error) and the next one in LRU
    /// order goes instead: one file that cannot be written must not fail
    /// every other file's requests. Only when no cached block can go does
    /// this request fail, saying why.
    fn evict(&self, g: &mut Inner, open: &dyn Fn(FileId) -> io::Result<Option<std::sync::Arc<super::Object>>>) -> io::Result<()> {
        let mut stuck: Vec<u64> = Vec::new();
        let mut last_error: Option<(FileId, io::Error)> = None;
        while g.blocks.len() >= self.capacity {
            let Some((tick, (file, b))) = g.lru.iter().find(|(t, _)| !stuck.contains(t)).map(|(&t, &k)| (t, k)) else {
                let (file, e) = last_error.expect("a block is stuck only after its write-back failed");
                return Err(io::Error::new(e.kind(), format!("every block of the server's cache waits to be written back, and that fails (file {}: {e})", file.0)));
            };
            let slot = g.blocks.get(&(file, b)).expect("in the LRU order");
            if slot.dirty {
                let written = match open(file) {
                    Ok(Some(o)) => Self::write_back(g, &o.file, file, b, self.block, slot),
                    // Deleted meanwhile: nothing to keep.
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Err(e) = written {
                    tracing::warn!(target: "weft::data", file = file.0, error = %e, "cannot write a cached block back; it stays cached");
                    stuck.push(tick);
                    last_error = Some((file, e));
                    continue;
                }
            }
            g.lru.remove(&tick);
            g.blocks.remove(&(file, b));
        }
        Ok(())
    }

    /// The block `b` of `file`, loaded from `f` (zeros past its end) if not
    /// cached; marks it used now.
    fn slot<'g>(&self, g: &'g mut Inner, file: FileId, b: u64, f: Option<&File>, open: &dyn Fn(FileId) -> io::Result<Option<std::sync::Arc<super::Object>>>) -> io::Result<&'g mut Slot> {
        g.tick += 1;
        let tick = g.tick;
        if let Some(s) = g.blocks.get_mut(&(file, b)) {
            let old = std::mem::replace(&mut s.tick, tick);
            g.lru.remove(&old);
            g.lru.insert(tick, (file, b));
            return Ok(g.blocks.get_mut(&(file, b)).expect("present"));
        }
        self.evict(g, open)?;
        let mut data = vec![0u8; self.block as usize].into_boxed_slice();
        if let Some(f) = f {
            read_full(f, &mut data, b * self.block)?;
        }
        g.lru.insert(tick, (file, b));
        Ok(g.blocks.entry((file, b)).or_insert(Slot { data, dirty: false, tick }))
    }

    /// Writes `data` at object offset `at` into cached blocks (write-behind).
    pub fn write(&self, file: FileId, f: &File, at: u64, data: &[u8], open: &dyn Fn(FileId) -> io::Result<Option<std::sync::Arc<super::Object>>>) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut g = self.lock();
        // The new size first: a block of this write evicted before the
        // write ends is written back up to it.
        let size = self.size_of(&mut g, file, Some(f))?;
        g.sizes.insert(file, size.max(at + data.len() as u64));
        let mut done = 0usize;
        while done < data.len() {
            let pos = at + done as u64;
            let (b, off) = (pos / self.block, (pos % self.block) as usize);
            let n = (self.block as usize - off).min(data.len() - done);
            // A block written whole need not be read first.
            let whole = off == 0 && n == self.block as usize;
            let slot = self.slot(&mut g, file, b, (!whole).then_some(f), open)?;
            slot.data[off..off + n].copy_from_slice(&data[done..done + n]);
            slot.dirty = true;
            done += n;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `at` (zeros past the end); returns the
    /// object's size. A miss also reads the next block ahead.
    pub fn read(&self, file: FileId, f: Option<&File>, at: u64, out: &mut [u8], open: &dyn Fn(FileId) -> io::Result<Option<std::sync::Arc<super::Object>>>) -> io::Result<u64> {
        let mut g = self.lock();
        let size = self.size_of(&mut g, file, f)?;
        let mut done = 0usize;
        while done < out.len() {
            let pos = at + done as u64;
            let (b, off) = (pos / self.block, (pos % self.block) as usize);
            let n = (self.block as usize - off).min(out.len() - done);
            if pos >= size {
                out[done..].fill(0);
                break;
            }
            let missed = !g.blocks.contains_key(&(file, b));
            let slot = self.slot(&mut g, file, b, f, open)?;
            out[done..done + n].copy_from_slice(&slot.data[off..off + n]);
            if missed && (b + 1) * self.block < size && !g.blocks.contains_key(&(file, b + 1)) {
                self.slot(&mut g, file, b + 1, f, open)?;
            }
            done += n;
        }
        // Bytes past the size read as zeros even if a block holds others.
        if at + (out.len() as u64) > size {
            let keep = (size.saturating_sub(at) as usize).min(out.len());
            out[keep..].fill(0);
        }
        Ok(size)
    }

    /// The object's size as the cache knows it.
    pub fn size(&self, file: FileId, f: Option<&File>) -> io::Result<u64> {
        let mut g = self.lock();
        self.size_of(&mut g, file, f)
    }

    /// Writes the file's dirty blocks back (before an fsync, a truncate, a
    /// collective's direct I/O).
    pub fn flush_file(&self, file: FileId, f: &File) -> io::Result<()> {
        let mut g = self.lock();
        let keys: Vec<u64> = g.blocks.iter().filter(|((id, _), s)| *id == file && s.dirty).map(|((_, b), _)| *b).collect();
        for b in keys {
            let slot = g.blocks.get(&(file, b)).expect("listed");
            Self::write_back(&g, f, file, b, self.block, slot)?;
            g.blocks.get_mut(&(file, b)).expect("listed").dirty = false;
        }
        Ok(())
    }

    /// Runs `op`, direct I/O on `file` (a truncate, a collective's runs),
    /// with the file's cached writes on disk first and its blocks and size
    /// forgotten, all under the cache's lock: no cached access to any file
    /// runs meanwhile, so none can slip in between.
    pub fn bypass<R>(&self, file: FileId, f: Option<&File>, op: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        let mut g = self.lock();
        if let Some(f) = f {
            let keys: Vec<u64> = g.blocks.iter().filter(|((id, _), s)| *id == file && s.dirty).map(|((_, b), _)| *b).collect();
            for b in keys {
                let slot = g.blocks.get(&(file, b)).expect("listed");
                Self::write_back(&g, f, file, b, self.block, slot)?;
                g.blocks.get_mut(&(file, b)).expect("listed").dirty = false;
            }
        }
        Self::forget_locked(&mut g, file);
        op()
    }

    /// Forgets the file's blocks and size (a delete).
    pub fn forget(&self, file: FileId) {
        let mut g = self.lock();
        Self::forget_locked(&mut g, file);
    }

    fn forget_locked(g: &mut Inner, file: FileId) {
        let keys: Vec<(FileId, u64)> = g.blocks.keys().filter(|(id, _)| *id == file).copied().collect();
        for k in keys {
            if let Some(s) = g.blocks.remove(&k) {
                g.lru.remove(&s.tick);
            }
        }
        g.sizes.remove(&file);
    }

    /// Every dirty block, written back (the flusher); errors are left for
    /// the next fsync to meet.
    pub fn flush_all(&self, open: &dyn Fn(FileId) -> io::Result<Option<std::sync::Arc<super::Object>>>) {
        let mut g = self.lock();
        let keys: Vec<(FileId, u64)> = g.blocks.iter().filter(|(_, s)| s.dirty).map(|(k, _)| *k).collect();
        for (file, b) in keys {
            let Ok(Some(o)) = open(file) else { continue };
            let slot = g.blocks.get(&(file, b)).expect("listed");
            if Self::write_back(&g, &o.file, file, b, self.block, slot).is_ok() {
                g.blocks.get_mut(&(file, b)).expect("listed").dirty = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, RwLock};

    fn object(path: &std::path::Path, writable: bool) -> Arc<super::super::Object> {
        let file = if writable { File::options().read(true).write(true).create(true).truncate(true).open(path).unwrap() } else { File::open(path).unwrap() };
        Arc::new(super::super::Object { file, rmw: RwLock::new(()) })
    }

    #[test]
    fn a_file_that_cannot_be_written_back_fails_its_own_fsync_not_others_requests() {
        let dir = std::env::temp_dir().join(format!("weft-cache-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a"), b"").unwrap();
        // File 1's object refuses writes (opened read-only): a disk error.
        let (bad, good) = (object(&dir.join("a"), false), object(&dir.join("b"), true));
        let open = |id: FileId| -> io::Result<Option<Arc<super::super::Object>>> { Ok(Some(if id == FileId(1) { bad.clone() } else { good.clone() })) };
        let c = BlockCache::new(2 * 512, 512);
        c.write(FileId(1), &bad.file, 0, &[1u8; 512], &open).unwrap();
        // File 2 writes many blocks: each needs an eviction, and file 1's
        // block, oldest and dirty, cannot be written back. Before the fix
        // every one of these failed with file 1's error.
        for k in 0..8u64 {
            c.write(FileId(2), &good.file, k * 512, &[k as u8 + 2; 512], &open).unwrap_or_else(|e| panic!("file 2's write {k} failed: {e}"));
        }
        c.flush_file(FileId(2), &good.file).unwrap();
        let mut back = vec![0u8; 8 * 512];
        assert_eq!(std::os::unix::fs::FileExt::read_at(&good.file, &mut back, 0).unwrap(), 8 * 512);
        assert!(back.chunks(512).enumerate().all(|(k, b)| b.iter().all(|&x| x == k as u8 + 2)));
        // File 1's own fsync meets its error, and its data is still cached.
        assert!(c.flush_file(FileId(1), &bad.file).is_err());
        let mut one = [0u8; 512];
        c.read(FileId(1), Some(&bad.file), 0, &mut one, &open).unwrap();
        assert_eq!(one, [1u8; 512]);
        // With every block stuck, a request that needs room fails saying why
        // (two blocks, the least a cache has).
        let c = BlockCache::new(2 * 512, 512);
        c.write(FileId(1), &bad.file, 0, &[1u8; 1024], &open).unwrap();
        let e = c.write(FileId(2), &good.file, 0, &[2u8; 512], &open).unwrap_err();
        assert!(e.to_string().contains("waits to be written back") && e.to_string().contains("file 1"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
