//! POSIX calls on `weft:` names (issue 27 item 8): programs that do their
//! I/O or metadata through POSIX beside MPI (IOR's POSIX back end, mdtest,
//! simple tools) reach Weft without a mount. The shim (`shim/posix.c`)
//! interposes the C library's `open`, `read`, `stat`, `mkdir`, `opendir`,
//! ...; a call on a name that starts with `weft:`, or on a descriptor or
//! directory stream it handed out, comes here; every other goes on to the
//! C library. See `docs/mpiio.md` for the calls covered.
//!
//! A descriptor is a real number the C library reserved for it (an open
//! of `/dev/null`), so it never collides with the program's own, and its
//! state (the file, its position, how it was opened) lives in [`FILES`].
//! Every entry point answers a negative errno on failure, never unwinds.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use weft_client::{CreateOptions, DirEntry, Error, File, FileAttr, FileKind};

/// The prefix of the names served here.
const PREFIX: &str = "weft:";

/// A descriptor's file, shared with the calls under way on it.
struct Shared {
    /// `None` once closed (by `close`, or by the last call to end after it).
    file: Option<File>,
    /// The position, held across an access that uses it (read, write,
    /// lseek): threads sharing a descriptor move it one at a time.
    pos: Mutex<u64>,
    readable: bool,
    writable: bool,
    append: bool,
}

impl Shared {
    fn file(&self) -> &File {
        self.file.as_ref().expect("a descriptor's file lives until its last use")
    }
}

/// A close while a call on the descriptor is under way in another thread
/// leaves the file to that call, which closes it when it ends.
impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            let _ = f.close();
        }
    }
}

/// What a descriptor opened here is.
#[derive(Clone)]
enum Open {
    File(Arc<Shared>),
    /// A directory (`open(dir, O_RDONLY)`, `O_DIRECTORY`): fstat and fsync
    /// only, as programs use it to sync a directory.
    Dir(String),
}

/// Open descriptors by number.
static FILES: Mutex<Option<HashMap<c_int, Open>>> = Mutex::new(None);

/// A directory stream: its names, and the next one to give.
type Stream = (Vec<DirEntry>, usize);

/// Open directory streams by handle.
static DIRS: Mutex<Option<HashMap<u64, Stream>>> = Mutex::new(None);
static NEXT_DIR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn files() -> MutexGuard<'static, Option<HashMap<c_int, Open>>> {
    FILES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn dirs() -> MutexGuard<'static, Option<HashMap<u64, Stream>>> {
    DIRS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What `stat` needs of an entry (the shim fills `struct stat` from it).
#[repr(C)]
pub struct WeftStat {
    pub ino: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blksize: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// What `statvfs` needs (bytes; the shim divides by its block size).
#[repr(C)]
pub struct WeftStatvfs {
    pub total: u64,
    pub free: u64,
    pub files: u64,
}

/// An answer to C: a value, or an error number negated.
trait Answer {
    fn failed(errno: i32) -> Self;
}

impl Answer for c_int {
    fn failed(errno: i32) -> Self {
        -errno
    }
}

impl Answer for i64 {
    fn failed(errno: i32) -> Self {
        -i64::from(errno)
    }
}

impl Answer for isize {
    fn failed(errno: i32) -> Self {
        -(errno as isize)
    }
}

/// Runs `f`, turning an error into a negative errno and a panic into
/// `-EIO` (nothing unwinds into C).
fn guarded<T: Answer>(f: impl FnOnce() -> Result<T, i32>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(errno)) => T::failed(errno),
        Err(_) => T::failed(libc::EIO),
    }
}

fn errno(e: Error) -> i32 {
    e.errno()
}

/// The Weft path of a C name: `weft:/a/b` -> `/a/b`, and whether it
/// ended with a slash (then it must name a directory: ENOTDIR).
///
/// # Safety
/// `name` is a NUL-terminated string (the shim checked it is not null).
unsafe fn weft_path(name: *const c_char) -> Result<(String, bool), i32> {
    // SAFETY: the caller's promise.
    let s = unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| libc::EINVAL)?;
    let p = s.strip_prefix(PREFIX).ok_or(libc::EINVAL)?;
    if !p.starts_with('/') {
        return Err(libc::ENOENT);
    }
    if p.len() > 4096 {
        return Err(libc::ENAMETOOLONG);
    }
    Ok((p.to_owned(), p.len() > 1 && p.ends_with('/')))
}

