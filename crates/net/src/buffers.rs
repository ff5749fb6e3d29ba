//! Idle payload buffers, kept for reuse. The allocator hands out large
//! buffers (over 128 KiB) as fresh mappings and unmaps them on free, so a
//! new 1 MiB buffer per message costs 256 page faults; streaming measured a
//! third of loopback speed that way. Buffers of finished requests come back
//! here instead, up to a bound, and connections that are idle hold none.
//! Small buffers (request bodies) are kept per thread, a few: a server's
//! event loop takes and gives one per request, and the allocator's
//! zeroed allocation and free cost more than the request's own decoding.

use std::sync::{Mutex, PoisonError};

/// Buffers smaller than this are not worth keeping in the shared pool.
const MIN_POOLED: usize = 64 * 1024;
/// Buffers at most this large are kept per thread, at most `SMALL_KEPT`.
const SMALL_MAX: usize = 4096;
const SMALL_KEPT: usize = 16;

thread_local! {
    static SMALL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Most bytes kept idle: 64 MiB, four maximal payloads or 64 of 1 MiB.
const MAX_POOLED_BYTES: usize = 64 << 20;

struct Pool {
    free: Vec<Vec<u8>>,
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool { free: Vec::new(), bytes: 0 });

/// A buffer of exactly `len` bytes. Its contents are unspecified (old
/// bytes of an earlier request): callers overwrite all of it, or clear it.
#[inline]
pub fn take(len: usize) -> Vec<u8> {
    // Inline for the empty case: most small requests and answers have no
    // payload, and a call costs more than the rest of it.
    if len == 0 {
        return Vec::new();
    }
    take_some(len)
}

fn take_some(len: usize) -> Vec<u8> {
    if len <= SMALL_MAX
        && let Some(mut v) = SMALL.with_borrow_mut(Vec::pop)
    {
        v.resize(len, 0);
        return v;
    }
    if len >= MIN_POOLED {
        let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
        // The smallest buffer that fits, so large ones stay for large needs.
        if let Some(k) = (0..pool.free.len()).filter(|&k| pool.free[k].capacity() >= len).min_by_key(|&k| pool.free[k].capacity()) {
            let mut v = pool.free.swap_remove(k);
            pool.bytes -= v.capacity();
            drop(pool);
            if v.len() >= len {
                v.truncate(len);
            } else {
                v.resize(len, 0);
            }
            return v;
        }
    }
    vec![0; len]
}

/// Returns a buffer for reuse (or frees it, if the pool is full).
#[inline]
pub fn give(v: Vec<u8>) {
    // Nothing to keep (see `take`).
    if v.capacity() != 0 {
        give_some(v);
    }
}

fn give_some(mut v: Vec<u8>) {
    if v.capacity() < MIN_POOLED {
        if (1..=SMALL_MAX).contains(&v.capacity()) {
            SMALL.with_borrow_mut(|kept| {
                if kept.len() < SMALL_KEPT {
                    v.clear();
                    v.reserve_exact(SMALL_MAX);
                    kept.push(v);
                }
            });
        }
        return;
    }
    let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    if pool.bytes + v.capacity() <= MAX_POOLED_BYTES {
        pool.bytes += v.capacity();
        pool.free.push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_with_the_asked_length() {
        let mut a = take(200_000);
        a[0] = 7;
        let ptr = a.as_ptr();
        give(a);
        let b = take(150_000);
        assert_eq!(b.len(), 150_000);
        // Another test may have taken it meanwhile; when it is ours, it is reused.
        if b.as_ptr() == ptr {
            assert_eq!(b[0], 7);
        }
        give(b);
        assert_eq!(take(10).len(), 10);
    }
}
