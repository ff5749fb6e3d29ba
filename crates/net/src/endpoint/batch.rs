//! One `run` call's calls, as the engine keeps them while their owner waits.

use super::views::{RecvView, SendView};
use super::{Call, Reply};
use crate::NetError;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Which call of which batch a frame or an answer belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CallRef {
    pub(super) batch: u64,
    pub(super) index: usize,
}

pub(super) struct BatchCall {
    pub(super) peer: SocketAddr,
    pub(super) body: Vec<u8>,
    pub(super) send: Vec<SendView>,
    pub(super) recv: Vec<RecvView>,
    pub(super) posted: bool,
    pub(super) result: Option<Result<Reply, NetError>>,
    /// Rails: where its payload's parts went, once split.
    pub(super) rails: Option<RailParts>,
}

/// A payload sent in parts: its message, the granting connection's token
/// and each part's (rail, offset, length).
pub(super) struct RailParts {
    pub(super) msg: u64,
    pub(super) token: weft_wire::RailToken,
    pub(super) parts: Vec<(u8, u64, usize)>,
}

pub(super) struct Batch {
    pub(super) calls: Vec<BatchCall>,
    /// Most calls in flight at once; calls are posted in order.
    pub(super) window: usize,
    /// The next call to post.
    pub(super) next: usize,
    pub(super) in_flight: usize,
    /// Calls with a result.
    pub(super) done: usize,
    /// When it was posted (a clock read a call alone need not repeat).
    pub(super) made: Instant,
    pub(super) deadline: Instant,
    pub(super) timeout: Duration,
    /// The next call's server has no connection (or rail): the owner opens it.
    pub(super) connect: Option<super::engine::ConnKey>,
}

impl Batch {
    /// A batch with no calls, to be filled ([`Batch::refill`]).
    pub(super) fn empty(now: Instant) -> Self {
        Batch { calls: Vec::new(), window: 1, next: 0, in_flight: 0, done: 0, made: now, deadline: now, timeout: Duration::ZERO, connect: None }
    }

    /// Makes this (finished, or empty) batch one of `calls`, made at
    /// `now`, in place: its call vector is reused, and its calls' own. A
    /// call that has a result already (refused before posting) keeps it
    /// and is never posted.
    pub(super) fn refill(&mut self, calls: &mut [Call<'_>], window: usize, timeout: Duration, now: Instant) {
        // The vector's calls are overwritten where there are some (their
        // view vectors keep their room), added past them.
        self.calls.truncate(calls.len());
        let mut done = 0;
        for (i, c) in calls.iter_mut().enumerate() {
            done += usize::from(c.result.is_some());
            if let Some(bc) = self.calls.get_mut(i) {
                // What `Engine::take_out` left: no result, body or views.
                bc.peer = c.peer;
                std::mem::swap(&mut bc.body, &mut c.body);
                if !c.send.is_empty() {
                    bc.send.extend(c.send.iter().map(|s| SendView::new(s)));
                }
                if !c.recv.is_empty() {
                    bc.recv.extend(c.recv.iter_mut().map(|r| RecvView::new(r)));
                }
                bc.posted = false;
                if c.result.is_some() {
                    bc.result = c.result.take();
                }
                if bc.rails.is_some() {
                    bc.rails = None;
                }
            } else {
                self.calls.push(BatchCall {
                    peer: c.peer,
                    body: std::mem::take(&mut c.body),
                    send: c.send.iter().map(|s| SendView::new(s)).collect(),
                    recv: c.recv.iter_mut().map(|r| RecvView::new(r)).collect(),
                    posted: false,
                    result: c.result.take(),
                    rails: None,
                });
            }
        }
        (self.window, self.next, self.in_flight, self.done) = (window.max(1), 0, 0, done);
        (self.made, self.deadline, self.timeout, self.connect) = (now, deadline_after(now, timeout), timeout, None);
    }

    pub(super) fn is_done(&self) -> bool {
        self.done == self.calls.len()
    }

    /// Gives call `i` its result unless it has one; returns 1 if it did.
    pub(super) fn complete(&mut self, i: usize, r: Result<Reply, NetError>) -> usize {
        let c = &mut self.calls[i];
        if c.result.is_some() {
            return 0;
        }
        c.result = Some(r);
        if c.posted {
            self.in_flight -= 1;
        }
        self.done += 1;
        1
    }

    /// Fails every call without a result (timeout or abandonment); calls not
    /// yet posted never will be.
    pub(super) fn fail_rest(&mut self, err: impl Fn(SocketAddr) -> NetError) {
        for i in 0..self.calls.len() {
            let peer = self.calls[i].peer;
            self.complete(i, Err(err(peer)));
        }
        self.next = self.calls.len();
        self.connect = None;
    }
}

/// `timeout` from now; a timeout too large for the clock is "never".
fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    now.checked_add(timeout).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}
