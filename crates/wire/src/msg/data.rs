//! Data-service messages: positioned list I/O on one stripe object.
//!
//! # Wire format
//! `DataReq`: `op u8 | file u64 | ...`; `Write` and `Read` carry
//! `count u32 | (offset u64 | len u64) * count`. A write's payload is the
//! pieces' bytes concatenated in list order; a read's response payload is
//! the same, zero-filled past the object's end. A `Read` also carries its
//! [`ReadOrder`]: `strategy u8 | rank u32 | group u32 | slot u32`, which the
//! server uses to choose among pending reads. `CollWrite` and `CollRead`
//! carry a [`CollTag`] and their pieces as strided runs (see [`super::coll`]);
//! their payloads are a `Write`'s and a `Read`'s.

use crate::limits::{MAX_OBJECT_END, MAX_PAYLOAD_LEN, MAX_PIECES};
use crate::msg::coll::{compact, decode_runs, encode_runs, CollTag};
use crate::{DecodeError, Decoder, Encoder, FileId};

/// One contiguous region of a stripe object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub offset: u64,
    pub len: u64,
}

/// How a server should rank this read among the reads waiting for it
/// (paper 000: the server decides the order for reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadOrder {
    /// Scheduling strategy code (`weft_sched::Strategy::code`); 0: serve at once.
    pub strategy: u8,
    /// The client's rank in its group (hash-IOS serves client (s + j) mod group at step j).
    pub rank: u32,
    pub group: u32,
    /// The block's colour in the group's transfer-graph colouring (colour strategy).
    pub slot: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataReq {
    Write { file: FileId, pieces: Vec<Piece> },
    /// `Write` under a lock of MPI atomic mode: refused (`LeaseExpired`)
    /// once the lock session's `lease` ran out (fencing).
    LeasedWrite { file: FileId, pieces: Vec<Piece>, lease: super::lock::Lease },
    Read { file: FileId, pieces: Vec<Piece>, order: ReadOrder },
    Size { file: FileId },
    Truncate { file: FileId, size: u64 },
    Fsync { file: FileId },
    Delete { file: FileId },
    /// One member's round of a server-directed collective write.
    CollWrite { file: FileId, tag: CollTag, pieces: Vec<Piece> },
    /// One member's round of a server-directed collective read.
    CollRead { file: FileId, tag: CollTag, pieces: Vec<Piece> },
    /// Lend the client a read-only descriptor of the file's object, sent
    /// over the connection's own Unix socket before the answer (`Lent`,
    /// naming the object): so only a shared-memory connection, from a
    /// client on this node, can have one (`NotFound` while the object does
    /// not exist yet).
    Lend { file: FileId },
}

/// What `weft status` shows for one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerStats {
    /// Bit 0: meta, bit 1: data, bit 2: lock.
    pub services: u8,
    pub requests: u64,
    pub bad_requests: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub bytes_stored: u64,
    pub objects: u64,
    pub uptime_ms: u64,
    /// Lock service: locks granted now, requests waiting, grants so far,
    /// and the total time granted requests waited (average = total / grants).
    pub locks_held: u64,
    pub locks_waiting: u64,
    pub locks_granted: u64,
    pub lock_wait_us: u64,
    /// Connections open now, and the most the server accepts.
    pub connections: u64,
    pub connection_limit: u64,
    /// Bytes of the server's memory budget in use now, and its limit.
    pub memory_used: u64,
    pub memory_limit: u64,
    /// Requests whose handling panicked (answered with an error; each is a bug).
    pub panics: u64,
    /// CPU time (thread CPU clocks, ns) spent serving requests, by kind:
    /// see [`CpuKind`]; and the event loop thread's own, in total.
    pub cpu_ns: [u64; CPU_KINDS],
    pub cpu_loop_ns: u64,
    /// The file system under the server's data: bytes in all and free.
    pub disk_total: u64,
    pub disk_free: u64,
    /// Server-directed collective rounds performed, and collectives failed.
    pub coll_rounds: u64,
    pub coll_failed: u64,
    /// Requests served by the workers, by [`CpuKind`], and their total
    /// time from queued to answered (µs): the mean latency of a kind is
    /// one over the other. (Lock waits answered later are not counted.)
    pub requests_by_kind: [u64; CPU_KINDS],
    pub latency_us_by_kind: [u64; CPU_KINDS],
    /// Requests waiting for a worker now.
    pub queue_depth: u64,
    /// Requests and connections refused by a per-user or per-server quota
    /// (connections, shared file pointers, lock sessions, locks,
    /// collectives), since start.
    pub quota_refusals: u64,
    /// Of `connections`, those over shared memory.
    pub shm_connections: u64,
}

