//! A server's shutdown as the loop sees it: stop accepting, answer what
//! was read, finish what is at work (within `DRAIN_LIMIT`), then say
//! `Stopping` on every connection.

use super::Reactor;
use std::time::Instant;
use weft_wire::ErrorCode;

impl Reactor {
    /// Begins a drain: no new connections (refused from now on), new
    /// requests answered `Stopping`. Returns when the drain gives up.
    pub(super) fn start_drain(&mut self) -> Instant {
        tracing::info!(target: "weft::server", connections = self.live, "shutting down: draining requests under way");
        self.draining = true;
        let _ = self.poll.registry().deregister(&mut self.listener);
        crate::server::shutdown::stop_listening(&self.listener);
        if let Some(l) = self.shm_listener.as_mut() {
            let _ = self.poll.registry().deregister(l);
            crate::server::shutdown::stop_listening(l);
        }
        // Requests read but not started yet get their answer now.
        let now = Instant::now();
        for k in 0..self.slots.len() {
            self.service_contained(k, now);
        }
        now + crate::server::DRAIN_LIMIT
    }

    /// The drain's last word on every connection: `Stopping`, after the
    /// answers. Nothing is read after it, so the client knows that what it
    /// sent and was not answered was not applied. A connection with a
    /// request still at work (the drain ran out its time) is closed without
    /// that word: its request may yet be applied.
    pub(super) fn say_goodbye(&mut self) {
        let now = Instant::now();
        for k in 0..self.slots.len() {
            if let Some(Some(slot)) = self.slots.get_mut(k) {
                if slot.in_service == 0 {
                    slot.conn.fail(ErrorCode::Stopping, "the server is stopping; what it did not answer was not applied".into(), now);
                } else {
                    slot.conn.abort("the server is stopping with a request of this connection at work");
                }
            }
            self.flush(k, now);
        }
    }

    /// Nothing started is unanswered and every answer went out.
    pub(super) fn drained(&self) -> bool {
        self.slots.iter().flatten().all(|s| s.in_service == 0 && s.ready.is_empty() && !s.conn.has_output())
    }
}
