//! The framing both sides of a connection share, sans I/O: a header being
//! received ([`HeaderRx`]), a body or payload being filled ([`Filling`]),
//! and the queue of frames waiting to go out ([`Outbox`]).
//!
//! Each receiving part offers a window of exactly the bytes its part still
//! needs (a [`Stage`] may read a little ahead at a frame boundary, for
//! small frames); the owner reads into
//! the window from whatever transport it has and reports how many arrived.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::time::{Duration, Instant};
use weft_wire::{DecodeError, FrameKind, Header, MsgId, HEADER_LEN};

/// A frame header being received.
#[derive(Debug, Clone)]
pub struct HeaderRx {
    buf: [u8; HEADER_LEN],
    filled: usize,
}

impl Default for HeaderRx {
    fn default() -> Self {
        HeaderRx { buf: [0; HEADER_LEN], filled: 0 }
    }
}

impl HeaderRx {
    /// No byte of the next frame has arrived.
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Where the header's missing bytes go (never empty).
    pub fn window(&mut self) -> &mut [u8] {
        &mut self.buf[self.filled..]
    }

    /// `n` bytes arrived in the window; the decoded header once whole (and
    /// the receiver is empty again for the next one).
    pub fn received(&mut self, n: usize) -> Option<Result<Header, DecodeError>> {
        self.filled += n;
        debug_assert!(self.filled <= HEADER_LEN, "more bytes than the window");
        if self.filled < HEADER_LEN {
            return None;
        }
        self.filled = 0;
        Some(Header::decode(&self.buf))
    }
}

/// A buffer of known length being filled.
#[derive(Debug, Default)]
pub struct Filling {
    pub buf: Vec<u8>,
    pub filled: usize,
}

impl Filling {
    pub fn new(buf: Vec<u8>) -> Self {
        Filling { buf, filled: 0 }
    }

    pub fn window(&mut self) -> &mut [u8] {
        &mut self.buf[self.filled..]
    }

    /// `n` bytes arrived; whether the buffer is now full.
    pub fn received(&mut self, n: usize) -> bool {
        self.filled += n;
        self.is_full()
    }

    pub fn is_full(&self) -> bool {
        self.filled == self.buf.len()
    }
}

/// Bytes read ahead at a frame boundary and not yet taken by the receiver:
/// small frames are then handled whole from here, several per read. What
/// it holds is bounded by its length, [`Stage::LEN`].
#[derive(Debug, Default)]
pub struct Stage {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Stage {
    /// Bytes one read may take ahead (most requests and answers are
    /// smaller than this).
    pub const LEN: usize = 1024;

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// The bytes not yet taken.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// `n` bytes were taken.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len(), "more bytes taken than staged");
        self.start += n;
        if self.start == self.end {
            self.clear();
        }
    }

    pub fn clear(&mut self) {
        (self.start, self.end) = (0, 0);
    }

    /// Makes the buffer (a receiver does once it sees traffic: an idle
    /// connection holds none).
    pub fn make(&mut self) {
        if self.buf.is_empty() {
            self.buf = vec![0; Self::LEN];
        }
    }

