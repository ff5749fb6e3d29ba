//! Shutdown as an input (SIGTERM): a server asked to stop drains instead
//! of dropping what is under way. It stops listening at once (new
//! connections are refused, so clients know nothing of theirs was sent),
//! answers requests that arrive from then on with `Stopping` (not applied:
//! clients send them again once the server is back), lets the requests it
//! had started finish and their answers go out, and returns within
//! [`DRAIN_LIMIT`]; the caller then makes the metadata durable and exits.
//! With the clients' recovery window, a restart is not seen by
//! applications, whatever their requests.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a drain waits for started requests (a lock wait or a slow
/// disk) before the server stops anyway: with the metadata flush after it,
/// a SIGTERM ends the process within 5 s.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(4);

/// Asks a server's event loop to drain and return; cheap to clone (a
/// signal handler holds one).
#[derive(Clone, Default)]
pub struct Shutdown(Arc<AtomicBool>);

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the drain (the loop sees it within one sweep, 200 ms).
    pub fn trigger(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Stops a listening socket from taking connections: connects are
/// refused from now on, rather than completed by the kernel's backlog and
/// then reset at exit (which a client could not tell from a lost request).
pub(super) fn stop_listening(listener: &impl AsRawFd) {
    // A socket that cannot be shut down (already closed) takes nothing anyway.
    let _ = nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
}
