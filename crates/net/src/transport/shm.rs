//! The shared-memory transport, for a client on the same node as a server
//! (the MPI-IO library, the mount, the CLI): two byte rings ([`super::ring`])
//! in one sealed memfd, and a Unix socket that carries nothing but
//! doorbells and end of stream.
//!
//! Set-up: the server listens on the abstract Unix socket
//! `weft-<ip>:<port>` of its TCP address (abstract names live in the
//! network namespace, so only a client on the same node, in the same
//! namespace, finds it). On a connection it makes a memfd of two rings,
//! seals its size (no one can shrink it under the other's feet, which
//! would kill the reader with SIGBUS), maps it and sends it with a
//! 16-byte offer (`WEFTSHM2`, ring capacity u32 LE, shared area bytes u32
//! LE). The client checks the
//! offer, the size and the seals, maps it, and both run the ordinary Weft
//! handshake and protocol over the rings: whoever listens on the name must
//! still prove the cluster's secret (or MUNGE identity).
//!
//! Bytes are copied once into the ring and once out of it; a ring is
//! 1 MiB each way, drawn from the server's memory budget. A rendezvous
//! payload the server places in the shared area after the rings
//! ([`super::area`]) is copied once, by the client.
// Ring ends and area copies over the shared mapping, and taking a
// descriptor from a control message.
#![allow(unsafe_code)]

use super::area::{Area, ALIGN};
use super::mapping::{area_offset, total_len, Mapping};
pub use super::mapping::{mapping_len, punch_due};
use super::ring::{Corrupt, RingEnd, HEADER};
use super::Transport;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixSocketAddr, UnixStream as StdUnixStream};
use std::sync::Arc;
use crate::budget::MemoryBudget;
use std::time::{Duration, Instant};

/// Lent descriptors a client connection keeps until they are taken.
const MAX_LENT: usize = 16;

/// Bytes a server lets wait unread in a client's socket before it lends
/// no more over it: a client that never reads its socket parks a few
/// descriptors, not hundreds (they count against the server user's limit
/// of descriptors in flight, and a root server's are not limited at all).
const LEND_QUEUE_MAX: i32 = 16 * 1024;

/// Reads doorbells from `bell` into `b` with room (`cmsg`, kept between
/// calls) for a descriptor: the bytes read and the first descriptor, if
/// one came (a second that fits the room is closed). A server sends one
/// at a time; a message with more than the room holds is an error and the
/// connection breaks: the kernel closes those that did not fit, and the
/// two it installed stay open (their numbers are not readable from a
/// truncated message), a bounded loss on a peer that broke the rules.
fn recv_lent(bell: &mio::net::UnixStream, b: &mut [u8], cmsg: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = [IoSliceMut::new(b)];
    let msg = recvmsg::<UnixAddr>(bell.as_raw_fd(), &mut iov, Some(cmsg), MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC).map_err(io::Error::from)?;
    let mut fd = None;
    let cmsgs = msg.cmsgs().map_err(|_| bad("the server sent more descriptors than one lend"))?;
    for c in cmsgs {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for raw in fds {
                // SAFETY: the kernel just gave us this descriptor; all but
                // the first are closed here.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                fd.get_or_insert(owned);
            }
        }
    }
    Ok((msg.bytes, fd))
}

/// Bytes of each ring.
pub const RING_CAP: usize = 1 << 20;
/// Rings offered outside these bounds are refused.
const MIN_CAP: usize = 4096;
const MAX_CAP: usize = 64 << 20;
/// A server's shared area (bytes after the rings): room for one largest
/// payload, or sixteen of 1 MiB. A client refuses more than [`MAX_AREA`].
pub const AREA_LEN: usize = 16 << 20;
const MAX_AREA: usize = 64 << 20;
const MAGIC: &[u8; 8] = b"WEFTSHM2";
/// Doorbell bytes one drain takes before the peer counts as flooding.
const MAX_BELLS: usize = 4096;
const OFFER_LEN: usize = 16;

/// The abstract socket name a server on `addr` listens on.
pub fn socket_name(addr: SocketAddr) -> String {
    format!("weft-{addr}")
}

/// The abstract address of `addr`'s shared-memory socket.
pub fn socket_addr(addr: SocketAddr) -> io::Result<UnixSocketAddr> {
    UnixSocketAddr::from_abstract_name(socket_name(addr).as_bytes())
}

