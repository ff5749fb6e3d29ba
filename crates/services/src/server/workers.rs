//! The worker pool: requests run here, off the event loop, so a slow disk
//! or a long metadata transaction never stops the loop from serving other
//! connections. Each result goes back to the loop through a channel and a
//! wake-up of its poller.
//!
//! A panic while serving one request is caught: that request is answered
//! with an `Internal` error, and the job's buffers and budget charges are
//! dropped with it, so the server goes on with nothing leaked.

use weft_net::budget::Charge;
use weft_net::link::Payload;
use super::Server;
use crate::lock::Answer;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use super::collectives::Reply;
use weft_wire::{CpuKind, DataReq, ErrorCode, FileId, MsgId, Request, Response};

/// A connection as the loop knows it: its slot and the slot's generation
/// (a slot reused by a later connection has a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnRef {
    pub slot: usize,
    pub generation: u64,
}

/// One request to serve.
pub struct Job {
    pub conn: ConnRef,
    pub id: MsgId,
    /// Boxed: a job moves through queues, and a request is large.
    pub req: Box<Request>,
    pub payload: Payload,
    /// The response payload's memory, drawn before the job was dispatched.
    pub out_charge: Option<Charge>,
    /// The memory drawn for a response body that may be large (a
    /// listing's page), held until the answer is sent.
    pub body_charge: Option<Charge>,
    /// The object whose read turn this job holds.
    pub turn: Option<FileId>,
    /// The proven user its connection counts for (`conn_quota`).
    pub user: Option<u32>,
    /// When its request arrived whole (its latency runs from here).
    pub arrived: std::time::Instant,
}

/// What comes back to the loop.
pub enum Done {
    /// A job ran; `answer` is `None` when the response comes later ([`Done::Late`]).
    /// `lent`: a lend's descriptor, sent over the connection before the answer.
    Job { conn: ConnRef, id: MsgId, answer: Option<(Response, Payload)>, turn: Option<FileId>, lent: Option<std::fs::File> },
    /// The later response of a job that ran earlier (a lock granted after a
    /// wait, a collective's round done), with its payload.
    Late { conn: ConnRef, id: MsgId, rsp: Response, payload: Payload },
    /// A MUNGE handshake's proof checked (see [`Verifier`]).
    Verified { conn: ConnRef, outcome: weft_net::link::MungeOutcome },
}

/// Sends results to the loop and wakes it.
#[derive(Clone)]
pub struct Replier {
    tx: Sender<Done>,
    waker: Arc<mio::Waker>,
}

impl Replier {
    pub fn new(waker: Arc<mio::Waker>) -> (Self, Receiver<Done>) {
        let (tx, rx) = channel();
        (Replier { tx, waker }, rx)
    }

