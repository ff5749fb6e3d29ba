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
use weft_net::{Call, ClusterFile, Endpoint, EndpointConfig, TransportChoice};
use weft_wire::{Request, Response, HEADER_LEN};

#[derive(Debug, Clone)]
pub struct Params {
    pub pings: usize,
    pub stream_bytes: u64,
    pub message: usize,
    pub rounds: usize,
    /// Weft's transports to measure, each beside raw TCP.
    pub transports: Vec<TransportChoice>,
    /// Also each transport with this many rails (1: not).
    pub rails: u8,
}

/// One measure of one transport (`op` is `rtt` or `stream`); `ratio` is to
/// raw TCP in the same rounds, for every transport, so shared memory's
/// shows its gain. The raw TCP rows have transport `raw-tcp`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `raw-tcp`, `tcp`, `shm`, or one of those with rails (`tcp-rails4`).
    pub transport: String,
    pub op: &'static str,
    /// Bytes per message (25 for a ping).
    pub size: usize,
    /// Round trip (rtt rows).
    pub rtt_us: Option<f64>,
    /// Throughput (stream rows).
    pub mb_s: Option<f64>,
    pub ratio: f64,
    /// The receiving server's CPU per GiB streamed (stream rows; for raw
    /// TCP the echo process's): what the transport costs the server.
    pub server_cpu_ms_per_gib: Option<f64>,
}

/// Size of a Weft ping on the wire (header plus one-byte body), so the raw
/// TCP ping moves exactly as many bytes.
const PING_BYTES: usize = HEADER_LEN + 1;

/// The name of a transport in rows and tables.
pub fn transport_name(t: TransportChoice) -> &'static str {
    match t {
        TransportChoice::Tcp => "tcp",
        TransportChoice::Shm => "shm",
        TransportChoice::Auto => "auto",
    }
}