/// A path without its trailing slashes ("/" stays).
fn without_slash(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() { "/" } else { t }
}

fn client() -> Result<weft_client::Client, i32> {
    crate::file::client().map_err(|f| {
        eprintln!("weft: {}", f.message);
        libc::EIO
    })
}

/// The process's umask now (read, not changed: /proc has it).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:").and_then(|v| u32::from_str_radix(v.trim(), 8).ok())))
        .unwrap_or(0o022)
}

/// `stat` of `path`, following symbolic links (at most 40, as Linux),
/// and ENOTDIR for a name that ended with a slash but is not a directory.
fn stat_follow(c: &weft_client::Client, path: &str, slash: bool) -> Result<(FileAttr, u64), i32> {
    let mut path = path.to_owned();
    for _ in 0..40 {
        let (attr, size) = c.stat(&path).map_err(errno)?;
        if attr.kind != FileKind::Symlink {
            if slash && attr.kind != FileKind::Dir {
                return Err(libc::ENOTDIR);
            }
            return Ok((attr, size));
        }
        let target = c.readlink(&path).map_err(errno)?;
        path = if target.starts_with('/') {
            target
        } else {
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            format!("{dir}/{target}")
        };
    }
    Err(libc::ELOOP)
}

/// `open(2)` of a `weft:` name, as descriptor `fd` (reserved by the shim).
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_open(name: *const c_char, flags: c_int, mode: u32, fd: c_int) -> c_int {
    guarded(|| {
        // SAFETY: the shim passes the program's NUL-terminated name.
        let (path, slash) = unsafe { weft_path(name) }?;
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Err(libc::EOPNOTSUPP);
        }
        let acc = flags & libc::O_ACCMODE;
        let (readable, writable) = (acc == libc::O_RDONLY || acc == libc::O_RDWR, acc == libc::O_WRONLY || acc == libc::O_RDWR);
        let c = client()?;
        let create = CreateOptions { mode: mode & 0o7777 & !umask(), exclusive: flags & libc::O_EXCL != 0, ..CreateOptions::default() };
        let opened = match (flags & libc::O_CREAT != 0, create.exclusive) {
            (true, true) => c.create(&path, create),
            // An existing file is opened as asked (O_RDONLY needs no
            // write permission); a missing one is created.
            (true, false) => match c.open(&path, writable) {
                Err(Error::NotFound(_)) => c.create(&path, create),
                other => other,
            },
            (false, _) => c.open(&path, writable),
        };
        let file = match opened {
            Ok(f) if flags & libc::O_DIRECTORY != 0 => {
                drop(f);
                return Err(libc::ENOTDIR);
            }
            Ok(_) if slash => return Err(libc::ENOTDIR),
            Ok(f) => f,
            // A directory: a descriptor to fstat and fsync, read-only.
            Err(Error::IsDir(_)) if !writable => {
                files().get_or_insert_with(HashMap::new).insert(fd, Open::Dir(path));
                return Ok(0);
            }
            Err(e) => return Err(errno(e)),
        };
        if flags & libc::O_TRUNC != 0 && writable {
            file.truncate(0).map_err(errno)?;
        }
        let shared = Shared { file: Some(file), pos: Mutex::new(0), readable, writable, append: flags & libc::O_APPEND != 0 };
        files().get_or_insert_with(HashMap::new).insert(fd, Open::File(Arc::new(shared)));
        Ok(0)
    })
}

/// `close(2)` of a descriptor opened here.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_close(fd: c_int) -> c_int {
    guarded(|| match files().as_mut().and_then(|m| m.remove(&fd)).ok_or(libc::EBADF)? {
        Open::Dir(_) => Ok(0),
        // With no call under way, closed here and its error told; else
        // the last call closes it (Shared's drop).
        Open::File(shared) => match Arc::try_unwrap(shared) {
            Ok(mut s) => s.file.take().map_or(Ok(0), |f| f.close().map(|()| 0).map_err(errno)),
            Err(_) => Ok(0),
        },
    })
}

