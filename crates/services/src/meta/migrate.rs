//! The database's record format, and bringing an older database up to it
//! when the service opens it (so an upgrade keeps the namespace).
//!
//! Format 1 (before link counts): inode records without `nlink`. Format 2:
//! `nlink` after the times; a directory's is 2 plus its subdirectories.

use super::tables::{decode_attr, err, Result, COUNTERS, DIRENTS, INODES};
use redb::{ReadableTable, WriteTransaction};
use std::collections::HashMap;
use weft_wire::{ErrorCode, FileKind};

/// The format this build writes.
pub(super) const FORMAT: u64 = 2;

/// Where format 1's records end their fixed part (id, kind, mode, uid,
/// gid, mtime, ctime): format 2 adds `nlink` (u32) there.
const FIXED_V1: usize = 8 + 1 + 4 + 4 + 4 + 8 + 8;

/// A format-1 record read as format 2, with link count `nlink`.
fn upgrade(v1: &[u8], nlink: u32) -> Result<Vec<u8>> {
    let cut = FIXED_V1.min(v1.len());
    let mut v2 = Vec::with_capacity(v1.len() + 4);
    v2.extend_from_slice(&v1[..cut]);
    v2.extend_from_slice(&nlink.to_le_bytes());
    v2.extend_from_slice(&v1[cut..]);
    // A record this build can read, or the upgrade stops here.
    decode_attr(&v2)?;
    Ok(v2)
}

/// Records the format of a new database.
pub(super) fn mark_new(tx: &WriteTransaction) -> Result<()> {
    tx.open_table(COUNTERS)?.insert("format", FORMAT)?;
    Ok(())
}

/// Brings an existing database to [`FORMAT`] (a database with no format
/// recorded is format 1); returns how many records it rewrote.
pub(super) fn to_current(tx: &WriteTransaction) -> Result<usize> {
    let mut counters = tx.open_table(COUNTERS)?;
    let format = counters.get("format")?.map_or(1, |v| v.value());
    if format > FORMAT {
        return Err(err(ErrorCode::Internal, format!("the metadata database is of format {format}, newer than this build's {FORMAT}: run the newer weft")));
    }
    if format == FORMAT {
        return Ok(0);
    }
    // Subdirectories per directory: format 1 did not count them.
    let mut inodes = tx.open_table(INODES)?;
    let dirents = tx.open_table(DIRENTS)?;
    let mut kinds: HashMap<u64, bool> = HashMap::new();
    let mut old: Vec<(u64, Vec<u8>)> = Vec::new();
    for item in inodes.iter()? {
        let (k, v) = item?;
        let bytes = v.value().to_vec();
        // The kind is the byte after the id, in both formats.
        kinds.insert(k.value(), bytes.get(8) == Some(&(FileKind::Dir as u8)));
        old.push((k.value(), bytes));
    }
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    for item in dirents.iter()? {
        let (k, v) = item?;
        if kinds.get(&v.value()).copied().unwrap_or(false) {
            *subdirs.entry(k.value().0).or_default() += 1;
        }
    }
    for (id, bytes) in &old {
        let nlink = if kinds[id] { 2 + subdirs.get(id).copied().unwrap_or(0) } else { 1 };
        inodes.insert(*id, upgrade(bytes, nlink)?.as_slice())?;
    }
    counters.insert("format", FORMAT)?;
    tracing::info!(target: "weft::meta", records = old.len(), from = format, to = FORMAT, "upgraded the metadata database's records");
    Ok(old.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::tables::encode_attr;
    use weft_wire::{FileAttr, FileId, ServerId, StripeLayout};

    /// A record as format 1 wrote it: this build's, less `nlink`.
    fn v1(a: &FileAttr) -> Vec<u8> {
        let mut b = encode_attr(a);
        b.drain(FIXED_V1..FIXED_V1 + 4);
        b
    }

    /// A database as format 1 left it: root holding a directory `d` (which
    /// holds a directory and a file) and a file; then upgraded, twice.
    #[test]
    fn a_format_1_database_is_upgraded_once_with_directory_link_counts() {
        let dir = std::env::temp_dir().join(format!("weft-migrate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = redb::Database::create(dir.join("meta.redb")).unwrap();
        let attr = |id: u64, kind: FileKind| FileAttr { id: FileId(id), kind, mode: 0o755, uid: 0, gid: 0, mtime_ns: 1, ctime_ns: 2, nlink: 0, layout: (kind == FileKind::File).then(|| StripeLayout { stripe_size: 4096, servers: vec![ServerId(1)] }) };
        let tx = db.begin_write().unwrap();
        {
            let mut inodes = tx.open_table(INODES).unwrap();
            let mut dirents = tx.open_table(DIRENTS).unwrap();
            for (id, kind, parent, name) in [(2, FileKind::Dir, 1, "d"), (3, FileKind::Dir, 2, "sub"), (4, FileKind::File, 2, "f"), (5, FileKind::File, 1, "g")] {
                inodes.insert(id, v1(&attr(id, kind)).as_slice()).unwrap();
                dirents.insert((parent, name), id).unwrap();
            }
            inodes.insert(1, v1(&attr(1, FileKind::Dir)).as_slice()).unwrap();
            tx.open_table(COUNTERS).unwrap();
        }
        assert_eq!(to_current(&tx).unwrap(), 5);
        assert_eq!(to_current(&tx).unwrap(), 0, "a second run changes nothing");
        tx.commit().unwrap();
        let tx = db.begin_read().unwrap();
        let inodes = tx.open_table(INODES).unwrap();
        let nlink = |id: u64| decode_attr(inodes.get(id).unwrap().unwrap().value()).unwrap().nlink;
        assert_eq!([nlink(1), nlink(2), nlink(3), nlink(4), nlink(5)], [3, 3, 2, 1, 1]);
        assert_eq!(tx.open_table(COUNTERS).unwrap().get("format").unwrap().unwrap().value(), FORMAT);
        drop((inodes, tx));
        // A newer format than this build's is refused, not rewritten.
        let tx = db.begin_write().unwrap();
        tx.open_table(COUNTERS).unwrap().insert("format", FORMAT + 1).unwrap();
        assert!(to_current(&tx).is_err());
        drop(tx);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn format_1_records_read_back_with_their_link_counts() {
        let file = FileAttr { id: FileId(9), kind: FileKind::File, mode: 0o640, uid: 3, gid: 4, mtime_ns: 5, ctime_ns: 6, nlink: 1, layout: Some(StripeLayout { stripe_size: 65536, servers: vec![ServerId(1), ServerId(2)] }) };
        let dir = FileAttr { id: FileId(2), kind: FileKind::Dir, mode: 0o755, uid: 0, gid: 0, mtime_ns: -7, ctime_ns: 8, nlink: 5, layout: None };
        for a in [file, dir] {
            assert_eq!(decode_attr(&upgrade(&v1(&a), a.nlink).unwrap()).unwrap(), a);
        }
    }
}
