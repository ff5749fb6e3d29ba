//! The memory a shared-memory connection's two sides map: one sealed
//! memfd of two rings and, on offer, a shared area after them
//! ([`super::area`]), and how its pages go back to the system (punched
//! out, since the client may keep the memfd open after the connection).
// Mapping shared memory and punching its pages.
#![allow(unsafe_code)]

use super::area::{Backing, ALIGN};
use super::ring::HEADER;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Bytes a connection's rings take (what the server draws from its budget).
pub fn mapping_len(cap: usize) -> usize {
    2 * (HEADER + cap)
}

/// Where the shared area starts: after the rings, on a page boundary.
pub(super) fn area_offset(cap: usize) -> usize {
    mapping_len(cap).next_multiple_of(ALIGN)
}

/// The whole memfd's size: rings, and an area of `area_len` bytes if any.
pub(super) fn total_len(cap: usize, area_len: usize) -> usize {
    if area_len == 0 { mapping_len(cap) } else { area_offset(cap) + area_len }
}

/// A shared mapping, unmapped when dropped; on the server, with the
/// memfd: the rings' pages go back when the connection ends
/// (`ShmTransport`'s drop), the area's when the last request holding a
/// place in it is done too (this drop).
pub(super) struct Mapping {
    ptr: NonNull<std::ffi::c_void>,
    len: usize,
    pub(super) memfd: Option<OwnedFd>,
    /// Where the area starts (`len` if there is none).
    pub(super) area_from: usize,
}

// SAFETY: the mapping is plain shared memory; the rings synchronise access,
// and the area's slots are only read by the server.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}
impl Backing for Mapping {
    fn punch(&self, at: *const u8, len: usize) {
        // Only ever the area: never the rings, whose bytes are live.
        let from = (at as usize).saturating_sub(self.base() as usize).max(self.area_from);
        let to = from.saturating_add(len).min(self.len);
        if let Some(fd) = &self.memfd
            && from < to
        {
            punch_range(fd, from, to - from);
        }
    }
}

impl Mapping {
    pub(super) fn new(fd: &OwnedFd, len: usize) -> io::Result<Self> {
        use nix::sys::mman::{mmap, MapFlags, ProtFlags};
        let n = NonZeroUsize::new(len).ok_or(io::ErrorKind::InvalidInput)?;
        // SAFETY: a fresh shared mapping of a sealed memfd of at least `len`
        // bytes; nothing else in this process aliases it.
        let ptr = unsafe { mmap(None, n, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED, fd, 0) }.map_err(io::Error::from)?;
        Ok(Mapping { ptr, len, memfd: None, area_from: len })
    }

    pub(super) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr() as *mut u8
    }

    /// Server side, at the end of a connection: the first `len` bytes (the
    /// rings) go back at once if the client has closed too, else after a
    /// grace period, since a client still connected may have last bytes to
    /// read (an error saying why it was closed).
    pub(super) fn release_rings(&self, len: usize, peer_closed: bool) {
        let Some(memfd) = self.memfd.as_ref() else { return };
        let now = Instant::now();
        if peer_closed {
            punch(memfd, len);
        } else {
            match memfd.try_clone() {
                Ok(fd) => DEFERRED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back((now + PUNCH_GRACE, fd, len)),
                // No descriptor to keep (a flood of connections): now.
                Err(_) => punch(memfd, len),
            }
        }
        punch_due(now);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once; the ring ends and the
        // area's slots die before it (they hold it).
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, self.len) };
        // The area's pages: no request holds a place any more.
        if let Some(fd) = &self.memfd
            && self.area_from < self.len
        {
            punch_range(fd, self.area_from, self.len - self.area_from);
        }
    }
}

/// Punches the rings of closed connections whose grace period is over
/// (the server's sweep calls it, so they go within a sweep of it even when
/// no other connection closes).
pub fn punch_due(now: Instant) {
    let mut deferred = DEFERRED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    while let Some((due, _, _)) = deferred.front() {
        if *due > now && deferred.len() <= MAX_DEFERRED {
            break;
        }
        let (_, fd, len) = deferred.pop_front().expect("front exists");
        punch(&fd, len);
    }
}

/// How long a closed connection's rings stay readable for a client still
/// connected, and how many may wait at once (then the oldest go at once).
const PUNCH_GRACE: Duration = Duration::from_secs(2);
const MAX_DEFERRED: usize = 64;

/// Memfds of closed connections whose pages go later (oldest first).
static DEFERRED: std::sync::Mutex<std::collections::VecDeque<(Instant, OwnedFd, usize)>> = std::sync::Mutex::new(std::collections::VecDeque::new());

fn punch(fd: &OwnedFd, len: usize) {
    punch_range(fd, 0, len);
}

fn punch_range(fd: &OwnedFd, at: usize, len: usize) {
    use nix::fcntl::{fallocate, FallocateFlags};
    let _ = fallocate(fd, FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE, at as i64, len as i64);
}
