//! Capabilities: what the metadata service decided, in a form data servers
//! can check without asking it (as OrangeFS's signed capabilities).
//!
//! The metadata service issues one when a file is opened, created, removed
//! or its size is needed; every data request carries one, and a data server
//! serves the request only if the capability names the request's file,
//! grants the right the operation needs, has not expired, and its MAC is
//! right under the key only servers derive.
//!
//! # Wire format
//! `file u64 | rights u8 | expires u64 (unix seconds) | mac[32]` (49 bytes);
//! `mac = blake3_keyed(key, "weft capability" | file | rights | expires)`,
//! `key = blake3::derive_key("weft v6 capability key", server secret)`.
//! Rights bits outside [`rights::ALL`] must be zero.

use crate::{DecodeError, Decoder, Encoder, FileId, Secret};

/// The rights a capability grants (bit set).
pub mod rights {
    /// `Read`, `CollRead`, `Fsync`.
    pub const READ: u8 = 1;
    /// `Write`, `CollWrite`, `Truncate`, `Fsync`.
    pub const WRITE: u8 = 2;
    /// `Size`: learn how long the file's objects are.
    pub const SIZE: u8 = 4;
    /// `Delete`: granted only for a file just removed from the namespace.
    pub const DELETE: u8 = 8;
    pub const ALL: u8 = READ | WRITE | SIZE | DELETE;

    /// "read, size" and so on, for messages.
    pub fn names(r: u8) -> String {
        let all = [(READ, "read"), (WRITE, "write"), (SIZE, "size"), (DELETE, "delete")];
        let v: Vec<&str> = all.iter().filter(|(b, _)| r & b != 0).map(|(_, n)| *n).collect();
        if v.is_empty() { "nothing".into() } else { v.join(", ") }
    }
}

/// The right to do `rights` to `file` until `expires` (unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    pub file: FileId,
    pub rights: u8,
    /// Unix time in seconds after which it is refused; `u64::MAX`: never.
    pub expires: u64,
    pub mac: [u8; 32],
}

/// Servers' key for issuing and checking capabilities. `Debug` hides it.
#[derive(Clone)]
pub struct CapKey([u8; 32]);

impl std::fmt::Debug for CapKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapKey(..)")
    }
}

/// Why a data server refused a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapRefusal {
    OtherFile,
    TooFewRights { needed: u8, granted: u8 },
    Expired,
    Forged,
}

impl std::fmt::Display for CapRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapRefusal::OtherFile => f.write_str("the capability is for another file"),
            CapRefusal::TooFewRights { needed, granted } => write!(f, "the capability grants {} but this needs {}", rights::names(*granted), rights::names(*needed)),
            CapRefusal::Expired => f.write_str("the capability has expired (ask the metadata service for a new one)"),
            CapRefusal::Forged => f.write_str("the capability was not issued by this cluster's metadata service"),
        }
    }
}

impl Capability {
    /// Encoded size.
    pub const LEN: usize = 49;

    /// A capability no server accepts (for requests made without one).
    pub fn none(file: FileId) -> Self {
        Capability { file, rights: 0, expires: 0, mac: [0; 32] }
    }

    pub fn encode(&self, e: &mut Encoder) {
        e.u64(self.file.0).u8(self.rights).u64(self.expires).raw(&self.mac);
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let c = Capability { file: FileId(d.u64()?), rights: d.u8()?, expires: d.u64()?, mac: d.fixed()? };
        if c.rights & !rights::ALL != 0 {
            return Err(DecodeError::Invalid("capability rights bits outside the defined ones"));
        }
        Ok(c)
    }
}

impl CapKey {
    /// The key servers derive from their secret.
    pub fn derive(secret: &Secret) -> Self {
        CapKey(blake3::derive_key("weft v6 capability key", secret.bytes()))
    }