/// Descriptor `fd` as opened here; EBADF if it is not.
fn lookup(fd: c_int) -> Result<Open, i32> {
    files().as_ref().and_then(|m| m.get(&fd)).cloned().ok_or(libc::EBADF)
}

/// Descriptor `fd`'s file, if `allowed` (opened for reading, say); EBADF
/// if it is not open here or not so, EISDIR for a directory.
fn file_of(fd: c_int, allowed: impl Fn(&Shared) -> bool) -> Result<Arc<Shared>, i32> {
    match lookup(fd)? {
        Open::File(s) if allowed(&s) => Ok(s),
        Open::File(_) => Err(libc::EBADF),
        Open::Dir(_) => Err(libc::EISDIR),
    }
}

fn lock_pos(s: &Shared) -> MutexGuard<'_, u64> {
    s.pos.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `read(2)` (`offset` < 0: at the descriptor's position, which moves) or
/// `pread(2)`.
///
/// # Safety
/// `buf` has `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_read(fd: c_int, buf: *mut u8, len: usize, offset: i64) -> isize {
    guarded(|| {
        let s = file_of(fd, |s| s.readable)?;
        if len == 0 {
            return Ok(0);
        }
        if buf.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: the caller's promise (non-null, `len` bytes); no other
        // reference to it exists during the call.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, len.min(isize::MAX as usize)) };
        if offset >= 0 {
            return Ok(s.file().read_at(offset as u64, out).map_err(errno)? as isize);
        }
        let mut pos = lock_pos(&s);
        let n = s.file().read_at(*pos, out).map_err(errno)?;
        *pos += n as u64;
        Ok(n as isize)
    })
}

/// `write(2)` (`offset` < 0: at the position, or the end with O_APPEND)
/// or `pwrite(2)`.
///
/// # Safety
/// `buf` has `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_write(fd: c_int, buf: *const u8, len: usize, offset: i64) -> isize {
    guarded(|| {
        let s = file_of(fd, |s| s.writable)?;
        if len == 0 {
            return Ok(0);
        }
        if buf.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: the caller's promise (non-null, `len` bytes).
        let data = unsafe { std::slice::from_raw_parts(buf, len.min(isize::MAX as usize)) };
        if offset >= 0 {
            return Ok(s.file().write_at(offset as u64, data).map_err(errno)? as isize);
        }
        // The position is held across the write: threads of this process
        // append one after the other (processes do not: docs/mpiio.md).
        let mut pos = lock_pos(&s);
        let at = if s.append { s.file().size().map_err(errno)? } else { *pos };
        let n = s.file().write_at(at, data).map_err(errno)?;
        *pos = at + n as u64;
        Ok(n as isize)
    })
}

/// `lseek(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_lseek(fd: c_int, offset: i64, whence: c_int) -> i64 {
    guarded(|| {
        let s = file_of(fd, |_| true)?;
        let mut pos = lock_pos(&s);
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => *pos as i64,
            libc::SEEK_END => s.file().size().map_err(errno)? as i64,
            _ => return Err(libc::EINVAL),
        };
        let to = base.checked_add(offset).filter(|&t| t >= 0).ok_or(libc::EINVAL)?;
        *pos = to as u64;
        Ok(to)
    })
}

/// `fsync(2)` and `fdatasync(2)`; of a directory: its metadata (all of
/// the namespace answered so far, as `Client::sync_meta`).
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_fsync(fd: c_int) -> c_int {
    guarded(|| {
        match lookup(fd)? {
            Open::File(s) => s.file().fsync().map_err(errno)?,
            Open::Dir(_) => client()?.sync_meta().map_err(errno)?,
        }
        Ok(0)
    })
}

/// `ftruncate(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_ftruncate(fd: c_int, len: i64) -> c_int {
    guarded(|| {
        let s = file_of(fd, |s| s.writable).map_err(|_| libc::EINVAL)?;
        s.file().truncate(u64::try_from(len).map_err(|_| libc::EINVAL)?).map_err(errno)?;
        Ok(0)
    })
}

