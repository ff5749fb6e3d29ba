//! The system calls the transports make straight to the kernel, without
//! std's and mio's wrappers around them: those cost about as much as the
//! rest of a small request's read or write (paper 003's count, `weft bench
//! net --icount`). Writes never raise SIGPIPE in a host program that did
//! not ignore it (the MPI-IO library lives in C programs, which do not,
//! unlike Rust's own). They go through `syscall(2)`, not libc's named
//! wrappers, which also make each call a thread-cancellation point (about
//! 50 instructions a call in a process with threads). Weft cancels no
//! threads; a C host program that cancels one of its own threads while it
//! is inside Weft's library would cancel it at a point Weft does not
//! expect, so not being one is the safer side.
#![allow(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::RawFd;

/// Most iovecs one call takes (Linux's `IOV_MAX`): callers pass at most
/// this many; more would be refused (EINVAL), so they are cut here.
const IOV_MAX: usize = 1024;

/// A system call's byte count, or the error it left in `errno`.
fn bytes(n: libc::c_long) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

pub(super) fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its whole length.
    bytes(unsafe { libc::syscall(libc::SYS_read, libc::c_long::from(fd), buf.as_mut_ptr(), buf.len()) })
}

pub(super) fn read_vectored(fd: RawFd, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
    // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` (std's promise
    // on Unix), and each names memory valid for writes.
    bytes(unsafe { libc::syscall(libc::SYS_readv, libc::c_long::from(fd), bufs.as_ptr(), bufs.len().min(IOV_MAX)) })
}

/// Writes `bufs` to socket `fd` (with `flags` besides `MSG_NOSIGNAL`).
pub(super) fn send_vectored(fd: RawFd, bufs: &[IoSlice<'_>], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: a zeroed `msghdr` is a valid one (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec`; sendmsg only reads them.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len().min(IOV_MAX) as _;
    // SAFETY: `msg` names `bufs`, valid for reads for this call.
    bytes(unsafe { libc::syscall(libc::SYS_sendmsg, libc::c_long::from(fd), &msg as *const libc::msghdr, libc::c_long::from(libc::MSG_NOSIGNAL | flags)) })
}
