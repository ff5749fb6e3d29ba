//! The mount's state: the client, the inode -> path map, open handles and
//! directories, record locks, queued writes. The kernel's requests are
//! served in `ops.rs`.

use crate::attrs::{fuse_attr, kind_of};
use crate::errno;
use crate::handle::{lock, Handle};
use crate::known::Known;
use crate::local_sizes::LocalSizes;
use crate::locks::PosixLocks;
use crate::write_behind::{Failures, WriteBehind};
use fuser::{Errno, FileAttr, FileHandle, FileType, INodeNo};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_client::{limits, Client};

/// `name` in directory `dir` (an absolute path).
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") }
}

/// Names under which files removed while open here live on until their
/// last close (as NFS clients' silly-renamed `.nfs<hex>` files); listings and lookups hide them.
pub(crate) const HIDDEN_PREFIX: &str = ".weft-unlinked-";

/// Asks of a file's attributes while last closes remove set-aside names
/// (see [`WeftFs::attrs_settled`]); each is one round trip.
const ATTR_ASKS: usize = 4;

/// How long an ask of attributes waits for removals of set-aside names
/// under way (each one metadata round trip) before asking anyway.
const REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How many handles of this mount have an inode open, and where it went if
/// it was unlinked (or renamed over) while open.
#[derive(Default)]
pub(crate) struct OpenInode {
    pub(crate) handles: usize,
    /// Removed while open: its hidden name, and the client of the user who
    /// removed it, who removes it at the last close (any other identity
    /// might not be allowed to: root's is `nobody` under root_squash).
    pub(crate) hidden: Option<(String, weft_client::Client)>,
}

/// How long the kernel may trust what the mount told it.
#[derive(Debug, Clone, Copy)]
pub struct MountOptions {
    /// Attributes (size, mode, times) of a file.
    pub attr_timeout: Duration,
    /// A name's mapping to an inode.
    pub entry_timeout: Duration,
    /// Threads serving the kernel's requests (a request that waits for
    /// others, as rmdir for releases, leaves at least one free).
    pub threads: usize,
    /// The kernel's writeback cache: small writes gathered in its page
    /// cache and sent as pages; the kernel keeps files' sizes and times
    /// and places appends itself (docs/posix.md says what that costs).
    pub writeback_cache: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { attr_timeout: Duration::from_secs(1), entry_timeout: Duration::from_secs(1), threads: 4, writeback_cache: false }
    }
}

/// A directory's entries as listed: (inode, kind, name).
/// One entry of a directory listing, with what readdirplus gives the
/// kernel: its attributes, and whether they are exact (a file's size is
/// known only when no writer has it open; a link's size is its target's
/// length, not listed). Inexact ones are given with no cache time, so the
/// kernel asks again before using them.
pub(crate) struct Listed {
    pub(crate) ino: u64,
    pub(crate) kind: FileType,
    pub(crate) name: String,
    /// The entry's path ("." and ".." have none).
    pub(crate) path: Option<String>,
    pub(crate) attr: Option<fuser::FileAttr>,
    pub(crate) exact: bool,
}

/// A directory's entries as listed at `taken`.
pub(crate) struct Listing {
    pub(crate) taken: std::time::Instant,
    pub(crate) entries: Vec<Listed>,
}



