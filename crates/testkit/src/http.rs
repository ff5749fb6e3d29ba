//! Plain HTTP GETs, for the servers' metrics pages.

use std::time::Duration;

/// `GET path` on `addr`: the status line and the body.
pub fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    try_get(addr, path).expect("an answer within 10 s")
}

/// [`get`], or the error that cut it (a port serving its most scrapes
/// closes further connections unanswered).
pub fn try_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut all = String::new();
    s.read_to_string(&mut all)?;
    let (head, body) = all.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other("no blank line after the head"))?;
    Ok((head.lines().next().unwrap_or("").to_owned(), body.to_owned()))
}

/// The value of the sample `series` (name and labels exactly as written)
/// in a Prometheus page.
pub fn value(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
