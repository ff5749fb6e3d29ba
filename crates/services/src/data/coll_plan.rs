//! How a data server performs one round of a server-directed collective
//! (paper 001's disk-directed I/O): every member's pieces merged and sorted
//! by object offset, then cut into runs of back-to-back pieces, each run
//! one vectored disk operation over the members' buffers. The disk sees one
//! forward sweep of few large operations, whatever order and size the
//! members' pieces had. Pure: no files, no threads.

use weft_wire::Piece;

/// Most buffers in one vectored operation (Linux's `IOV_MAX`).
pub const MAX_IOVECS: usize = 1024;

/// A piece of one member: its index in the round's member list, the
/// piece's index in that member's list, and where its bytes sit in that
/// member's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub member: usize,
    pub piece: usize,
    pub at: usize,
    pub len: usize,
}

/// Back-to-back pieces starting at object offset `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoRun {
    pub offset: u64,
    pub len: u64,
    pub parts: Vec<Part>,
}

/// The runs of a round, in object order. A piece that overlaps the one
/// before it starts a new run, so overlapping writes land in (offset,
/// member) order. Empty pieces are left out.
pub fn plan(members: &[&[Piece]]) -> Vec<IoRun> {
    let mut all: Vec<(u64, Part)> = Vec::with_capacity(members.iter().map(|m| m.len()).sum());
    for (member, pieces) in members.iter().enumerate() {
        let mut at = 0usize;
        for (piece, p) in pieces.iter().enumerate() {
            if p.len > 0 {
                all.push((p.offset, Part { member, piece, at, len: p.len as usize }));
            }
            at += p.len as usize;
        }
    }
    // Stable: a member's own pieces at one offset keep their list order.
    all.sort_by_key(|&(offset, part)| (offset, part.member));
    let mut runs: Vec<IoRun> = Vec::new();
    for (offset, part) in all {
        match runs.last_mut() {
            Some(r) if r.offset + r.len == offset && r.parts.len() < MAX_IOVECS => {
                r.len += part.len as u64;
                r.parts.push(part);
            }
            _ => runs.push(IoRun { offset, len: part.len as u64, parts: vec![part] }),
        }
    }
    runs
}

/// For each run, the members whose last piece it holds: they can be
/// answered once it is done. A member with no bytes finishes before the
/// first run (listed in `idle`).
pub fn finishing(runs: &[IoRun], members: usize) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut last = vec![None; members];
    for (k, r) in runs.iter().enumerate() {
        for p in &r.parts {
            last[p.member] = Some(k);
        }
    }
    let mut by_run = vec![Vec::new(); runs.len()];
    let mut idle = Vec::new();
    for (m, l) in last.into_iter().enumerate() {
        match l {
            Some(k) => by_run[k].push(m),
            None => idle.push(m),
        }
    }
    (idle, by_run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Applies a round of writes by the plan and naively (each member's
    /// pieces in member order, then list order, sorted by offset with
    /// member as tie-break), over a small object.
    fn both(members: &[Vec<Piece>]) -> (Vec<u8>, Vec<u8>) {
        let refs: Vec<&[Piece]> = members.iter().map(|m| &m[..]).collect();
        let data: Vec<Vec<u8>> = members.iter().enumerate().map(|(m, ps)| (0..ps.iter().map(|p| p.len as usize).sum::<usize>()).map(|i| (m * 50 + i % 50) as u8 + 1).collect()).collect();
        let mut planned = vec![0u8; 512];
        for r in plan(&refs) {
            let mut at = r.offset as usize;
            for p in &r.parts {
                planned[at..at + p.len].copy_from_slice(&data[p.member][p.at..p.at + p.len]);
                at += p.len;
            }
            assert_eq!(at as u64, r.offset + r.len, "a run's parts fill it exactly");
        }
        let mut naive = vec![0u8; 512];
        let mut all = Vec::new();
        for (m, ps) in members.iter().enumerate() {
            let mut at = 0;
            for p in ps {
                all.push((p.offset, m, at, p.len as usize));
                at += p.len as usize;
            }
        }
        all.sort_by_key(|&(o, m, _, _)| (o, m));
        for (o, m, at, len) in all {
            naive[o as usize..o as usize + len].copy_from_slice(&data[m][at..at + len]);
        }
        (planned, naive)
    }

    #[test]
    fn interleaved_members_make_one_run() {
        // Three members with 8-byte records interleaved: one sweep.
        let members: Vec<Vec<Piece>> = (0..3u64).map(|m| (0..4u64).map(|i| Piece { offset: 8 * (3 * i + m), len: 8 }).collect()).collect();
        let refs: Vec<&[Piece]> = members.iter().map(|m| &m[..]).collect();
        let runs = plan(&refs);
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].offset, runs[0].len, runs[0].parts.len()), (0, 96, 12));
        let (idle, by_run) = finishing(&runs, 4);
        assert_eq!(idle, [3]);
        assert_eq!(by_run, [vec![0, 1, 2]]);
    }

    proptest! {
        #[test]
        fn the_plan_writes_what_naive_order_writes(
            members in proptest::collection::vec(proptest::collection::vec((0u64..480, 0u64..32), 0..12), 1..6),
        ) {
            let members: Vec<Vec<Piece>> = members.into_iter().map(|ps| ps.into_iter().map(|(o, l)| Piece { offset: o, len: l }).collect()).collect();
            let (planned, naive) = both(&members);
            prop_assert_eq!(planned, naive);
            let refs: Vec<&[Piece]> = members.iter().map(|m| &m[..]).collect();
            let runs = plan(&refs);
            prop_assert!(runs.windows(2).all(|w| w[0].offset <= w[1].offset), "object order");
            let parts: usize = runs.iter().map(|r| r.parts.len()).sum();
            prop_assert_eq!(parts, members.iter().flatten().filter(|p| p.len > 0).count(), "every piece once");
            let (idle, by_run) = finishing(&runs, members.len());
            prop_assert_eq!(idle.len() + by_run.iter().map(Vec::len).sum::<usize>(), members.len(), "every member answered once");
        }

        /// Many back-to-back pieces (members' records interleaved): runs
        /// never exceed one vectored operation's buffers, and together
        /// cover the sweep exactly, in as few runs as the cap allows.
        #[test]
        fn runs_stay_within_one_vectored_operation(members in 1usize..5, per_member in 1usize..1500, record in 1u64..9) {
            let pieces: Vec<Vec<Piece>> = (0..members).map(|m| (0..per_member).map(|i| Piece { offset: (i * members + m) as u64 * record, len: record }).collect()).collect();
            let refs: Vec<&[Piece]> = pieces.iter().map(|m| &m[..]).collect();
            let runs = plan(&refs);
            let total = members * per_member;
            prop_assert!(runs.iter().all(|r| r.parts.len() <= MAX_IOVECS));
            prop_assert_eq!(runs.len(), total.div_ceil(MAX_IOVECS));
            let mut at = 0;
            for r in &runs {
                prop_assert_eq!(r.offset, at);
                at += r.len;
            }
            prop_assert_eq!(at, total as u64 * record);
        }
    }
}