pub struct WeftFs {
    pub(crate) client: Client,
    pub(crate) opts: MountOptions,
    /// The inodes (Weft file ids) the kernel knows, and their paths.
    pub(crate) known: Mutex<Known>,
    /// Directories made here moments ago (see `fresh_dirs`).
    pub(crate) fresh: Mutex<crate::fresh_dirs::FreshDirs>,
    /// Attribute changes of files made here and still open, not yet sent.
    pub(crate) held: crate::held_attrs::HeldAttrs,
    /// Directories' attributes asked moments ago (see `dir_attrs`).
    pub(crate) dirs: crate::dir_attrs::DirAttrs,
    pub(crate) handles: crate::handle::Handles,
    /// Open directories: their listing, taken once at opendir, so that
    /// readdir's offsets stay valid and a large directory is listed once.
    pub(crate) listings: Mutex<HashMap<u64, Arc<Listing>>>,
    /// Inodes with open handles; also serializes removing an open file
    /// against its last close.
    pub(crate) open_inodes: Mutex<HashMap<u64, OpenInode>>,
    /// Signalled (with `open_inodes`) when a file set aside is removed.
    pub(crate) closes: std::sync::Condvar,
    /// Hidden names whose last close is removing them now.
    pub(crate) removing: Mutex<Vec<String>>,
    /// Removals of set-aside names started so far (see
    /// [`WeftFs::removals_mark`]).
    pub(crate) removals: AtomicU64,
    /// Requests waiting in `wait_hidden_closed` (each holds a thread the
    /// releases they wait for need).
    pub(crate) release_waiters: AtomicUsize,
    /// fcntl record locks, through the lock service.
    pub(crate) locks: Arc<PosixLocks>,
    /// F_SETLKW requests waiting on threads of their own.
    pub(crate) lock_waiters: Arc<std::sync::atomic::AtomicUsize>,
    /// Writes answered once queued (see `write_behind`).
    pub(crate) writes: WriteBehind,
    /// Sizes of the files this mount writes (see `local_sizes`).
    pub(crate) sizes: Arc<LocalSizes>,
    /// Clients acting as the users who create files here (by identity).
    pub(crate) callers: Mutex<HashMap<weft_client::Cred, Client>>,
    /// Supplementary groups read from /proc, by pid, with their uid, gid
    /// and when read (see [`WeftFs::caller`]).
    pub(crate) groups_of_pid: Mutex<HashMap<u32, crate::identity::SeenGroups>>,
    /// Tells the kernel to drop cached pages (set once the session runs).
    pub(crate) notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    pub(crate) next_fh: AtomicU64,
}

impl WeftFs {
    pub fn new(client: Client, opts: MountOptions) -> Self {
        let sizes = Arc::new(LocalSizes::new(opts.attr_timeout));
        let handles = crate::handle::Handles::default();
        // The kernel's writeback cache writes any process's pages through
        // any handle of the file.
        let failures = if opts.writeback_cache { Failures::PerFile(handles.clone()) } else { Failures::PerHandle };
        WeftFs {
            client: client.clone(),
            opts,
            known: Mutex::new(Known::new()),
            fresh: Mutex::new(crate::fresh_dirs::FreshDirs::new(opts.entry_timeout)),
            held: Default::default(),
            dirs: Default::default(),
            handles,
            listings: Mutex::new(HashMap::new()),
            open_inodes: Mutex::new(HashMap::new()),
            closes: std::sync::Condvar::new(),
            removing: Mutex::new(Vec::new()),
            removals: AtomicU64::new(0),
            release_waiters: AtomicUsize::new(0),
            locks: Arc::new(PosixLocks::new(client.clone())),
            lock_waiters: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            notifier: Arc::new(std::sync::OnceLock::new()),
            callers: Mutex::new(HashMap::new()),
            groups_of_pid: Mutex::new(HashMap::new()),
            writes: WriteBehind::new(sizes.clone(), failures),
            sizes,
            next_fh: AtomicU64::new(1),
        }
    }