    pub fn send(&self, d: Done) {
        // The loop outlives the workers; a failed send means it is gone.
        if self.tx.send(d).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// Threads serving jobs from one queue.
pub struct Workers {
    tx: Sender<Job>,
    server: Arc<Server>,
}

impl Workers {
    /// Starts `n` workers.
    pub fn start(n: usize, server: Arc<Server>, replier: &Replier) -> Self {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for k in 0..n.max(1) {
            let (server, rx, replier) = (server.clone(), rx.clone(), replier.clone());
            std::thread::Builder::new()
                .name(format!("weft-worker-{k}"))
                .spawn(move || work(&server, &rx, &replier))
                .expect("spawn a worker thread");
        }
        Workers { tx, server }
    }

    pub fn submit(&self, job: Job) {
        self.server.requests.enqueued();
        // Workers live as long as the process.
        let _ = self.tx.send(job);
    }
}

/// A MUNGE proof to check: the connection, its hello and challenge, the
/// credential.
pub struct VerifyJob {
    pub conn: ConnRef,
    pub hello: weft_wire::Hello,
    pub challenge: weft_wire::Challenge,
    pub cred: Vec<u8>,
}

/// One thread that checks MUNGE proofs with `munged` (and looks up the
/// user's groups), off the event loop: a slow or dead `munged` delays only
/// handshakes, never other connections' requests. The connection's
/// handshake deadline still runs; a late result finds it gone.
pub struct Verifier {
    tx: Sender<VerifyJob>,
}

impl Verifier {
    pub fn start(server: Arc<Server>, replier: &Replier) -> Self {
        let (tx, rx) = channel::<VerifyJob>();
        let replier = replier.clone();
        std::thread::Builder::new()
            .name("weft-verifier".into())
            .spawn(move || {
                let mut cpu = CpuLaps::start();
                for j in rx {
                    let outcome = catch_unwind(AssertUnwindSafe(|| server.gate.munge_proof(&j.hello, &j.challenge, &j.cred)))
                        .unwrap_or_else(|_| Err((ErrorCode::Internal, "the server failed while checking the credential".into())));
                    replier.send(Done::Verified { conn: j.conn, outcome });
                    server.count_cpu(CpuKind::Other, cpu.lap());
                }
            })
            .expect("spawn the verifier thread");
        Verifier { tx }
    }

    pub fn submit(&self, job: VerifyJob) {
        let _ = self.tx.send(job);
    }
}

/// This thread's CPU time in laps: each [`CpuLaps::lap`] is the time since
/// the last one (or the start), so laps add up to all of the thread's time.
struct CpuLaps(u64);

impl CpuLaps {
    fn start() -> Self {
        CpuLaps(super::thread_cpu_ns())
    }

    fn lap(&mut self) -> u64 {
        let now = super::thread_cpu_ns();
        let ns = now.saturating_sub(self.0);
        self.0 = now;
        ns
    }
}

/// A worker's loop. All of the thread's CPU time is counted, by the kind
/// of the request it served: each job's share runs from the end of the
/// previous one (taking the job from the queue included), so the kinds of
/// every thread add up to the process's CPU time (`weft status`).
fn work(server: &Server, rx: &Mutex<Receiver<Job>>, replier: &Replier) {
    let mut cpu = CpuLaps::start();
    let mut count = |kind: CpuKind| server.count_cpu(kind, cpu.lap());
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(PoisonError::into_inner);
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        server.requests.dequeued();
        server.requests.started();
        let Job { conn, id, req, mut payload, out_charge, turn, user, body_charge, arrived } = job;
        let req = *req;
        let kind = super::cpu_kind(&req);
        let bytes_in = payload.len() as u64;
        // A status report should not count its own request (1 byte).
        if matches!(req, Request::Status) {
            drop(payload.charge.take());
        }
        let later = || -> Answer {
            let r = replier.clone();
            Box::new(move |rsp| r.send(Done::Late { conn, id, rsp, payload: Payload::default() }))
        };
        // Sized by the memory drawn for it: a read's whole response.
        let mut out = weft_net::buffers::take(out_charge.as_ref().map_or(0, |c| c.bytes() as usize));
        if let Request::Data { op: op @ (DataReq::CollWrite { .. } | DataReq::CollRead { .. }), .. } = req {
            // Held until its round is complete: answered through `reply`.
            let r = replier.clone();
            let reply: Reply = Box::new(move |rsp, payload| r.send(Done::Late { conn, id, rsp, payload }));
            let buf = if matches!(op, DataReq::CollWrite { .. }) { payload } else { Payload::new(out, out_charge) };
            if catch_unwind(AssertUnwindSafe(|| server.collective(op, buf, reply, user))).is_err() {
                server.count_panic();
                tracing::error!(target: "weft::server", msg_id = id.0, "a collective round panicked; its members were not answered");
            }
            replier.send(Done::Job { conn, id, answer: None, turn, lent: None });
            count(kind);
            server.requests.finished();
            continue;
        }
        let mut lent = None;
        let outcome = catch_unwind(AssertUnwindSafe(|| match req {
            Request::Data { op: DataReq::Lend { file }, .. } => {
                let (rsp, f) = server.lend(file);
                lent = f;
                Some(rsp)
            }
            req => server.handle(req, payload.data(), &mut out, &later, user),
        }));
        drop(payload);
        let answer = match outcome {
            Ok(Some(rsp)) => Some((rsp, Payload::new(out, with_body(out_charge, body_charge)))),
            Ok(None) => None,
            Err(panic) => {
                let what = panic.downcast_ref::<&str>().map(|s| (*s).to_owned()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default();
                server.count_panic();
                tracing::error!(target: "weft::server", msg_id = id.0, %what, "request panicked; answered with an error");
                Some((Response::error(ErrorCode::Internal, format!("the server failed while serving this request: {what}")), Payload::default()))
            }
        };
        // A lock that waits is answered later: its wait is not a latency.
        if let Some((_, out)) = &answer {
            server.requests.served(kind, bytes_in, out.bytes.len() as u64, arrived.elapsed());
        }
        replier.send(Done::Job { conn, id, answer, turn, lent });
        count(kind);
        server.requests.finished();
    }
}

/// A response's payload charge with its body's reservation added (both
/// drawn for the same connection at dispatch).
fn with_body(payload: Option<Charge>, body: Option<Charge>) -> Option<Charge> {
    match (payload, body) {
        (Some(mut p), Some(b)) => {
            p.merge(b);
            Some(p)
        }
        (p, b) => p.or(b),
    }
}
