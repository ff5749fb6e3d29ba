//! What the loop does apart from serving input: deadlines swept every
//! `SWEEP_EVERY`, connections that waited for memory tried again, reads of
//! one file started in turn, and idle connections taken back at the limit.

use super::Reactor;
use std::time::Instant;

impl Reactor {
    /// Retries a connection that waited for memory (contained like
    /// [`Reactor::service_contained`]: the retry may complete and decode a frame).
    pub(super) fn retry(&mut self, k: usize, now: Instant) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let Some(Some(slot)) = self.slots.get_mut(k) else { return };
            let mut events = std::mem::take(&mut self.events);
            slot.conn.retry(now, &self.server.gate, &mut events);
            self.events = events;
        }));
        if r.is_err() {
            self.events.clear();
            self.close_after_panic(k);
            return;
        }
        self.service_contained(k, now);
    }

    /// A read of `file` finished: start the next one waiting for its turn,
    /// skipping jobs whose connection has gone.
    pub(super) fn next_turn(&mut self, file: weft_wire::FileId) {
        while let Some(job) = self.turns.finish(file) {
            if self.slot_of(job.conn).is_some() {
                self.workers.submit(job);
                return;
            }
        }
    }

    /// At the connection limit: closes the connection idle longest, if one
    /// has been idle long enough to be taken back (see [`crate::server::conn_quota::ConnQuota`]).
    pub(super) fn take_back_idle(&mut self) -> bool {
        let now = Instant::now();
        if self.oldest_idle.is_none_or(|t| now.saturating_duration_since(t) < self.quota.evict_after) {
            return false;
        }
        let idle = self.slots.iter().enumerate().filter_map(|(k, s)| Some((k, s.as_ref()?.conn.idle_since()?)));
        let Some(k) = self.quota.victim(idle, now) else {
            // Nothing is old enough any more: not before the next sweep.
            self.oldest_idle = None;
            return false;
        };
        if let Some(Some(slot)) = self.slots.get_mut(k) {
            tracing::info!(target: "weft::server", peer = %slot.peer, "taken back at the connection limit: idle");
            slot.conn.abort("peer closed: taken back, idle at the connection limit");
        }
        self.close(k);
        true
    }

    /// Closes connections past a deadline; retries accepting (after a
    /// failed accept no new readiness may come for the waiting backlog).
    pub(super) fn sweep(&mut self, now: Instant) {
        self.server.note_loop_cpu();
        // One pass: connections past a deadline, and the oldest idle start.
        let mut late: Vec<(usize, String)> = Vec::new();
        self.oldest_idle = None;
        for (k, conn) in self.slots.iter().enumerate().filter_map(|(k, s)| Some((k, &s.as_ref()?.conn))) {
            match conn.overdue(now) {
                Some(why) => late.push((k, why)),
                None => {
                    if let Some(t) = conn.idle_since() {
                        self.oldest_idle = Some(self.oldest_idle.map_or(t, |o| o.min(t)));
                    }
                }
            }
        }
        self.server.expire_collectives(now);
        // Closed connections' rings past their grace period, and shared
        // areas left empty, give their pages (and budget) back.
        weft_net::transport::shm::punch_due(now);
        for &k in &self.shm_slots {
            if let Some(Some(slot)) = self.slots.get(k)
                && let Some(area) = slot.conn.area()
            {
                area.trim(now);
            }
        }
        self.accept();
        self.accept_shm();
        for (k, why) in late {
            if let Some(Some(slot)) = self.slots.get_mut(k) {
                tracing::info!(target: "weft::server", peer = %slot.peer, %why, "deadline passed, closing");
                slot.conn.abort(why);
            }
            self.close(k);
        }
        // Connections that stalled with nothing of theirs in flight retry
        // here too (memory may have been returned by another connection).
        let stalled: Vec<usize> = self.slots.iter().enumerate().filter(|(_, s)| s.as_ref().is_some_and(|s| s.stalled)).map(|(k, _)| k).collect();
        for k in stalled {
            self.retry(k, now);
        }
    }
}
