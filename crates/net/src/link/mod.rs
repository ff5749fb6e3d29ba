//! One connection's protocol, both sides, sans I/O: the machines every
//! Weft connection runs, whatever moves its bytes.
//!
//! * [`frames`]: the framing both sides share: a header being received,
//!   a body being filled, and the queue of frames to send.
//! * [`server`]: the server side: handshake (secret or MUNGE), eager and
//!   rendezvous requests, deadlines, memory budget; `weft serve`'s event
//!   loop drives it.
//! * [`client`]: the client side: requests posted by message id, `Cts`
//!   answered with the data, responses matched to their calls; the
//!   client [`crate::endpoint`] drives it.
//! * [`body`]: a response's body as the caller gets it (short ones inline).
//! * [`hello`]: the client side of the handshake.
//! * [`id_queue`]: the calls a connection owes answers, by message id.
//!
//! A machine is given bytes (`received`) and asked for bytes
//! (`tx_slices`, `sent`); the owner moves them over a
//! [`crate::transport::Transport`]. No sockets, threads or clocks here
//! (`now` is passed in), so each rule is tested with plain buffers, and
//! `tests` runs a client machine against a server machine through memory.

pub mod body;
pub mod client;
pub mod frames;
pub mod hello;
pub mod id_queue;
pub mod server;

#[cfg(test)]
mod pair_tests;

pub use client::{ClientConn, ClientRx, Completion};
pub use hello::{ClientHello, HelloStep};
pub use server::{Admission, Close, ConnLimits, Event, Identity, MungeOutcome, Payload, ServerConn};
