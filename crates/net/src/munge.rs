//! MUNGE credentials (the authentication service Slurm uses): a process
//! asks its node's `munged` to encode a payload, and any process of the
//! cluster can have it decoded, learning the uid and gid of the process
//! that encoded it. `munged` also refuses a credential decoded twice.
//!
//! libmunge is loaded at run time (`dlopen("libmunge.so.2")`), so building
//! Weft needs nothing and a cluster in secret mode never loads it; a
//! machine without it gets a clear error naming the package.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::sync::OnceLock;

type Ctx = *mut c_void;
type Encode = unsafe extern "C" fn(*mut *mut c_char, Ctx, *const c_void, c_int) -> c_int;
type Decode = unsafe extern "C" fn(*const c_char, Ctx, *mut *mut c_void, *mut c_int, *mut libc::uid_t, *mut libc::gid_t) -> c_int;
type CtxCreate = unsafe extern "C" fn() -> Ctx;
type CtxDestroy = unsafe extern "C" fn(Ctx);
type CtxSet = unsafe extern "C" fn(Ctx, c_int, ...) -> c_int;
type StrError = unsafe extern "C" fn(c_int) -> *const c_char;

/// `MUNGE_OPT_SOCKET` in munge.h.
const OPT_SOCKET: c_int = 8;
/// `EMUNGE_CRED_REPLAYED`: the credential was decoded before.
pub const REPLAYED: i32 = 17;

/// Longest credential accepted from a peer (a few hundred bytes for the
/// payloads Weft encodes).
pub const MAX_CRED_LEN: usize = 4096;

struct Lib {
    encode: Encode,
    decode: Decode,
    ctx_create: CtxCreate,
    ctx_destroy: CtxDestroy,
    ctx_set: CtxSet,
    strerror: StrError,
}

/// Why a credential could not be made or checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MungeError {
    #[error("MUNGE is not available: {0} (install the `munge` package)")]
    Unavailable(String),
    #[error("MUNGE: {message}")]
    Failed { code: i32, message: String },
}

/// A decoded credential: who encoded it, and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub uid: u32,
    pub gid: u32,
    pub payload: Vec<u8>,
}

fn lib() -> Result<&'static Lib, MungeError> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    // SAFETY: dlopen and dlsym take NUL-terminated names (C string
    // literals); each symbol found is transmuted to the prototype munge.h
    // gives the function of that name, and the library is never unloaded.
    LIB.get_or_init(|| unsafe {
        let name = c"libmunge.so.2";
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return Err("cannot load libmunge.so.2".into());
        }
        let sym = |n: &CStr| {
            let p = libc::dlsym(h, n.as_ptr());
            if p.is_null() { Err(format!("libmunge.so.2 lacks {}", n.to_string_lossy())) } else { Ok(p) }
        };
        // Each symbol is the libmunge function of that name, with the
        // prototype munge.h gives it.
        Ok(Lib {
            encode: std::mem::transmute::<*mut c_void, Encode>(sym(c"munge_encode")?),
            decode: std::mem::transmute::<*mut c_void, Decode>(sym(c"munge_decode")?),
            ctx_create: std::mem::transmute::<*mut c_void, CtxCreate>(sym(c"munge_ctx_create")?),
            ctx_destroy: std::mem::transmute::<*mut c_void, CtxDestroy>(sym(c"munge_ctx_destroy")?),
            ctx_set: std::mem::transmute::<*mut c_void, CtxSet>(sym(c"munge_ctx_set")?),
            strerror: std::mem::transmute::<*mut c_void, StrError>(sym(c"munge_strerror")?),
        })
    })
    .as_ref()
    .map_err(|e| MungeError::Unavailable(e.clone()))
}

/// A connection to one `munged` (its socket; the system's by default).
#[derive(Debug, Clone)]
pub struct Munge {
    socket: Option<CString>,
}

/// A libmunge context, destroyed when dropped.
struct Context<'l> {
    lib: &'l Lib,
    ctx: Ctx,
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from munge_ctx_create and is destroyed once, here.
        unsafe { (self.lib.ctx_destroy)(self.ctx) }
    }
}

