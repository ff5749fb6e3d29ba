//! The metrics port: just enough HTTP/1.1 for a Prometheus scrape.
//! `GET /metrics` answers the page; anything else a short error; the
//! connection closes after each answer.
//!
//! A scraper is a peer like any other: its whole exchange (request head,
//! answer, the drain before closing) has [`CONNECTION_TIMEOUT`] in all,
//! a request head is capped at 8 KiB, at most 4 scrapes are served at
//! once (more are closed unanswered), and pages are made at most once a
//! second whatever the scrapers ask (see `super::page`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest request head read.
pub const MAX_HEAD: usize = 8 * 1024;
/// All the time one connection gets: its head, its answer, the drain.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes served at once.
pub const MAX_SCRAPES: usize = 4;

/// Serves `listener` on a thread of its own until the process ends;
/// `page` makes the metrics page at each scrape.
pub fn serve(listener: TcpListener, page: Arc<dyn Fn() -> String + Send + Sync>) -> std::io::Result<()> {
    let in_flight = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("weft-metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else {
                // Out of descriptors, say: the connection waits in the
                // backlog; do not spin on it.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_SCRAPES {
                in_flight.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            let slot = Slot(in_flight.clone());
            let page = page.clone();
            // A failed spawn drops the closure, and with it the slot.
            let _ = std::thread::Builder::new().name("weft-scrape".into()).spawn(move || {
                let _slot = slot;
                answer(stream, &*page, Instant::now() + CONNECTION_TIMEOUT);
            });
        }
    })?;
    Ok(())
}

/// One of the [`MAX_SCRAPES`] places, given back when dropped (also when
/// making the page panicked).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    Metrics { head_only: bool },
    Index,
    NotFound,
    BadMethod,
    Malformed,
}

/// Reads the request line of `head` (the bytes before the blank line).
pub fn parse(head: &[u8]) -> Asked {
    let Ok(text) = std::str::from_utf8(head) else { return Asked::Malformed };
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Asked::Malformed;
    };
    if !version.starts_with("HTTP/1.") {
        return Asked::Malformed;
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Asked::BadMethod,
    };
    // A query string (Prometheus sends none; curl users might) is ignored.
    match target.split('?').next().unwrap_or("") {
        "/metrics" => Asked::Metrics { head_only },
        "/" => Asked::Index,
        _ => Asked::NotFound,
    }
}

fn answer(mut stream: TcpStream, page: &dyn Fn() -> String, deadline: Instant) {
    let Some(head) = read_head(&mut stream, deadline) else {
        let _ = respond(&mut stream, "400 Bad Request", "text/plain", b"request head too long, too slow or cut\n", false, deadline);
        linger(stream, deadline);
        return;
    };
    let _ = match parse(&head) {
        Asked::Metrics { head_only } => respond(&mut stream, "200 OK", "text/plain; version=0.0.4; charset=utf-8", page().as_bytes(), head_only, deadline),
        Asked::Index => respond(&mut stream, "200 OK", "text/plain", b"Weft server metrics: GET /metrics\n", false, deadline),
        Asked::NotFound => respond(&mut stream, "404 Not Found", "text/plain", b"not found: try /metrics\n", false, deadline),
        Asked::BadMethod => respond(&mut stream, "405 Method Not Allowed", "text/plain", b"only GET and HEAD\n", false, deadline),
        Asked::Malformed => respond(&mut stream, "400 Bad Request", "text/plain", b"not an HTTP/1 request line\n", false, deadline),
    };
}

/// Time left before `deadline`, or `None` once it passed (a socket
/// timeout of zero would mean none at all).
fn left(deadline: Instant) -> Option<Duration> {
    deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
}

/// The bytes before the blank line ending a request head, or `None` if
/// it does not come whole within [`MAX_HEAD`] bytes and before `deadline`.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Some(head);
        }
        stream.set_read_timeout(Some(left(deadline)?)).ok()?;
        let n = stream.read(&mut buf).ok().filter(|&n| n > 0)?;
        if head.len() + n > MAX_HEAD {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
}

/// Ends a connection whose peer may still be sending: our side is shut
/// first and what arrives is read and dropped (at most 64 KiB, until
/// `deadline`), so the kernel does not answer the unread bytes with a
/// reset that destroys the answer before the peer reads it.
fn linger(mut stream: TcpStream, deadline: Instant) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 4096];
    let mut budget = 64 * 1024usize;
    while budget > 0 {
        let Some(t) = left(deadline) else { return };
        if stream.set_read_timeout(Some(t)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => budget = budget.saturating_sub(n),
            _ => return,
        }
    }
}

/// Writes all of `bytes` before `deadline`, a piece at a time (a socket's
/// write timeout bounds one call, and a peer opening its window a little
/// at a time could otherwise stretch `write_all` for ever).
fn write_by(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
    let late = || std::io::Error::from(std::io::ErrorKind::TimedOut);
    while !bytes.is_empty() {
        stream.set_write_timeout(Some(left(deadline).ok_or_else(late)?))?;
        match stream.write(&bytes[..bytes.len().min(16 * 1024)]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8], head_only: bool, deadline: Instant) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    write_by(stream, head.as_bytes(), deadline)?;
    if !head_only {
        write_by(stream, body, deadline)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_read_strictly() {
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\nHost: x"), Asked::Metrics { head_only: false });
        assert_eq!(parse(b"HEAD /metrics?x=1 HTTP/1.0"), Asked::Metrics { head_only: true });
        assert_eq!(parse(b"GET / HTTP/1.1"), Asked::Index);
        assert_eq!(parse(b"GET /etc/passwd HTTP/1.1"), Asked::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1"), Asked::BadMethod);
        assert_eq!(parse(b"GET /metrics"), Asked::Malformed);
        assert_eq!(parse(b"GET /metrics HTTP/1.1 extra"), Asked::Malformed);
        assert_eq!(parse(b"GET /metrics SPDY/3"), Asked::Malformed);
        assert_eq!(parse(b"\xff\xfe"), Asked::Malformed);
        assert_eq!(parse(b""), Asked::Malformed);
    }
}
