//! The connection handshake: protocol version, mutual proof of the shared
//! secret, and a challenge from the server so that nothing recorded from
//! an earlier connection can be replayed.
//!
//! ```text
//!  client                                   server
//!    | Hello     { client_nonce[16], flags u32 = 0 }  ->|
//!    |<- Challenge { server_nonce[16] }                  |  fresh random per connection
//!    | Proof     { mac[32] }                          ->|  mac over both nonces, version, flags
//!    |<- Welcome   { mac[32] }                           |  the server's own proof
//! ```
//!
//! # Wire format
//! `key = blake3::derive_key("weft v2 handshake", secret)`;
//! client proof `= blake3_keyed(key, "client proof" | version u8 | flags u32 LE | client_nonce | server_nonce)`;
//! server proof `= blake3_keyed(key, "server proof" | version u8 | client_nonce | server_nonce)`.
//! Every body has its exact size (20, 16, 32, 32 bytes); the flags are
//! reserved and must be zero. Both nonces are in both proofs, so a proof
//! recorded on one connection is worthless on another (the server's nonce
//! differs), and a server that does not hold the secret cannot answer.
//! `session_key` derives a per-connection key from both nonces, for frame
//! MACs (not sent yet).

use crate::header::PROTOCOL_VERSION;
use crate::{DecodeError, Decoder, Encoder};

/// The cluster's shared secret. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The client's opening: its nonce and its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub nonce: [u8; 16],
    /// [`Hello::MUNGE`] or 0; every other bit is reserved and must be zero.
    pub flags: u32,
}

/// The server's fresh nonce for this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    pub nonce: [u8; 16],
}

/// A MAC proving its sender holds the secret (the client's `Proof` frame
/// and the server's `Welcome` frame both carry one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof {
    pub mac: [u8; 32],
}

impl Hello {
    /// Exact size of an encoded `Hello`.
    pub const LEN: usize = 20;
    /// The client proves its uid and gid with a MUNGE credential instead
    /// of the secret (the cluster's `auth = "munge"`): its `Proof` frame
    /// carries the credential (of any length up to 4096 bytes), whose
    /// payload is [`Hello::munge_payload`] for the client; the server's
    /// `Welcome` carries the server's own.
    pub const MUNGE: u32 = 1;

    pub fn munge(&self) -> bool {
        self.flags & Self::MUNGE != 0
    }

    /// What a MUNGE credential of this handshake carries: who speaks, the
    /// protocol version, the flags, both nonces and the server's address as
    /// the cluster file gives it, so that a credential is worth nothing on
    /// another connection, in the other direction, or relayed to another
    /// server than the client dialled.
    pub fn munge_payload(&self, challenge: &Challenge, from_server: bool, server: &str) -> Vec<u8> {
        let mut v = Vec::with_capacity(80);
        v.extend_from_slice(if from_server { b"weft munge server " } else { b"weft munge client " });
        v.push(PROTOCOL_VERSION);
        v.extend_from_slice(&self.flags.to_le_bytes());
        v.extend_from_slice(&self.nonce);
        v.extend_from_slice(&challenge.nonce);
        v.extend_from_slice(server.as_bytes());
        v
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.raw(&self.nonce).u32(self.flags);
        e.finish()
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let h = Hello { nonce: d.fixed()?, flags: d.u32()? };
        d.finish()?;
        if h.flags & !Self::MUNGE != 0 {
            return Err(DecodeError::Invalid("hello flags other than MUNGE are reserved and must be zero"));
        }
        Ok(h)
    }
}

impl Challenge {
    pub const LEN: usize = 16;

    pub fn encode(&self) -> Vec<u8> {
        self.nonce.to_vec()
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let c = Challenge { nonce: d.fixed()? };
        d.finish()?;
        Ok(c)
    }
}

impl Proof {
    pub const LEN: usize = 32;

    pub fn encode(&self) -> Vec<u8> {
        self.mac.to_vec()
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let p = Proof { mac: d.fixed()? };
        d.finish()?;
        Ok(p)
    }
}

impl Secret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Secret(bytes.into())
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let key = blake3::derive_key("weft v2 handshake", &self.0);
        let mut h = blake3::Hasher::new_keyed(&key);
        h.update(label);
        for p in parts {
            h.update(p);
        }
        *h.finalize().as_bytes()
    }

    /// The client's proof for this connection.
    pub fn client_proof(&self, hello: &Hello, challenge: &Challenge) -> Proof {
        Proof { mac: self.mac(b"client proof", &[&[PROTOCOL_VERSION], &hello.flags.to_le_bytes(), &hello.nonce, &challenge.nonce]) }
    }

    /// The server's proof for this connection.
    pub fn server_proof(&self, hello: &Hello, challenge: &Challenge) -> Proof {
        Proof { mac: self.mac(b"server proof", &[&[PROTOCOL_VERSION], &hello.nonce, &challenge.nonce]) }
    }

    /// Constant-time check of a client's proof.
    pub fn verify_client_proof(&self, hello: &Hello, challenge: &Challenge, proof: &Proof) -> bool {
        blake3::Hash::from(self.client_proof(hello, challenge).mac) == blake3::Hash::from(proof.mac)
    }

    /// Constant-time check of a server's proof.
    pub fn verify_server_proof(&self, hello: &Hello, challenge: &Challenge, proof: &Proof) -> bool {
        blake3::Hash::from(self.server_proof(hello, challenge).mac) == blake3::Hash::from(proof.mac)
    }

    /// A key of this connection alone (both nonces), for frame MACs.
    pub fn session_key(&self, hello: &Hello, challenge: &Challenge) -> [u8; 32] {
        self.mac(b"session key", &[&hello.nonce, &challenge.nonce])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_the_secret_and_both_nonces() {
        let s = Secret::new(*b"right");
        let hello = Hello { nonce: [7; 16], flags: 0 };
        let ch = Challenge { nonce: [9; 16] };
        let p = s.client_proof(&hello, &ch);
        assert!(s.verify_client_proof(&Hello::decode(&hello.encode()).unwrap(), &Challenge::decode(&ch.encode()).unwrap(), &Proof::decode(&p.encode()).unwrap()));
        assert!(!Secret::new(*b"wrong").verify_client_proof(&hello, &ch, &p));
        // Replayed on a connection with another server nonce: worthless.
        assert!(!s.verify_client_proof(&hello, &Challenge { nonce: [8; 16] }, &p));
        // A client proof is not a server proof (no reflection).
        assert!(!s.verify_server_proof(&hello, &ch, &p));
        assert!(s.verify_server_proof(&hello, &ch, &s.server_proof(&hello, &ch)));
        assert_ne!(s.session_key(&hello, &ch), s.session_key(&hello, &Challenge { nonce: [8; 16] }));
    }

    #[test]
    fn every_message_has_its_exact_size_and_flags_are_zero() {
        assert!(matches!(Hello::decode(&[0; 19]), Err(DecodeError::Truncated { .. })));
        assert!(matches!(Hello::decode(&[0; 21]), Err(DecodeError::Trailing(1))));
        let mut flagged = Hello { nonce: [1; 16], flags: 0 }.encode();
        flagged[16] = 2;
        assert!(matches!(Hello::decode(&flagged), Err(DecodeError::Invalid(_))));
        assert!(Challenge::decode(&[0; 17]).is_err() && Proof::decode(&[0; 31]).is_err());
        assert_eq!(Hello { nonce: [0; 16], flags: 0 }.encode().len(), Hello::LEN);
    }
}
