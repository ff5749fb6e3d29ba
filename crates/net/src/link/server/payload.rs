//! A request's payload as the server holds it: bytes read into a buffer,
//! or a place in the connection's shared area (`transport::area`).

use crate::budget::Charge;
use crate::transport::area::Slot;

/// A request's bulk bytes and the budget they hold: in `bytes`, or, for a
/// payload the client placed in the connection's shared area, in `placed`
/// (`bytes` empty). Dropping it returns the buffer to the pool (the place
/// to its area) and then the bytes to the budget.
#[derive(Debug, Default)]
pub struct Payload {
    pub bytes: Vec<u8>,
    pub charge: Option<Charge>,
    /// Boxed: payloads move through the server's queues, and most are not
    /// placed.
    pub placed: Option<Box<Slot>>,
}

impl Payload {
    pub fn new(bytes: Vec<u8>, charge: Option<Charge>) -> Self {
        Payload { bytes, charge, placed: None }
    }

    /// The payload's bytes, wherever they are. A placed payload's bytes
    /// are in memory the client maps too and may change at any time: use
    /// them only to copy them (into a file, a buffer), never to decide
    /// anything, nor read them twice expecting the same bytes (which is
    /// why only `Request::payload_is_opaque` payloads are placed).
    pub fn data(&self) -> &[u8] {
        match &self.placed {
            Some(slot) => slot.bytes(),
            None => &self.bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.placed.as_ref().map_or(self.bytes.len(), |s| s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        crate::buffers::give(std::mem::take(&mut self.bytes));
        // Before the charge (a field, dropped after this): a connection
        // retried when memory comes back finds the place free too.
        if self.placed.is_some() {
            self.placed = None;
        }
    }
}
