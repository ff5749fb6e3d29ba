//! `weft fuzz`: structure-aware fuzzing of the decoders and of live
//! servers' request handling, on the stable toolchain.
//!
//! Each input is built from the message grammar, not from random bytes
//! alone: a real request of a random family (meta, data, lock, status,
//! source/sink) with field values drawn to hit limits and edges (counts at
//! and past their caps, lengths whose sums wrap, offsets near 2^62 and 2^64,
//! empty and overlong strings), then sent as it is or mutated (bytes
//! flipped, cut short, extended, a header's lengths or kind changed, a
//! rendezvous announced and abandoned, raw garbage). Every body is first
//! decoded in process (a panic there is a finding), then sent to a meta or
//! data server over one of several connections. The server must answer or
//! close the connection, never stall; every `check_every` inputs a
//! well-behaved client must be served, and at the end every server must be
//! alive with no panicked request and its memory budget back to idle.

use anyhow::{bail, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use weft_client::{Client, CreateOptions};
use weft_net::handshake::client_handshake;
use weft_net::ClusterFile;
use weft_wire::limits::{MAX_LOCK_EXTENTS, MAX_PAYLOAD_LEN, MAX_PIECES};
use weft_wire::{Cred, DataReq, FileId, FrameKind, Header, LayoutHint, LockReq, MetaReq, MsgId, Piece, ReadOrder, Request, Response, WireExtent, HEADER_LEN};

/// What to run.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    pub inputs: u64,
    pub seed: u64,
    /// Connections per target server kept open at once.
    pub connections: usize,
    /// A well-behaved client is served every this many inputs.
    pub check_every: u64,
    /// How long an answer may take before the server counts as stalled.
    pub answer_timeout: Duration,
}

impl Default for FuzzConfig {
    fn default() -> Self {
        FuzzConfig { inputs: 1_000_000, seed: 1, connections: 4, check_every: 10_000, answer_timeout: Duration::from_secs(10) }
    }
}

/// What happened.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FuzzReport {
    pub inputs: u64,
    pub decoded_ok: u64,
    pub decode_errors: u64,
    pub answered: u64,
    pub error_answers: u64,
    pub closed_by_server: u64,
    pub reconnects: u64,
    pub checks_passed: u64,
    pub server_panics: u64,
    pub seconds: f64,
}

/// How an input is sent.
enum Input {
    /// A whole frame whose framing is valid: an answer is due.
    Framed(Vec<u8>),
    /// Bytes that break the framing or leave it open: the server may close.
    Broken(Vec<u8>),
}

struct Gen {
    rng: StdRng,
    /// The servers' capability key: the fuzzer holds the secret (as any
    /// client in secret mode), so most data requests pass the gate and
    /// reach the data service; the rest carry forged or mismatched ones.
    caps: weft_wire::CapKey,
}

impl Gen {
    /// A length near an edge, or anywhere.
    fn len(&mut self) -> u64 {
        match self.rng.gen_range(0..10) {
            0 => 0,
            1 => u64::from(MAX_PAYLOAD_LEN) + self.rng.gen_range(0..3),
            2 => 1 << 62,
            3 => u64::MAX - self.rng.gen_range(0..3),
            4 => (1 << 61) + self.rng.gen_range(0..5),
            5 => self.rng.gen_range(1..70_000),
            // Mostly small, so a million inputs move gigabytes, not terabytes.
            _ => self.rng.gen_range(1..512),
        }
    }

    fn offset(&mut self) -> u64 {
        match self.rng.gen_range(0..6) {
            0 => 0,
            1 => (1 << 62) - self.rng.gen_range(0..100),
            2 => u64::MAX - self.rng.gen_range(0..100),
            _ => self.rng.gen_range(0..1 << 30),
        }
    }

    fn count(&mut self, cap: usize) -> usize {
        match self.rng.gen_range(0..8) {
            0 => 0,
            1 => cap,
            2 => cap + 1,
            _ => self.rng.gen_range(1..64),
        }
    }

