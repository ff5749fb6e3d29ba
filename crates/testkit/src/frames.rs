//! Requests made and answers read by hand, for tests that speak the
//! protocol below the client library (hostile peers, one shard alone).

/// Asks server `addr` for namespace request `op` as `cred`, alone (no
/// routing, no riding through restarts); the decoded answer.
pub fn meta_call(ep: &weft_net::Endpoint, addr: std::net::SocketAddr, cred: weft_wire::Cred, op: weft_wire::MetaReq) -> weft_wire::Response {
    let reply = ep.call(addr, weft_wire::Request::Meta { cred, op }.encode()).unwrap();
    weft_wire::Response::decode(&reply.body).unwrap()
}

/// Reads one response frame from a raw connection and decodes it.
pub fn response(s: &mut std::net::TcpStream) -> (weft_wire::Header, weft_wire::Response) {
    let h = weft_net::frame_io::read_header(s).map_err(|e| format!("{e:?}")).unwrap();
    assert_eq!(h.kind, weft_wire::FrameKind::Response);
    let body = weft_net::frame_io::read_vec(s, h.body_len as usize).unwrap();
    let _payload = weft_net::frame_io::read_vec(s, h.pay_len as usize).unwrap();
    (h, weft_wire::Response::decode(&body).unwrap())
}

/// A data request with a capability for its file and every right, minted
/// with the servers' key (which a holder of the secret can derive).
pub fn capped(secret: &weft_wire::Secret, op: weft_wire::DataReq) -> weft_wire::Request {
    weft_wire::Request::data(cap_for(secret, op.file()), op)
}

/// A capability for `file` with every right, never expiring.
pub fn cap_for(secret: &weft_wire::Secret, file: weft_wire::FileId) -> weft_wire::Capability {
    weft_wire::CapKey::derive(secret).issue(file, weft_wire::rights::ALL, u64::MAX)
}