impl Munge {
    /// Talks to the `munged` at `socket` (None: libmunge's default,
    /// `/run/munge/munge.socket.2`). Fails if libmunge cannot be loaded.
    pub fn new(socket: Option<&Path>) -> Result<Self, MungeError> {
        lib()?;
        let socket = socket
            .map(|p| CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| MungeError::Unavailable(format!("socket path {} contains a NUL byte", p.display()))))
            .transpose()?;
        Ok(Munge { socket })
    }

    fn context(&self) -> Result<Context<'static>, MungeError> {
        let lib = lib()?;
        // SAFETY: munge_ctx_create takes nothing; a null result is checked.
        let ctx = unsafe { (lib.ctx_create)() };
        if ctx.is_null() {
            return Err(MungeError::Failed { code: 5, message: "out of memory".into() });
        }
        let c = Context { lib, ctx };
        if let Some(s) = &self.socket {
            // SAFETY: a live context, MUNGE_OPT_SOCKET and a NUL-terminated
            // path that outlives the call (libmunge copies it).
            let rc = unsafe { (lib.ctx_set)(ctx, OPT_SOCKET, s.as_ptr()) };
            if rc != 0 {
                return Err(failed(lib, rc));
            }
        }
        Ok(c)
    }

    /// A credential for `payload`, as this process's uid and gid.
    pub fn encode(&self, payload: &[u8]) -> Result<String, MungeError> {
        let len = c_int::try_from(payload.len()).map_err(|_| MungeError::Failed { code: 0, message: format!("a payload of {} bytes is more than MUNGE takes", payload.len()) })?;
        let c = self.context()?;
        let mut cred: *mut c_char = std::ptr::null_mut();
        // SAFETY: `cred` is an out pointer; the payload's pointer and
        // length describe a live slice.
        let rc = unsafe { (c.lib.encode)(&mut cred, c.ctx, payload.as_ptr().cast(), len) };
        if rc != 0 {
            return Err(failed(c.lib, rc));
        }
        // A NUL-terminated string libmunge allocated with malloc.
        // SAFETY: on success `cred` is that string, freed once here.
        let s = unsafe { CStr::from_ptr(cred) }.to_string_lossy().into_owned();
        unsafe { libc::free(cred.cast()) };
        Ok(s)
    }

    /// Checks `cred` with `munged`: who made it and what it carries. A
    /// credential decoded before, expired, or made with another key fails.
    pub fn decode(&self, cred: &[u8]) -> Result<Decoded, MungeError> {
        if cred.is_empty() || cred.len() > MAX_CRED_LEN || cred.contains(&0) {
            return Err(MungeError::Failed { code: 8, message: "malformed credential".into() });
        }
        let text = CString::new(cred).expect("no NUL: checked");
        let c = self.context()?;
        let (mut buf, mut len, mut uid, mut gid): (*mut c_void, c_int, libc::uid_t, libc::gid_t) = (std::ptr::null_mut(), 0, 0, 0);
        // SAFETY: a NUL-terminated credential and out pointers to locals.
        let rc = unsafe { (c.lib.decode)(text.as_ptr(), c.ctx, &mut buf, &mut len, &mut uid, &mut gid) };
        // The payload is malloc'ed even for some failures.
        let payload = if buf.is_null() {
            Vec::new()
        } else {
            // SAFETY: libmunge malloc'ed `len` bytes at `buf` for us; copied,
            // then freed once.
            let v = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len.max(0) as usize) }.to_vec();
            unsafe { libc::free(buf) };
            v
        };
        if rc != 0 {
            return Err(failed(c.lib, rc));
        }
        Ok(Decoded { uid, gid, payload })
    }
}

fn failed(lib: &Lib, rc: c_int) -> MungeError {
    // SAFETY: munge_strerror returns a static NUL-terminated string or null
    // (checked).
    let p = unsafe { (lib.strerror)(rc) };
    let message = if p.is_null() { format!("error {rc}") } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
    MungeError::Failed { code: rc, message }
}
