//! Calls left in flight while the caller does other work: post, then test
//! or wait (MPI's `MPI_Isend`/`MPI_Test`/`MPI_Wait`, the paper's
//! post/advance engine as a public API). The blocking [`Endpoint::run`] is
//! a post followed by a wait.
//!
//! ```no_run
//! # fn f(ep: &weft_net::Endpoint, peer: std::net::SocketAddr, data: &[u8]) {
//! use weft_net::Call;
//! use weft_wire::Request;
//! ep.scope(|s| {
//!     let mut call = Call::new(peer, Request::Sink.encode());
//!     call.send = vec![data];
//!     let mut posted = s.post(vec![call]);
//!     while !posted.test() {
//!         // compute while the message layer moves the bytes
//!     }
//!     let calls = posted.wait();
//!     assert!(calls[0].result.as_ref().unwrap().is_ok());
//! });
//! # }
//! ```
//!
//! **Why a scope.** The engine reads and writes the callers' buffers in
//! place (no staging copy), so nothing may free a buffer while a call on it
//! is in flight. A handle that is dropped withdraws its calls; but a handle
//! can also be leaked (`mem::forget`), so the buffers are borrowed for the
//! scope (from outside it), and the scope withdraws every call still in
//! flight before it returns, as `std::thread::scope` joins its threads.
//!
//! **Progress.** [`Posted::test`] moves things on without waiting: it
//! posts what the window allows and, unless another thread is driving,
//! makes one pass over every connection. Between tests nothing moves
//! unless another thread of the process is in the endpoint (a thread
//! waiting in `run` or `wait` drives every batch, including this one).

use super::{Abandon, Call, Endpoint};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::time::Duration;

/// Batches posted in a scope; see [`Endpoint::scope`].
pub struct Scope<'s, 'env: 's> {
    ep: &'env Endpoint,
    /// Batches posted here and not yet waited for or withdrawn.
    live: RefCell<Vec<u64>>,
    /// Invariant in both, as `std::thread::Scope`.
    _scope: PhantomData<&'s mut &'s ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// Calls in flight; [`Posted::wait`] gives them back with their results.
/// Dropping it withdraws the calls not yet answered.
pub struct Posted<'s> {
    ep: &'s Endpoint,
    live: &'s RefCell<Vec<u64>>,
    id: u64,
    calls: Vec<Call<'s>>,
    timeout: Duration,
    /// Taken out of the engine (waited for).
    finished: bool,
}

impl Endpoint {
    /// Runs `f` with a scope in which calls may be posted and left in
    /// flight ([`Scope::post`]); every call still in flight when `f`
    /// returns (or unwinds) is withdrawn, failing with a timeout.
    pub fn scope<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'s> FnOnce(&'s Scope<'s, 'env>) -> R,
    {
        let scope = Scope { ep: self, live: RefCell::new(Vec::new()), _scope: PhantomData, _env: PhantomData };
        let _end = ScopeEnd(&scope);
        f(&scope)
    }
}

impl<'s> Scope<'s, '_> {
    /// Posts `calls` (all at once) under the endpoint's deadline.
    pub fn post(&'s self, calls: Vec<Call<'s>>) -> Posted<'s> {
        self.post_within(calls, usize::MAX, self.ep.config.op_timeout)
    }

    /// [`Scope::post`] with at most `window` calls in flight (posted in
    /// order) and a deadline `timeout` from now.
    pub fn post_within(&'s self, mut calls: Vec<Call<'s>>, window: usize, timeout: Duration) -> Posted<'s> {
        let id = self.ep.post_batch(&mut calls, window, timeout).map(|(id, _)| id);
        // No calls: nothing in the engine, done at once.
        let (id, finished) = match id {
            Some(id) => {
                self.live.borrow_mut().push(id);
                (id, false)
            }
            None => (u64::MAX, true),
        };
        Posted { ep: self.ep, live: &self.live, id, calls, timeout, finished }
    }
}

impl<'s> Posted<'s> {
    /// Moves the calls on without waiting (see the module doc); whether
    /// every call has its result, so that [`Posted::wait`] returns at once.
    pub fn test(&mut self) -> bool {
        self.finished || self.ep.test_batch(self.id)
    }

    /// Waits until every call has its result (its answer, its own error,
    /// or a timeout) and gives the calls back.
    pub fn wait(mut self) -> Vec<Call<'s>> {
        if !self.finished {
            let mut calls = std::mem::take(&mut self.calls);
            self.ep.wait_batch(self.id, &mut calls, self.timeout);
            self.finished = true;
            self.live.borrow_mut().retain(|&b| b != self.id);
            self.calls = calls;
        }
        std::mem::take(&mut self.calls)
    }
}

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.live.borrow_mut().retain(|&b| b != self.id);
            drop(Abandon { ep: self.ep, id: self.id });
        }
    }
}

/// Withdraws the batches a scope still has in flight (handles leaked or
/// an unwinding `f`), before the buffers they borrow can go.
struct ScopeEnd<'a, 's, 'env>(&'a Scope<'s, 'env>);

impl Drop for ScopeEnd<'_, '_, '_> {
    fn drop(&mut self) {
        for id in self.0.live.borrow_mut().drain(..) {
            drop(Abandon { ep: self.0.ep, id });
        }
    }
}
