//! Rails (paper 003's striping of one message over several paths): with
//! `WEFT_RAILS=N`, the endpoint keeps N - 1 extra connections to a server
//! it sends large payloads to, and a granted payload of at least
//! [`SPLIT_MIN`] bytes goes as `Part` frames spread over the server's own
//! connection and its rails at once; the server puts the payload together
//! by message id. The answer comes on the server's own connection.
//!
//! A rail that fails fails no call: its parts of messages not yet answered
//! are sent again on the server's own connection (the server takes the
//! same part twice as once), and the server's rails are not used or
//! opened again for [`RAIL_RETRY`]. A rail that cannot be opened is the
//! same: calls go on over the connections there are.

use super::batch::CallRef;
use super::engine::{ConnKey, Engine, Slot};
use crate::link::client::SplitGrant;
use rustc_hash::FxHashMap as HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use weft_wire::MAX_PARTS;

/// Most rails per server (`WEFT_RAILS`).
pub const MAX_RAILS: u8 = 8;

/// The least bytes a part carries: below this a payload is not split
/// further (a part's frame and its copy at the server cost more than a
/// second path saves).
pub const PART_MIN: usize = 256 * 1024;

/// Payloads at least this large are split (into two parts or more).
pub const SPLIT_MIN: usize = 2 * PART_MIN;

/// How long a server's rails rest after one failed or could not be opened.
pub const RAIL_RETRY: Duration = Duration::from_secs(10);

/// Parts are cut at multiples of this (page-aligned copies at the server).
const PART_ALIGN: usize = 4096;

/// How many rails, and which servers' are resting.
#[derive(Default)]
pub(super) struct RailPlan {
    rails: u8,
    down: HashMap<SocketAddr, Instant>,
}

impl RailPlan {
    pub(super) fn new(rails: u8) -> Self {
        RailPlan { rails: rails.clamp(1, MAX_RAILS), down: HashMap::default() }
    }

    /// The size from which a server's own connection hands grants over to
    /// be split (0: no rails).
    pub(super) fn split_min(&self) -> usize {
        if self.rails > 1 { SPLIT_MIN } else { 0 }
    }

    /// A rail a payload of `pay_len` bytes to `peer` would use and that
    /// is not open yet (or being opened), if any.
    #[inline]
    pub(super) fn missing(&self, peer: SocketAddr, pay_len: usize, conns: &super::conns::Conns) -> Option<ConnKey> {
        if self.rails < 2 || pay_len < SPLIT_MIN {
            return None;
        }
        self.missing_rail(peer, conns)
    }

    /// [`RailPlan::missing`] for a payload to split.
    fn missing_rail(&self, peer: SocketAddr, conns: &super::conns::Conns) -> Option<ConnKey> {
        if self.resting(peer) {
            return None;
        }
        // Over shared memory with an area the payload is placed whole:
        // rails of the same memory would carry nothing.
        if let Some(Slot::Ready(c)) = conns.get(&ConnKey::primary(peer))
            && c.transport.has_area()
        {
            return None;
        }
        (1..self.rails).map(|rail| ConnKey { peer, rail }).find(|k| !matches!(conns.get(k), Some(Slot::Ready(_))))
    }

    fn resting(&self, peer: SocketAddr) -> bool {
        // The clock is read only for a server whose rail failed.
        self.down.get(&peer).is_some_and(|t| t.elapsed() < RAIL_RETRY)
    }

    pub(super) fn went_down(&mut self, peer: SocketAddr) {
        self.down.insert(peer, Instant::now());
    }
}

/// Where each part of a payload of `pay_len` bytes goes, over `paths`
/// connections at most: (index of the path, offset, length), the parts
/// page-aligned, each at least [`PART_MIN`] but the last, at most
/// [`MAX_PARTS`], covering the payload once, in order.
pub fn cut(pay_len: usize, paths: usize) -> Vec<(usize, u64, usize)> {
    let n = paths.min(pay_len / PART_MIN).clamp(1, MAX_PARTS);
    let each = pay_len.div_ceil(n).next_multiple_of(PART_ALIGN).max(PART_ALIGN);
    let mut parts = Vec::with_capacity(n);
    let mut offset = 0;
    while offset < pay_len {
        let len = each.min(pay_len - offset);
        parts.push((parts.len(), offset as u64, len));
        offset += len;
    }
    parts
}

impl Engine {
    /// Puts the payloads granted since the last pass on the wire: in parts
    /// over a server's own connection and its usable rails, or whole when
    /// it has none. Returns how many grants were handled.
    pub(super) fn distribute_splits(&mut self) -> usize {
        if self.splits.is_empty() {
            return 0;
        }
        let grants = std::mem::take(&mut self.splits);
        let n = grants.len();
        for (peer, g) in grants {
            self.distribute(peer, g);
        }
        n
    }

