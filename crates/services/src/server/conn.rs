//! The loop serving one connection.
//!
//! Rendezvous flow control: each `Rts` is granted (`Cts`) while the bytes
//! granted and not yet received stay within [`RENDEZVOUS_BUDGET`]; further
//! ones wait in arrival order until `Data` frames drain the budget.

use super::Server;
use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;
use weft_net::frame_io::{read_header, write_frame, write_response, FrameReadError};
use weft_net::handshake::{server_handshake, Refusal};
use crate::data::Splicer;
use weft_wire::{DataReq, ErrorCode, FrameKind, MsgId, Request, Response};

/// Bytes a connection may have granted and not yet received: 64 MiB, four
/// maximal payloads, enough to keep a fast client streaming.
pub const RENDEZVOUS_BUDGET: u64 = 64 << 20;

/// Most rendezvous requests a connection may have announced and not sent;
/// each holds a decoded request, so a hostile client must not grow them unbounded.
const MAX_PENDING_RTS: usize = 4096;

/// A connection idle this long is closed; clients reconnect on next use.
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest a response write, or the rest of a payload once its frame has
/// begun, may stall. A hung client must not hold a read turn or an object's
/// lock for longer than this.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

struct Rendezvous {
    pending: HashMap<u64, (Request, u32)>,
    waiting: VecDeque<u64>,
    granted: u64,
}

pub fn serve(server: &Server, mut stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    match server_handshake(&mut stream, &server.secret) {
        Ok(()) => {}
        Err(Refusal::Rejected(why)) => {
            server.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            tracing::info!(target: "weft::server", %peer, %why, "handshake refused");
            return;
        }
        Err(_) => return,
    }
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(STALL_TIMEOUT));
    if let Err(why) = serve_frames(server, stream) {
        server.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        tracing::info!(target: "weft::server", %peer, %why, "connection closed");
    }
}

fn serve_frames(server: &Server, stream: TcpStream) -> Result<(), String> {
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    // Buffered reads cut syscalls for small frames; large payloads bypass the buffer.
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut rdv = Rendezvous { pending: HashMap::new(), waiting: VecDeque::new(), granted: 0 };
    let mut bufs = Buffers::default();
    loop {
        let head = match read_header(&mut reader) {
            Ok(h) => h,
            Err(FrameReadError::Closed) => return Ok(()),
            Err(FrameReadError::Io(e)) => return Err(format!("read failed: {e}")),
            Err(FrameReadError::Decode(e)) => {
                // Tell the client why before closing, if it still listens.
                let _ = write_response(&mut writer, MsgId(0), &Response::error(ErrorCode::BadRequest, e.to_string()), &[]);
                return Err(format!("bad frame: {e}"));
            }
        };
        let mut body = vec![0u8; head.body_len as usize];
        reader.read_exact(&mut body).map_err(|e| format!("read body: {e}"))?;
        let io = |e: std::io::Error| format!("write failed: {e}");
        match head.kind {
            FrameKind::Request => {
                let req = Request::decode(&body);
                let mut turn = None;
                let rsp = serve_request(server, &mut turn, req, head.pay_len, &mut reader, &mut bufs)?;
                write_response(&mut writer, head.msg_id, &rsp, &[&bufs.out]).map_err(io)?;
                drop(turn);
            }
            FrameKind::Rts => match Request::decode(&body) {
                Ok(req) => {
                    if rdv.pending.contains_key(&head.msg_id.0) {
                        return Err(format!("duplicate rendezvous message id {}", head.msg_id.0));
                    }
                    if rdv.pending.len() >= MAX_PENDING_RTS {
                        return Err(format!("more than {MAX_PENDING_RTS} rendezvous requests pending"));
                    }
                    rdv.pending.insert(head.msg_id.0, (req, head.pay_len));
                    rdv.waiting.push_back(head.msg_id.0);
                    grant(&mut rdv, &mut writer).map_err(io)?;
                }
                Err(e) => {
                    server.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                    let rsp = Response::error(ErrorCode::BadRequest, format!("undecodable request: {e}"));
                    write_response(&mut writer, head.msg_id, &rsp, &[]).map_err(io)?;
                }
            },
            FrameKind::Data => {
                let Some((req, announced)) = rdv.pending.remove(&head.msg_id.0) else {
                    return Err(format!("data for message {} that was not granted", head.msg_id.0));
                };
                if rdv.waiting.contains(&head.msg_id.0) || announced != head.pay_len {
                    return Err(format!("data for message {} does not match its grant", head.msg_id.0));
                }
                rdv.granted -= u64::from(announced);
                let mut turn = None;
                let rsp = serve_request(server, &mut turn, Ok(req), head.pay_len, &mut reader, &mut bufs)?;
                write_response(&mut writer, head.msg_id, &rsp, &[&bufs.out]).map_err(io)?;
                drop(turn);
                grant(&mut rdv, &mut writer).map_err(io)?;
            }
            k => return Err(format!("unexpected {k:?} frame from a client")),
        }
    }
}

