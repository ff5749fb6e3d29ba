//! Decode errors and the stable status codes errors travel as.

use thiserror::Error;

/// Why some bytes are not a valid frame or message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the encoding needs; for a streamed frame this only
    /// means "read more", for a complete body it is an error.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("bad magic {0:#010x}: not a Weft frame")]
    BadMagic(u32),
    #[error("protocol version {got} not supported (this side speaks {want})")]
    BadVersion { got: u8, want: u8 },
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    #[error("{what} length {len} exceeds the limit {limit}")]
    TooLong { what: &'static str, len: u64, limit: u64 },
    #[error("unknown {what} tag {tag}")]
    BadTag { what: &'static str, tag: u32 },
    #[error("string is not valid UTF-8")]
    BadUtf8,
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("invalid value: {0}")]
    Invalid(&'static str),
}

/// The status code of an error response. Values are stable: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    NotFound = 1,
    Exists = 2,
    NotDir = 3,
    IsDir = 4,
    NotEmpty = 5,
    Permission = 6,
    BadRequest = 7,
    Io = 8,
    WrongService = 9,
    Busy = 10,
    Internal = 11,
    InvalidPath = 12,
    /// The lock session's lease ran out: its locks were released, so the
    /// client must not go on as if it held them.
    LeaseExpired = 13,
    /// A server's storage is full (ENOSPC).
    NoSpace = 14,
    /// A collective operation failed: a member abandoned it, one never
    /// arrived in time, or the server's I/O for it failed.
    Aborted = 15,
    /// Past the largest file a server's storage keeps (EFBIG).
    TooLarge = 16,
    /// A file has the most names it may have (EMLINK).
    TooManyLinks = 17,
    /// A rename or link between names kept by different metadata shards,
    /// or of a directory on a sharded cluster (EXDEV: `mv` copies instead).
    CrossShard = 18,
    /// The server is stopping (SIGTERM) and did not apply the request:
    /// send it again once the server is back (clients do, within their
    /// recovery window).
    Stopping = 19,
}

impl ErrorCode {
    /// Every code, for decoding and tests.
    pub const ALL: [ErrorCode; 19] = [
        Self::NotFound,
        Self::Exists,
        Self::NotDir,
        Self::IsDir,
        Self::NotEmpty,
        Self::Permission,
        Self::BadRequest,
        Self::Io,
        Self::WrongService,
        Self::Busy,
        Self::Internal,
        Self::InvalidPath,
        Self::LeaseExpired,
        Self::NoSpace,
        Self::Aborted,
        Self::TooLarge,
        Self::TooManyLinks,
        Self::CrossShard,
        Self::Stopping,
    ];

    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| *c as u16 == v)
    }

    /// The name printed in messages and docs.
    pub fn name(self) -> &'static str {
        match self {
            Self::NotFound => "not found",
            Self::Exists => "already exists",
            Self::NotDir => "not a directory",
            Self::IsDir => "is a directory",
            Self::NotEmpty => "directory not empty",
            Self::Permission => "permission denied",
            Self::BadRequest => "bad request",
            Self::Io => "I/O error",
            Self::WrongService => "service not hosted by this server",
            Self::Busy => "busy",
            Self::Internal => "internal error",
            Self::InvalidPath => "invalid path",
            Self::LeaseExpired => "lock lease expired",
            Self::NoSpace => "no space left on the server",
            Self::Aborted => "collective operation aborted",
            Self::TooLarge => "file too large for the server's storage",
            Self::TooManyLinks => "too many links",
            Self::CrossShard => "names on different metadata shards",
            Self::Stopping => "server stopping (not applied: send it again)",
        }
    }
}