pub fn run(weft_bin: &Path, bc: &BenchCluster, p: &Params) -> Result<Vec<Row>> {
    if p.pings == 0 || p.rounds == 0 || p.message == 0 || p.stream_bytes < p.message as u64 || p.transports.is_empty() {
        bail!("pings, rounds and message size must be at least 1, the stream at least one message, and one transport given");
    }
    let cf = ClusterFile::load(&bc.cluster_file)?;
    let data = cf.data_servers()[0];
    let addr = cf.server(data).expect("data server").addr;
    // Each transport, and with rails if asked: (name, transport, rails).
    let mut kinds: Vec<(String, TransportChoice, u8)> = p.transports.iter().map(|&t| (transport_name(t).to_string(), t, 1)).collect();
    if p.rails > 1 {
        kinds.extend(p.transports.iter().map(|&t| (format!("{}-rails{}", transport_name(t), p.rails), t, p.rails)));
    }
    let eps = kinds
        .iter()
        // The client's variables (WEFT_SHM_POLL_US, WEFT_TIMEOUT_MS), with
        // each transport in turn.
        .map(|&(_, transport, rails)| Ok(Endpoint::new(cf.secret(), EndpointConfig { transport, rails, ..EndpointConfig::from_vars(&weft_net::settings::Vars::env())? })?))
        .collect::<Result<Vec<_>>>()?;
    let mut peer = Command::new(weft_bin).args(["bench", "net-peer"]).stdout(Stdio::piped()).spawn().context("cannot start the TCP peer")?;
    let mut line = String::new();
    BufReader::new(peer.stdout.take().expect("piped")).read_line(&mut line)?;
    let raw: SocketAddr = line.trim().parse().with_context(|| format!("peer said {line:?}"))?;
    let payload = vec![7u8; p.message];
    let k = eps.len();
    let (mut rw, mut rt, mut sw, mut st) = (vec![vec![]; k], vec![], vec![vec![]; k], vec![]);
    let (mut cw, mut ct) = (vec![vec![]; k], vec![]);
    let gib = p.stream_bytes as f64 / (1u64 << 30) as f64;
    let peer_pid = peer.id();
    for round in 0..p.rounds {
        // Alternating which goes first, round by round.
        rt.push(tcp_rtt(raw, p.pings)?);
        for i in (0..k).map(|i| if round % 2 == 0 { i } else { k - 1 - i }) {
            rw[i].push(weft_rtt(&eps[i], addr, p.pings)?);
        }
        let before = process_cpu_ns(peer_pid)?;
        st.push(tcp_stream(raw, &payload, p.stream_bytes)?);
        ct.push((process_cpu_ns(peer_pid)? - before) as f64 / 1e6 / gib);
        for i in (0..k).map(|i| if round % 2 == 0 { i } else { k - 1 - i }) {
            let before = server_cpu_ns(&eps[i], addr)?;
            sw[i].push(weft_stream(&eps[i], addr, &payload, p.stream_bytes)?);
            cw[i].push((server_cpu_ns(&eps[i], addr)?.saturating_sub(before)) as f64 / 1e6 / gib);
        }
    }
    let _ = peer.kill();
    let _ = peer.wait();
    for (i, ep) in eps.iter().enumerate() {
        if kinds[i].1 == TransportChoice::Shm && ep.stats().shm_connects == 0 {
            bail!("the shm endpoint did not connect over shared memory");
        }
        if kinds[i].2 > 1 && ep.stats().rail_parts == 0 {
            bail!("the {} endpoint sent nothing over its rails (messages under {} bytes are not split)", kinds[i].0, weft_net::SPLIT_MIN);
        }
    }
    let (rtt_t, s_t) = (median(rt), median(st));
    let mut rows = vec![
        Row { transport: "raw-tcp".into(), op: "rtt", size: PING_BYTES, rtt_us: Some(rtt_t), mb_s: None, ratio: 1.0, server_cpu_ms_per_gib: None },
        Row { transport: "raw-tcp".into(), op: "stream", size: p.message, rtt_us: None, mb_s: Some(s_t), ratio: 1.0, server_cpu_ms_per_gib: Some(median(ct)) },
    ];
    for (i, (name, ..)) in kinds.iter().enumerate() {
        let (r, s, c) = (median(std::mem::take(&mut rw[i])), median(std::mem::take(&mut sw[i])), median(std::mem::take(&mut cw[i])));
        rows.push(Row { transport: name.clone(), op: "rtt", size: PING_BYTES, rtt_us: Some(r), mb_s: None, ratio: r / rtt_t, server_cpu_ms_per_gib: None });
        rows.push(Row { transport: name.clone(), op: "stream", size: p.message, rtt_us: None, mb_s: Some(s), ratio: s / s_t, server_cpu_ms_per_gib: Some(c) });
    }
    Ok(rows)
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

/// The server's CPU so far (its event loop's and its workers'), by its
/// own thread clocks.
fn server_cpu_ns(ep: &Endpoint, addr: SocketAddr) -> Result<u64> {
    let r = ep.call(addr, Request::Status.encode())?;
    match Response::decode(&r.body)? {
        Response::Stats(st) => Ok(st.cpu_loop_ns + st.cpu_ns.iter().sum::<u64>()),
        other => bail!("a status request was answered with {other:?}"),
    }
}

/// A process's user and system CPU so far (`/proc/PID/stat`).
fn process_cpu_ns(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("odd /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as u64;
    Ok(ticks * 1_000_000_000 / hz.max(1))
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

/// The message layer against raw TCP, as `weft bench net` runs it.
pub struct Net<'a> {
    pub exe: &'a Path,
    pub cluster: &'a BenchCluster,
    pub params: Params,
}

impl crate::experiment::Experiment for Net<'_> {
    type Row = Row;

    fn name(&self) -> &'static str {
        "net"
    }

    fn run(&mut self, _progress: &dyn Fn(&str)) -> Result<Vec<Row>> {
        run(self.exe, self.cluster, &self.params)
    }

    fn report(&self, rows: &[Row]) -> crate::experiment::Report {
        let table = rows
            .iter()
            .map(|r| {
                let value = match (r.rtt_us, r.mb_s) {
                    (Some(us), _) => format!("{us:.2} us"),
                    (_, Some(mb)) => format!("{mb:.1} MB/s"),
                    _ => String::new(),
                };
                let cpu = r.server_cpu_ms_per_gib.map_or(String::new(), |ms| format!("{ms:.0}"));
                vec![r.transport.clone(), r.op.into(), crate::experiment::human_bytes(r.size as u64), value, format!("{:.2}", r.ratio), cpu]
            })
            .collect();
        crate::experiment::Report::table(
            format!("Message layer vs raw TCP (paper 003), median of {} rounds, alternating order", self.params.rounds),
            &["transport", "op", "message", "value", "vs raw tcp", "server CPU ms/GiB"],
            table,
        )
    }
}
