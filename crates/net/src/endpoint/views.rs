//! Raw views of the buffers a caller lends to [`super::Endpoint::run`].
//!
//! Several threads share one endpoint, so the thread that happens to drive
//! the sockets writes other callers' request payloads and reads response
//! payloads straight into other callers' buffers, with no staging copy.
//! Borrows cannot cross threads that way, so the engine keeps raw views.
//!
//! Safety rests on two rules kept by the engine:
//! * a view is made from a borrow that `run`'s caller holds for the whole
//!   call, and `run` does not return, nor unwind past its guard, until the
//!   engine holds no view of its batch (`Engine::detach`);
//! * views are only dereferenced with the engine's mutex held, so no two
//!   threads touch a buffer at once, and the owner does not touch it while
//!   it waits.
#![allow(unsafe_code)]

/// A caller's buffer to send from.
#[derive(Clone, Copy)]
pub(super) struct SendView {
    ptr: *const u8,
    len: usize,
}

/// A caller's buffer to receive into.
pub(super) struct RecvView {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointed-to memory is only accessed under the engine's mutex,
// while its owner waits (module doc).
unsafe impl Send for SendView {}
unsafe impl Send for RecvView {}

impl SendView {
    pub(super) fn new(s: &[u8]) -> Self {
        SendView { ptr: s.as_ptr(), len: s.len() }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The bytes. Only while the owner's batch is in the engine (module doc).
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: made from a live `&[u8]` whose owner waits in `run` until
        // this view is gone; `as_ptr` of an empty slice is non-null.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl RecvView {
    pub(super) fn new(s: &mut [u8]) -> Self {
        RecvView { ptr: s.as_mut_ptr(), len: s.len() }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The bytes, writable. Only while the owner's batch is in the engine.
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: made from a live `&mut [u8]` whose owner waits in `run`
        // and does not touch it; `&mut self` keeps this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}