/// Whether `addr`'s IP is this node's (in this network namespace): only
/// then can its server be on the node, so only then is its socket name
/// worth trying (a name of a remote server's would be anyone's to take).
pub fn is_local(addr: SocketAddr) -> bool {
    addr.ip().is_loopback() || std::net::UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).is_ok()
}

/// How long a side looks at its rings before it blocks for a doorbell
/// (`WEFT_SHM_POLL_US`, both clients and servers; default 0: block at once),
/// capped at 10 ms, past which spinning only burns a core.
pub fn poll_budget(vars: &crate::settings::Vars<'_>) -> Result<Duration, crate::settings::BadSetting> {
    Ok(Duration::from_micros(vars.u64("WEFT_SHM_POLL_US")?.unwrap_or(0).min(10_000)))
}

/// One connection over shared memory (either side).
pub struct ShmTransport {
    rx: RingEnd,
    tx: RingEnd,
    bell: mio::net::UnixStream,
    /// The peer closed its socket: nothing more will come.
    peer_closed: bool,
    /// The peer broke the rules: every read and write fails.
    broken: Option<String>,
    /// Server side: the shared area, if the offer had one.
    area: Option<Arc<Area>>,
    /// Client side: the shared area's start and length in the mapping.
    area_at: usize,
    area_len: usize,
    /// Client side: descriptors the server lent (`DataReq::Lend`), taken
    /// from the socket with the doorbells, at most [`MAX_LENT`] kept (a
    /// server only ever sends one per answered lend). A server's side
    /// takes none: the kernel closes any a client sends.
    lent: Option<std::collections::VecDeque<OwnedFd>>,
    /// Room for the control message that carries one (kept: the doorbells
    /// are drained often).
    cmsg: Vec<u8>,
    // Last: the ring ends point into it (the area's slots hold it too).
    map: Arc<Mapping>,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn corrupt(_: Corrupt) -> io::Error {
    bad("the peer broke the shared-memory ring's rules")
}

impl ShmTransport {
    /// Server side: makes the rings for the client on `bell` and offers
    /// them (`cap` a multiple of 64), with a shared area of `area.0` bytes
    /// (a multiple of 4 KiB) whose high-water mark is drawn from `area.1`.
    /// Never blocks.
    pub fn offer(bell: StdUnixStream, cap: usize, area: Option<(usize, Arc<MemoryBudget>)>) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let area_len = area.as_ref().map_or(0, |a| a.0);
        if !area_len.is_multiple_of(ALIGN) || area_len > MAX_AREA {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a shared area of whole pages, at most 64 MiB"));
        }
        let len = total_len(cap, area_len);
        let fd = memfd_create("weft-shm", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).map_err(io::Error::from)?;
        nix::unistd::ftruncate(&fd, len as i64).map_err(io::Error::from)?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL)).map_err(io::Error::from)?;
        let mut map = Mapping::new(&fd, len)?;
        let mut offer = [0u8; OFFER_LEN];
        offer[..8].copy_from_slice(MAGIC);
        offer[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
        offer[12..].copy_from_slice(&(area_len as u32).to_le_bytes());
        let fds = [fd.as_raw_fd()];
        // A fresh socket's buffer takes 12 bytes and a descriptor at once.
        sendmsg::<UnixAddr>(bell.as_raw_fd(), &[IoSlice::new(&offer)], &[ControlMessage::ScmRights(&fds)], MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL, None)
            .map_err(io::Error::from)?;
        bell.set_nonblocking(true)?;
        // SAFETY: both rings lie within the mapping, which the transport owns.
        let (rx, tx) = unsafe { (RingEnd::new(map.base(), cap), RingEnd::new(map.base().add(HEADER + cap), cap)) };
        // The client's first bytes (its hello) ring the server.
        rx.set_reader_waiting();
        map.memfd = Some(fd);
        map.area_from = if area_len > 0 { area_offset(cap) } else { len };
        let map = Arc::new(map);
        let area = match area {
            // SAFETY: the area is the mapping's tail from a page boundary
            // (`area_offset`), mapped while `map` lives.
            Some((n, budget)) if n > 0 => Some(unsafe { Area::new(map.base().add(area_offset(cap)), n, map.clone(), budget) }),
            _ => None,
        };
        Ok(ShmTransport { rx, tx, bell: mio::net::UnixStream::from_std(bell), peer_closed: false, broken: None, area, area_at: 0, area_len: 0, lent: None, cmsg: Vec::new(), map })
    }

    /// Server side: the shared area, if the offer had one.
    pub fn area(&self) -> Option<Arc<Area>> {
        self.area.clone()
    }

    /// Client side: a copy of `len` bytes of the shared area from `at`, as
    /// the client sees them now (tests, diagnostics); `None` outside it.
    pub fn area_copy(&self, at: u64, len: usize) -> Option<Vec<u8>> {
        let at = usize::try_from(at).ok()?;
        if at.checked_add(len)? > self.area_len || self.area.is_some() {
            return None;
        }
        let mut v = vec![0u8; len];
        // SAFETY: inside the client's mapping of the area (checked above).
        unsafe { std::ptr::copy_nonoverlapping(self.map.base().add(self.area_at + at), v.as_mut_ptr(), len) };
        Some(v)
    }

    /// Client side: the rings of the server on `addr`, if one listens on
    /// this node (`NotFound` or `ConnectionRefused` if none does), run by
    /// one of `trusted_uids` (anyone else could relay the handshake to the
    /// real server and sit in the middle).
    pub fn connect(addr: SocketAddr, timeout: Duration, trusted_uids: &[u32]) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::socket::{connect, getsockopt, socket, sockopt::PeerCredentials, AddressFamily, SockFlag, SockType};
        if !is_local(addr) {
            return Err(io::ErrorKind::NotFound.into());
        }
        // Non-blocking, so a listener that never accepts (its backlog
        // full) is a refusal, not a hang.
        let fd = socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC, None).map_err(io::Error::from)?;
        let name = UnixAddr::new_abstract(socket_name(addr).as_bytes()).map_err(io::Error::from)?;
        match connect(fd.as_raw_fd(), &name) {
            Ok(()) => {}
            Err(nix::errno::Errno::EAGAIN) => return Err(io::ErrorKind::ConnectionRefused.into()),
            Err(e) => return Err(e.into()),
        }
        let peer = getsockopt(&fd, PeerCredentials).map_err(io::Error::from)?;
        if !trusted_uids.contains(&peer.uid()) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("the process offering shared memory for {addr} runs as uid {}, not the servers'", peer.uid())));
        }
        let bell = StdUnixStream::from(fd);
        bell.set_nonblocking(false)?;
        bell.set_read_timeout(Some(timeout))?;
        let mut offer = [0u8; OFFER_LEN];
        // Room for as many descriptors as one message may carry, so none
        // is left unclosed by a truncated control message.
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 253]);
        let (got, fd) = {
            let mut iov = [IoSliceMut::new(&mut offer)];
            let msg = recvmsg::<UnixAddr>(bell.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).map_err(io::Error::from)?;
            let mut fd = None;
            for c in msg.cmsgs().map_err(io::Error::from)? {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    for raw in fds {
                        // SAFETY: the kernel just gave us this descriptor;
                        // all but the first are closed here.
                        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                        fd.get_or_insert(owned);
                    }
                }
            }
            (msg.bytes, fd)
        };
        if got != OFFER_LEN || &offer[..8] != MAGIC {
            return Err(bad("not a Weft shared-memory offer"));
        }
        let fd = fd.ok_or_else(|| bad("the shared-memory offer carried no memory"))?;
        let cap = u32::from_le_bytes(offer[8..12].try_into().expect("4 bytes")) as usize;
        let area_len = u32::from_le_bytes(offer[12..].try_into().expect("4 bytes")) as usize;
        // A multiple of 64 keeps the second ring's header aligned.
        if !(MIN_CAP..=MAX_CAP).contains(&cap) || !cap.is_multiple_of(64) {
            return Err(bad(format!("shared-memory rings of {cap} bytes")));
        }
        if area_len > MAX_AREA || !area_len.is_multiple_of(ALIGN) {
            return Err(bad(format!("a shared area of {area_len} bytes")));
        }
        let len = total_len(cap, area_len);
        // Seals first, then the size: sealed memory cannot shrink after.
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(io::Error::from)?;
        let sealed = SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK);
        let size = nix::sys::stat::fstat(fd.as_fd()).map_err(io::Error::from)?.st_size;
        // Plain shared memory (not huge pages, whose holes fault).
        let tmpfs = nix::sys::statfs::fstatfs(&fd).map_err(io::Error::from)?.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC;
        if size != len as i64 || !sealed || !tmpfs {
            return Err(bad("the shared memory offered is not plain memory sealed at its size"));
        }
        let map = Mapping::new(&fd, len)?;
        bell.set_read_timeout(None)?;
        bell.set_nonblocking(true)?;
        // SAFETY: as in `offer`, the other way round.
        let (tx, rx) = unsafe { (RingEnd::new(map.base(), cap), RingEnd::new(map.base().add(HEADER + cap), cap)) };
        Ok(ShmTransport {
            rx,
            tx,
            bell: mio::net::UnixStream::from_std(bell),
            peer_closed: false,
            broken: None,
            area: None,
            area_at: area_offset(cap),
            area_len,
            lent: Some(Default::default()),
            cmsg: nix::cmsg_space!([std::os::fd::RawFd; 1]),
            map: Arc::new(map),
        })
    }

    /// Wakes the peer (best effort: a socket with bytes in it has
    /// already woken it). Never raises SIGPIPE in a host program.
    fn ring(&mut self) {
        let _ = super::sys::send_vectored(self.bell.as_raw_fd(), &[IoSlice::new(&[1])], libc::MSG_DONTWAIT);
    }

    /// Takes the doorbells rung so far, and (client side) the descriptors
    /// lent with them; notes an end of stream. A peer rings once each time
    /// this side waits, so more than [`MAX_BELLS`] at once is a peer
    /// flooding the socket to hold this thread: its connection breaks.
    /// `to_end`: read on to `WouldBlock` even after a short read (when a
    /// poll event saw the peer close, whose end of stream may follow the
    /// bytes, and for every descriptor lent).
    fn drain_bell(&mut self, to_end: bool) {
        // A peer rings once per wait: a few bytes at a time (zeroing a
        // larger buffer on every drain cost more than the read).
        let mut b = [0u8; 64];
        let mut taken = 0;
        loop {
            let got = match &mut self.lent {
                None => super::sys::read(self.bell.as_raw_fd(), &mut b).map(|n| (n, None)),
                Some(_) => recv_lent(&self.bell, &mut b, &mut self.cmsg),
            };
            match got {
                Ok((0, _)) => {
                    self.peer_closed = true;
                    return;
                }
                Ok((n, fd)) => {
                    let brought_fd = fd.is_some();
                    if let (Some(fd), Some(lent)) = (fd, &mut self.lent) {
                        if lent.len() == MAX_LENT {
                            lent.pop_front();
                        }
                        lent.push_back(fd);
                    }
                    taken += n;
                    if taken > MAX_BELLS {
                        self.broken.get_or_insert_with(|| "the peer floods the doorbell".into());
                        return;
                    }
                    // A short read of a stream socket took all there was
                    // (one that brought a descriptor stops at it): the
                    // next read would only say `WouldBlock`.
                    if n < b.len() && !brought_fd && !to_end {
                        return;
                    }
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::InvalidData => {
                        self.broken.get_or_insert_with(|| e.to_string());
                        return;
                    }
                    // Done.
                    io::ErrorKind::WouldBlock => return,
                    // The peer is gone (reset).
                    _ => {
                        self.peer_closed = true;
                        return;
                    }
                },
            }
        }
    }

    /// A blocking view, for the handshake: reads and writes wait for the
    /// peer until `deadline`.
    pub fn blocking(&mut self, deadline: Instant) -> Blocking<'_> {
        Blocking { t: self, deadline }
    }

    /// Waits until the doorbell rings or `deadline` passes.
    fn wait_bell(&mut self, deadline: Instant) -> io::Result<()> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let ms = PollTimeout::try_from(left.as_millis().max(1) as u64).unwrap_or(PollTimeout::MAX);
        let fd = self.bell.as_fd();
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        self.drain_bell(true);
        Ok(())
    }
}

