//! The TCP transport in a host program that did not ignore SIGPIPE (a C
//! program using the MPI-IO library: Rust's runtime ignores it for its own
//! programs, so the check runs in a child process that restores the
//! default).

use std::io::{IoSlice, Read};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use weft_net::transport::Transport;

const CHILD: &str = "WEFT_TCP_TEST_CHILD";

/// The child's part: writes to a peer that has closed, with SIGPIPE's
/// default action (death) restored, until the write fails.
fn write_to_a_closed_peer() {
    // SAFETY: restores a signal's default disposition; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    drop(listener);
    client.set_nonblocking(true).unwrap();
    let mut t = mio::net::TcpStream::from_std(client);
    // The server closes with bytes unread: its end resets the connection,
    // and a write after the reset raises SIGPIPE unless told not to.
    Transport::write_vectored(&mut t, &[IoSlice::new(b"request")]).unwrap();
    let mut b = [0u8; 1];
    server.read_exact(&mut b).unwrap();
    drop(server);
    // The first write after the reset may fail with ECONNRESET; the next
    // ones fail with EPIPE, which is what raises the signal.
    let mut failed = None;
    for _ in 0..1000 {
        match Transport::write_vectored(&mut t, &[IoSlice::new(&[7u8; 4096])]) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                failed = Some(e);
                break;
            }
            Ok(_) | Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
    let e = failed.expect("writes to a closed peer never failed with EPIPE");
    println!("write failed: {e}");
}

#[test]
fn a_write_to_a_closed_peer_fails_without_killing_a_host_program() {
    if std::env::var_os(CHILD).is_some() {
        write_to_a_closed_peer();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_write_to_a_closed_peer_fails_without_killing_a_host_program", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), None, "the child was killed by a signal: {:?}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("write failed"), "{}", String::from_utf8_lossy(&out.stdout));
}
