//! The plain-C entry points the shim calls (`weftio_*`, declared in
//! `shim/weftio.h`). Each returns 0 or an error [`Class`] number, with the
//! message in [`weftio_last_error`]; a panic is caught and reported as
//! `Intern`, never unwound into C.

use crate::comm::CComm;
use crate::errors::{Class, Fail, Result};
use crate::access::{perform, Placed};
use crate::file::{OpenFile, Position};
use crate::posted::{self, Ticket};
use crate::registry;
use crate::types;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Arc;
use std::time::Duration;
use weft_client::Datatype;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs `f`; an error or a panic becomes a class number and the message.
fn guard(f: impl FnOnce() -> Result<()>) -> c_int {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| Err(Fail::new(Class::Intern, "weft: internal error (a panic in the MPI-IO library)")));
    match r {
        Ok(()) => 0,
        Err(f) => {
            let c = CString::new(f.message.replace('\0', " ")).unwrap_or_default();
            LAST_ERROR.with(|e| *e.borrow_mut() = c);
            f.class as c_int
        }
    }
}

fn file(key: usize) -> Result<registry::Shared> {
    registry::get(key).ok_or_else(|| Fail::new(Class::BadFile, "weft: not an open Weft file"))
}

/// The file, after every nonblocking access posted on it has run: for the
/// calls that change how later accesses run (view, atomicity, hints) or
/// that must cover every write (sync, size). MPI asks programs to complete
/// their requests first; one that did not still gets its accesses run as
/// they were posted.
fn settled(key: usize) -> Result<registry::Shared> {
    posted::drain(key);
    file(key)
}

/// The file, for a call that takes collective steps: after the
/// collectives posted on it (every rank's come in the same order).
fn in_turn(key: usize) -> Result<registry::Shared> {
    if posted::collectives_pending(key) {
        posted::drain(key);
    }
    file(key)
}

/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn text(p: *const c_char, what: &str) -> Result<String> {
    if p.is_null() {
        return Err(Fail::new(Class::Arg, format!("weft: {what} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated per this function's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(str::to_owned).map_err(|_| Fail::new(Class::Arg, format!("weft: {what} is not UTF-8")))
}

/// # Safety
/// `keys` and `vals` hold `n` valid C strings each (or `n` is 0).
unsafe fn pairs(keys: *const *const c_char, vals: *const *const c_char, n: c_int) -> Result<Vec<(String, String)>> {
    let n = usize::try_from(n).map_err(|_| Fail::new(Class::Arg, "weft: negative hint count"))?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if keys.is_null() || vals.is_null() {
        return Err(Fail::new(Class::Arg, "weft: hint arrays are NULL"));
    }
    // SAFETY: both arrays hold n pointers to C strings (contract).
    (0..n).map(|i| unsafe { Ok((text(*keys.add(i), "hint key")?, text(*vals.add(i), "hint value")?)) }).collect()
}

/// The calling thread's last error message (valid until its next call).
#[unsafe(no_mangle)]
pub extern "C" fn weftio_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Sends the small writes every open file holds (`weft_write_behind`) and
/// drops what was read ahead (`weft_read_ahead`): called at MPI_Barrier,
/// where programs (against MPI's letter, which asks for MPI_File_sync)
/// expect to see each other's writes, as they do on a POSIX file system.
/// A file busy in another thread's call is skipped; a failed send is
/// reported by the file's next sync or close.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_at_barrier() {
    let _ = guard(|| {
        for f in registry::all() {
            if let Ok(g) = f.try_read() {
                let _ = g.file.flush_writes();
                g.file.drop_read_ahead();
            }
        }
        Ok(())
    });
}

/// 1 if `key` is an open Weft file.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_known(key: usize) -> c_int {
    c_int::from(registry::get(key).is_some())
}

/// Collective open over `comm`; registers the file under `key` and gives
/// its Fortran handle.
///
/// # Safety
/// `comm` points to callbacks valid until close; `path` is a C string;
/// hint arrays as in [`pairs`]; `fortran` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_open(comm: *const CComm, path: *const c_char, amode: u32, keys: *const *const c_char, vals: *const *const c_char, nhints: c_int, key: usize, fortran: *mut c_int) -> c_int {
    guard(|| {
        if comm.is_null() || fortran.is_null() || key == 0 {
            return Err(Fail::new(Class::Arg, "weft: NULL argument to open"));
        }
        // SAFETY: non-null, valid per the contract.
        let (comm, path, hints) = unsafe { (*comm, text(path, "file name")?, pairs(keys, vals, nhints)?) };
        let f = OpenFile::open(comm, &path, amode, hints)?;
        let fh = registry::insert(key, f);
        // SAFETY: non-null and writable per the contract.
        unsafe { *fortran = fh };
        Ok(())
    })
}

/// Collective close; `key` is forgotten even if closing fails. A call
/// still running on the file in another thread (erroneous in MPI) is waited
/// for, so every rank reaches the close's collective steps.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_close(key: usize) -> c_int {
    guard(|| {
        posted::drain(key);
        let f = registry::remove(key).ok_or_else(|| Fail::new(Class::BadFile, "weft: not an open Weft file"))?;
        let mut g = registry::lock(&f);
        g.close()
    })
}

