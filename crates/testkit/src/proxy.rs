//! A man in the middle that records what a client sends.

/// A proxy to `target` for one connection that records what the client
/// sent; the thread returns the bytes once the client hangs up.
pub fn recording_proxy(target: std::net::SocketAddr) -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = l.local_addr().unwrap();
    let recorder = std::thread::spawn(move || {
        let (mut client, _) = l.accept().unwrap();
        let mut server = std::net::TcpStream::connect(target).unwrap();
        let mut back = server.try_clone().unwrap();
        let mut to_client = client.try_clone().unwrap();
        let pump = std::thread::spawn(move || {
            let _ = std::io::copy(&mut back, &mut to_client);
        });
        let mut recorded = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    recorded.extend_from_slice(&buf[..n]);
                    server.write_all(&buf[..n]).unwrap();
                }
            }
        }
        let _ = server.shutdown(std::net::Shutdown::Both);
        pump.join().unwrap();
        recorded
    });
    (proxy, recorder)
}