impl Transport for ShmTransport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_vectored(&mut [IoSliceMut::new(buf)])
    }

    /// A read that gives less than `bufs` hold has emptied the ring and
    /// asked for a doorbell (`short_read_drains`); bytes that came
    /// meanwhile are read on into what is left of `bufs` (advanced past
    /// what was read).
    fn read_vectored(&mut self, mut bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        if let Some(why) = &self.broken {
            return Err(bad(why.clone()));
        }
        let mut room: usize = bufs.iter().map(|b| b.len()).sum();
        if room == 0 {
            return Ok(0);
        }
        let mut total = 0;
        loop {
            let n = self.rx.read_vectored(bufs).map_err(corrupt)?;
            total += n;
            room -= n;
            if room == 0 {
                break;
            }
            if total == 0 && self.peer_closed {
                return Ok(0);
            }
            // The ring is empty: a doorbell is asked for before saying so.
            self.rx.set_reader_waiting();
            if self.rx.available().map_err(corrupt)? == 0 {
                if total == 0 {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                break;
            }
            self.rx.clear_reader_waiting();
            // Rare: bytes came between the read and the flag.
            IoSliceMut::advance_slices(&mut bufs, n);
        }
        if self.rx.take_writer_waiting() {
            self.ring();
        }
        Ok(total)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if let Some(why) = &self.broken {
            return Err(bad(why.clone()));
        }
        if self.peer_closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        loop {
            let n = self.tx.write_vectored(bufs).map_err(corrupt)?;
            if n > 0 || bufs.iter().all(|b| b.is_empty()) {
                if self.tx.take_reader_waiting() {
                    self.ring();
                }
                return Ok(n);
            }
            self.tx.set_writer_waiting();
            if self.tx.room().map_err(corrupt)? == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.tx.clear_writer_waiting();
        }
    }

    fn idle_is_healthy(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        // Doorbells may be left in the socket; a hang-up behind them is
        // what counts.
        // (A Unix stream whose peer closed reports POLLHUP; nix drops the
        // revents of flags it does not know, such as POLLRDHUP.)
        let mut fds = [PollFd::new(self.bell.as_fd(), PollFlags::POLLIN)];
        let hung_up = match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => fds[0].revents().is_none_or(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
            Err(_) => true,
        };
        !hung_up && !self.peer_closed && self.broken.is_none() && self.rx.available() == Ok(0)
    }

    fn input_pending(&self) -> bool {
        self.rx.available() != Ok(0) || self.peer_closed
    }

    fn short_read_drains(&self) -> bool {
        true
    }

    fn on_event(&mut self, _readable: bool, _writable: bool, closed: bool) -> (bool, bool) {
        // A doorbell means bytes or room, whichever the peer made.
        self.drain_bell(closed);
        (true, true)
    }

    fn lend(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        let mut queued: libc::c_int = 0;
        // SAFETY: SIOCOUTQ writes one int: the bytes of this socket's
        // sends its peer has not read yet.
        if unsafe { libc::ioctl(self.bell.as_raw_fd(), libc::TIOCOUTQ, &mut queued) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if queued > LEND_QUEUE_MAX {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "the client does not read what was sent to it"));
        }
        // One doorbell byte carries it (a client wakes as for any bell).
        let fds = [fd.as_raw_fd()];
        sendmsg::<UnixAddr>(self.bell.as_raw_fd(), &[IoSlice::new(&[1])], &[ControlMessage::ScmRights(&fds)], MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL, None)
            .map_err(io::Error::from)?;
        Ok(())
    }

    fn has_area(&self) -> bool {
        self.area_len > 0
    }

    fn place(&mut self, at: u64, len: usize, parts: &mut dyn Iterator<Item = &[u8]>) -> io::Result<()> {
        let fits = usize::try_from(at).ok().and_then(|a| a.checked_add(len)).is_some_and(|end| end <= self.area_len);
        if !fits || self.area.is_some() {
            return Err(bad(format!("the server placed {len} bytes at {at} of a shared area of {} bytes", self.area_len)));
        }
        let mut done = 0;
        for p in parts {
            let n = p.len().min(len - done);
            // SAFETY: `area_at + at + done + n <= area_at + area_len`, inside
            // the mapping (checked above and by `n`); the server reads this
            // place only after the `Placed` frame that follows.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), self.map.base().add(self.area_at + at as usize + done), n) };
            done += n;
        }
        if done != len {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("a payload of {done} bytes for a place of {len}")));
        }
        Ok(())
    }

    fn take_lent(&mut self) -> Vec<OwnedFd> {
        // A lent descriptor is in the socket before the answer is in the
        // ring, and the answer may have been read without a doorbell.
        if self.lent.is_some() {
            self.drain_bell(true);
        }
        self.lent.as_mut().map(|l| l.drain(..).collect()).unwrap_or_default()
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        &mut self.bell
    }

    fn kind(&self) -> &'static str {
        "shm"
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        // The client may keep the memfd alive: the rings' pages go back
        // (punched out; no write seal, so this is allowed), so a client
        // cycling connections cannot pin memory the budget no longer
        // counts. The area's go with the mapping (`Mapping`'s drop), once
        // no request holds a place in it.
        self.map.release_rings(mapping_len(self.rx.capacity()), self.peer_closed);
    }
}

/// [`ShmTransport::blocking`].
pub struct Blocking<'a> {
    t: &'a mut ShmTransport,
    deadline: Instant,
}

impl Read for Blocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match Transport::read(self.t, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.t.wait_bell(self.deadline)?,
                r => return r,
            }
        }
    }
}

impl Write for Blocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        loop {
            match Transport::write_vectored(self.t, bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.t.wait_bell(self.deadline)?,
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
