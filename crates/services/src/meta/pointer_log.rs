//! The shared file pointers' log: what lets a restarted metadata server
//! (its process killed or crashed, the machine still up) find every
//! pointer where it was, so a running MPI program's `write_shared` or
//! `write_ordered` goes on after the restart.
//!
//! Every change to a pointer appends one record (the value after it, and
//! for a tagged fetch-and-add the answer it gave) with `pwrite` and no
//! fsync: the kernel keeps written pages through the death of the process.
//! A reboot may lose the last records, and a pointer brought back at an
//! older value would hand out a range twice; so the log begins with the
//! machine's boot id (`/proc/sys/kernel/random/boot_id`), and one written
//! under another boot is not replayed (every pointer is then lost, and its
//! next use fails "lost", as without the log). Each record carries a
//! check: a torn or damaged record ends the replay there. The log is
//! rewritten with the live pointers alone once it holds many more records
//! than they need. A log that cannot be written is made void (its first
//! record zeroed in place, which needs no new block, or the file removed),
//! so a later restart loses the pointers rather than bring back old values.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One record: kind u8, 3 zero bytes, uid u32, token, value, client, seq,
/// old, the wall clock's second (u64 each), then the first 8 bytes of the
/// blake3 hash of those 56.
const RECORD: usize = 64;
/// The first record: magic, boot id (36 bytes), 4 zero bytes, check.
const MAGIC: &[u8; 8] = b"WEFTSPL1";
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// A change to a pointer, as logged and replayed; `secs`: when, by the
/// wall clock (a replayed pointer is as idle as it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// Made, or set, at `value`.
    Set { token: u64, uid: u32, value: u64, secs: u64 },
    /// A fetch-and-add tagged (`client`, `seq`) answered `old`; the
    /// pointer is now at `value`.
    Added { token: u64, uid: u32, value: u64, client: u64, seq: u64, old: u64, secs: u64 },
    /// Released (or dropped idle).
    Released { token: u64 },
}

impl Entry {
    fn encode(&self) -> [u8; RECORD] {
        let (kind, uid, token, value, client, seq, old, secs) = match *self {
            Entry::Set { token, uid, value, secs } => (1u8, uid, token, value, 0, 0, 0, secs),
            Entry::Added { token, uid, value, client, seq, old, secs } => (2, uid, token, value, client, seq, old, secs),
            Entry::Released { token } => (3, 0, token, 0, 0, 0, 0, 0),
        };
        let mut r = [0u8; RECORD];
        r[0] = kind;
        r[4..8].copy_from_slice(&uid.to_le_bytes());
        for (k, v) in [token, value, client, seq, old, secs].into_iter().enumerate() {
            r[8 + 8 * k..16 + 8 * k].copy_from_slice(&v.to_le_bytes());
        }
        seal(&mut r);
        r
    }

    fn decode(r: &[u8]) -> Option<Entry> {
        if r.len() != RECORD || !sealed(r) || r[1..4] != [0; 3] {
            return None;
        }
        let u = |k: usize| u64::from_le_bytes(r[8 + 8 * k..16 + 8 * k].try_into().expect("8 bytes"));
        let uid = u32::from_le_bytes(r[4..8].try_into().expect("4 bytes"));
        Some(match r[0] {
            1 => Entry::Set { token: u(0), uid, value: u(1), secs: u(5) },
            2 => Entry::Added { token: u(0), uid, value: u(1), client: u(2), seq: u(3), old: u(4), secs: u(5) },
            3 => Entry::Released { token: u(0) },
            _ => return None,
        })
    }
}

fn check(body: &[u8]) -> [u8; 8] {
    blake3::hash(body).as_bytes()[..8].try_into().expect("8 bytes")
}

fn seal(r: &mut [u8; RECORD]) {
    let c = check(&r[..RECORD - 8]);
    r[RECORD - 8..].copy_from_slice(&c);
}

fn sealed(r: &[u8]) -> bool {
    r[RECORD - 8..] == check(&r[..RECORD - 8])
}

fn header(boot: &str) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..8].copy_from_slice(MAGIC);
    let b = boot.as_bytes();
    let n = b.len().min(36);
    r[8..8 + n].copy_from_slice(&b[..n]);
    seal(&mut r);
    r
}