/// MPI_File_delete of a Weft path (not collective).
///
/// # Safety
/// `path` is a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_delete(path: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: a C string per the contract.
        let path = unsafe { text(path, "file name")? };
        crate::file::delete(&path)
    })
}

/// Builds a datatype from a type program (see [`types`]); `*out` gets an
/// owned handle for [`weftio_type_free`].
///
/// # Safety
/// `prog` holds `len` words; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_type_build(prog: *const i64, len: i64, out: *mut *mut c_void) -> c_int {
    guard(|| {
        let n = usize::try_from(len).map_err(|_| Fail::new(Class::Type, "weft: negative program length"))?;
        if prog.is_null() || out.is_null() {
            return Err(Fail::new(Class::Arg, "weft: NULL type program"));
        }
        // SAFETY: `prog` holds `len` words (contract).
        let words = unsafe { std::slice::from_raw_parts(prog, n) };
        let t = types::build(words)?;
        // SAFETY: writable per the contract.
        unsafe { *out = Box::into_raw(Box::new(t)).cast() };
        Ok(())
    })
}

/// Frees a handle from [`weftio_type_build`].
///
/// # Safety
/// `t` came from `weftio_type_build` and is freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_type_free(t: *mut c_void) {
    if !t.is_null() {
        // SAFETY: a Box<Datatype> from weftio_type_build, freed once (contract).
        drop(unsafe { Box::from_raw(t.cast::<Datatype>()) });
    }
}

/// # Safety
/// `t` is a live handle from `weftio_type_build`.
unsafe fn datatype<'a>(t: *const c_void) -> Result<&'a Datatype> {
    // SAFETY: live handle per the contract.
    unsafe { t.cast::<Datatype>().as_ref() }.ok_or_else(|| Fail::new(Class::Type, "weft: NULL datatype"))
}

/// Collective MPI_File_set_view (datarep already checked by the shim). A
/// rank whose own arguments the shim refused passes NULL types: it still
/// takes part, so the other ranks do not wait for it.
///
/// # Safety
/// `etype` and `filetype` are live handles or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_set_view(key: usize, disp: i64, etype: *const c_void, filetype: *const c_void) -> c_int {
    guard(|| {
        // SAFETY: live handles or NULL per the contract.
        let types = unsafe { datatype(etype).and_then(|e| Ok((e.clone(), datatype(filetype)?.clone()))) };
        let f = settled(key)?;
        registry::lock(&f).set_view(disp, types)
    })
}

/// The position kind the shim passes: 0 explicit `offset`, 1 individual
/// pointer, 2 shared, 3 ordered.
fn position(kind: c_int, offset: i64) -> Result<Position> {
    Ok(match kind {
        0 => Position::At(offset),
        1 => Position::Individual,
        2 => Position::Shared,
        3 => Position::Ordered,
        p => return Err(Fail::new(Class::Arg, format!("weft: position kind {p}"))),
    })
}

