//! Starting a connection's requests, in arrival order: answered on the
//! loop at once when they need neither disk nor waiting (and a few
//! metadata changes a pass when no other commit runs), else handed to the
//! worker pool (or an object's read queue), up to `per_connection` of a
//! connection's at a time. The memory a request's answer will take is
//! drawn first, within the connection's share.

use super::Reactor;
use crate::server::workers::Job;
use crate::server::{cpu_kind, thread_cpu_ns};
use std::time::Instant;
use weft_net::link::Payload;
use weft_wire::{DataReq, ErrorCode, Request, Response};

impl Reactor {
    /// Starts the connection's next requests: those that need neither disk
    /// nor waiting run here at once; the others go to the pool, up to
    /// `per_connection` of this connection's at a time.
    pub(super) fn dispatch(&mut self, k: usize, now: Instant) {
        // Changes made on the loop this pass (see `CHANGES_PER_PASS`).
        let mut changes = 0;
        loop {
            let Some(Some(slot)) = self.slots.get_mut(k) else { return };
            let ping = matches!(slot.ready.front(), Some(j) if matches!(*j.req, Request::Ping));
            if (slot.in_service >= self.per_connection && !ping) || slot.conn.closing().is_some() {
                return;
            }
            let Some(mut job) = slot.ready.pop_front() else { return };
            if self.draining {
                slot.conn.respond(job.id, &Response::error(ErrorCode::Stopping, "the server is stopping; the request was not applied: send it again once it is back"), Payload::default(), now);
                continue;
            }
            // The response payload's memory, and a large body's, before
            // any work is done for it.
            let (out_len, body_len) = (response_len(&job.req), body_reserve(&job.req));
            if out_len + body_len > 0 {
                // Within the connection's share: a client that asks for
                // many large reads (or listings) and takes them slowly
                // holds only its share.
                match slot.conn.charge(out_len + body_len) {
                    Some(mut c) => {
                        job.body_charge = c.split(body_len).filter(|_| body_len > 0);
                        job.out_charge = (out_len > 0).then_some(c);
                    }
                    None => {
                        slot.ready.push_front(job);
                        slot.stalled = true;
                        return;
                    }
                }
            }
            if self.server.answers_on_the_loop(&job.req) {
                self.answer_inline(k, job, now);
                continue;
            }
            // Only with none of the connection's requests at a worker, so
            // its requests still start in arrival order.
            if slot.in_service == 0
                && changes < CHANGES_PER_PASS
                && self.server.changes_on_the_loop(&job.req)
                && let Some(rsp) = self.try_change_inline(&job)
            {
                changes += 1;
                if let Some(Some(slot)) = self.slots.get_mut(k) {
                    slot.conn.respond(job.id, &rsp, Payload::default(), now);
                }
                continue;
            }
            self.start(k, job);
            return;
        }
    }

    /// Serves a metadata change on the loop's thread if no other commit
    /// runs or waits (see `Server::changes_on_the_loop`), counted as a
    /// worker counts it; `None` otherwise.
    fn try_change_inline(&self, job: &Job) -> Option<Response> {
        let (kind, bytes_in, cpu_before) = (cpu_kind(&job.req), job.payload.len() as u64, thread_cpu_ns());
        let rsp = self.server.try_change_now(&job.req)?;
        self.server.count_inline(kind, bytes_in, 0, job.arrived, thread_cpu_ns().saturating_sub(cpu_before));
        Some(rsp)
    }

    /// Serves a request on the loop's thread (see `Server::answers_on_the_loop`)
    /// and queues its answer; a panic is contained as on a worker.
    fn answer_inline(&mut self, k: usize, job: Job, now: Instant) {
        let Job { id, mut req, payload, out_charge, user, arrived, .. } = job;
        // Requests a worker would serve are counted as a worker counts them.
        let counted = matches!(*req, Request::Meta { .. }).then(|| (cpu_kind(&req), payload.len() as u64, thread_cpu_ns()));
        let mut out = weft_net::buffers::take(out_charge.as_ref().map_or(0, |c| c.bytes() as usize));
        // Inline requests never answer later.
        let later = || -> crate::lock::Answer { Box::new(|_| {}) };
        let server = &self.server;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.handle(std::mem::replace(&mut *req, Request::Ping), payload.data(), &mut out, &later, user)));
        if let Some((kind, bytes_in, cpu_before)) = counted {
            // A failed request answers with no payload.
            let bytes_out = if matches!(outcome, Ok(Some(_))) { out.len() as u64 } else { 0 };
            server.count_inline(kind, bytes_in, bytes_out, arrived, thread_cpu_ns().saturating_sub(cpu_before));
        }
        let Some(Some(slot)) = self.slots.get_mut(k) else { return };
        // The box is the connection's next request's (no allocation).
        slot.conn.recycle(req);
        match outcome {
            Ok(Some(rsp)) => slot.conn.respond(id, &rsp, Payload::new(out, out_charge), now),
            Ok(None) | Err(_) => {
                self.server.count_panic();
                slot.conn.respond(id, &Response::error(ErrorCode::Internal, "the server failed while serving this request"), Payload::default(), now);
            }
        }
    }

    /// Hands a request to the pool (or to its object's read queue).
    fn start(&mut self, k: usize, mut job: Job) {
        if matches!(*job.req, Request::Status) {
            // The loop's CPU time is noted at each sweep, and here, so a
            // status report misses none of the loop's work before it.
            self.server.note_loop_cpu();
        }
        let Some(Some(slot)) = self.slots.get_mut(k) else { return };
        slot.in_service += 1;
        if let Request::Data { op: DataReq::Read { file, pieces, order }, .. } = &*job.req
            && order.strategy != 0
        {
            let (file, order, offset) = (*file, *order, pieces.first().map_or(0, |p| p.offset));
            job.turn = Some(file);
            if let Some(job) = self.turns.admit(file, order, offset, job) {
                self.workers.submit(job);
            }
            return;
        }
        if let Request::Meta { op: weft_wire::MetaReq::Replica { .. }, .. } = &*job.req {
            self.replicas.submit(job);
            return;
        }
        self.workers.submit(job);
    }
}

/// Metadata changes one connection may have made on the loop per pass
/// (each a commit of tens of microseconds); the rest of what it sent goes
/// to the workers, within its share (`per_connection`), so a client that
/// streams changes does not keep the loop from the others.
const CHANGES_PER_PASS: usize = 4;

/// Bytes of response payload a request produces (drawn before it runs).
fn response_len(req: &Request) -> u64 {
    match req {
        Request::Data { op: DataReq::Read { pieces, .. } | DataReq::CollRead { pieces, .. }, .. } => pieces.iter().map(|p| p.len).sum(),
        Request::Source { len } => (*len).into(),
        _ => 0,
    }
}

/// Bytes reserved for a response body that may be large (a listing's
/// page, up to the body limit): the small answers of everything else are
/// bounded by their count (`ConnLimits::max_queued`).
fn body_reserve(req: &Request) -> u64 {
    match req {
        Request::Meta { op: weft_wire::MetaReq::Readdir { .. } | weft_wire::MetaReq::ReaddirShard { .. }, .. } => weft_wire::limits::MAX_BODY_LEN.into(),
        _ => 0,
    }
}