fn fill(attr: &FileAttr, size: u64, out: &mut WeftStat) {
    let kind = match attr.kind {
        FileKind::Dir => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::Socket => libc::S_IFSOCK,
        _ => libc::S_IFREG,
    };
    *out = WeftStat {
        ino: attr.id.0,
        mode: kind | (attr.mode & 0o7777),
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        size,
        blksize: attr.layout.as_ref().map_or(4096, |l| l.stripe_size),
        mtime_ns: attr.mtime_ns,
        ctime_ns: attr.ctime_ns,
    };
}

/// `stat(2)` (`follow`: symbolic links followed) and `lstat(2)` of a
/// `weft:` name.
///
/// # Safety
/// `name` is a NUL-terminated string; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_stat(name: *const c_char, follow: c_int, out: *mut WeftStat) -> c_int {
    guarded(|| {
        // SAFETY: the caller's promise.
        let (path, slash) = unsafe { weft_path(name) }?;
        let c = client()?;
        let (attr, size) = if follow != 0 || slash {
            stat_follow(&c, &path, slash)?
        } else {
            c.stat(&path).map_err(errno)?
        };
        // SAFETY: the caller's promise.
        fill(&attr, size, unsafe { &mut *out });
        Ok(0)
    })
}

/// `fstat(2)` of a descriptor opened here: the file's attributes now (by
/// its name; those of its open if it was renamed away since).
///
/// # Safety
/// `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_fstat(fd: c_int, out: *mut WeftStat) -> c_int {
    guarded(|| {
        let (attr, size) = match lookup(fd)? {
            Open::Dir(path) => client()?.stat(&path).map_err(errno)?,
            Open::File(s) => {
                let f = s.file();
                let size = f.size().map_err(errno)?;
                let now = client()?.stat(f.path()).ok().map(|(a, _)| a).filter(|a| a.id == f.id());
                (now.unwrap_or_else(|| f.attr().clone()), size)
            }
        };
        // SAFETY: the caller's promise.
        fill(&attr, size, unsafe { &mut *out });
        Ok(0)
    })
}

/// `statvfs(2)` of a `weft:` name: the data servers' disks together.
///
/// # Safety
/// `name` is a NUL-terminated string; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_statvfs(name: *const c_char, out: *mut WeftStatvfs) -> c_int {
    guarded(|| {
        // SAFETY: the caller's promise.
        let (path, _) = unsafe { weft_path(name) }?;
        let c = client()?;
        c.stat(&path).map_err(errno)?;
        let (mut total, mut free, mut files) = (0u64, 0u64, 0u64);
        for s in c.status() {
            let st = s.stats.map_err(errno)?;
            if st.services & 2 != 0 {
                total = total.saturating_add(st.disk_total);
                free = free.saturating_add(st.disk_free);
            }
            if st.services & 1 != 0 {
                files = files.saturating_add(st.objects);
            }
        }
        // SAFETY: the caller's promise.
        unsafe { *out = WeftStatvfs { total, free, files } };
        Ok(0)
    })
}

/// Runs a namespace change on one `weft:` name.
///
/// # Safety
/// `name` is a NUL-terminated string.
unsafe fn on_name(name: *const c_char, f: impl FnOnce(&weft_client::Client, &str) -> weft_client::Result<()>) -> c_int {
    guarded(|| {
        // SAFETY: the caller's promise.
        let (path, _) = unsafe { weft_path(name) }?;
        f(&client()?, without_slash(&path)).map_err(errno)?;
        Ok(0)
    })
}

/// `mkdir(2)`.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_mkdir(name: *const c_char, mode: u32) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { on_name(name, |c, p| c.mkdir(p, mode & 0o7777 & !umask()).map(drop)) }
}

/// `rmdir(2)`.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_rmdir(name: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { on_name(name, |c, p| c.rmdir(p)) }
}

/// `unlink(2)`.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_unlink(name: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { on_name(name, |c, p| c.unlink(p)) }
}

/// `rename(2)` between two `weft:` names.
///
/// # Safety
/// Both are NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_rename(from: *const c_char, to: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    let to = match unsafe { weft_path(to) } {
        Ok((t, _)) => t,
        Err(e) => return -e,
    };
    // SAFETY: the caller's promise.
    unsafe { on_name(from, |c, p| c.rename(p, without_slash(&to))) }
}