    /// Where the mount's session puts its notifier once it runs (the file
    /// system is built before the session that carries it).
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }


    pub(crate) fn path_of(&self, ino: INodeNo) -> Result<String, Errno> {
        // An inode the mount never named (or forgot after a rename away).
        lock(&self.known).path(ino.0).map(str::to_string).ok_or(Errno::ESTALE)
    }

    pub(crate) fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        if name.len() > limits::MAX_NAME_LEN {
            return Err(Errno::ENAMETOOLONG);
        }
        if name.starts_with(HIDDEN_PREFIX) {
            // Removed files still open somewhere: not names anyone may use.
            return Err(Errno::ENOENT);
        }
        let p = self.path_of(parent)?;
        let path = join(&p, name);
        // Deeper than PATH_MAX is fine (reached by relative names), up to
        // what one request to the metadata service may carry.
        if path.len() > limits::MAX_PATH_LEN {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(path)
    }

    /// `ino` is at `path` now (if the kernel knows it).
    pub(crate) fn remember(&self, ino: u64, path: &str) {
        lock(&self.known).moved(ino, path);
    }

    /// The kernel is given an entry for `ino` at `path` (a reference it
    /// forgets later).
    pub(crate) fn counted(&self, ino: u64, path: &str) {
        lock(&self.known).counted(ino, path);
    }

    /// `path`'s attributes, asked as the user behind the request (`c`,
    /// from [`WeftFs::caller`]).
    pub(crate) fn stat(&self, c: &weft_client::Client, path: &str) -> Result<FileAttr, Errno> {
        self.stat_keeping(c, path, None)
    }

    /// A request that may make `name` in directory `parent` is about to
    /// be sent (see `fresh_dirs`).
    pub(crate) fn naming(&self, parent: INodeNo, name: &OsStr) {
        if let Some(name) = name.to_str() {
            lock(&self.fresh).naming(parent.0, name, std::time::Instant::now());
        }
    }

    /// [`WeftFs::stat`]; a size the data servers give for inode `ino` (the
    /// one expected at `path`) is kept for this mount's next stats (see
    /// `local_sizes`). A file this mount writes has its size from there,
    /// when known.
    fn stat_keeping(&self, c: &weft_client::Client, path: &str, ino: Option<u64>) -> Result<FileAttr, Errno> {
        let ask = self.sizes.ask();
        let local = std::cell::Cell::new(false);
        let known = |id: weft_client::FileId| {
            let size = self.sizes.get(id.0);
            local.set(local.get() || size.is_some());
            size
        };
        self.attrs_settled(|| {
            let (a, size) = self.settled(|| c.stat_knowing(path, &known), &local)?;
            if let Some(ino) = ino
                && a.id.0 == ino
                && a.kind == weft_client::FileKind::File
                && !local.get()
            {
                self.sizes.learned(ino, ask, size);
            }
            self.remember(a.id.0, path);
            Ok(self.kernel_attr(&a, size))
        })
    }

    /// What `ask` says of a file, with every write answered before this
    /// call in its size (the kernel takes the answer as newer than those
    /// writes): if one was still queued or in flight while the servers
    /// were asked, wait for it and ask again. A size this mount knew
    /// (`local` set) already counts every write queued here.
    fn settled(&self, ask: impl Fn() -> Result<(weft_client::FileAttr, u64), weft_client::Error>, local: &std::cell::Cell<bool>) -> Result<(weft_client::FileAttr, u64), Errno> {
        let mark = self.writes.mark();
        let (a, size) = ask().map_err(|e| errno::of(&e))?;
        if a.kind == weft_client::FileKind::File && !local.get() && self.writes.unsettled_since(a.id.0, mark) {
            self.writes.wait_for(a.id.0, mark);
            return ask().map_err(|e| errno::of(&e));
        }
        Ok((a, size))
    }

    /// Changes an attribute of inode `ino` as `c`: by its id (never a path
    /// another client may have moved), or, for a user who does not own it
    /// (a writer setting the time "now" or dropping setuid, which only the
    /// owner may do by id), by its path, if it still names the inode.
    pub(crate) fn change(&self, c: &weft_client::Client, ino: INodeNo, change: weft_client::AttrChange) -> Result<weft_client::FileAttr, weft_client::Error> {
        self.change_sized(c, ino, change).map(|(a, _)| a)
    }

    /// [`WeftFs::change`], and the file's size if the metadata service
    /// knows it (no writer has it open).
    pub(crate) fn change_sized(&self, c: &weft_client::Client, ino: INodeNo, change: weft_client::AttrChange) -> Result<(weft_client::FileAttr, Option<u64>), weft_client::Error> {
        use weft_client::{AttrChange, Error};
        match c.change_sized(weft_client::FileId(ino.0), change) {
            Err(Error::Permission(why)) => {
                let Ok(path) = self.path_of(ino) else { return Err(Error::Permission(why)) };
                let a = match change {
                    AttrChange::Mode(m) => c.chmod(&path, m)?,
                    AttrChange::Owner { uid, gid } => c.chown(&path, uid, gid)?,
                    AttrChange::Mtime(t) => c.set_mtime(&path, (t != weft_client::TIME_NOW).then_some(t))?,
                };
                if a.id.0 != ino.0 {
                    // Changed what the path names now: say so.
                    return Err(Error::NotFound(format!("{path} names another file now")));
                }
                Ok((a, None))
            }
            other => other,
        }
    }

    /// What `ask` gives (attributes asked of the metadata service, then
    /// made the kernel's by [`WeftFs::kernel_attr`]), asked again when a
    /// last close removed a set-aside name meanwhile: the link count asked
    /// may count that name while the mount no longer knows to leave it
    /// out. At most `ATTR_ASKS` asks; the last answer stands.
    pub(crate) fn attrs_settled<T>(&self, mut ask: impl FnMut() -> Result<T, Errno>) -> Result<T, Errno> {
        for _ in 1..ATTR_ASKS {
            let mark = self.removals_mark_after_waiting();
            let r = ask();
            if !self.removed_since(mark) {
                return r;
            }
        }
        ask()
    }

    /// [`WeftFs::removals_mark`] once no removal is under way, waiting at
    /// most `REMOVAL_WAIT` for those that are (one round trip each).
    fn removals_mark_after_waiting(&self) -> Option<u64> {
        if let Some(mark) = self.removals_mark() {
            return Some(mark);
        }
        let deadline = std::time::Instant::now() + REMOVAL_WAIT;
        // Checked under the open-inode lock, which a removal's end takes
        // before it signals `closes`: no signal is missed.
        let mut open = lock(&self.open_inodes);
        loop {
            if lock(&self.removing).is_empty() {
                return Some(self.removals.load(Ordering::Acquire));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            open = self.closes.wait_timeout(open, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }

    /// Where removals of set-aside names stand: how many started, or
    /// `None` while one is under way.
    pub(crate) fn removals_mark(&self) -> Option<u64> {
        let started = self.removals.load(Ordering::Acquire);
        lock(&self.removing).is_empty().then_some(started)
    }

    /// Whether a set-aside name was being removed at `mark` or one started
    /// since (a link count asked meanwhile may count it or not).
    pub(crate) fn removed_since(&self, mark: Option<u64>) -> bool {
        mark.is_none_or(|m| self.removals.load(Ordering::Acquire) != m)
    }

    /// A request that makes an entry in directory `parent`, started at
    /// `mark`, answered: with the entry `made` (its change time is the
    /// directory's now), or not (perhaps made all the same: a lost
    /// answer). On several metadata shards the directory's home shard
    /// learns the time later: asked again there.
    pub(crate) fn made_in(&self, parent: INodeNo, made: Option<&weft_client::FileAttr>, mark: crate::dir_attrs::Mark) {
        self.entries_changed_in(parent, made.map(|a| (a.ctime_ns, i32::from(a.kind == weft_client::FileKind::Dir))), mark);
    }

    /// [`WeftFs::made_in`] for any change of `parent`'s entries: `change`
    /// is the service's time of it and the change of the directory's link
    /// count, if known.
    pub(crate) fn entries_changed_in(&self, parent: INodeNo, change: Option<(i64, i32)>, mark: crate::dir_attrs::Mark) {
        match change {
            Some((at_ns, subdirs)) if self.client.cluster().meta_shard_count() <= 1 => self.dirs.entries_changed(parent.0, crate::attrs::time(at_ns), subdirs, mark),
            _ => self.dirs.changed(parent.0),
        }
    }

    /// Sends the attribute changes held (`held_attrs`) of the file at
    /// `path`, and holds no more, before a request whose checks at the
    /// metadata service may read its owner or mode (an unlink or rename in
    /// a sticky directory, a link) and which changes its link count. A
    /// failure is logged here and reported by the holder's close; the
    /// request's own answer follows.
    pub(crate) fn send_held_at(&self, path: &str) {
        let Some(ino) = lock(&self.known).ino_at(path) else { return };
        // Its link count and change time move: nothing more is held.
        self.held.stop(ino);
        if let Err(e) = self.held.send(ino) {
            tracing::warn!(target: "weft::fuse", ino, error = %e, "attribute changes held for a file's close failed");
        }
    }

    /// The attributes the kernel is given for `a` of `size` bytes: a name
    /// this mount set aside for an open file (unlink while open) is not
    /// counted among its links, as the kernel counts none for it (fstat of
    /// a removed open file shows 0).
    pub(crate) fn kernel_attr(&self, a: &weft_client::FileAttr, size: u64) -> FileAttr {
        // Changes this mount holds are this node's truth (held_attrs.rs).
        let held = if a.kind == weft_client::FileKind::File { self.held.overlay(a) } else { None };
        let a = held.as_ref().unwrap_or(a);
        let mut k = fuse_attr(a, size);
        if a.kind != weft_client::FileKind::Dir && lock(&self.open_inodes).get(&a.id.0).is_some_and(|o| o.hidden.is_some()) {
            k.nlink = k.nlink.saturating_sub(1);
        }
        k
    }

    /// File `ino`'s size now, with every write queued before this call in
    /// it: from a handle this mount has open (one round trip to the data
    /// servers, none to the metadata service), else by a stat.
    pub(crate) fn size_now(&self, c: &weft_client::Client, ino: INodeNo) -> Result<u64, Errno> {
        if let Some(size) = self.sizes.get(ino.0) {
            return Ok(size);
        }
        let open = lock(&self.handles).values().find(|h| h.file.attr().id.0 == ino.0).cloned();
        match open {
            Some(h) => {
                let ask = self.sizes.ask();
                self.writes.wait(ino.0);
                let size = h.file.size().map_err(|e| errno::of(&e))?;
                self.sizes.learned(ino.0, ask, size);
                Ok(size)
            }
            None => self.stat_ino(c, ino).map(|a| a.size),
        }
    }

    /// The attributes of inode `ino`: by its path, or, if the path names
    /// another file now or nothing (another client renamed or replaced
    /// it), by its id; ESTALE once the file is gone.
    pub(crate) fn stat_ino(&self, c: &weft_client::Client, ino: INodeNo) -> Result<FileAttr, Errno> {
        match self.path_of(ino).and_then(|path| self.stat_keeping(c, &path, Some(ino.0))) {
            Ok(a) if a.ino == ino || ino.0 == 1 => return Ok(a),
            // Refused as this user: the answer stands.
            Err(e) if e != Errno::ENOENT && e != Errno::ENOTDIR && e != Errno::ESTALE => return Err(e),
            // The path names another file now (`stat` remembered it there).
            Ok(_) => lock(&self.known).lost(ino.0),
            Err(_) => {}
        }
        // The path names another file now, or nothing (another client
        // renamed or replaced it): ask for the inode itself, as the mount
        // (the kernel checked the path when it looked the inode up).
        self.attrs_settled(|| match self.settled(|| self.client.stat_id(weft_client::FileId(ino.0)), &std::cell::Cell::new(false)) {
            Ok((a, size)) => Ok(self.kernel_attr(&a, size)),
            Err(e) if e == Errno::ENOENT || e == Errno::EACCES => Err(Errno::ESTALE),
            Err(e) => Err(e),
        })
    }

    /// Forgets the inodes at `path` and below (removed or replaced).
    pub(crate) fn forget_path(&self, path: &str) {
        lock(&self.known).gone(path);
    }

    /// The listing `opendir` made for `fh`, or a fresh one (also when
    /// `fresh_within` is given and the kept one is older).
    pub(crate) fn listing(&self, c: &weft_client::Client, ino: INodeNo, fh: fuser::FileHandle, fresh_within: Option<std::time::Duration>) -> Result<Arc<Listing>, Errno> {
        if let Some(l) = lock(&self.listings).get(&fh.0).cloned()
            && fresh_within.is_none_or(|d| l.taken.elapsed() <= d)
        {
            return Ok(l);
        }
        let l = Arc::new(self.list(c, ino)?);
        if let Some(kept) = lock(&self.listings).get_mut(&fh.0) {
            *kept = l.clone();
        }
        Ok(l)
    }

    /// A directory's entries, "." and ".." first, remembering each child's path.
    pub(crate) fn list(&self, c: &weft_client::Client, ino: INodeNo) -> Result<Listing, Errno> {
        let path = self.path_of(ino)?;
        let removals = self.removals_mark();
        let entries = c.readdir(&path).map_err(|e| errno::of(&e))?;
        let taken = std::time::Instant::now();
        let dot = |name: &str| Listed { ino: ino.0, kind: FileType::Directory, name: name.into(), path: None, attr: None, exact: false };
        let mut all = vec![dot("."), dot("..")];
        for e in entries.into_iter().filter(|e| !e.name.starts_with(HIDDEN_PREFIX)) {
            let child = join(&path, &e.name);
            // Known to the kernel once readdirplus gives it (or a lookup).
            self.remember(e.attr.id.0, &child);
            let size = match e.attr.kind {
                weft_client::FileKind::Dir => Some(0),
                weft_client::FileKind::File => e.size,
                weft_client::FileKind::Symlink => None,
                weft_client::FileKind::Fifo | weft_client::FileKind::Socket => Some(0),
            };
            let attr = Some(self.kernel_attr(&e.attr, size.unwrap_or(0)));
            all.push(Listed { ino: e.attr.id.0, kind: kind_of(&e.attr), name: e.name, path: Some(child), attr, exact: size.is_some() });
        }
        // A set-aside name removed meanwhile: a file's link count may be
        // off by it, so the kernel asks for the files' attributes again.
        if self.removed_since(removals) {
            for e in all.iter_mut().filter(|e| e.kind != FileType::Directory) {
                e.exact = false;
            }
        }
        Ok(Listing { taken, entries: all })
    }

    /// `from` was renamed to `to` (by the mount's user, or to set a file
    /// removed while open aside): open handles named by it, or by a name
    /// below it, take the new name, which their capability's renewal walks.
    /// Handles of other names of the same file (hard links) keep theirs.
    pub(crate) fn rename_handles(&self, from: &str, to: &str) {
        let below = format!("{}/", from.trim_end_matches('/'));
        for h in lock(&self.handles).values() {
            let name = h.file.name();
            if name == from {
                h.file.renamed(to);
            } else if let Some(rest) = name.strip_prefix(&below) {
                h.file.renamed(&format!("{}/{rest}", to.trim_end_matches('/')));
            }
        }
    }

    pub(crate) fn handle(&self, fh: FileHandle) -> Result<Arc<Handle>, Errno> {
        lock(&self.handles).get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    pub(crate) fn keep(&self, h: Handle) -> FileHandle {
        self.reserve(h.file.attr().id.0);
        self.keep_reserved(h)
    }

    /// Counts a handle of `ino` before it is opened, so an unlink racing
    /// the open sets the file aside instead of removing it; undone by
    /// `closed` if the open fails.
    pub(crate) fn reserve(&self, ino: u64) {
        lock(&self.open_inodes).entry(ino).or_default().handles += 1;
    }

    /// Keeps a handle counted by [`WeftFs::reserve`].
    pub(crate) fn keep_reserved(&self, h: Handle) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Arc::new(h));
        FileHandle(fh)
    }

    /// EFBIG for bytes past the largest file Weft keeps.
    pub(crate) fn within_max_size(offset: u64, len: u64) -> Result<(), Errno> {
        match offset.checked_add(len) {
            Some(end) if end <= limits::MAX_FILE_END => Ok(()),
            _ => Err(Errno::EFBIG),
        }
    }
}