/// A connection's reusable buffers.
#[derive(Default)]
struct Buffers {
    /// Request payloads; reused so large ones do not fault in fresh pages each time.
    payload: Vec<u8>,
    /// Response payloads.
    out: Vec<u8>,
    /// Created on the first large write: connections that never write one cost no pipe.
    splicer: Option<Splicer>,
}

/// Payloads at least this large go socket -> pipe -> file; smaller ones
/// are read into a buffer, where one copy is cheaper than two splices.
const SPLICE_MIN: u32 = 64 * 1024;
/// Average piece size below which a payload is read into a buffer instead.
const SPLICE_MIN_PIECE: u64 = 16 * 1024;

/// Serves one request whose `pay_len` payload bytes are next on `reader`.
/// An ordered read leaves its `turn` set: the caller holds it until the
/// response is sent, so the turn covers the whole transfer.
fn serve_request<'s>(
    server: &'s Server,
    turn: &mut Option<super::Turn<'s>>,
    req: Result<Request, weft_wire::DecodeError>,
    pay_len: u32,
    reader: &mut BufReader<TcpStream>,
    bufs: &mut Buffers,
) -> Result<Response, String> {
    let Buffers { payload, out, splicer } = bufs;
    out.clear();
    if let Ok(Request::Data(DataReq::Write { file, pieces })) = &req {
        // Streaming writes in list order, so only sorted lists take this
        // path, and only large pieces: each costs two splices, where a
        // buffered piece costs one write (or nothing, when sieved).
        let large_pieces = pieces.len() as u64 * SPLICE_MIN_PIECE <= u64::from(pay_len);
        if pay_len >= SPLICE_MIN && large_pieces && crate::data::is_sorted(pieces) {
            if splicer.is_none() {
                *splicer = Splicer::new().map_err(|e| format!("cannot create a pipe: {e}"))?.into();
            }
            let sp = splicer.as_mut().expect("just created");
            // The object's lock is held while the payload streams in.
            let _ = reader.get_ref().set_read_timeout(Some(STALL_TIMEOUT));
            let r = server.write_streamed(*file, pieces, pay_len, reader, sp).map_err(|e| format!("read payload: {e}"));
            let _ = reader.get_ref().set_read_timeout(Some(IDLE_TIMEOUT));
            return r;
        }
    }
    payload.resize(pay_len as usize, 0);
    reader.read_exact(payload).map_err(|e| format!("read payload: {e}"))?;
    Ok(match req {
        Ok(Request::Data(DataReq::Read { file, pieces, order })) if order.strategy != 0 => {
            let offset = pieces.first().map_or(0, |p| p.offset);
            *turn = Some(server.read_turns.acquire(order, offset));
            server.handle(Request::Data(DataReq::Read { file, pieces, order }), payload, out)
        }
        Ok(req) => server.handle(req, payload, out),
        Err(e) => {
            server.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            Response::error(ErrorCode::BadRequest, format!("undecodable request: {e}"))
        }
    })
}

/// Sends `Cts` to waiting rendezvous requests, in order, while the budget allows.
fn grant(rdv: &mut Rendezvous, writer: &mut TcpStream) -> std::io::Result<()> {
    while let Some(&id) = rdv.waiting.front() {
        let len = u64::from(rdv.pending[&id].1);
        if rdv.granted > 0 && rdv.granted + len > RENDEZVOUS_BUDGET {
            break;
        }
        rdv.waiting.pop_front();
        rdv.granted += len;
        write_frame(writer, FrameKind::Cts, MsgId(id), &[], &[])?;
    }
    Ok(())
}