/// `access(2)`: whether the calling process (its effective ids, as the
/// servers see them) may do `amode` (F_OK, or R_OK | W_OK | X_OK).
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_access(name: *const c_char, amode: c_int) -> c_int {
    guarded(|| {
        // SAFETY: the caller's promise.
        let (path, slash) = unsafe { weft_path(name) }?;
        let c = client()?;
        let (attr, _) = stat_follow(&c, &path, slash)?;
        let want = (amode & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
        let cred = c.cred();
        // Root may read and write anything, and search any directory and
        // execute what anyone may (as Linux).
        let root = cred.uid == 0 && (want & 1 == 0 || attr.kind == FileKind::Dir || attr.mode & 0o111 != 0);
        if want == 0 || root || attr.mode_permits(cred, want) { Ok(0) } else { Err(libc::EACCES) }
    })
}

/// `opendir(3)`: the whole listing of a `weft:` directory, read into a
/// stream; its handle in `*handle`.
///
/// # Safety
/// `name` is a NUL-terminated string; `handle` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_opendir(name: *const c_char, handle: *mut u64) -> c_int {
    guarded(|| {
        // SAFETY: the caller's promise.
        let (path, _) = unsafe { weft_path(name) }?;
        let c = client()?;
        let (attr, _) = stat_follow(&c, &path, false)?;
        if attr.kind != FileKind::Dir {
            return Err(libc::ENOTDIR);
        }
        let entries = c.readdir(without_slash(&path)).map_err(errno)?;
        let h = NEXT_DIR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        dirs().get_or_insert_with(HashMap::new).insert(h, (entries, 0));
        // SAFETY: the caller's promise.
        unsafe { *handle = h };
        Ok(0)
    })
}

/// `readdir(3)`: the next name of stream `handle` into `name` (`cap`
/// bytes, NUL-terminated), its type (a `DT_*`) and inode. 1: an entry,
/// 0: the end.
///
/// # Safety
/// `name` has `cap` writable bytes; `kind` and `ino` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_readdir(handle: u64, name: *mut u8, cap: usize, kind: *mut u8, ino: *mut u64) -> c_int {
    guarded(|| {
        let mut g = dirs();
        let (entries, next) = g.as_mut().and_then(|m| m.get_mut(&handle)).ok_or(libc::EBADF)?;
        let Some(e) = entries.get(*next) else { return Ok(0) };
        *next += 1;
        let bytes = e.name.as_bytes();
        if bytes.len() + 1 > cap {
            return Err(libc::ENAMETOOLONG);
        }
        let t = match e.attr.kind {
            FileKind::Dir => libc::DT_DIR,
            FileKind::Symlink => libc::DT_LNK,
            FileKind::Fifo => libc::DT_FIFO,
            FileKind::Socket => libc::DT_SOCK,
            _ => libc::DT_REG,
        };
        // SAFETY: the caller's promises; `bytes` fits with its NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name, bytes.len());
            *name.add(bytes.len()) = 0;
            *kind = t;
            *ino = e.attr.id.0;
        }
        Ok(1)
    })
}

/// `closedir(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_closedir(handle: u64) -> c_int {
    guarded(|| {
        dirs().as_mut().and_then(|m| m.remove(&handle)).ok_or(libc::EBADF)?;
        Ok(0)
    })
}

/// `dup(2)`, `dup2(2)`, `dup3(2)`, `F_DUPFD`: descriptor `to` (reserved
/// by the shim) names what `from` names, sharing its position (as the
/// kernel's duplicates share their open file description).
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_dup(from: c_int, to: c_int) -> c_int {
    guarded(|| {
        let open = lookup(from)?;
        files().get_or_insert_with(HashMap::new).insert(to, open);
        Ok(0)
    })
}

/// `telldir(3)` (`to` < 0) or `seekdir(3)`/`rewinddir(3)` (`to` >= 0: the
/// index of the next name to give) on stream `handle`; the index now.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_seekdir(handle: u64, to: i64) -> i64 {
    guarded(|| {
        let mut g = dirs();
        let (entries, next) = g.as_mut().and_then(|m| m.get_mut(&handle)).ok_or(libc::EBADF)?;
        if to >= 0 {
            *next = usize::try_from(to).unwrap_or(usize::MAX).min(entries.len());
        }
        Ok(*next as i64)
    })
}