/// One read (`write` 0) or write of `count` copies of `memtype` at `buf`.
/// `pos`: 0 explicit `offset`, 1 individual pointer, 2 shared, 3 ordered;
/// `coll` 1 for the collective (`_all`) forms.
/// For an ordered access a rank whose own arguments the shim refused passes
/// a NULL `memtype`: it takes part in the collective steps, adding nothing.
///
/// # Safety
/// `buf` with `memtype` and `count` describes memory the caller owns
/// (readable, and writable for a read); `memtype` is a live handle or NULL;
/// `bytes` is writable or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_access(key: usize, write: c_int, pos: c_int, coll: c_int, offset: i64, buf: *mut c_void, count: i64, memtype: *const c_void, bytes: *mut i64) -> c_int {
    guard(|| {
        let pos = position(pos, offset)?;
        // Collective steps come after those of the collectives posted before.
        let f = if coll != 0 || pos == Position::Ordered { in_turn(key)? } else { file(key)? };
        // SAFETY: a live handle or NULL per the contract.
        let placed = unsafe { datatype(memtype) }.and_then(|t| Placed::new(buf.cast(), count, t));
        let g = registry::lock(&f);
        // SAFETY: the caller's memory for the call (contract).
        let moved = unsafe { perform(&g, pos, coll != 0, write != 0, &placed)? };
        // SAFETY: writable or NULL per the contract.
        if let Some(out) = unsafe { bytes.as_mut() } {
            *out = moved as i64;
        }
        Ok(())
    })
}

/// Posts a nonblocking read or write (arguments as [`weftio_access`]; not
/// ordered): its arguments are checked and its place claimed now, its
/// bytes moved by the file's worker ([`posted`]). `*ticket` gets a handle
/// for [`weftio_ticket_wait`], [`weftio_ticket_result`] and, once,
/// [`weftio_ticket_free`]. A collective one (`coll`, posted only when the
/// program has `MPI_THREAD_MULTIPLE`) whose own arguments are refused is
/// still posted, to take part with nothing, and the error returned.
///
/// # Safety
/// As [`weftio_access`], with the memory the access's until the ticket is
/// done (MPI's rule for a nonblocking call's buffer); `ticket` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_post(key: usize, write: c_int, pos: c_int, coll: c_int, offset: i64, buf: *mut c_void, count: i64, memtype: *const c_void, ticket: *mut *const c_void) -> c_int {
    guard(|| {
        let (w, c) = (write != 0, coll != 0);
        let f = file(key)?;
        // The worker first: once the access's place is claimed, nothing fails.
        let worker = posted::worker(key)?;
        // SAFETY: a live handle or NULL per the contract.
        let placed = unsafe { datatype(memtype) }.and_then(|t| Placed::new(buf.cast(), count, t));
        let claimed = placed.and_then(|p| Ok((registry::read(&f).claim(position(pos, offset)?, w, p.memtype())?, p)));
        match claimed {
            Ok((pos, placed)) => {
                // SAFETY: the memory is the access's until the ticket is done (contract).
                let t = unsafe { posted::post(&worker, f, pos, w, c, Ok(placed)) };
                put(ticket, Arc::into_raw(t).cast())
            }
            Err(e) => {
                if c {
                    // SAFETY: no memory: the rank takes part with nothing.
                    drop(unsafe { posted::post(&worker, f, Position::At(0), w, true, Err(e.clone())) });
                }
                Err(e)
            }
        }
    })
}

/// # Safety
/// `t` came from [`weftio_post`] and is not yet freed.
unsafe fn ticket<'a>(t: *const c_void) -> &'a Ticket {
    // SAFETY: a live Arc<Ticket> from into_raw (contract).
    unsafe { &*t.cast::<Ticket>() }
}

/// Waits for a posted access, at most `timeout_us` microseconds (0: just
/// looks; negative: as long as it takes). 1 if it is done.
///
/// # Safety
/// As [`ticket`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_ticket_wait(t: *const c_void, timeout_us: i64) -> c_int {
    let timeout = u64::try_from(timeout_us).ok().map(Duration::from_micros);
    // SAFETY: per the contract.
    c_int::from(unsafe { ticket(t) }.wait(timeout))
}

/// A done access's result: 0 with the bytes moved in `*bytes`, or the
/// error's class with its message in this thread's [`weftio_last_error`].
///
/// # Safety
/// As [`ticket`]; `bytes` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_ticket_result(t: *const c_void, bytes: *mut i64) -> c_int {
    guard(|| {
        // SAFETY: per the contract.
        let r = unsafe { ticket(t) }.result().ok_or_else(|| Fail::new(Class::Intern, "weft: the access is still running"))?;
        put(bytes, r? as i64)
    })
}

/// # Safety
/// `t` came from [`weftio_post`]; freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_ticket_free(t: *const c_void) {
    if !t.is_null() {
        // SAFETY: an Arc<Ticket> from into_raw, released once (contract).
        drop(unsafe { Arc::from_raw(t.cast::<Ticket>()) });
    }
}

/// How many posted accesses have finished so far (see [`weftio_wait_finished`]).
#[unsafe(no_mangle)]
pub extern "C" fn weftio_finished() -> u64 {
    posted::finished()
}

