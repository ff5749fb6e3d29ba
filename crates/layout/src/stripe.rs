//! Round-robin striping, as in PVFS: stripe `k` (bytes `[k*s, (k+1)*s)` of the
//! file) lives on server index `k % n`, at object offset `(k / n) * s`.
//!
//! Worked example, `s = 4`, `n = 3`: file bytes 0..4 go to server 0 at 0..4,
//! 4..8 to server 1 at 0..4, 8..12 to server 2 at 0..4, 12..16 to server 0 at
//! 4..8. A contiguous file range therefore maps to one contiguous range of
//! each object, which is why one request per server suffices.

use thiserror::Error;

/// Largest stripe size (the wire's limit, repeated here: layout is a pure
/// floor beside wire, not above it).
pub const MAX_STRIPE_SIZE: u64 = 1 << 32;
/// Most servers per file (the wire's limit).
pub const MAX_STRIPE_COUNT: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StripingError {
    #[error("stripe size must be at least 1 byte")]
    ZeroStripeSize,
    #[error("stripe count must be at least 1")]
    ZeroStripeCount,
    #[error("stripe size {size} exceeds the largest, {limit} bytes")]
    StripeTooLarge { size: u64, limit: u64 },
    #[error("stripe count {count} exceeds the largest, {limit}")]
    TooManyStripes { count: usize, limit: usize },
    #[error("range offset {offset} + length {len} overflows")]
    Overflow { offset: u64, len: u64 },
}

/// A file's striping: stripe size and number of servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Striping {
    stripe_size: u64,
    count: u64,
}

/// The part of a file range that one server holds: one contiguous object
/// range, and the pieces of the caller's buffer it corresponds to, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectExtent {
    /// Index of the server in the file's server list.
    pub server: usize,
    pub object_offset: u64,
    pub len: u64,
    /// `(offset in the caller's buffer, length)`, in object order.
    pub segments: Vec<(u64, u64)>,
}

impl Striping {
    pub fn new(stripe_size: u64, count: usize) -> Result<Self, StripingError> {
        if stripe_size == 0 {
            return Err(StripingError::ZeroStripeSize);
        }
        if count == 0 {
            return Err(StripingError::ZeroStripeCount);
        }
        // Bounded so that a full row (size x count) and every offset
        // computed from it stay far below 2^64 (issue 8: 2^62 x 4 wrapped to 0).
        if stripe_size > MAX_STRIPE_SIZE {
            return Err(StripingError::StripeTooLarge { size: stripe_size, limit: MAX_STRIPE_SIZE });
        }
        if count > MAX_STRIPE_COUNT {
            return Err(StripingError::TooManyStripes { count, limit: MAX_STRIPE_COUNT });
        }
        Ok(Striping { stripe_size, count: count as u64 })
    }

    pub fn stripe_size(&self) -> u64 {
        self.stripe_size
    }

    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// The server index and object offset of file offset `off`.
    pub fn locate(&self, off: u64) -> (usize, u64) {
        let stripe = off / self.stripe_size;
        let server = (stripe % self.count) as usize;
        let row = stripe / self.count;
        (server, row * self.stripe_size + off % self.stripe_size)
    }

    /// The file offset of byte `obj_off` of server `server`'s object.
    pub fn file_offset(&self, server: usize, obj_off: u64) -> u64 {
        let row = obj_off / self.stripe_size;
        (row * self.count + server as u64) * self.stripe_size + obj_off % self.stripe_size
    }

    /// The file size implied by an object of `object_size` bytes on `server`:
    /// one past the file offset of its last byte (0 for an empty object).
    pub fn file_end(&self, server: usize, object_size: u64) -> u64 {
        if object_size == 0 { 0 } else { self.file_offset(server, object_size - 1) + 1 }
    }

    /// How many bytes of the file range `[0, size)` server `server` holds:
    /// the object size a truncate to `size` leaves.
    pub fn object_size_for(&self, server: usize, file_size: u64) -> u64 {
        let row_bytes = self.stripe_size * self.count;
        let rows = file_size / row_bytes;
        let rem = file_size % row_bytes;
        let start = server as u64 * self.stripe_size;
        rows * self.stripe_size + rem.saturating_sub(start).min(self.stripe_size)
    }

