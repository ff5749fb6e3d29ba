//! Paper 003's message-layer cost: small-message round trip and
//! large-message streaming through Weft's message layer, beside a raw TCP
//! socket doing the same between the same kinds of processes in the same run.

use crate::{median, BenchCluster};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use weft_net::{Call, ClusterFile, Endpoint, EndpointConfig};
use weft_wire::{Request, HEADER_LEN};

#[derive(Debug, Clone)]
pub struct Params {
    pub pings: usize,
    pub stream_bytes: u64,
    pub message: usize,
    pub rounds: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub rtt_us_weft: f64,
    pub rtt_us_tcp: f64,
    pub rtt_ratio: f64,
    pub stream_mb_s_weft: f64,
    pub stream_mb_s_tcp: f64,
    pub stream_ratio: f64,
    pub message_bytes: usize,
}

/// Size of a Weft ping on the wire (header plus one-byte body), so the raw
/// TCP ping moves exactly as many bytes.
const PING_BYTES: usize = HEADER_LEN + 1;

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<Row> {
    if p.pings == 0 || p.rounds == 0 || p.message == 0 || p.stream_bytes < p.message as u64 {
        bail!("pings, rounds and message size must be at least 1, and the stream at least one message");
    }
    let cf = ClusterFile::load(&bc.cluster_file)?;
    let data = cf.data_servers()[0];
    let addr = cf.server(data).expect("data server").addr;
    let ep = Endpoint::new(cf.secret(), EndpointConfig::default())?;
    let mut peer = Command::new(weft_bin).args(["bench", "net-peer"]).stdout(Stdio::piped()).spawn().context("cannot start the TCP peer")?;
    let mut line = String::new();
    BufReader::new(peer.stdout.take().expect("piped")).read_line(&mut line)?;
    let raw: SocketAddr = line.trim().parse().with_context(|| format!("peer said {line:?}"))?;
    let payload = vec![7u8; p.message];
    let (mut rw, mut rt, mut sw, mut st) = (vec![], vec![], vec![], vec![]);
    for _ in 0..p.rounds {
        rw.push(weft_rtt(&ep, addr, p.pings)?);
        rt.push(tcp_rtt(raw, p.pings)?);
        sw.push(weft_stream(&ep, addr, &payload, p.stream_bytes)?);
        st.push(tcp_stream(raw, &payload, p.stream_bytes)?);
    }
    let _ = peer.kill();
    let _ = peer.wait();
    let (rtt_w, rtt_t, s_w, s_t) = (median(rw), median(rt), median(sw), median(st));
    Ok(Row { rtt_us_weft: rtt_w, rtt_us_tcp: rtt_t, rtt_ratio: rtt_w / rtt_t, stream_mb_s_weft: s_w, stream_mb_s_tcp: s_t, stream_ratio: s_w / s_t, message_bytes: p.message })
}

fn weft_rtt(ep: &Endpoint, addr: SocketAddr, n: usize) -> Result<f64> {
    let body = Request::Ping.encode();
    ep.call(addr, body.clone())?; // connect outside the timing
    let t = Instant::now();
    for _ in 0..n {
        ep.call(addr, body.clone())?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
}

fn weft_stream(ep: &Endpoint, addr: SocketAddr, payload: &[u8], total: u64) -> Result<f64> {
    let n = (total / payload.len() as u64) as usize;
    // Keep a window of messages in flight, as a streaming writer would.
    let window = 16;
    let body = Request::Sink.encode();
    let t = Instant::now();
    let mut sent = 0;
    while sent < n {
        let k = window.min(n - sent);
        let mut calls: Vec<Call<'_>> = (0..k)
            .map(|_| {
                let mut c = Call::new(addr, body.clone());
                c.send = vec![payload];
                c
            })
            .collect();
        ep.run(&mut calls);
        for c in calls {
            c.result.expect("filled")?;
        }
        sent += k;
    }
    Ok((n * payload.len()) as f64 / t.elapsed().as_secs_f64() / 1e6)
}

fn tcp_rtt(addr: SocketAddr, n: usize) -> Result<f64> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.write_all(b"p")?;
    let mut b = [0u8; PING_BYTES];
    let t = Instant::now();
    for _ in 0..n {
        s.write_all(&b)?;
        s.read_exact(&mut b)?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / n as f64)
}

fn tcp_stream(addr: SocketAddr, payload: &[u8], total: u64) -> Result<f64> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let n = total / payload.len() as u64;
    s.write_all(b"s")?;
    s.write_all(&(n * payload.len() as u64).to_le_bytes())?;
    let t = Instant::now();
    for _ in 0..n {
        s.write_all(payload)?;
    }
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)?;
    Ok((n * payload.len() as u64) as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// The raw TCP peer process: prints its address, then serves connections one
/// at a time: `p` echoes fixed-size pings, `s` reads a stream and acks its end.
pub fn peer() -> Result<()> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    println!("{}", l.local_addr()?);
    std::io::stdout().flush()?;
    let mut buf = vec![0u8; 1 << 20];
    for s in l.incoming() {
        let mut s = s?;
        s.set_nodelay(true)?;
        let mut mode = [0u8; 1];
        if s.read_exact(&mut mode).is_err() {
            continue;
        }
        match mode[0] {
            b'p' => {
                let mut b = [0u8; PING_BYTES];
                while s.read_exact(&mut b).is_ok() {
                    s.write_all(&b)?;
                }
            }
            b's' => {
                let mut len = [0u8; 8];
                s.read_exact(&mut len)?;
                let mut left = u64::from_le_bytes(len);
                while left > 0 {
                    let k = (left as usize).min(buf.len());
                    let n = s.read(&mut buf[..k])?;
                    if n == 0 {
                        break;
                    }
                    left -= n as u64;
                }
                s.write_all(b"k")?;
            }
            _ => {}
        }
    }
    Ok(())
}
