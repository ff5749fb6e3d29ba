//! Descriptors lent by a server to a client on its node: read-only
//! descriptors of a file's stripe objects, so the client reads them itself
//! (one copy, from the page cache or the disk, as a local file is read)
//! instead of having each byte copied by the server, through a transport
//! and out again (HDFS's short-circuit local reads do the same).
//!
//! A client makes a mailbox: a Unix datagram socket bound to the abstract
//! name `weft-lend-<32 hex digits>`, random, so no one can guess it or
//! take it first. It asks for an object with a data request (`Lend`,
//! naming the mailbox and a nonce) over its ordinary, authenticated
//! connection; the server checks the capability as for a read, opens the
//! object read-only and sends the descriptor to the mailbox (with the
//! nonce) *before* it answers. So once the answer is in, the descriptor is
//! in the mailbox. Abstract names live in the network namespace, so a
//! server on another node finds no such mailbox and the lend fails; the
//! client then reads through the server as always.
//!
//! The mailbox takes a datagram only from a process of a trusted uid (the
//! kernel's `SCM_CREDENTIALS`, as the shared-memory transport checks its
//! peer) carrying the nonce it waits for; anything else is dropped, and
//! its descriptors closed.
// Taking descriptors from control messages.
#![allow(unsafe_code)]

use nix::sys::socket::{
    bind, recvmsg, sendmsg, setsockopt, socket, sockopt::PassCred, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Bytes of a mailbox's id.
pub const MAILBOX_ID_LEN: usize = 16;
/// A mailbox's id: the random part of its name.
pub type MailboxId = [u8; MAILBOX_ID_LEN];

/// The abstract socket name of mailbox `id`.
pub fn mailbox_name(id: &MailboxId) -> String {
    let mut s = String::with_capacity(10 + 2 * MAILBOX_ID_LEN);
    s.push_str("weft-lend-");
    for b in id {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Server side: sends `fd` to mailbox `to` with `nonce`, without
/// waiting (a mailbox that is full, or gone, is the client's loss).
pub fn lend(fd: BorrowedFd<'_>, to: &MailboxId, nonce: u64) -> io::Result<()> {
    let sock = socket(AddressFamily::Unix, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None).map_err(io::Error::from)?;
    let addr = UnixAddr::new_abstract(mailbox_name(to).as_bytes()).map_err(io::Error::from)?;
    let fds = [fd.as_raw_fd()];
    let nonce = nonce.to_le_bytes();
    sendmsg(sock.as_raw_fd(), &[IoSlice::new(&nonce)], &[ControlMessage::ScmRights(&fds)], MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL, Some(&addr))
        .map_err(io::Error::from)?;
    Ok(())
}

/// Client side: where lent descriptors arrive.
pub struct Mailbox {
    sock: OwnedFd,
    id: MailboxId,
}

impl Mailbox {
    /// Binds a fresh mailbox.
    pub fn bind() -> io::Result<Self> {
        let sock = socket(AddressFamily::Unix, SockType::Datagram, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK, None).map_err(io::Error::from)?;
        setsockopt(&sock, PassCred, &true).map_err(io::Error::from)?;
        let id: MailboxId = rand::random();
        bind(sock.as_raw_fd(), &UnixAddr::new_abstract(mailbox_name(&id).as_bytes()).map_err(io::Error::from)?).map_err(io::Error::from)?;
        Ok(Mailbox { sock, id })
    }

    pub fn id(&self) -> &MailboxId {
        &self.id
    }

    /// The descriptors sent with `nonces` by a process of one of
    /// `trusted_uids`, in the same order, waiting at most `within` for
    /// those not in yet (`None`: did not come). Other datagrams are
    /// dropped on the way.
    pub fn take(&self, nonces: &[u64], trusted_uids: &[u32], within: Duration) -> io::Result<Vec<Option<OwnedFd>>> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let deadline = Instant::now() + within;
        let mut got: Vec<Option<OwnedFd>> = nonces.iter().map(|_| None).collect();
        let mut missing = nonces.len();
        while missing > 0 {
            if let Some((nonce, uid, fd)) = self.next()? {
                if let Some(i) = nonces.iter().position(|&n| n == nonce)
                    && trusted_uids.contains(&uid)
                    && got[i].is_none()
                {
                    got[i] = Some(fd);
                    missing -= 1;
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let ms = PollTimeout::try_from(left.as_millis().max(1) as u64).unwrap_or(PollTimeout::MAX);
            match poll(&mut [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)], ms) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(got)
    }

    /// The next datagram, if one waits: its nonce (0 if malformed), its
    /// sender's uid, and its first descriptor (datagrams without one are
    /// skipped); any other descriptors it carried are closed.
    fn next(&self) -> io::Result<Option<(u64, u32, OwnedFd)>> {
        loop {
            let mut b = [0u8; 8];
            // Room for as many descriptors as one message may carry, so
            // none is left unclosed by a truncated control message.
            let mut space = nix::cmsg_space!(nix::sys::socket::UnixCredentials, [std::os::fd::RawFd; 253]);
            let mut iov = [IoSliceMut::new(&mut b)];
            let msg = match recvmsg::<UnixAddr>(self.sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT) {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN) => return Ok(None),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            };
            let whole = msg.bytes == 8 && !msg.flags.contains(MsgFlags::MSG_TRUNC);
            let (mut uid, mut first) = (None, None);
            for c in msg.cmsgs().map_err(io::Error::from)? {
                match c {
                    ControlMessageOwned::ScmCredentials(cred) => uid = Some(cred.uid()),
                    ControlMessageOwned::ScmRights(fds) => {
                        for raw in fds {
                            // SAFETY: the kernel just gave us this
                            // descriptor; all but the first are closed here.
                            let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                            first.get_or_insert(owned);
                        }
                    }
                    _ => {}
                }
            }
            if let (Some(uid), Some(fd)) = (uid, first) {
                let nonce = if whole { u64::from_le_bytes(b) } else { 0 };
                return Ok(Some((nonce, uid, fd)));
            }
        }
    }
}
