//! One server-wide memory budget for every byte a peer can make the server
//! buffer: request bodies and payloads, rendezvous grants not yet received,
//! response payloads being built or sent.
//!
//! A connection asks before it allocates. When the budget cannot cover a
//! frame, the connection stops reading (TCP pushes back on the client) until
//! memory is returned; a rendezvous waits for its `Cts` the same way. So the
//! server's buffered bytes never pass the budget, whatever clients send.
//! Memory is returned by dropping the [`Charge`] that holds it, so a failed
//! or panicking request cannot leak its share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Default budget: 1 GiB. Enough for 64 maximal (16 MiB) payloads in
/// flight at once, far below the machines' memory (24 GiB here).
pub const DEFAULT_MEMORY_BUDGET: u64 = 1 << 30;

/// The budget; shared by the event loop and the workers.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
}

/// What one connection holds of the budget. A connection may hold at most
/// its share, so one busy client cannot take the memory every other client
/// needs to be served.
#[derive(Debug, Default)]
pub struct Account {
    used: AtomicU64,
}

impl Account {
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

/// Bytes drawn from a [`MemoryBudget`] (and an [`Account`]); returned when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    account: Option<Arc<Account>>,
    bytes: u64,
}

/// Adds `bytes` to `counter` unless that passes `limit`.
fn add_within(counter: &AtomicU64, bytes: u64, limit: u64) -> bool {
    let mut cur = counter.load(Ordering::Relaxed);
    loop {
        let Some(next) = cur.checked_add(bytes).filter(|&n| n <= limit) else { return false };
        match counter.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

impl MemoryBudget {
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(MemoryBudget { limit, used: AtomicU64::new(0) })
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Draws `bytes` if the budget has them; `None` leaves it unchanged.
    pub fn try_charge(self: &Arc<Self>, bytes: u64) -> Option<Charge> {
        add_within(&self.used, bytes, self.limit).then(|| Charge { budget: self.clone(), account: None, bytes })
    }

    /// Draws `bytes` that are held already (an answer made), past the
    /// limits if need be: the budget then stays over them until they are
    /// returned, and its users wait (a connection over its share reads
    /// nothing more, see `link::server`).
    pub fn charge_held(self: &Arc<Self>, bytes: u64, account: &Arc<Account>) -> Charge {
        self.used.fetch_add(bytes, Ordering::AcqRel);
        account.used.fetch_add(bytes, Ordering::AcqRel);
        Charge { budget: self.clone(), account: Some(account.clone()), bytes }
    }

    /// Draws `bytes` for a connection whose `account` may hold at most
    /// `share`; `None` (nothing drawn) if either would pass its limit.
    pub fn try_charge_for(self: &Arc<Self>, bytes: u64, account: &Arc<Account>, share: u64) -> Option<Charge> {
        if !add_within(&account.used, bytes, share) {
            return None;
        }
        if !add_within(&self.used, bytes, self.limit) {
            account.used.fetch_sub(bytes, Ordering::AcqRel);
            return None;
        }
        Some(Charge { budget: self.clone(), account: Some(account.clone()), bytes })
    }
}

impl Charge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes over `other`'s bytes (both must come from the same budget and
    /// account), so one charge returns them all.
    pub fn merge(&mut self, mut other: Charge) {
        debug_assert!(Arc::ptr_eq(&self.budget, &other.budget));
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Splits `bytes` off into a charge of their own (for a rendezvous grant
    /// that becomes a payload buffer); `None` if this charge is smaller.
    pub fn split(&mut self, bytes: u64) -> Option<Charge> {
        self.bytes = self.bytes.checked_sub(bytes)?;
        Some(Charge { budget: self.budget.clone(), account: self.account.clone(), bytes })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        if let Some(a) = &self.account {
            a.used.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// `123`, `64k`, `512m`, `2g` (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let (num, shift) = match s.as_bytes().last()? {
        b'k' => (&s[..s.len() - 1], 10),
        b'm' => (&s[..s.len() - 1], 20),
        b'g' => (&s[..s.len() - 1], 30),
        _ => (&s[..], 0),
    };
    num.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit_and_return_on_drop() {
        let b = MemoryBudget::new(100);
        let c1 = b.try_charge(60).unwrap();
        assert!(b.try_charge(41).is_none());
        let mut c2 = b.try_charge(40).unwrap();
        assert_eq!(b.used(), 100);
        let part = c2.split(15).unwrap();
        assert!(c2.split(26).is_none());
        drop(c1);
        assert_eq!(b.used(), 40);
        drop(part);
        drop(c2);
        assert_eq!(b.used(), 0);
        assert!(b.try_charge(u64::MAX).is_none());
    }

    #[test]
    fn a_connection_stops_at_its_share() {
        let b = MemoryBudget::new(100);
        let (a1, a2) = (Arc::new(Account::default()), Arc::new(Account::default()));
        let c = b.try_charge_for(30, &a1, 40).unwrap();
        assert!(b.try_charge_for(11, &a1, 40).is_none(), "past a1's share");
        assert_eq!(a1.used(), 30);
        let d = b.try_charge_for(40, &a2, 80).unwrap();
        assert!(b.try_charge_for(31, &a2, 80).is_none(), "past the budget");
        assert_eq!((a2.used(), b.used()), (40, 70));
        drop((c, d));
        assert_eq!((a1.used(), a2.used(), b.used()), (0, 0, 0));
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size(" 2G"), Some(2 << 30));
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("99999999999999g"), None);
        assert_eq!(parse_size("m"), None);
    }
}