/// Number of [`CpuKind`]s.
pub const CPU_KINDS: usize = 6;

/// What a request's CPU time is counted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuKind {
    Meta = 0,
    DataWrite = 1,
    DataRead = 2,
    /// Size, truncate, fsync, delete.
    DataOther = 3,
    Lock = 4,
    /// Status, and MUNGE handshakes' checks. (Ping, sink and source are
    /// served on the event loop: counted in `cpu_loop_ns` only.)
    Other = 5,
}

impl CpuKind {
    pub const ALL: [CpuKind; CPU_KINDS] = [CpuKind::Meta, CpuKind::DataWrite, CpuKind::DataRead, CpuKind::DataOther, CpuKind::Lock, CpuKind::Other];
    pub fn name(self) -> &'static str {
        ["meta", "data-write", "data-read", "data-other", "lock", "other"][self as usize]
    }
}

/// Total bytes of a piece list, or an error if any piece ends past
/// [`MAX_OBJECT_END`] or the total exceeds [`MAX_PAYLOAD_LEN`] (one
/// request's bytes travel in one payload, so no valid list totals more).
/// The sum is checked at every step: lengths from the wire may add up past
/// 2^64.
pub fn pieces_total(pieces: &[Piece]) -> Result<u64, DecodeError> {
    let mut total = 0u64;
    for p in pieces {
        if p.offset.checked_add(p.len).is_none_or(|end| end > MAX_OBJECT_END) {
            return Err(DecodeError::Invalid("piece ends past the largest object offset"));
        }
        total = total.saturating_add(p.len);
        if total > u64::from(MAX_PAYLOAD_LEN) {
            return Err(DecodeError::TooLong { what: "piece list total", len: total, limit: MAX_PAYLOAD_LEN.into() });
        }
    }
    Ok(total)
}

fn encode_pieces(e: &mut Encoder, pieces: &[Piece]) {
    e.u32(pieces.len() as u32);
    for p in pieces {
        e.u64(p.offset).u64(p.len);
    }
}

fn decode_pieces(d: &mut Decoder<'_>) -> Result<Vec<Piece>, DecodeError> {
    let n = d.count("piece list", MAX_PIECES, 16)?;
    let pieces: Vec<Piece> = (0..n).map(|_| Ok(Piece { offset: d.u64()?, len: d.u64()? })).collect::<Result<_, DecodeError>>()?;
    pieces_total(&pieces)?;
    Ok(pieces)
}

impl DataReq {
    pub fn file(&self) -> FileId {
        match self {
            DataReq::Write { file, .. }
            | DataReq::LeasedWrite { file, .. }
            | DataReq::Read { file, .. }
            | DataReq::Size { file }
            | DataReq::Truncate { file, .. }
            | DataReq::Fsync { file }
            | DataReq::Delete { file }
            | DataReq::CollWrite { file, .. }
            | DataReq::CollRead { file, .. }
            | DataReq::Lend { file, .. } => *file,
        }
    }

