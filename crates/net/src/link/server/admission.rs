//! Who a connection proved to be, and what the server lets it do.

use weft_wire::{ErrorCode, Request, Secret};

/// Who a connection proved to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// It proved the servers' secret: a server, or a tool of the servers'
    /// owner, or (secret mode) any client. Its requests' credentials are
    /// believed.
    Trusted,
    /// It proved this uid and gid with MUNGE; the groups are the uid's
    /// supplementary groups as this server's system knows them.
    Verified { uid: u32, gid: u32, groups: Vec<u32> },
}

/// A MUNGE proof's result: who, and the server's credential; or the
/// error to send before closing.
pub type MungeOutcome = Result<(Identity, Vec<u8>), (ErrorCode, String)>;

/// What the server lets in, as the connection sees it: the secret a
/// handshake must prove, and whether a decoded request may be served by
/// the identity the connection proved (the services' `Gate`).
pub trait Admission {
    fn secret(&self) -> &Secret;
    /// `Err(why)` refuses the request (answered `Permission`); the
    /// request may be rewritten (a verified user's groups).
    fn admit(&self, req: &mut Request, who: &Identity) -> Result<(), String>;
}

/// Admits every request of a connection that proved `Secret` (test peers
/// and tools that run the server side of a handshake).
impl Admission for Secret {
    fn secret(&self) -> &Secret {
        self
    }
    fn admit(&self, _: &mut Request, _: &Identity) -> Result<(), String> {
        Ok(())
    }
}