    fn mac(&self, file: FileId, rights: u8, expires: u64) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(b"weft capability").update(&file.0.to_le_bytes()).update(&[rights]).update(&expires.to_le_bytes());
        *h.finalize().as_bytes()
    }

    /// A MAC under this key of `bytes` in the domain `what` (for other
    /// messages only servers may send, such as replica changes).
    pub fn mac_of(&self, what: &[u8], bytes: &[u8]) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(what).update(&(bytes.len() as u64).to_le_bytes()).update(bytes);
        *h.finalize().as_bytes()
    }

    pub fn issue(&self, file: FileId, rights: u8, expires: u64) -> Capability {
        Capability { file, rights, expires, mac: self.mac(file, rights, expires) }
    }

    /// Does `cap` allow `needed` (any one of its bits) on `file` at unix
    /// time `now`? The MAC is compared in constant time.
    pub fn check(&self, cap: &Capability, file: FileId, needed: u8, now: u64) -> Result<(), CapRefusal> {
        if blake3::Hash::from(self.mac(cap.file, cap.rights, cap.expires)) != blake3::Hash::from(cap.mac) {
            return Err(CapRefusal::Forged);
        }
        if cap.file != file {
            return Err(CapRefusal::OtherFile);
        }
        if cap.rights & needed == 0 {
            return Err(CapRefusal::TooFewRights { needed, granted: cap.rights });
        }
        if now > cap.expires {
            return Err(CapRefusal::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> CapKey {
        CapKey::derive(&Secret::new(*b"0123456789abcdef"))
    }

    #[test]
    fn a_capability_allows_its_file_and_rights_until_it_expires() {
        let c = key().issue(FileId(7), rights::READ | rights::SIZE, 100);
        assert_eq!(key().check(&c, FileId(7), rights::READ, 100), Ok(()));
        assert_eq!(key().check(&c, FileId(7), rights::SIZE, 0), Ok(()));
        assert_eq!(key().check(&c, FileId(8), rights::READ, 50), Err(CapRefusal::OtherFile));
        assert_eq!(key().check(&c, FileId(7), rights::WRITE, 50), Err(CapRefusal::TooFewRights { needed: rights::WRITE, granted: 5 }));
        assert_eq!(key().check(&c, FileId(7), rights::READ, 101), Err(CapRefusal::Expired));
        assert_eq!(key().check(&Capability::none(FileId(7)), FileId(7), rights::READ, 0), Err(CapRefusal::Forged));
        let other = CapKey::derive(&Secret::new(*b"another secret!!"));
        assert_eq!(other.check(&c, FileId(7), rights::READ, 50), Err(CapRefusal::Forged));
    }

    #[test]
    fn undefined_rights_bits_are_refused_by_the_decoder() {
        let mut e = Encoder::new();
        Capability { rights: 0x10, ..Capability::none(FileId(1)) }.encode(&mut e);
        let b = e.finish();
        assert_eq!(b.len(), Capability::LEN);
        assert!(matches!(Capability::decode(&mut Decoder::new(&b)), Err(DecodeError::Invalid(_))));
    }

    proptest! {
        /// Changing any field of an issued capability (file, rights,
        /// expiry or one bit of its MAC) makes it a forgery.
        #[test]
        fn any_change_to_a_capability_is_caught(file in any::<u64>(), r in 1u8..16, exp in any::<u64>(), which in 0usize..4, bit in 0usize..256) {
            let c = key().issue(FileId(file), r, exp);
            let mut e = Encoder::new();
            c.encode(&mut e);
            let back = Capability::decode(&mut Decoder::new(&e.finish())).unwrap();
            prop_assert_eq!(back, c);
            let mut t = c;
            match which {
                0 => t.file = FileId(file ^ 1),
                1 => t.rights = r ^ 1 | if r ^ 1 == 0 { 2 } else { 0 },
                2 => t.expires = exp ^ 1,
                _ => t.mac[bit / 8] ^= 1 << (bit % 8),
            }
            prop_assert_eq!(key().check(&t, t.file, rights::ALL, 0), Err(CapRefusal::Forged));
        }
    }
}
