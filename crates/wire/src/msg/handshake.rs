//! The connection handshake: protocol version and proof of the shared secret.
//!
//! # Wire format
//! `Hello` body: `nonce [16] | mac [32]` where
//! `mac = blake3_keyed(key(secret), "hello" | nonce)`.
//! `HelloAck` body: `mac [32]` with `mac = blake3_keyed(key(secret), "ack" | nonce)`,
//! proving to the client that the server holds the secret too.
//! The protocol version travels in the frame header of both frames.

use crate::{DecodeError, Decoder, Encoder};

/// The cluster's shared secret. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Secret(bytes.into())
    }

    fn mac(&self, label: &[u8], nonce: &[u8; 16]) -> [u8; 32] {
        let key = blake3::derive_key("weft v1 handshake", &self.0);
        let mut h = blake3::Hasher::new_keyed(&key);
        h.update(label);
        h.update(nonce);
        *h.finalize().as_bytes()
    }

    /// Builds the client's hello for a fresh random `nonce`.
    pub fn hello(&self, nonce: [u8; 16]) -> Hello {
        Hello { nonce, mac: self.mac(b"hello", &nonce) }
    }

    /// True when `hello` was made with this secret.
    pub fn verify_hello(&self, hello: &Hello) -> bool {
        // blake3::Hash compares in constant time.
        blake3::Hash::from(self.mac(b"hello", &hello.nonce)) == blake3::Hash::from(hello.mac)
    }

    pub fn ack(&self, hello: &Hello) -> HelloAck {
        HelloAck { mac: self.mac(b"ack", &hello.nonce) }
    }

    pub fn verify_ack(&self, hello: &Hello, ack: &HelloAck) -> bool {
        blake3::Hash::from(self.mac(b"ack", &hello.nonce)) == blake3::Hash::from(ack.mac)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub nonce: [u8; 16],
    pub mac: [u8; 32],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloAck {
    pub mac: [u8; 32],
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.raw(&self.nonce).raw(&self.mac);
        e.finish()
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let h = Hello { nonce: d.fixed()?, mac: d.fixed()? };
        d.finish()?;
        Ok(h)
    }
}

impl HelloAck {
    pub fn encode(&self) -> Vec<u8> {
        self.mac.to_vec()
    }
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(b);
        let a = HelloAck { mac: d.fixed()? };
        d.finish()?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_secrets_verify_and_others_do_not() {
        let s = Secret::new(*b"right");
        let hello = s.hello([7; 16]);
        assert!(s.verify_hello(&Hello::decode(&hello.encode()).unwrap()));
        assert!(!Secret::new(*b"wrong").verify_hello(&hello));
        let ack = s.ack(&hello);
        assert!(s.verify_ack(&hello, &HelloAck::decode(&ack.encode()).unwrap()));
        assert!(!Secret::new(*b"wrong").verify_ack(&hello, &ack));
    }

    #[test]
    fn short_hello_is_truncated() {
        assert!(matches!(Hello::decode(&[0; 47]), Err(DecodeError::Truncated { .. })));
        assert!(matches!(Hello::decode(&[0; 49]), Err(DecodeError::Trailing(1))));
    }
}
