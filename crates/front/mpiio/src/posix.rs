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

/// One open descriptor.
struct Open {
    /// Shared with calls under way, so none holds the table during I/O.
    file: Arc<File>,
    pos: u64,
    readable: bool,
    writable: bool,
    append: bool,
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

/// The Weft path of a C name: `weft:/a/b` -> `/a/b`.
///
/// # Safety
/// `name` is a NUL-terminated string (the shim checked it is not null).
unsafe fn weft_path(name: *const c_char) -> Result<String, i32> {
    // SAFETY: the caller's promise.
    let s = unsafe { CStr::from_ptr(name) }.to_str().map_err(|_| libc::EINVAL)?;
    let p = s.strip_prefix(PREFIX).ok_or(libc::EINVAL)?;
    if !p.starts_with('/') {
        return Err(libc::ENOENT);
    }
    if p.len() > 4096 {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(p.to_owned())
}

fn client() -> Result<weft_client::Client, i32> {
    crate::file::client().map_err(|f| {
        eprintln!("weft: {}", f.message);
        libc::EIO
    })
}

/// The process's umask (without changing it: read from /proc).
fn umask() -> u32 {
    static MASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:").and_then(|v| u32::from_str_radix(v.trim(), 8).ok())))
            .unwrap_or(0o022)
    })
}

/// `open(2)` of a `weft:` name, as descriptor `fd` (reserved by the shim).
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_open(name: *const c_char, flags: c_int, mode: u32, fd: c_int) -> c_int {
    guarded(|| {
        // SAFETY: the shim passes the program's NUL-terminated name.
        let path = unsafe { weft_path(name) }?;
        let acc = flags & libc::O_ACCMODE;
        let (readable, writable) = (acc == libc::O_RDONLY || acc == libc::O_RDWR, acc == libc::O_WRONLY || acc == libc::O_RDWR);
        let c = client()?;
        let file = if flags & libc::O_CREAT != 0 {
            c.create(&path, CreateOptions { mode: mode & 0o7777 & !umask(), exclusive: flags & libc::O_EXCL != 0, ..CreateOptions::default() }).map_err(errno)?
        } else {
            c.open(&path, writable).map_err(errno)?
        };
        if flags & libc::O_TRUNC != 0 && writable {
            file.truncate(0).map_err(errno)?;
        }
        let open = Open { file: Arc::new(file), pos: 0, readable, writable, append: flags & libc::O_APPEND != 0 };
        files().get_or_insert_with(HashMap::new).insert(fd, open);
        Ok(0)
    })
}

/// `close(2)` of a descriptor opened here.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_close(fd: c_int) -> c_int {
    guarded(|| {
        let open = files().as_mut().and_then(|m| m.remove(&fd)).ok_or(libc::EBADF)?;
        // A call on it still under way in another thread holds a share:
        // wait for it (bounded), as the kernel's close would not cut it.
        let mut file = open.file;
        for _ in 0..1000 {
            match Arc::try_unwrap(file) {
                Ok(f) => return f.close().map(|()| 0).map_err(errno),
                Err(shared) => file = shared,
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(0)
    })
}

/// Descriptor `fd`'s file, position and O_APPEND, if it is open here and
/// `allowed` (opened for reading, say); else EBADF.
fn lookup(fd: c_int, allowed: impl Fn(&Open) -> bool) -> Result<(Arc<File>, u64, bool), i32> {
    let g = files();
    let o = g.as_ref().and_then(|m| m.get(&fd)).filter(|o| allowed(o)).ok_or(libc::EBADF)?;
    Ok((Arc::clone(&o.file), o.pos, o.append))
}

/// Moves descriptor `fd`'s position to `to` (after a read or write at it).
fn advance(fd: c_int, to: u64) {
    if let Some(o) = files().as_mut().and_then(|m| m.get_mut(&fd)) {
        o.pos = to;
    }
}

/// `read(2)` (`offset` < 0: at the descriptor's position, which moves) or
/// `pread(2)`.
///
/// # Safety
/// `buf` has `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_read(fd: c_int, buf: *mut u8, len: usize, offset: i64) -> isize {
    guarded(|| {
        let (file, pos, _) = lookup(fd, |o| o.readable)?;
        let at = if offset < 0 { pos } else { offset as u64 };
        let len = len.min(isize::MAX as usize);
        // SAFETY: the caller's promise; no other reference to it exists.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, len) };
        let n = file.read_at(at, out).map_err(errno)?;
        if offset < 0 {
            advance(fd, at + n as u64);
        }
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
        let (file, pos, append) = lookup(fd, |o| o.writable)?;
        let at = match (offset < 0, append) {
            (true, true) => file.size().map_err(errno)?,
            (true, false) => pos,
            (false, _) => offset as u64,
        };
        let len = len.min(isize::MAX as usize);
        // SAFETY: the caller's promise.
        let data = unsafe { std::slice::from_raw_parts(buf, len) };
        let n = file.write_at(at, data).map_err(errno)?;
        if offset < 0 {
            advance(fd, at + n as u64);
        }
        Ok(n as isize)
    })
}