    pub fn encode(&self, e: &mut Encoder) {
        match self {
            DataReq::Write { file, pieces } => {
                e.u8(1).u64(file.0);
                encode_pieces(e, pieces);
            }
            DataReq::LeasedWrite { file, pieces, lease } => {
                e.u8(9).u64(file.0);
                encode_pieces(e, pieces);
                lease.encode(e);
            }
            DataReq::Read { file, pieces, order } => {
                e.u8(2).u64(file.0);
                encode_pieces(e, pieces);
                e.u8(order.strategy).u32(order.rank).u32(order.group).u32(order.slot);
            }
            DataReq::Size { file } => {
                e.u8(3).u64(file.0);
            }
            DataReq::Truncate { file, size } => {
                e.u8(4).u64(file.0).u64(*size);
            }
            DataReq::Fsync { file } => {
                e.u8(5).u64(file.0);
            }
            DataReq::Delete { file } => {
                e.u8(6).u64(file.0);
            }
            DataReq::CollWrite { file, tag, pieces } | DataReq::CollRead { file, tag, pieces } => {
                e.u8(if matches!(self, DataReq::CollWrite { .. }) { 7 } else { 8 }).u64(file.0);
                tag.encode(e);
                encode_runs(e, &compact(pieces));
            }
            DataReq::Lend { file } => {
                e.u8(10).u64(file.0);
            }
        }
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let op = d.u8()?;
        let file = FileId(d.u64()?);
        Ok(match op {
            1 => DataReq::Write { file, pieces: decode_pieces(d)? },
            9 => DataReq::LeasedWrite { file, pieces: decode_pieces(d)?, lease: super::lock::Lease::decode(d)? },
            2 => {
                let pieces = decode_pieces(d)?;
                let order = ReadOrder { strategy: d.u8()?, rank: d.u32()?, group: d.u32()?, slot: d.u32()? };
                if order.group > 0 && order.rank >= order.group {
                    return Err(DecodeError::Invalid("read order rank outside its group"));
                }
                DataReq::Read { file, pieces, order }
            }
            3 => DataReq::Size { file },
            4 => {
                let size = d.u64()?;
                if size > MAX_OBJECT_END {
                    return Err(DecodeError::Invalid("truncate size past the largest object offset"));
                }
                DataReq::Truncate { file, size }
            }
            5 => DataReq::Fsync { file },
            6 => DataReq::Delete { file },
            10 => DataReq::Lend { file },
            7 | 8 => {
                let tag = CollTag::decode(d)?;
                let pieces = decode_runs(d)?;
                let total = pieces_total(&pieces)?;
                if total > tag.member_share() {
                    return Err(DecodeError::TooLong { what: "collective round", len: total, limit: tag.member_share() });
                }
                if op == 7 { DataReq::CollWrite { file, tag, pieces } } else { DataReq::CollRead { file, tag, pieces } }
            }
            t => return Err(DecodeError::BadTag { what: "data op", tag: t.into() }),
        })
    }
}

impl ServerStats {
    pub fn encode(&self, e: &mut Encoder) {
        e.u8(self.services).u64(self.requests).u64(self.bad_requests).u64(self.bytes_written);
        e.u64(self.bytes_read).u64(self.bytes_stored).u64(self.objects).u64(self.uptime_ms);
        e.u64(self.locks_held).u64(self.locks_waiting).u64(self.locks_granted).u64(self.lock_wait_us);
        e.u64(self.connections).u64(self.connection_limit).u64(self.memory_used).u64(self.memory_limit).u64(self.panics);
        for v in self.cpu_ns {
            e.u64(v);
        }
        e.u64(self.cpu_loop_ns).u64(self.disk_total).u64(self.disk_free).u64(self.coll_rounds).u64(self.coll_failed);
        for v in self.requests_by_kind.iter().chain(&self.latency_us_by_kind) {
            e.u64(*v);
        }
        e.u64(self.queue_depth).u64(self.quota_refusals).u64(self.shm_connections);
    }
    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        Ok(ServerStats {
            services: d.u8()?,
            requests: d.u64()?,
            bad_requests: d.u64()?,
            bytes_written: d.u64()?,
            bytes_read: d.u64()?,
            bytes_stored: d.u64()?,
            objects: d.u64()?,
            uptime_ms: d.u64()?,
            locks_held: d.u64()?,
            locks_waiting: d.u64()?,
            locks_granted: d.u64()?,
            lock_wait_us: d.u64()?,
            connections: d.u64()?,
            connection_limit: d.u64()?,
            memory_used: d.u64()?,
            memory_limit: d.u64()?,
            panics: d.u64()?,
            cpu_ns: kinds(d)?,
            cpu_loop_ns: d.u64()?,
            disk_total: d.u64()?,
            disk_free: d.u64()?,
            coll_rounds: d.u64()?,
            coll_failed: d.u64()?,
            requests_by_kind: kinds(d)?,
            latency_us_by_kind: kinds(d)?,
            queue_depth: d.u64()?,
            quota_refusals: d.u64()?,
            shm_connections: d.u64()?,
        })
    }
}

/// One u64 per [`CpuKind`].
fn kinds(d: &mut Decoder<'_>) -> Result<[u64; CPU_KINDS], DecodeError> {
    let mut v = [0u64; CPU_KINDS];
    for x in v.iter_mut() {
        *x = d.u64()?;
    }
    Ok(v)
}
