//! The lock service's clocks: the timer thread that times out lock waits,
//! expires leases and ends the grace after a restart; and the wall clock
//! leases are sealed with.

use super::{lock, LockService};
use std::sync::{PoisonError, Weak};
use std::time::{Duration, Instant};

/// Unix time in milliseconds (leases are checked by other servers' clocks).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Times out lock waits and expires leases until the service is dropped.
pub(super) fn timer_loop(svc: &Weak<LockService>, tick: Duration) {
    let mut next_lease_check = Instant::now() + tick;
    loop {
        let Some(s) = svc.upgrade() else { return };
        let now = Instant::now();
        // This thread must outlive any bug it runs into: without it no lease
        // expires and no wait times out.
        let contained = |what: &str, f: &dyn Fn()| {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                tracing::error!(target: "weft::lock", "{what} panicked; the timer goes on");
            }
        };
        if now >= next_lease_check {
            contained("lease expiry", &|| s.expire());
            contained("the end of the grace", &|| s.end_grace());
            next_lease_check = now + tick;
        }
        let mut next_wait = None;
        if let Ok(n) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.time_out_waiters(now))) {
            next_wait = n;
        }
        let until = next_wait.map_or(next_lease_check, |w| w.min(next_lease_check));
        let d = lock(&s.deadlines);
        // A new, earlier deadline notifies the condvar.
        let _ = s.timer.wait_timeout(d, until.saturating_duration_since(Instant::now()).min(tick)).unwrap_or_else(PoisonError::into_inner);
    }
}