/// This machine's boot id; `None` if it cannot be read (then no log is
/// ever trusted across a restart).
fn boot_id() -> Option<String> {
    std::fs::read_to_string(BOOT_ID).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

pub(super) struct PointerLog {
    file: File,
    path: PathBuf,
    /// Where the next record goes (past the last whole one).
    end: u64,
    boot: String,
}

impl PointerLog {
    /// Opens `dir/shared-pointers.log`, and what to replay from it: nothing
    /// for a new log, one of another boot, or one whose machine has no
    /// boot id. The log comes back `None` when it could not be rewritten
    /// (it was made void: the entries hold for this process alone); `Err`
    /// when it could not be read, or made void either.
    pub(super) fn open(dir: &Path) -> io::Result<(Option<PointerLog>, Vec<Entry>)> {
        Self::open_at(dir, boot_id())
    }

    fn open_at(dir: &Path, boot: Option<String>) -> io::Result<(Option<PointerLog>, Vec<Entry>)> {
        let path = dir.join("shared-pointers.log");
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path)?;
        let bytes = std::fs::read(&path)?;
        let trusted = boot.as_ref().is_some_and(|b| bytes.len() >= RECORD && bytes[..RECORD] == header(b));
        let mut entries = Vec::new();
        if trusted {
            for r in bytes[RECORD..].chunks(RECORD) {
                match Entry::decode(r) {
                    Some(e) => entries.push(e),
                    None => break,
                }
            }
        }
        let boot = boot.unwrap_or_default();
        let mut log = PointerLog { file, path, end: 0, boot };
        // Rewritten at once: under this boot's header, without a torn tail
        // or what was not replayed.
        match log.rewrite(&entries) {
            Ok(()) => Ok((Some(log), entries)),
            Err(e) => {
                tracing::warn!(target: "weft::meta", error = %e, "cannot rewrite the shared file pointers' log: made void, pointers will not outlive this process");
                log.make_void()?;
                Ok((None, entries))
            }
        }
    }

    /// Makes the log replay nothing (see the module's documentation).
    pub(super) fn make_void(&mut self) -> io::Result<()> {
        match self.file.write_all_at(&[0u8; RECORD], 0) {
            Ok(()) => Ok(()),
            Err(_) => std::fs::remove_file(&self.path),
        }
    }

    /// Appends `e`; on failure nothing counts as logged (the next record
    /// is written over what this one left).
    pub(super) fn append(&mut self, e: &Entry) -> io::Result<()> {
        self.file.write_all_at(&e.encode(), self.end)?;
        self.end += RECORD as u64;
        Ok(())
    }

    /// Records in the log, its header excluded.
    pub(super) fn records(&self) -> u64 {
        (self.end / RECORD as u64).saturating_sub(1)
    }

    /// Replaces the log with `entries` alone: written to a new file, then
    /// renamed over the old (a death between leaves one or the other).
    pub(super) fn rewrite(&mut self, entries: &[Entry]) -> io::Result<()> {
        let fresh = self.path.with_extension("log.new");
        let mut bytes = Vec::with_capacity(RECORD * (entries.len() + 1));
        bytes.extend_from_slice(&header(&self.boot));
        for e in entries {
            bytes.extend_from_slice(&e.encode());
        }
        let made = OpenOptions::new().read(true).write(true).create(true).truncate(true).mode(0o600).open(&fresh).and_then(|file| {
            file.write_all_at(&bytes, 0)?;
            std::fs::rename(&fresh, &self.path)?;
            Ok(file)
        });
        let file = made.inspect_err(|_| {
            let _ = std::fs::remove_file(&fresh);
        })?;
        self.file = file;
        self.end = bytes.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry() -> impl Strategy<Value = Entry> {
        (0u8..3, any::<u64>(), any::<u32>(), any::<[u64; 5]>()).prop_map(|(k, token, uid, [value, client, seq, old, secs])| match k {
            0 => Entry::Set { token, uid, value, secs },
            1 => Entry::Added { token, uid, value, client, seq, old, secs },
            _ => Entry::Released { token },
        })
    }

    proptest! {
        #[test]
        fn records_decode_to_what_was_encoded_and_any_flipped_bit_is_refused(e in entry(), bit in 0usize..RECORD * 8) {
            let mut r = e.encode();
            prop_assert_eq!(Entry::decode(&r), Some(e));
            r[bit / 8] ^= 1 << (bit % 8);
            prop_assert_eq!(Entry::decode(&r), None);
        }
    }

    /// A fresh directory for a unit test of the pointers.
    pub(in crate::meta) fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weft-pointers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_reopen_in_the_same_boot_replays_up_to_a_torn_tail_and_another_boot_replays_nothing() {
        let d = dir("replay");
        let boot = Some("boot-a".to_string());
        let written = [Entry::Set { token: 1, uid: 5, value: 0, secs: 7 }, Entry::Added { token: 1, uid: 5, value: 10, client: 9, seq: 3, old: 0, secs: 8 }, Entry::Released { token: 1 }];
        {
            let (log, replay) = PointerLog::open_at(&d, boot.clone()).unwrap();
            let mut log = log.unwrap();
            assert!(replay.is_empty());
            for e in &written {
                log.append(e).unwrap();
            }
            assert_eq!(log.records(), 3);
        }
        let (_, replay) = PointerLog::open_at(&d, boot.clone()).unwrap();
        assert_eq!(replay, written);
        // Half a record more (a death in the middle of a write): ignored,
        // and gone from the file.
        let path = d.join("shared-pointers.log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&Entry::Set { token: 2, uid: 5, value: 7, secs: 9 }.encode()[..30]);
        std::fs::write(&path, &bytes).unwrap();
        let (_, replay) = PointerLog::open_at(&d, boot.clone()).unwrap();
        assert_eq!(replay, written);
        assert_eq!(std::fs::read(&path).unwrap().len(), RECORD * 4);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // After a reboot the log may have lost its last records: nothing.
        let (_, replay) = PointerLog::open_at(&d, Some("boot-b".into())).unwrap();
        assert!(replay.is_empty());
        let (_, replay) = PointerLog::open_at(&d, Some("boot-a".into())).unwrap();
        assert!(replay.is_empty(), "the other boot's log was rewritten under its own header");
        // A machine without a boot id never trusts its log.
        let (log, _) = PointerLog::open_at(&d, None).unwrap();
        log.unwrap().append(&written[0]).unwrap();
        assert!(PointerLog::open_at(&d, None).unwrap().1.is_empty());
        // A log made void replays nothing, in the same boot too.
        let (log, _) = PointerLog::open_at(&d, boot.clone()).unwrap();
        let mut log = log.unwrap();
        log.append(&written[0]).unwrap();
        log.make_void().unwrap();
        assert!(PointerLog::open_at(&d, boot.clone()).unwrap().1.is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    use std::os::unix::fs::PermissionsExt;
}
