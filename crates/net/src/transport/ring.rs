//! A one-way byte ring in memory shared by two processes: the producer
//! copies bytes in at its tail, the consumer copies them out at its head.
//!
//! ```text
//! header (256 bytes)                                    data (cap bytes)
//! [ tail u64 | pad ][ head u64 | pad ][ reader_waiting u32, writer_waiting u32 | pad ][ ......... ]
//! ```
//!
//! Positions only grow (u64, wrapping); `tail - head` bytes are in the
//! ring. Each side keeps the position it owns in its own memory and only
//! publishes it, so a peer that scribbles on the header cannot move our
//! position; the peer's position is read and checked (at most `cap` apart
//! from ours) on every use, and a bad one is [`Corrupt`].
//!
//! Waiting: a consumer that finds the ring empty sets `reader_waiting`
//! and looks again; a producer that published bytes clears the flag and,
//! if it was set, rings the consumer's doorbell (and the same for a full
//! ring and `writer_waiting`). Flags and positions are sequentially
//! consistent, so of "set the flag, look again" and "publish, check the
//! flag" at least one side sees the other: no wake-up is lost, and none is
//! sent while the peer is busy.
#![allow(unsafe_code)]

use std::io::{IoSlice, IoSliceMut};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// Bytes of a ring's header.
pub const HEADER: usize = 256;

/// The peer broke the ring's rules (positions more than a ring apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// One end of a ring: where the header and data are, and our position.
pub struct RingEnd {
    base: *mut u8,
    cap: usize,
    /// Our own position (the tail when producing, the head when consuming).
    pos: u64,
}

// SAFETY: the memory is a shared mapping that lives as long as the
// transport holding this end; all access is through atomics or copies of
// ranges the positions give this side.
unsafe impl Send for RingEnd {}

