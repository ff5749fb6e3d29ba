//! What a server lets in: connections that prove the cluster's secret (the
//! handshake, run by [`super::conn`]), and data requests whose capability
//! allows them (checked here, before any payload is accepted or any work
//! is queued).

use std::time::{SystemTime, UNIX_EPOCH};
use weft_wire::{rights, CapKey, DataReq, Request, Secret};

/// The keys a server checks peers and requests with.
pub struct Gate {
    secret: Secret,
    caps: CapKey,
}

/// The right a data operation needs (any one bit of it).
fn needed(op: &DataReq) -> u8 {
    match op {
        DataReq::Write { .. } | DataReq::CollWrite { .. } | DataReq::Truncate { .. } => rights::WRITE,
        DataReq::Read { .. } | DataReq::CollRead { .. } => rights::READ,
        // fsync(2) works on a descriptor open for reading too.
        DataReq::Fsync { .. } => rights::READ | rights::WRITE,
        DataReq::Size { .. } => rights::SIZE,
        DataReq::Delete { .. } => rights::DELETE,
    }
}

/// Unix time in seconds, as capabilities count it.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Gate {
    pub fn new(secret: Secret) -> Self {
        Gate { caps: CapKey::derive(&secret), secret }
    }

    /// The secret connections must prove.
    pub fn secret(&self) -> &Secret {
        &self.secret
    }

    /// The key capabilities are issued and checked with.
    pub fn cap_key(&self) -> &CapKey {
        &self.caps
    }

    /// `Err(why)` if `req` may not be served: a data request without a
    /// valid capability for its file and operation.
    pub fn admit(&self, req: &Request) -> Result<(), String> {
        match req {
            Request::Data { cap, op } => self.caps.check(cap, op.file(), needed(op), unix_now()).map_err(|why| format!("file {}: {why}", op.file().0)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_wire::{Capability, FileId, Piece};

    #[test]
    fn each_data_operation_needs_its_right() {
        let g = Gate::new(Secret::new(vec![3u8; 32]));
        let f = FileId(5);
        let read = g.cap_key().issue(f, rights::READ, u64::MAX);
        let write = Request::data(read, DataReq::Write { file: f, pieces: vec![Piece { offset: 0, len: 1 }] });
        assert!(g.admit(&write).unwrap_err().contains("needs write"), "a read capability wrote");
        assert!(g.admit(&Request::data(read, DataReq::Read { file: f, pieces: vec![], order: Default::default() })).is_ok());
        assert!(g.admit(&Request::data(read, DataReq::Fsync { file: f })).is_ok());
        assert!(g.admit(&Request::data(read, DataReq::Delete { file: f })).is_err(), "a read capability deleted");
        assert!(g.admit(&Request::data(read, DataReq::Size { file: f })).is_err());
        assert!(g.admit(&Request::data(Capability::none(f), DataReq::Size { file: f })).is_err());
        let old = g.cap_key().issue(f, rights::SIZE, unix_now() - 1);
        assert!(g.admit(&Request::data(old, DataReq::Size { file: f })).unwrap_err().contains("expired"));
        assert!(g.admit(&Request::Ping).is_ok());
    }
}