    fn distribute(&mut self, peer: SocketAddr, g: SplitGrant<CallRef>) {
        let now = Instant::now();
        let idle_reuse = self.idle_reuse;
        // A call abandoned meanwhile: its connection was dropped (the
        // grant held it), nothing to send.
        if self.batches.get(g.call.batch).is_none_or(|b| b.calls[g.call.index].result.is_some()) {
            return;
        }
        // Rails in use, or idle but fresh and with nothing to read; a stale
        // idle one is closed (the next large call opens it again).
        let mut paths = vec![0u8];
        let mut stale = Vec::new();
        if !self.rails.resting(peer) {
            for rail in 1..self.rails.rails {
                if let Some(Slot::Ready(c)) = self.conns.get_mut(&ConnKey { peer, rail }) {
                    if !c.is_idle() || (now.saturating_duration_since(c.last_used()) < idle_reuse && c.idle_is_healthy()) {
                        c.posted_at(now);
                        paths.push(rail);
                    } else {
                        stale.push(ConnKey { peer, rail });
                    }
                }
            }
        }
        for key in stale {
            self.drop_conn(key, crate::NetError::Closed { addr: peer, reason: "idle rail closed".into() });
        }
        let Some(Slot::Ready(own)) = self.conns.get_mut(&ConnKey::primary(peer)) else { return };
        let parts = cut(g.pay_len, paths.len());
        if parts.len() < 2 {
            own.link.push_data(g);
            return;
        }
        own.link.distributed(g.id);
        let plan: Vec<(u8, u64, usize)> = parts.into_iter().map(|(p, offset, len)| (paths[p], offset, len)).collect();
        if let Some(b) = self.batches.get_mut(g.call.batch) {
            let c = &mut b.calls[g.call.index];
            c.rails = Some(super::batch::RailParts { msg: g.id, token: g.token, parts: plan.clone() });
        }
        for &(rail, offset, len) in &plan {
            if let Some(Slot::Ready(c)) = self.conns.get_mut(&ConnKey { peer, rail }) {
                c.link.push_part(g.id, g.call, g.token, offset, len);
            }
        }
        self.stats.rail_parts += plan.iter().filter(|p| p.0 != 0).count() as u64;
    }

    /// Rail `key` failed: its parts of calls not yet answered go again on
    /// the server's own connection; the server's rails rest a while,
    /// unless it was idle and carried nothing (the server closed it idle).
    pub(super) fn rail_lost(&mut self, key: ConnKey, idle: bool) {
        let mut again = Vec::new();
        for (batch, b) in self.batches.iter_mut() {
            for (index, c) in b.calls.iter_mut().enumerate() {
                if c.peer != key.peer || c.result.is_some() {
                    continue;
                }
                let Some(r) = c.rails.as_mut() else { continue };
                for part in r.parts.iter_mut().filter(|p| p.0 == key.rail) {
                    part.0 = 0;
                    again.push((CallRef { batch, index }, r.msg, r.token, part.1, part.2));
                }
            }
        }
        if !idle || !again.is_empty() {
            self.rails.went_down(key.peer);
        }
        let Some(Slot::Ready(own)) = self.conns.get_mut(&ConnKey::primary(key.peer)) else { return };
        self.stats.rail_resends += again.len() as u64;
        if again.is_empty() {
            return;
        }
        for (call, msg, token, offset, len) in again {
            own.link.push_part(msg, call, token, offset, len);
        }
        // Written now: no poll event may come for a connection already
        // writable (edge-triggered), and nothing else moved in this pass.
        // A failure here shows on the connection's next read.
        if own.writable {
            let _ = own.advance_write(key.peer, &self.batches);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Parts cover the payload once, in order, page-aligned, no more
        /// than the paths or the cap, none under the minimum but the last.
        #[test]
        fn parts_cover_the_payload_once(pay_len in 1usize..(40 << 20), paths in 1usize..12) {
            let parts = cut(pay_len, paths);
            let mut at = 0u64;
            for (i, &(path, offset, len)) in parts.iter().enumerate() {
                prop_assert_eq!(path, i);
                prop_assert_eq!(offset, at);
                prop_assert!(len > 0);
                prop_assert_eq!(offset as usize % PART_ALIGN, 0);
                if i + 1 < parts.len() {
                    prop_assert!(len >= PART_MIN);
                }
                at += len as u64;
            }
            prop_assert_eq!(at, pay_len as u64);
            prop_assert!(parts.len() <= paths.max(1) && parts.len() <= MAX_PARTS);
        }
    }
}
