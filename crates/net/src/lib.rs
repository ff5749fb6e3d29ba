//! Weft's message layer (floor 2), after the BlueGene/L MPI paper (seed 003).
//!
//! * [`endpoint`]: the client side, a post/advance engine on non-blocking
//!   sockets that all threads of a client share, one connection per server.
//!   One waiting thread at a time drives every connection: requests to many
//!   servers are in flight at once, payloads go out with vectored writes
//!   straight from the callers' buffers, and response payloads are read
//!   straight into them. Small payloads travel eagerly; large ones use a
//!   rendezvous (`Rts`/`Cts`/`Data`) so the receiver decides when to take them.
//!   Calls run blocking (`run`) or stay in flight while the caller works
//!   (`scope`, `post`, `test`, `wait`).
//! * [`link`]: one connection's protocol, client and server side, as
//!   sans-I/O machines that the endpoint, the servers' event loop and the
//!   blocking helpers all drive.
//! * [`transport`]: what moves a connection's bytes: TCP, or shared memory
//!   rings for a client on the server's node.
//! * [`budget`], [`buffers`]: the servers' memory budget and payload pool.
//! * [`frame_io`]: blocking frame reads and writes, for tools and tests.
//! * [`handshake`]: protocol version and shared-secret (or MUNGE) check on every connection.
//! * [`munge`]: MUNGE credentials through libmunge, loaded at run time.
//! * [`cluster`]: the cluster file clients and servers read.
//!
//! Uses `wire` only; never the client or the services. See `docs/protocol.md`.
// Only `endpoint::views` (callers' buffers lent across threads), `munge`
// (libmunge through its C interface) and `transport::{ring, shm}` (shared
// memory between processes) allow it.
#![deny(unsafe_code)]

pub mod budget;
pub mod buffers;
pub mod cluster;
pub mod endpoint;
pub mod error;
pub mod frame_io;
pub mod handshake;
pub mod link;
pub mod munge;
pub mod settings;
pub mod transport;

pub use cluster::{ClusterFile, ClusterError, ServerEntry, Service};
pub use endpoint::{Body, Call, Endpoint, EndpointConfig, EndpointStats, Posted, Reply, Scope, TransportChoice, IDLE_REUSE, MAX_RAILS, PING_AFTER, SPLIT_MIN};
pub use error::NetError;
pub use handshake::ClientAuth;