impl RingEnd {
    /// An end of the ring at `base` (`HEADER + cap` bytes, 8-aligned),
    /// with its positions as they are now (a new ring: both 0).
    ///
    /// # Safety
    /// `base` must point to at least `HEADER + cap` bytes mapped for as
    /// long as this end is used.
    pub unsafe fn new(base: *mut u8, cap: usize) -> Self {
        RingEnd { base, cap, pos: 0 }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: within the header, 8-aligned (module doc).
        unsafe { &*(self.base as *const AtomicU64) }
    }
    fn head(&self) -> &AtomicU64 {
        // SAFETY: as `tail`.
        unsafe { &*(self.base.add(64) as *const AtomicU64) }
    }
    fn reader_waiting(&self) -> &AtomicU32 {
        // SAFETY: as `tail`.
        unsafe { &*(self.base.add(128) as *const AtomicU32) }
    }
    fn writer_waiting(&self) -> &AtomicU32 {
        // SAFETY: as `tail`.
        unsafe { &*(self.base.add(132) as *const AtomicU32) }
    }
    fn data(&self) -> *mut u8 {
        // SAFETY: within the mapping.
        unsafe { self.base.add(HEADER) }
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Consumer: bytes waiting to be read.
    pub fn available(&self) -> Result<usize, Corrupt> {
        let used = self.tail().load(SeqCst).wrapping_sub(self.pos);
        if used > self.cap as u64 { Err(Corrupt) } else { Ok(used as usize) }
    }

    /// Producer: room for more bytes.
    pub fn room(&self) -> Result<usize, Corrupt> {
        let used = self.pos.wrapping_sub(self.head().load(SeqCst));
        if used > self.cap as u64 { Err(Corrupt) } else { Ok(self.cap - used as usize) }
    }

    /// Consumer: copies up to the bytes available into `dst` in order;
    /// returns how many (0: empty).
    pub fn read_vectored(&mut self, dst: &mut [IoSliceMut<'_>]) -> Result<usize, Corrupt> {
        let mut left = self.available()?;
        let mut n = 0;
        for d in dst.iter_mut() {
            if left == 0 {
                break;
            }
            let k = d.len().min(left);
            self.copy_out(n, &mut d[..k]);
            n += k;
            left -= k;
        }
        if n > 0 {
            self.pos = self.pos.wrapping_add(n as u64);
            self.head().store(self.pos, SeqCst);
        }
        Ok(n)
    }

    /// Copies ring bytes starting `skip` past our head into `dst`. A
    /// hostile producer may write these bytes while we copy: we get some
    /// bytes, never read twice (the protocol machine checks them after the
    /// copy), and never outside the ring.
    fn copy_out(&self, skip: usize, dst: &mut [u8]) {
        let at = (self.pos.wrapping_add(skip as u64) % self.cap as u64) as usize;
        let first = dst.len().min(self.cap - at);
        // SAFETY: `at + first <= cap` and the rest starts at 0, within the
        // data area; the producer does not write these bytes until our head
        // passes them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data().add(at), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(self.data(), dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    /// Producer: copies as much of `src` as fits, in order; returns how
    /// many bytes (0: full).
    pub fn write_vectored(&mut self, src: &[IoSlice<'_>]) -> Result<usize, Corrupt> {
        let mut room = self.room()?;
        let mut n = 0;
        for s in src {
            if room == 0 {
                break;
            }
            let k = s.len().min(room);
            let at = (self.pos.wrapping_add(n as u64) % self.cap as u64) as usize;
            let first = k.min(self.cap - at);
            // SAFETY: as `copy_out`, for the free part of the ring.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), self.data().add(at), first);
                std::ptr::copy_nonoverlapping(s.as_ptr().add(first), self.data(), k - first);
            }
            n += k;
            room -= k;
        }
        if n > 0 {
            self.pos = self.pos.wrapping_add(n as u64);
            self.tail().store(self.pos, SeqCst);
        }
        Ok(n)
    }

    /// Consumer found the ring empty: asks for a doorbell on the next bytes.
    pub fn set_reader_waiting(&self) {
        self.reader_waiting().store(1, SeqCst);
    }
    /// Consumer: no doorbell wanted after all (bytes came).
    pub fn clear_reader_waiting(&self) {
        self.reader_waiting().store(0, SeqCst);
    }
    /// Producer, after publishing: whether the consumer asked for a doorbell.
    pub fn take_reader_waiting(&self) -> bool {
        self.reader_waiting().swap(0, SeqCst) != 0
    }
    pub fn set_writer_waiting(&self) {
        self.writer_waiting().store(1, SeqCst);
    }
    pub fn clear_writer_waiting(&self) {
        self.writer_waiting().store(0, SeqCst);
    }
    /// Consumer, after taking bytes: whether the producer waits for room.
    pub fn take_writer_waiting(&self) -> bool {
        self.writer_waiting().swap(0, SeqCst) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A ring in a heap buffer (8-aligned), both ends.
    fn ring(cap: usize) -> (Vec<u64>, RingEnd, RingEnd) {
        let mut mem = vec![0u64; (HEADER + cap).div_ceil(8)];
        let base = mem.as_mut_ptr() as *mut u8;
        // SAFETY: `mem` outlives both ends in every test.
        unsafe { (mem, RingEnd::new(base, cap), RingEnd::new(base, cap)) }
    }

    proptest! {
        /// Whatever the sizes of writes and reads, the bytes come out as
        /// they went in, across the wrap, and never more than the ring holds.
        #[test]
        fn bytes_come_out_in_order(cap in 1usize..64, writes in proptest::collection::vec(0usize..100, 1..30), reads in proptest::collection::vec(1usize..100, 1..30)) {
            let (_mem, mut tx, mut rx) = ring(cap);
            let input: Vec<u8> = (0..writes.iter().sum::<usize>()).map(|i| (i * 7 + 3) as u8).collect();
            let (mut sent, mut got) = (0, Vec::new());
            let mut k = 0;
            while got.len() < input.len() {
                let w = writes[k % writes.len()].min(input.len() - sent);
                let n = tx.write_vectored(&[IoSlice::new(&input[sent..sent + w])]).unwrap();
                prop_assert!(n <= cap);
                sent += n;
                let mut buf = vec![0u8; reads[k % reads.len()]];
                let r = rx.read_vectored(&mut [IoSliceMut::new(&mut buf)]).unwrap();
                got.extend_from_slice(&buf[..r]);
                k += 1;
                prop_assert!(k < 100_000);
            }
            prop_assert_eq!(got, input);
        }
    }

    #[test]
    fn a_peer_that_moves_positions_apart_is_caught() {
        let (_mem, mut tx, mut rx) = ring(16);
        tx.write_vectored(&[IoSlice::new(b"abc")]).unwrap();
        // A hostile producer claims more than a ring's worth.
        tx.tail().store(1000, SeqCst);
        assert_eq!(rx.available(), Err(Corrupt));
        let mut b = [0u8; 4];
        assert_eq!(rx.read_vectored(&mut [IoSliceMut::new(&mut b)]), Err(Corrupt));
        // A hostile consumer claims to have read bytes never written.
        rx.head().store(1 << 40, SeqCst);
        assert_eq!(tx.room(), Err(Corrupt));
    }

    #[test]
    fn our_own_position_is_not_taken_from_shared_memory() {
        let (_mem, mut tx, mut rx) = ring(16);
        tx.write_vectored(&[IoSlice::new(b"hello")]).unwrap();
        // The peer rewrites the head we publish: we read from our own.
        rx.head().store(3, SeqCst);
        let mut b = [0u8; 5];
        assert_eq!(rx.read_vectored(&mut [IoSliceMut::new(&mut b)]).unwrap(), 5);
        assert_eq!(&b, b"hello");
    }

    #[test]
    fn waiting_flags_are_taken_once() {
        let (_mem, tx, rx) = ring(8);
        assert!(!tx.take_reader_waiting());
        rx.set_reader_waiting();
        assert!(tx.take_reader_waiting());
        assert!(!tx.take_reader_waiting());
        tx.set_writer_waiting();
        assert!(rx.take_writer_waiting());
    }
}