    /// The stripe pieces of the file range `[offset, offset + len)` in file
    /// order: `(server, object offset, length)`, none longer than a stripe.
    /// The caller makes sure `offset + len` does not overflow.
    pub fn walk(&self, offset: u64, len: u64) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        let end = offset + len;
        let mut off = offset;
        std::iter::from_fn(move || {
            if off >= end {
                return None;
            }
            let (server, obj) = self.locate(off);
            let chunk = (self.stripe_size - off % self.stripe_size).min(end - off);
            off += chunk;
            Some((server, obj, chunk))
        })
    }

    /// Splits the file range `[offset, offset + len)` into one extent per
    /// server that holds part of it, ordered by server index.
    pub fn split(&self, offset: u64, len: u64) -> Result<Vec<ObjectExtent>, StripingError> {
        let end = offset.checked_add(len).ok_or(StripingError::Overflow { offset, len })?;
        let mut extents: Vec<Option<ObjectExtent>> = vec![None; self.count()];
        let mut off = offset;
        for (server, obj_off, chunk) in self.walk(offset, end - offset) {
            let ext = extents[server].get_or_insert_with(|| ObjectExtent {
                server,
                object_offset: obj_off,
                len: 0,
                segments: Vec::new(),
            });
            debug_assert_eq!(ext.object_offset + ext.len, obj_off, "object range must stay contiguous");
            ext.len += chunk;
            ext.segments.push((off - offset, chunk));
            off += chunk;
        }
        debug_assert_eq!(off, end);
        Ok(extents.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The naive reference: walk the range byte by byte.
    fn naive(s: u64, n: u64, off: u64) -> (usize, u64) {
        let stripe = off / s;
        ((stripe % n) as usize, (stripe / n) * s + off % s)
    }

    #[test]
    fn worked_example_from_the_module_doc() {
        let st = Striping::new(4, 3).unwrap();
        assert_eq!(st.locate(0), (0, 0));
        assert_eq!(st.locate(5), (1, 1));
        assert_eq!(st.locate(13), (0, 5));
        assert_eq!(st.file_end(0, 6), 14);
        assert_eq!(st.file_end(0, 5), 13);
        assert_eq!(st.object_size_for(0, 14), 6);
        assert_eq!(st.object_size_for(1, 14), 4);
        assert_eq!(st.object_size_for(2, 14), 4);
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert_eq!(Striping::new(0, 1), Err(StripingError::ZeroStripeSize));
        assert_eq!(Striping::new(1, 0), Err(StripingError::ZeroStripeCount));
        assert!(matches!(Striping::new(1, 1).unwrap().split(u64::MAX, 2), Err(StripingError::Overflow { .. })));
        // Issue 8: a 2^62-byte stripe over 4 servers made a full row wrap to
        // 0 and every size computation divide by zero.
        assert!(matches!(Striping::new(1 << 62, 4), Err(StripingError::StripeTooLarge { .. })));
        assert!(matches!(Striping::new(1, MAX_STRIPE_COUNT + 1), Err(StripingError::TooManyStripes { .. })));
        let widest = Striping::new(MAX_STRIPE_SIZE, MAX_STRIPE_COUNT).unwrap();
        let end = (1u64 << 62) - 1;
        let (server, obj) = widest.locate(end);
        assert_eq!(widest.file_offset(server, obj), end);
        let total: u64 = (0..MAX_STRIPE_COUNT).map(|k| widest.object_size_for(k, end)).sum();
        assert_eq!(total, end);
    }

    proptest! {
        #[test]
        fn split_matches_byte_by_byte_reference(s in 1u64..50, n in 1usize..7, off in 0u64..2000, len in 0u64..600) {
            let st = Striping::new(s, n).unwrap();
            let extents = st.split(off, len).unwrap();
            let mut covered = vec![None; len as usize];
            for ext in &extents {
                let seg_total: u64 = ext.segments.iter().map(|x| x.1).sum();
                prop_assert_eq!(seg_total, ext.len);
                let mut obj = ext.object_offset;
                for &(buf_off, l) in &ext.segments {
                    for i in 0..l {
                        let b = (buf_off + i) as usize;
                        prop_assert!(covered[b].is_none(), "byte covered twice");
                        covered[b] = Some((ext.server, obj));
                        prop_assert_eq!(naive(s, n as u64, off + b as u64), (ext.server, obj));
                        obj += 1;
                    }
                }
            }
            prop_assert!(covered.iter().all(Option::is_some), "every byte is covered");
        }

        #[test]
        fn file_offset_inverts_locate(s in 1u64..100, n in 1usize..9, off in 0u64..1_000_000) {
            let st = Striping::new(s, n).unwrap();
            let (server, obj) = st.locate(off);
            prop_assert_eq!(st.file_offset(server, obj), off);
        }

        #[test]
        fn truncate_sizes_give_back_the_file_size(s in 1u64..50, n in 1usize..7, size in 0u64..5000) {
            let st = Striping::new(s, n).unwrap();
            let end = (0..n).map(|k| st.file_end(k, st.object_size_for(k, size))).max().unwrap();
            prop_assert_eq!(end, size);
            // Reference: count the bytes below `size` that map to each server.
            for k in 0..n {
                let want = (0..size).filter(|&o| naive(s, n as u64, o).0 == k).count() as u64;
                prop_assert_eq!(st.object_size_for(k, size), want);
            }
        }
    }
}