    fn path(&mut self) -> String {
        match self.rng.gen_range(0..8) {
            0 => String::new(),
            1 => "/".into(),
            2 => format!("/{}", "x".repeat(self.rng.gen_range(250..270))),
            3 => "/a/../b//c/.".into(),
            4 => format!("/fz/{}", "d/".repeat(self.rng.gen_range(1..40))),
            _ => format!("/fz/{}", self.rng.gen_range(0..200)),
        }
    }

    fn file(&mut self) -> FileId {
        FileId(if self.rng.gen_bool(0.8) { self.rng.gen_range(0..300) } else { self.rng.r#gen() })
    }

    /// A data request with a capability (see [`Gen::cap`]).
    fn data(&mut self, op: DataReq) -> Request {
        let cap = self.cap(op.file());
        Request::data(cap, op)
    }

    /// A capability for `f`: usually valid for every right, sometimes for
    /// another file, too few rights, expired or forged.
    fn cap(&mut self, f: FileId) -> weft_wire::Capability {
        match self.rng.gen_range(0..10) {
            0 => self.caps.issue(FileId(f.0 ^ 1), weft_wire::rights::ALL, u64::MAX),
            1 => self.caps.issue(f, self.rng.gen_range(0..16), u64::MAX),
            2 => self.caps.issue(f, weft_wire::rights::ALL, self.rng.gen_range(0..1_000_000)),
            3 => weft_wire::Capability { mac: self.rng.r#gen(), ..self.caps.issue(f, weft_wire::rights::ALL, u64::MAX) },
            _ => self.caps.issue(f, weft_wire::rights::ALL, u64::MAX),
        }
    }

    fn pieces(&mut self) -> Vec<Piece> {
        let n = self.count(MAX_PIECES).min(MAX_PIECES + 1);
        (0..n).map(|_| Piece { offset: self.offset(), len: self.len() }).collect()
    }

    fn extent(&mut self) -> WireExtent {
        if self.rng.gen_bool(0.5) {
            let start = self.offset();
            WireExtent::Range { start, end: start.wrapping_add(self.len()) }
        } else {
            let len = self.rng.gen_range(0..64);
            WireExtent::Strided { offset: self.offset(), len, stride: len + self.rng.gen_range(0..64), count: if self.rng.gen_bool(0.3) { 1 << 40 } else { self.rng.gen_range(0..1000) } }
        }
    }

    fn request(&mut self) -> Request {
        let groups: Vec<u32> = (0..self.rng.gen_range(0..=weft_wire::MAX_GROUPS)).map(|_| self.rng.gen_range(0..3000)).collect();
        let cred = Cred::with_groups(if self.rng.gen_bool(0.5) { 0 } else { self.rng.gen_range(1..3000) }, self.rng.gen_range(0..3000), &groups);
        let req = match self.rng.gen_range(0..14) {
            0 => Request::Ping,
            1 => Request::Status,
            2 => Request::Source { len: if self.rng.gen_bool(0.05) { self.rng.gen_range(0..=MAX_PAYLOAD_LEN) } else { self.rng.gen_range(0..4096) } },
            3 => Request::Meta {
                cred,
                op: MetaReq::Create {
                    path: self.path(),
                    mode: self.rng.r#gen(),
                    exclusive: self.rng.r#gen(),
                    hint: LayoutHint { stripe_size: if self.rng.gen_bool(0.5) { 0 } else { self.len() }, stripe_count: self.rng.gen_range(0..6) },
                },
            },
            4 => Request::Meta { cred, op: MetaReq::Mkdir { path: self.path(), mode: self.rng.r#gen() } },
            5 => Request::Meta { cred, op: MetaReq::Readdir { path: self.path(), after: self.path(), max: self.rng.gen_range(0..2000) } },
            6 => Request::Meta { cred, op: MetaReq::Unlink { path: self.path() } },
            7 => Request::Meta { cred, op: MetaReq::Rename { from: self.path(), to: self.path() } },
            8 => {
                let op = DataReq::Write { file: self.file(), pieces: self.pieces() };
                self.data(op)
            }
            9 => {
                let order = ReadOrder { strategy: self.rng.gen_range(0..6), rank: self.rng.gen_range(0..8), group: self.rng.gen_range(0..8), slot: self.rng.r#gen() };
                let op = DataReq::Read { file: self.file(), pieces: self.pieces(), order };
                self.data(op)
            }
            10 => {
                let op = match self.rng.gen_range(0..4) {
                0 => DataReq::Truncate { file: self.file(), size: self.offset() },
                1 => DataReq::Size { file: self.file() },
                2 => DataReq::Fsync { file: self.file() },
                // Deletes only ids no real file has: a delete is final
                // (tombstoned), and the checks need their files.
                _ => DataReq::Delete { file: FileId((1 << 40) + self.rng.gen_range(0..1000)) },
                };
                self.data(op)
            }
            11 | 12 => {
                let n = self.count(MAX_LOCK_EXTENTS).min(2_000);
                let extents: Vec<WireExtent> = (0..n).map(|_| self.extent()).collect();
                let file = self.file();
                let (session, cap, exclusive) = (self.rng.gen_range(0..50), self.cap(file), self.rng.r#gen());
                // Reclaims too: refused outside a restart's grace, they
                // must leave the table as it was.
                if self.rng.gen_range(0..8) == 0 {
                    // Half sealed as a grant would be, so they reach the
                    // grace check and the table, not only the seal check.
                    let lock = self.rng.gen_range(0..10_000);
                    let seal = if self.rng.r#gen() { weft_wire::lock_seal(&self.caps, session, file, lock, exclusive, &extents) } else { self.rng.r#gen() };
                    Request::Lock(LockReq::Reclaim { session, file, cap, exclusive, lock, seal, extents })
                } else {
                    Request::Lock(LockReq::Acquire { session, file, cap, exclusive, wait_ms: self.rng.gen_range(0..30), extents })
                }
            }
            _ => Request::Lock(match self.rng.gen_range(0..3) {
                0 => LockReq::Release { session: self.rng.gen_range(0..50), file: self.file(), lock: self.rng.gen_range(0..10_000) },
                1 if self.rng.r#gen() => LockReq::Start { session: self.rng.gen_range(0..50) },
                1 => LockReq::Renew { session: self.rng.gen_range(0..50) },
                _ => LockReq::End { session: self.rng.gen_range(0..50) },
            }),
        };
        // Changes tagged to be answered once, from a few clients and counts,
        // so that tags meet: resends, reuses with other requests, other uids.
        match req {
            Request::Meta { cred, op } if op.answered_once() && self.rng.gen_bool(0.3) => {
                Request::Meta { cred, op: MetaReq::Once { client: self.rng.gen_range(0..4), seq: self.rng.gen_range(0..20), op: Box::new(op) } }
            }
            r => r,
        }
    }

    /// The payload a request would carry (right length or not).
    fn payload(&mut self, req: &Request) -> Vec<u8> {
        let want = match req {
            Request::Data { op: DataReq::Write { pieces, .. }, .. } => pieces.iter().fold(0u64, |a, p| a.saturating_add(p.len)),
            _ => 0,
        };
        let n = if want <= 60_000 && self.rng.gen_bool(0.8) { want } else { self.rng.gen_range(0..2_000) };
        vec![0xA5; n as usize]
    }

    fn input(&mut self, id: u64) -> (Vec<u8>, Input) {
        let req = self.request();
        let mut body = req.encode();
        let payload = self.payload(&req);
        let frame = |kind: FrameKind, body: &[u8], pay_len: usize, payload: &[u8]| {
            let mut v = Header::new(kind, MsgId(id), body.len(), pay_len).encode().to_vec();
            v.extend_from_slice(body);
            v.extend_from_slice(payload);
            v
        };
        let input = match self.rng.gen_range(0..20) {
            // Valid framing, body as encoded or with bytes flipped/cut/added.
            0..=9 => Input::Framed(frame(FrameKind::Request, &body, payload.len(), &payload)),
            10..=12 => {
                for _ in 0..self.rng.gen_range(1..4) {
                    if !body.is_empty() {
                        let k = self.rng.gen_range(0..body.len());
                        body[k] ^= 1 << self.rng.gen_range(0..8);
                    }
                }
                Input::Framed(frame(FrameKind::Request, &body, payload.len(), &payload))
            }
            13 => {
                let cut = self.rng.gen_range(0..=body.len());
                body.truncate(cut);
                Input::Framed(frame(FrameKind::Request, &body, payload.len(), &payload))
            }
            14 => {
                body.extend((0..self.rng.gen_range(1..20)).map(|_| self.rng.r#gen::<u8>()));
                Input::Framed(frame(FrameKind::Request, &body, payload.len(), &payload))
            }
            // A rendezvous: announced and abandoned, or with mismatched data.
            15 => {
                let mut v = frame(FrameKind::Rts, &body, self.rng.gen_range(0..=MAX_PAYLOAD_LEN as usize), &[]);
                if self.rng.r#gen() {
                    v.extend(frame(FrameKind::Data, &[], 10, &[1; 10]));
                }
                Input::Broken(v)
            }
            // A header with random kind and lengths.
            16 | 17 => {
                let mut h = Header::new(FrameKind::Request, MsgId(id), 0, 0).encode();
                h[5] = self.rng.gen_range(0..10);
                h[16..20].copy_from_slice(&self.rng.r#gen::<u32>().to_le_bytes());
                h[20..24].copy_from_slice(&self.rng.r#gen::<u32>().to_le_bytes());
                let mut v = h.to_vec();
                v.extend((0..self.rng.gen_range(0..64)).map(|_| self.rng.r#gen::<u8>()));
                Input::Broken(v)
            }
            // A frame cut off in the middle.
            18 => {
                let v = frame(FrameKind::Request, &body, payload.len(), &payload);
                let cut = self.rng.gen_range(1..v.len().max(2));
                Input::Broken(v[..cut].to_vec())
            }
            _ => Input::Broken((0..self.rng.gen_range(1..200)).map(|_| self.rng.r#gen::<u8>()).collect()),
        };
        (body, input)
    }
}

struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
}

/// Runs the fuzzer against the servers of `cluster` (meta and data).
pub fn run(cluster: &ClusterFile, cfg: &FuzzConfig, progress: &dyn Fn(u64)) -> Result<FuzzReport> {
    let secret = cluster.secret();
    let mut g = Gen { rng: StdRng::seed_from_u64(cfg.seed), caps: weft_wire::CapKey::derive(&secret) };
    let targets: Vec<SocketAddr> = cluster.servers.iter().map(|s| s.addr).collect();
    let mut conns: Vec<Conn> = targets.iter().flat_map(|&addr| (0..cfg.connections).map(move |_| Conn { addr, stream: None })).collect();
    let mut opts = crate::client_options()?;
    opts.endpoint.op_timeout = cfg.answer_timeout;
    let checker = Client::with_options(cluster.clone(), opts)?;
    let mut r = FuzzReport::default();
    let start = Instant::now();
    for i in 0..cfg.inputs {
        let (body, input) = g.input(i + 1);
        match std::panic::catch_unwind(|| Request::decode(&body)) {
            Ok(Ok(_)) => r.decoded_ok += 1,
            Ok(Err(_)) => r.decode_errors += 1,
            Err(_) => bail!("input {i} (seed {}): Request::decode panicked on {body:02x?}", cfg.seed),
        }
        let _ = std::panic::catch_unwind(|| Response::decode(&body)).map_err(|_| anyhow::anyhow!("Response::decode panicked on input {i}"))?;
        let k = g.rng.gen_range(0..conns.len());
        let c = &mut conns[k];
        if c.stream.is_none() {
            let mut s = TcpStream::connect(c.addr).with_context(|| format!("server {} unreachable after {i} inputs", c.addr))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(cfg.answer_timeout))?;
            s.set_write_timeout(Some(cfg.answer_timeout))?;
            client_handshake(&mut s, c.addr, &secret, g.rng.r#gen()).with_context(|| format!("handshake with {} after {i} inputs", c.addr))?;
            c.stream = Some(s);
            r.reconnects += 1;
        }
        let s = c.stream.as_mut().expect("connected");
        match input {
            Input::Framed(bytes) => {
                if s.write_all(&bytes).is_err() {
                    c.stream = None;
                    r.closed_by_server += 1;
                } else {
                    match read_answer(s) {
                        Ok(Some(is_error)) => {
                            r.answered += 1;
                            r.error_answers += u64::from(is_error);
                        }
                        Ok(None) => {
                            c.stream = None;
                            r.closed_by_server += 1;
                        }
                        Err(e) => bail!("server {} gave no answer within {:?} to input {i}: {e}", c.addr, cfg.answer_timeout),
                    }
                }
            }
            Input::Broken(bytes) => {
                // The connection's framing is now unknown: send and drop it.
                let _ = s.write_all(&bytes);
                c.stream = None;
            }
        }
        r.inputs = i + 1;
        if (i + 1) % cfg.check_every == 0 {
            served(&checker, i).with_context(|| format!("a well-behaved client was not served after {} inputs", i + 1))?;
            r.checks_passed += 1;
            progress(i + 1);
        }
    }
    served(&checker, cfg.inputs)?;
    r.checks_passed += 1;
    r.seconds = start.elapsed().as_secs_f64();
    // Every server alive, nothing panicked, memory returned.
    drop(conns);
    std::thread::sleep(Duration::from_millis(300));
    for st in checker.status() {
        let stats = st.stats.with_context(|| format!("server {} is down after fuzzing", st.server.id))?;
        r.server_panics += stats.panics;
        if stats.memory_used > 0 {
            bail!("server {} still holds {} bytes of its budget with no request in flight", st.server.id, stats.memory_used);
        }
    }
    Ok(r)
}

/// Reads frames until a `Response`: `Some(is_error)`, or `None` if the
/// server closed the connection. `Cts` frames are skipped.
fn read_answer(s: &mut TcpStream) -> std::io::Result<Option<bool>> {
    loop {
        let mut h = [0u8; HEADER_LEN];
        match s.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) => return Ok(None),
            Err(e) => return Err(e),
        }
        let Ok(head) = Header::decode(&h) else { return Ok(None) };
        let mut rest = vec![0u8; head.body_len as usize + head.pay_len as usize];
        if let Err(e) = s.read_exact(&mut rest) {
            return if e.kind() == std::io::ErrorKind::UnexpectedEof { Ok(None) } else { Err(e) };
        }
        if head.kind == FrameKind::Response {
            let is_error = !matches!(Response::decode(&rest[..head.body_len as usize]), Ok(r) if !matches!(r, Response::Error { .. }));
            // An error frame with id 0 precedes a close.
            if head.msg_id == MsgId(0) {
                return Ok(None);
            }
            return Ok(Some(is_error));
        }
    }
}

/// A well-behaved client's create, write and read-back. Fuzz inputs may
/// legitimately delete or truncate any file (a client holding the cluster
/// secret may), including a check's file between two of its steps: a check
/// that finds its file deleted tries again with a new one.
fn served(c: &Client, round: u64) -> Result<()> {
    let mut tries = 0;
    loop {
        match served_once(c, round, tries) {
            Err(e) if tries < 3 && e.downcast_ref::<weft_client::Error>().is_some_and(|e| matches!(e, weft_client::Error::NotFound(_))) => tries += 1,
            r => return r,
        }
    }
}

fn served_once(c: &Client, round: u64, attempt: u32) -> Result<()> {
    let path = format!("/fuzz-check-{round}-{attempt}");
    let f = c.create(&path, CreateOptions::default())?;
    let data: Vec<u8> = (0..100_000u32).map(|k| (k as u64 ^ round) as u8).collect();
    f.write_at(0, &data)?;
    let mut back = vec![0u8; data.len()];
    let n = f.read_at(0, &mut back)?;
    if n != data.len() || back != data {
        bail!("the check file read back wrong after {round} inputs");
    }
    Ok(())
}
