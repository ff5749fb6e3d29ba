//! The client's errors: DESIGN §4's kinds, each with what failed.

use std::net::SocketAddr;
use thiserror::Error;
use weft_net::{ClusterError, NetError};
use weft_wire::ErrorCode;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    #[error("no such file or directory: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    Exists(String),
    #[error("not a directory: {0}")]
    NotDir(String),
    #[error("is a directory: {0}")]
    IsDir(String),
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    #[error("permission denied: {0}")]
    Permission(String),
    #[error("invalid path: {0}")]
    InvalidPath(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A server's local storage failed.
    #[error("I/O error on server {addr}: {message}")]
    Io { addr: SocketAddr, message: String },
    /// A server could not be reached, timed out, or refused the handshake.
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A file view or memory datatype that cannot be used for this access.
    #[error("{}: {}", .0.subject(), .0)]
    View(#[from] weft_layout::ViewError),
    /// A server's storage is full.
    #[error("no space left on server {addr}: {message}")]
    NoSpace { addr: SocketAddr, message: String },
    /// The file has the most names (hard links) it may have.
    #[error("too many links: {0}")]
    TooManyLinks(String),
    /// A rename or link the metadata shards do not make between these
    /// names (EXDEV: `mv` copies instead).
    #[error("names on different metadata shards: {0}")]
    CrossShard(String),
    /// Past the largest file a server's storage keeps.
    #[error("file too large for server {addr}: {message}")]
    TooLarge { addr: SocketAddr, message: String },
    /// A server is at a limit (connections, memory, lock-table size, a lock
    /// wait): try again later.
    #[error("server {addr} busy: {message}")]
    Busy { addr: SocketAddr, message: String },
    /// The atomic-mode lock session lapsed (its lease was not renewed in
    /// time): its locks may have gone to others, so atomic I/O stops here.
    #[error("lock lease expired: {0}")]
    LeaseExpired(String),
    /// A server-directed collective failed at a server: a member gave up or
    /// never arrived, or the server's I/O for it failed.
    #[error("collective aborted at server {addr}: {message}")]
    Aborted { addr: SocketAddr, message: String },
    /// A collective step over the processes' communicator failed.
    #[error("communicator: {0}")]
    Comm(String),
    /// A server answered with something the request does not allow.
    #[error("unexpected answer from server {addr}: {what}")]
    Protocol { addr: SocketAddr, what: String },
}

impl Error {
    /// The POSIX error number a system call would give for this error (the
    /// mount and the MPI-IO library's POSIX calls answer with it).
    pub fn errno(&self) -> i32 {
        use nix::errno::Errno as E;
        (match self {
            Error::NotFound(_) => E::ENOENT,
            Error::Exists(_) => E::EEXIST,
            Error::NotDir(_) => E::ENOTDIR,
            Error::IsDir(_) => E::EISDIR,
            Error::NotEmpty(_) => E::ENOTEMPTY,
            Error::Permission(_) => E::EACCES,
            Error::InvalidPath(_) | Error::BadRequest(_) => E::EINVAL,
            Error::NoSpace { .. } => E::ENOSPC,
            Error::TooLarge { .. } => E::EFBIG,
            Error::TooManyLinks(_) => E::EMLINK,
            Error::CrossShard(_) => E::EXDEV,
            Error::Busy { .. } => E::EBUSY,
            _ => E::EIO,
        }) as i32
    }
}

impl Error {
    /// The server went away (its connection broke or was refused, or it
    /// is stopping): what a restart looks like to a call that could not be
    /// sent again by itself (a server-directed collective is tried again
    /// whole, `collective/server.rs`).
    pub fn server_went_away(&self) -> bool {
        matches!(self, Error::Net(NetError::Unreachable { .. } | NetError::Stopping { .. }))
    }

    /// Maps a server's error response to the client's kinds.
    pub(crate) fn from_code(addr: SocketAddr, code: ErrorCode, message: String) -> Self {
        match code {
            ErrorCode::NotFound => Error::NotFound(message),
            ErrorCode::Exists => Error::Exists(message),
            ErrorCode::NotDir => Error::NotDir(message),
            ErrorCode::IsDir => Error::IsDir(message),
            ErrorCode::NotEmpty => Error::NotEmpty(message),
            ErrorCode::Permission => Error::Permission(message),
            ErrorCode::InvalidPath => Error::InvalidPath(message),
            ErrorCode::BadRequest => Error::BadRequest(message),
            ErrorCode::Io => Error::Io { addr, message },
            ErrorCode::Busy | ErrorCode::Stopping => Error::Busy { addr, message },
            ErrorCode::NoSpace => Error::NoSpace { addr, message },
            ErrorCode::TooLarge => Error::TooLarge { addr, message },
            ErrorCode::TooManyLinks => Error::TooManyLinks(message),
            ErrorCode::CrossShard => Error::CrossShard(message),
            ErrorCode::LeaseExpired => Error::LeaseExpired(message),
            ErrorCode::Aborted => Error::Aborted { addr, message },
            ErrorCode::WrongService | ErrorCode::Internal => {
                Error::Protocol { addr, what: format!("{}: {message}", code.name()) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use weft_layout::ViewError;

    #[test]
    fn a_view_error_names_the_argument_to_fix() {
        let mem = super::Error::from(ViewError::OutsideBuffer { offset: 64, len: 8, buf: 16 }).to_string();
        assert!(mem.starts_with("bad memory datatype: memory region at 64"), "{mem}");
        assert!(super::Error::from(ViewError::MemoryOverlap(4)).to_string().starts_with("bad memory datatype"));
        assert!(super::Error::from(ViewError::NegativeDisplacement(-1)).to_string().starts_with("bad view: "));
        assert!(super::Error::from(ViewError::PartialEtype { len: 3, etype: 4 }).to_string().starts_with("bad access: "));
    }
}
