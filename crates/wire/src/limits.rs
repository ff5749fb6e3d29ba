//! Hard limits on every length that travels on the wire. A decoder checks a
//! length against its limit before it allocates or copies anything.

/// Largest encoded message body. Bodies carry paths, piece lists and
/// directory pages, never bulk data, so 1 MiB leaves room for a full
/// piece list while bounding what a hostile peer can make us allocate.
pub const MAX_BODY_LEN: u32 = 1 << 20;

/// Largest bulk payload of one frame. Clients split larger transfers into
/// several requests, so 16 MiB bounds server memory per request while
/// staying far above the size where per-message cost matters.
pub const MAX_PAYLOAD_LEN: u32 = 16 << 20;

/// Longest path in a request: past POSIX's `PATH_MAX`, since a program may
/// reach a deep file by a short relative name and the mount then asks for
/// it by its whole path (a walk costs one lookup per 2 bytes at most).
pub const MAX_PATH_LEN: usize = 32 << 10;

/// Longest symbolic link target the service keeps: `PATH_MAX` (Linux's
/// own limit is one less, for the NUL; the mount applies that).
pub const MAX_LINK_TARGET_LEN: usize = 4096;

/// Largest end (offset + length) of a file's bytes: any layout then keeps
/// every object below [`MAX_OBJECT_END`].
pub const MAX_FILE_END: u64 = MAX_OBJECT_END;

/// Longest name of one path component, as POSIX's `NAME_MAX`.
pub const MAX_NAME_LEN: usize = 255;

/// Most (offset, length) pieces in one data request; 64 Ki pieces of 16 bytes
/// is exactly [`MAX_BODY_LEN`]. Longer lists are split by the client.
pub const MAX_PIECES: usize = 65_000;

/// Most extents in one lock request (17 to 33 bytes each on the wire);
/// longer lists are coalesced by the client first, or refused.
pub const MAX_LOCK_EXTENTS: usize = 30_000;

/// Largest stripe size: 4 GiB, as Lustre's. With at most
/// [`MAX_STRIPE_COUNT`] servers a full stripe row stays below 2^44 bytes, so
/// striping arithmetic cannot overflow.
pub const MAX_STRIPE_SIZE: u64 = 1 << 32;

/// Most servers a file can be striped over.
pub const MAX_STRIPE_COUNT: usize = 4096;

/// Most directory entries in one readdir page.
pub const MAX_DIR_PAGE: usize = 1024;

/// Longest error message carried in an error response.
pub const MAX_ERROR_MSG: usize = 1024;

/// Largest offset + length of a piece: objects stay below 2^62 bytes so that
/// offset arithmetic never overflows a `u64`.
pub const MAX_OBJECT_END: u64 = 1 << 62;
