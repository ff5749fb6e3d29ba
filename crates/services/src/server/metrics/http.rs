//! The metrics port: just enough HTTP/1.1 for a Prometheus scrape.
//! `GET /metrics` answers the page; anything else a short error; the
//! connection closes after each answer.
//!
//! A scraper is a peer like any other: a request head is capped at 8 KiB
//! and must arrive within 2 s, at most 4 scrapes are served at once (more
//! are closed unanswered), and nothing a scraper sends reaches the file
//! service, which runs on its own threads.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest request head read.
pub const MAX_HEAD: usize = 8 * 1024;
/// Time a scraper has to send its request head (and to take the answer).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// Scrapes served at once.
pub const MAX_SCRAPES: usize = 4;

/// Serves `listener` on a thread of its own until the process ends;
/// `page` makes the metrics page at each scrape.
pub fn serve(listener: TcpListener, page: Arc<dyn Fn() -> String + Send + Sync>) -> std::io::Result<()> {
    let in_flight = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("weft-metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_SCRAPES {
                in_flight.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            let (page, count) = (page.clone(), in_flight.clone());
            let spawned = std::thread::Builder::new().name("weft-scrape".into()).spawn(move || {
                answer(stream, &*page);
                count.fetch_sub(1, Ordering::AcqRel);
            });
            if spawned.is_err() {
                // The closure (and its count) was dropped with the error.
                in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        }
    })?;
    Ok(())
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

fn answer(mut stream: TcpStream, page: &dyn Fn() -> String) {
    let _ = stream.set_read_timeout(Some(HEAD_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HEAD_TIMEOUT));
    let Some(head) = read_head(&mut stream) else {
        let _ = respond(&mut stream, "400 Bad Request", "text/plain", b"request head too long, too slow or cut\n", false);
        linger(stream);
        return;
    };
    let _ = match parse(&head) {
        Asked::Metrics { head_only } => respond(&mut stream, "200 OK", "text/plain; version=0.0.4; charset=utf-8", page().as_bytes(), head_only),
        Asked::Index => respond(&mut stream, "200 OK", "text/plain", b"Weft server metrics: GET /metrics\n", false),
        Asked::NotFound => respond(&mut stream, "404 Not Found", "text/plain", b"not found: try /metrics\n", false),
        Asked::BadMethod => respond(&mut stream, "405 Method Not Allowed", "text/plain", b"only GET and HEAD\n", false),
        Asked::Malformed => respond(&mut stream, "400 Bad Request", "text/plain", b"not an HTTP/1 request line\n", false),
    };
}

/// The bytes before the blank line ending a request head, or `None` if
/// it does not come whole within [`MAX_HEAD`] bytes and [`HEAD_TIMEOUT`].
fn read_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let started = Instant::now();
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Some(head);
        }
        let left = HEAD_TIMEOUT.checked_sub(started.elapsed())?;
        let _ = stream.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        let n = stream.read(&mut buf).ok().filter(|&n| n > 0)?;
        if head.len() + n > MAX_HEAD {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
}

/// Ends a connection whose peer may still be sending: our side is shut
/// first and what arrives is read and dropped (at most 64 KiB, for at
/// most 1 s), so the kernel does not answer the unread bytes with a reset
/// that destroys the answer before the peer reads it.
fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 4096];
    let mut left = 64 * 1024usize;
    while left > 0 {
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => left = left.saturating_sub(n),
            _ => return,
        }
    }
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8], head_only: bool) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
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
