//! Weft as a POSIX file system through FUSE (floor 8, front end):
//! `weft mount MOUNTPOINT`. Every tool, language and library reaches Weft
//! files as ordinary files; see `docs/posix.md` for what POSIX behaviour is
//! kept and what is relaxed.
//!
//! Inode numbers are Weft's file ids (the root's is 1, as FUSE's), so
//! nothing is allocated per file; the mount keeps only a map from inode to
//! path (the metadata service is path-based) and its open handles.

mod attrs;
mod dir_attrs;
mod errno;
mod fresh_dirs;
mod fs;
mod handle;
mod held_attrs;
mod identity;
mod known;
mod local_sizes;
mod lock_requests;
mod locks;
mod open_files;
mod ops;
mod pool;
mod setattr;
mod write_behind;
mod writeback;

pub use fs::{MountOptions, WeftFs};