/// `lseek(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_lseek(fd: c_int, offset: i64, whence: c_int) -> i64 {
    guarded(|| {
        let (file, pos, _) = lookup(fd, |_| true)?;
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => pos as i64,
            libc::SEEK_END => file.size().map_err(errno)? as i64,
            _ => return Err(libc::EINVAL),
        };
        let to = base.checked_add(offset).filter(|&t| t >= 0).ok_or(libc::EINVAL)?;
        let mut g = files();
        g.as_mut().and_then(|m| m.get_mut(&fd)).ok_or(libc::EBADF)?.pos = to as u64;
        Ok(to)
    })
}

/// `fsync(2)` and `fdatasync(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_fsync(fd: c_int) -> c_int {
    guarded(|| {
        let (file, _, _) = lookup(fd, |_| true)?;
        file.fsync().map_err(errno)?;
        Ok(0)
    })
}

/// `ftruncate(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_posix_ftruncate(fd: c_int, len: i64) -> c_int {
    guarded(|| {
        let file = files().as_ref().and_then(|m| m.get(&fd)).filter(|o| o.writable).map(|o| Arc::clone(&o.file)).ok_or(libc::EINVAL)?;
        file.truncate(u64::try_from(len).map_err(|_| libc::EINVAL)?).map_err(errno)?;
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

/// `stat(2)` and `lstat(2)` of a `weft:` name.
///
/// # Safety
/// `name` is a NUL-terminated string; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_stat(name: *const c_char, out: *mut WeftStat) -> c_int {
    guarded(|| {
        // SAFETY: the caller's promise.
        let path = unsafe { weft_path(name) }?;
        let (attr, size) = client()?.stat(&path).map_err(errno)?;
        // SAFETY: the caller's promise.
        fill(&attr, size, unsafe { &mut *out });
        Ok(0)
    })
}

/// `fstat(2)` of a descriptor opened here.
///
/// # Safety
/// `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_posix_fstat(fd: c_int, out: *mut WeftStat) -> c_int {
    guarded(|| {
        let (file, _, _) = lookup(fd, |_| true)?;
        let size = file.size().map_err(errno)?;
        // SAFETY: the caller's promise.
        fill(file.attr(), size, unsafe { &mut *out });
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
        let path = unsafe { weft_path(name) }?;
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
        let path = unsafe { weft_path(name) }?;
        f(&client()?, &path).map_err(errno)?;
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
        Ok(t) => t,
        Err(e) => return -e,
    };
    // SAFETY: the caller's promise.
    unsafe { on_name(from, |c, p| c.rename(p, &to)) }
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
        let path = unsafe { weft_path(name) }?;
        let c = client()?;
        let (attr, _) = c.stat(&path).map_err(errno)?;
        let want = (amode & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
        let cred = c.cred();
        // Root may read and write anything, and execute what anyone may.
        let root = cred.uid == 0 && (want & 1 == 0 || attr.mode & 0o111 != 0);
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
        let path = unsafe { weft_path(name) }?;
        let c = client()?;
        let (attr, _) = c.stat(&path).map_err(errno)?;
        if attr.kind != FileKind::Dir {
            return Err(libc::ENOTDIR);
        }
        let entries = c.readdir(&path).map_err(errno)?;
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