/// Sleeps until more than `seen` posted accesses have finished, at most
/// `timeout_us` microseconds.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_wait_finished(seen: u64, timeout_us: u64) {
    posted::wait_finished(seen, Duration::from_micros(timeout_us));
}

/// Writes `v` through `out` if it is not NULL.
fn put<T>(out: *mut T, v: T) -> Result<()> {
    // SAFETY: the shim passes a pointer to its own local or the user's
    // output argument, or NULL.
    match unsafe { out.as_mut() } {
        Some(o) => {
            *o = v;
            Ok(())
        }
        None => Err(Fail::new(Class::Arg, "weft: NULL output argument")),
    }
}

/// MPI_File_seek (`shared` 0) or MPI_File_seek_shared; whence 0 set, 1 cur, 2 end.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_seek(key: usize, offset: i64, whence: c_int, shared: c_int) -> c_int {
    // Under the read lock: a posted access that is running (waiting for a
    // byte-range lock, say) holds it too. A shared seek is collective: it
    // comes after the collectives posted on the file.
    guard(|| registry::read(&if shared != 0 { in_turn(key)? } else { file(key)? }).seek(offset, whence, shared != 0))
}

/// The individual (or shared) file pointer, in etypes.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_position(key: usize, shared: c_int, out: *mut i64) -> c_int {
    guard(|| {
        let p = registry::read(&file(key)?).position(shared != 0)?;
        put(out, p as i64)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn weftio_byte_offset(key: usize, offset: i64, out: *mut i64) -> c_int {
    guard(|| {
        let p = registry::read(&file(key)?).byte_offset(offset)?;
        put(out, p as i64)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn weftio_get_size(key: usize, out: *mut i64) -> c_int {
    guard(|| {
        let s = registry::read(&file(key)?).file.size().map_err(Fail::from)?;
        put(out, s as i64)
    })
}

/// Collective MPI_File_set_size, or MPI_File_preallocate with `grow_only`.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_set_size(key: usize, size: i64, grow_only: c_int) -> c_int {
    guard(|| registry::lock(&settled(key)?).set_size(size, grow_only != 0))
}

#[unsafe(no_mangle)]
pub extern "C" fn weftio_sync(key: usize) -> c_int {
    guard(|| registry::lock(&settled(key)?).sync())
}

#[unsafe(no_mangle)]
pub extern "C" fn weftio_set_atomicity(key: usize, on: c_int) -> c_int {
    guard(|| registry::lock(&settled(key)?).set_atomicity(on != 0))
}

#[unsafe(no_mangle)]
pub extern "C" fn weftio_get_atomicity(key: usize, out: *mut c_int) -> c_int {
    guard(|| {
        let a = registry::read(&file(key)?).file.atomicity();
        put(out, c_int::from(a))
    })
}

/// Applies hints (MPI_File_set_info, and set_view's info).
///
/// # Safety
/// As [`pairs`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_set_info(key: usize, keys: *const *const c_char, vals: *const *const c_char, n: c_int) -> c_int {
    guard(|| {
        // SAFETY: per the contract.
        let p = unsafe { pairs(keys, vals, n)? };
        let f = settled(key)?;
        let mut g = registry::lock(&f);
        let OpenFile { file, hints, .. } = &mut *g;
        hints.apply(file, &p);
        Ok(())
    })
}

/// The hints in effect as one string of `key=value` lines, for
/// MPI_File_get_info; `*out` must be freed with [`weftio_string_free`].
#[unsafe(no_mangle)]
pub extern "C" fn weftio_get_info(key: usize, out: *mut *mut c_char) -> c_int {
    guard(|| {
        let f = file(key)?;
        let g = registry::read(&f);
        let text: String = g.hints.in_effect(&g.file).into_iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
        put(out, c.into_raw())
    })
}

/// # Safety
/// `s` came from this library and is freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weftio_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: a CString from into_raw, freed once (contract).
        drop(unsafe { CString::from_raw(s) });
    }
}

/// The Fortran handle of a Weft file, or 0.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_c2f(key: usize) -> c_int {
    registry::fortran_of(key).unwrap_or(0)
}

/// The file a Fortran handle names, or 0 if it is not Weft's.
#[unsafe(no_mangle)]
pub extern "C" fn weftio_f2c(fh: c_int) -> usize {
    registry::key_of_fortran(fh).unwrap_or(0)
}
