//! Per-kind request counters and latency histograms, kept with relaxed
//! atomics so that counting costs a served request a few instructions and
//! no lock (the message layer's instruction budget, issue 24).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft_wire::{CpuKind, CPU_KINDS};

/// Upper bounds (µs) of the latency histogram's buckets, Prometheus's
/// `le`: from a cached metadata lookup (tens of µs) to an fsync'd write
/// on a slow disk (seconds). Above the last: the `+Inf` bucket.
pub const BUCKETS_US: [u64; 16] = [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 10_000_000];

#[derive(Default)]
struct KindCounters {
    requests: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    latency_us: AtomicU64,
    /// Not cumulative: request counts per bucket, `+Inf` last.
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
}

/// What one kind of request has cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindSnapshot {
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub latency_us: u64,
    pub buckets: [u64; BUCKETS_US.len() + 1],
}

/// Requests served by the worker pool, by [`CpuKind`], and the pool's queue.
#[derive(Default)]
pub struct RequestMetrics {
    kinds: [KindCounters; CPU_KINDS],
    /// Jobs handed to the pool and not yet taken by a worker.
    queued: AtomicU64,
    /// Jobs a worker is running now.
    running: AtomicU64,
}

impl RequestMetrics {
    pub fn enqueued(&self) {
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dequeued(&self) {
        // Never below zero, even if a job is taken before it was counted.
        let _ = self.queued.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
    }

    pub fn queue_depth(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    /// A worker took a job (it runs until [`RequestMetrics::finished`]).
    pub fn started(&self) {
        self.running.fetch_add(1, Ordering::Relaxed);
    }

    pub fn finished(&self) {
        let _ = self.running.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
    }

    /// Jobs queued or running: 0 when the workers are idle.
    pub fn in_service(&self) -> u64 {
        self.running.load(Ordering::Relaxed) + self.queued.load(Ordering::Relaxed)
    }

    /// One request of `kind` answered `took` after it arrived, having
    /// carried `bytes_in` of payload and answered `bytes_out`.
    pub fn served(&self, kind: CpuKind, bytes_in: u64, bytes_out: u64, took: Duration) {
        let k = &self.kinds[kind as usize];
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        k.requests.fetch_add(1, Ordering::Relaxed);
        k.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        k.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        k.latency_us.fetch_add(us, Ordering::Relaxed);
        k.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self, kind: CpuKind) -> KindSnapshot {
        let k = &self.kinds[kind as usize];
        KindSnapshot {
            requests: k.requests.load(Ordering::Relaxed),
            bytes_in: k.bytes_in.load(Ordering::Relaxed),
            bytes_out: k.bytes_out.load(Ordering::Relaxed),
            latency_us: k.latency_us.load(Ordering::Relaxed),
            buckets: std::array::from_fn(|b| k.buckets[b].load(Ordering::Relaxed)),
        }
    }
}

/// The bucket a latency of `us` falls in: the first bound at or above it
/// (Prometheus buckets are `le`, less than or equal).
pub fn bucket_of(us: u64) -> usize {
    BUCKETS_US.partition_point(|&bound| bound < us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_on_a_bound_counts_in_that_bound_and_past_the_last_in_inf() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(50), 0, "le is inclusive");
        assert_eq!(bucket_of(51), 1);
        assert_eq!(bucket_of(10_000_000), BUCKETS_US.len() - 1);
        assert_eq!(bucket_of(10_000_001), BUCKETS_US.len());
        assert_eq!(bucket_of(u64::MAX), BUCKETS_US.len());
    }

    #[test]
    fn served_requests_add_up_by_kind() {
        let m = RequestMetrics::default();
        m.served(CpuKind::Meta, 10, 20, Duration::from_micros(70));
        m.served(CpuKind::Meta, 1, 2, Duration::from_secs(20));
        m.served(CpuKind::DataWrite, 4096, 0, Duration::from_micros(5));
        let meta = m.snapshot(CpuKind::Meta);
        assert_eq!((meta.requests, meta.bytes_in, meta.bytes_out, meta.latency_us), (2, 11, 22, 20_000_070));
        assert_eq!(meta.buckets[1], 1);
        assert_eq!(meta.buckets[BUCKETS_US.len()], 1);
        assert_eq!(m.snapshot(CpuKind::DataWrite).buckets[0], 1);
        assert_eq!(m.snapshot(CpuKind::Lock), KindSnapshot::default());
        m.dequeued();
        assert_eq!(m.queue_depth(), 0, "never below zero");
        m.enqueued();
        assert_eq!(m.queue_depth(), 1);
    }
}
