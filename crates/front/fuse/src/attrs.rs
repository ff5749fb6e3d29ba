//! Weft's attributes as the kernel wants them, and times both ways.

use fuser::{FileAttr, FileType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weft_client::FileKind;

pub(crate) fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

pub(crate) fn time(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}

/// Kernel attributes of a Weft file or directory of `size` bytes.
pub(crate) fn kind_of(a: &weft_client::FileAttr) -> FileType {
    match a.kind {
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::File => FileType::RegularFile,
    }
}

pub(crate) fn fuse_attr(a: &weft_client::FileAttr, size: u64) -> FileAttr {
    let blksize = a.layout.as_ref().map_or(4096, |l| l.stripe_size.clamp(4096, 1 << 20) as u32);
    FileAttr {
        ino: INodeNo(a.id.0),
        size,
        blocks: size.div_ceil(512),
        atime: time(a.mtime_ns),
        mtime: time(a.mtime_ns),
        ctime: time(a.ctime_ns),
        crtime: time(a.ctime_ns),
        kind: kind_of(a),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize,
        flags: 0,
    }
}
