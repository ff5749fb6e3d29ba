//! New entries: what a create or mkdir asks for, the layout a new file's
//! stripes take, and the inode made for it.

use super::*;

/// What a create or mkdir asks for.
pub(super) struct NewEntry<'a> {
    pub(super) kind: FileKind,
    pub(super) mode: u32,
    /// Fail if the name exists (always, for directories and links).
    pub(super) exclusive: bool,
    pub(super) hint: LayoutHint,
    /// A symbolic link's target.
    pub(super) target: Option<&'a str>,
}

impl MetaService {
    pub(super) fn layout_for(&self, hint: LayoutHint, rr: u64) -> Result<StripeLayout> {
        let n = self.data_servers.len();
        let count = match hint.stripe_count as usize {
            0 => n,
            c if c > n => return Err(err(ErrorCode::BadRequest, format!("stripe count {c} exceeds the {n} data servers"))),
            c => c,
        };
        let stripe_size = if hint.stripe_size == 0 { self.default_stripe_size } else { hint.stripe_size };
        if stripe_size > weft_wire::limits::MAX_STRIPE_SIZE {
            return Err(err(ErrorCode::BadRequest, format!("stripe size {stripe_size} exceeds the largest, {}", weft_wire::limits::MAX_STRIPE_SIZE)));
        }
        // Rotate the first server per file so small files spread out.
        let start = (rr % n as u64) as usize;
        let servers = (0..count).map(|k| self.data_servers[(start + k) % n]).collect();
        Ok(StripeLayout { stripe_size, servers })
    }

    pub(super) fn insert_new(&self, tx: &WriteTransaction, cred: Cred, path: &str, new: NewEntry) -> Result<FileAttr> {
        self.insert_new_file(tx, cred, path, new).map(|(a, _)| a)
    }

    /// [`MetaService::insert_new`], also saying whether the entry is new
    /// (a non-exclusive create of an existing file opens it).
    pub(super) fn insert_new_file(&self, tx: &WriteTransaction, cred: Cred, path: &str, new: NewEntry) -> Result<(FileAttr, bool)> {
        let NewEntry { kind, mode, exclusive, hint, target } = new;
        let (parent_comps, name) = split_parent(path)?;
        let attr = {
            let mut t = Tables { inodes: tx.open_table(INODES)?, dirents: tx.open_table(DIRENTS)? };
            let parent = t.parent_for_change(cred, &parent_comps)?;
            shards::check_unmarked(tx, parent.id, name, path)?;
            // An entry found here is served here (another shard's name of a
            // file kept here too: a link across shards).
            if let Some(existing) = t.child(parent.id.0, name)? {
                let a = t.entry(existing, path)?;
                if exclusive || kind != FileKind::File {
                    return Err(err(ErrorCode::Exists, format!("{path} already exists")));
                }
                match a.kind {
                    FileKind::Dir => return Err(err(ErrorCode::IsDir, format!("{path} is a directory"))),
                    FileKind::Symlink => return Err(err(ErrorCode::Exists, format!("{path} is a symbolic link"))),
                    FileKind::Fifo | FileKind::Socket => return Err(err(ErrorCode::Exists, format!("{path} is a special file"))),
                    FileKind::File => {}
                }
                check(cred, &a, W, "write this file")?;
                return Ok((a, false));
            }
            // Routed on an earlier snapshot: the parent may have been made
            // anew since (its id decides the shard).
            self.check_owner(parent.id, name)?;
            let mut counters = tx.open_table(COUNTERS)?;
            let at = counters.get("next_id")?.map(|v| v.value()).unwrap_or(ROOT.0 + 1).max(self.min_next_id.load(Ordering::Relaxed));
            // A shard's ids route home (`weft_wire::shard`).
            let id = weft_wire::shard::next_id_of(at, self.shards.place.index, self.shards.place.count).ok_or_else(|| err(ErrorCode::NoSpace, "file ids are used up"))?;
            counters.insert("next_id", id + 1)?;
            self.min_next_id.fetch_max(id + 1, Ordering::Relaxed);
            if id >= counters.get("id_ceiling")?.map_or(0, |v| v.value()) {
                counters.insert("id_ceiling", id + ID_BLOCK)?;
                self.ceiling_moved.store(true, Ordering::Relaxed);
            }
            let layout = if kind == FileKind::File {
                let rr = counters.get("next_rr")?.map(|v| v.value()).unwrap_or(0);
                counters.insert("next_rr", rr + 1)?;
                Some(self.layout_for(hint, rr)?)
            } else {
                None
            };
            let t_ns = now_ns();
            // A setgid directory (mode 02000) gives new entries its group,
            // and new subdirectories its setgid bit, so a project directory
            // keeps its group (as on POSIX file systems).
            let setgid_parent = parent.mode & 0o2000 != 0;
            let gid = if setgid_parent { parent.gid } else { cred.gid };
            let mut mode = mode & 0o7777;
            if setgid_parent && kind == FileKind::Dir {
                mode |= 0o2000;
            }
            let attr = FileAttr { id: FileId(id), kind, mode, uid: cred.uid, gid, mtime_ns: t_ns, ctime_ns: t_ns, nlink: if kind == FileKind::Dir { 2 } else { 1 }, layout };
            t.inodes.insert(id, encode_attr(&attr).as_slice())?;
            t.dirents.insert((parent.id.0, name), id)?;
            t.entries_changed(parent.id.0, i32::from(kind == FileKind::Dir), t_ns)?;
            if let Some(target) = target {
                tx.open_table(LINKS)?.insert(id, target)?;
            }
            attr
        };
        Ok((attr, true))
    }
}