    /// Whether [`Stage::make`] was called.
    pub fn is_made(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Where a read goes (only while empty; the buffer is made here if it
    /// was not).
    pub fn window(&mut self) -> &mut [u8] {
        debug_assert!(self.is_empty(), "a read ahead would pass bytes not yet taken");
        self.make();
        &mut self.buf[..]
    }

    /// `n` bytes arrived in [`Stage::window`].
    pub fn filled(&mut self, n: usize) {
        debug_assert!(n <= self.buf.len());
        (self.start, self.end) = (0, n);
    }
}

/// One frame waiting to go out: its header and body encoded, then the
/// payload the owner names by `P` (its own bytes, or a caller's buffers).
#[derive(Debug)]
pub struct OutFrame<P> {
    pub kind: FrameKind,
    pub id: u64,
    head: Vec<u8>,
    pub payload: P,
    pay_len: usize,
    /// Bytes of this frame already written.
    pub pos: usize,
}

impl<P> OutFrame<P> {
    fn len(&self) -> usize {
        self.head.len() + self.pay_len
    }
}

/// Frame heads kept for reuse, and the largest kept (a large body's head
/// goes back to the allocator).
const SPARE_HEADS: usize = 8;
const SPARE_HEAD_BYTES: usize = 4096;

/// Frames queued for sending, in order, with an absolute deadline for the
/// frame at the head (a peer that stops reading is noticed).
#[derive(Debug)]
pub struct Outbox<P> {
    frames: VecDeque<OutFrame<P>>,
    /// Heads of frames sent, kept for the next ones (a frame per request
    /// would otherwise cost an allocation and a free).
    spare: Vec<Vec<u8>>,
    /// How long the frame at the head may take to go out.
    deadline: Duration,
    head_by: Option<Instant>,
}

/// No deadline: the owner bounds its sends otherwise.
impl<P> Default for Outbox<P> {
    fn default() -> Self {
        Outbox::new(Duration::MAX)
    }
}

impl<P> Outbox<P> {
    pub fn new(deadline: Duration) -> Self {
        Outbox { frames: VecDeque::new(), spare: Vec::new(), deadline, head_by: None }
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn frames(&self) -> impl Iterator<Item = &OutFrame<P>> {
        self.frames.iter()
    }

    /// Queues a frame whose payload (`pay_len` bytes) `payload` names; the
    /// deadline to send it starts once it reaches the head.
    pub fn push(&mut self, kind: FrameKind, id: MsgId, body: &[u8], payload: P, pay_len: usize, now: Instant) {
        self.queue(kind, id, body, (pay_len, pay_len), payload, now);
    }

    /// Queues a frame that announces `pay_len` payload bytes without
    /// carrying them (an `Rts`: they follow in a `Data` frame once granted).
    pub fn push_announce(&mut self, kind: FrameKind, id: MsgId, body: &[u8], pay_len: usize, payload: P, now: Instant) {
        self.queue(kind, id, body, (pay_len, 0), payload, now);
    }

    /// `(announced, carried)`: the payload length the header names, and
    /// how many payload bytes follow it.
    fn queue(&mut self, kind: FrameKind, id: MsgId, body: &[u8], (announced, carried): (usize, usize), payload: P, now: Instant) {
        let mut head = self.spare.pop().unwrap_or_default();
        head.reserve(HEADER_LEN + body.len());
        head.extend_from_slice(&Header::new(kind, id, body.len(), announced).encode());
        head.extend_from_slice(body);
        if self.frames.is_empty() {
            // A deadline past the clock's range is none.
            self.head_by = now.checked_add(self.deadline);
        }
        self.frames.push_back(OutFrame { kind, id: id.0, head, payload, pay_len: carried, pos: 0 });
    }

    /// Keeps only the frames `keep` accepts (never the one being written).
    pub fn retain(&mut self, mut keep: impl FnMut(&OutFrame<P>) -> bool) {
        let mut first = true;
        self.frames.retain(|f| std::mem::take(&mut first) && f.pos > 0 || keep(f));
        if self.frames.is_empty() {
            self.head_by = None;
        }
    }

    pub fn clear(&mut self) {
        self.frames.clear();
        self.head_by = None;
    }

    /// The bytes to send next, as at most `max` slices; `parts` gives a
    /// frame's payload as slices in order.
    pub fn slices<'a, I>(&'a self, max: usize, parts: impl Fn(&'a P) -> I) -> Vec<IoSlice<'a>>
    where
        I: Iterator<Item = &'a [u8]>,
    {
        // Two slices a frame (head, one payload part) is the common case.
        let mut v = Vec::with_capacity(max.min(2 * self.frames.len()));
        self.slices_into(max, parts, &mut v);
        v
    }

    /// [`Outbox::slices`] appended to `v` (a vector the caller reuses).
    pub fn slices_into<'a, I>(&'a self, max: usize, parts: impl Fn(&'a P) -> I, v: &mut Vec<IoSlice<'a>>)
    where
        I: Iterator<Item = &'a [u8]>,
    {
        let max = max + v.len();
        for f in &self.frames {
            let mut skip = f.pos;
            // The head first (all most frames are), then the payload's parts.
            if skip < f.head.len() {
                v.push(IoSlice::new(&f.head[skip..]));
                if v.len() == max {
                    return;
                }
                skip = 0;
            } else {
                skip -= f.head.len();
            }
            if f.pay_len == 0 {
                continue;
            }
            for part in parts(&f.payload) {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                v.push(IoSlice::new(&part[skip..]));
                skip = 0;
                if v.len() == max {
                    return;
                }
            }
        }
    }

    /// `n` bytes of [`Outbox::slices`] went out; returns how many frames
    /// are now wholly sent (and dropped). The next frame's deadline starts
    /// as it reaches the head.
    pub fn sent(&mut self, mut n: usize, now: Instant) -> usize {
        let mut done = 0;
        while n > 0 {
            let front = self.frames.front_mut().expect("sent bytes belong to queued frames");
            let left = front.len() - front.pos;
            if n >= left {
                n -= left;
                if let Some(f) = self.frames.pop_front()
                    && self.spare.len() < SPARE_HEADS
                    && f.head.capacity() <= SPARE_HEAD_BYTES
                {
                    let mut head = f.head;
                    head.clear();
                    self.spare.push(head);
                }
                done += 1;
                self.head_by = if self.frames.is_empty() { None } else { now.checked_add(self.deadline) };
            } else {
                front.pos += n;
                n = 0;
            }
        }
        done
    }

    /// Whether the frame at the head missed its deadline.
    pub fn overdue(&self, now: Instant) -> bool {
        self.head_by.is_some_and(|d| now >= d)
    }
}

/// An empty vector of slices with another lifetime, in the same
/// allocation (collecting from a vector's own iterator into one of the same
/// layout reuses it), so a write's iovecs need no allocation per pass.
pub fn relent<'b>(mut v: Vec<IoSlice<'_>>) -> Vec<IoSlice<'b>> {
    v.clear();
    v.into_iter().map(|_| unreachable!("the vector is empty")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the write sizes, the bytes that go out are the frames'
        /// headers, bodies and payloads in order, each once.
        #[test]
        fn sent_bytes_are_the_frames_in_order(frames in proptest::collection::vec((0usize..40, 0usize..300), 1..8), cuts in proptest::collection::vec(1usize..97, 1..64)) {
            let now = Instant::now();
            let mut ob: Outbox<Vec<u8>> = Outbox::new(Duration::from_secs(1));
            let mut want = Vec::new();
            for (i, &(b, p)) in frames.iter().enumerate() {
                let body = vec![i as u8; b];
                let pay: Vec<u8> = (0..p).map(|k| (k * 7 + i) as u8).collect();
                want.extend_from_slice(&Header::new(FrameKind::Response, MsgId(i as u64), b, p).encode());
                want.extend_from_slice(&body);
                want.extend_from_slice(&pay);
                ob.push(FrameKind::Response, MsgId(i as u64), &body, pay, p, now);
            }
            let mut got = Vec::new();
            let mut k = 0;
            let mut whole = 0;
            while !ob.is_empty() {
                let slices = ob.slices(3, |p: &Vec<u8>| std::iter::once(&p[..]));
                let flat: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
                let n = cuts[k % cuts.len()].min(flat.len());
                k += 1;
                got.extend_from_slice(&flat[..n]);
                whole += ob.sent(n, now);
            }
            prop_assert_eq!(got, want);
            prop_assert_eq!(whole, frames.len());
        }
    }

    #[test]
    fn a_header_arrives_in_pieces() {
        let bytes = Header::new(FrameKind::Cts, MsgId(9), 0, 0).encode();
        let mut rx = HeaderRx::default();
        assert!(rx.is_empty());
        rx.window()[..5].copy_from_slice(&bytes[..5]);
        assert!(rx.received(5).is_none());
        assert!(!rx.is_empty());
        let rest = rx.window().len();
        rx.window().copy_from_slice(&bytes[5..]);
        let h = rx.received(rest).unwrap().unwrap();
        assert_eq!((h.kind, h.msg_id), (FrameKind::Cts, MsgId(9)));
        assert!(rx.is_empty());
    }

    #[test]
    fn retain_never_drops_a_frame_half_written() {
        let now = Instant::now();
        let mut ob: Outbox<()> = Outbox::default();
        ob.push(FrameKind::Request, MsgId(1), b"abc", (), 0, now);
        ob.push(FrameKind::Request, MsgId(2), b"def", (), 0, now);
        ob.sent(HEADER_LEN + 1, now);
        ob.retain(|_| false);
        assert_eq!(ob.frames().map(|f| f.id).collect::<Vec<_>>(), [1]);
    }
}
