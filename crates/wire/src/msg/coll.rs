//! Server-directed collective I/O (paper 001's disk-directed I/O): the tag
//! that names one participant's part of one collective operation at one
//! data server, and the compact strided form its pieces travel in.
//!
//! # Wire format
//! `CollTag`: `id u64 | participants u32 | member u32 | round u32 |
//! window u64 | flags u8` (bit 0: this member's last round at this server,
//! bit 1: the member abandons the collective; other bits zero).
//!
//! Pieces travel as strided runs: `count u32 | (offset u64 | len u64 |
//! stride u64 | repeat u32) * count`, run k standing for `repeat` pieces of
//! `len` bytes at `offset + i * stride`. A BTIO-like view sends a handful
//! of runs instead of thousands of pieces. Expanded, a list holds at most
//! [`MAX_PIECES`] pieces, and every piece is checked as a plain list's is.

use crate::limits::{MAX_PAYLOAD_LEN, MAX_PIECES};
use crate::msg::data::{pieces_total, Piece};
use crate::{DecodeError, Decoder, Encoder};

/// Most members one collective may have at one server.
pub const MAX_PARTICIPANTS: u32 = 1 << 16;

/// Largest memory window a collective may ask a server to hold at once.
pub const MAX_WINDOW: u64 = 1 << 30;

const LAST: u8 = 1;
const ABANDON: u8 = 2;

/// One participant's request in one round of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollTag {
    /// Chosen by the collective's first rank; the same at every member.
    pub id: u64,
    /// Members sending to this server (ranks with pieces here).
    pub participants: u32,
    /// This member's index among them, `< participants`.
    pub member: u32,
    /// Rounds of one member at one server go 0, 1, 2, ... one at a time.
    pub round: u32,
    /// Bytes the server may hold for this collective at once; each member
    /// sends at most `window / participants` (rounded up) per round.
    pub window: u64,
    /// No more rounds from this member at this server.
    pub last: bool,
    /// The member gives up (it failed elsewhere): the collective fails.
    pub abandon: bool,
}

impl CollTag {
    /// Most bytes one member's request may carry in a round.
    pub fn member_share(&self) -> u64 {
        self.window.div_ceil(u64::from(self.participants.max(1))).min(u64::from(MAX_PAYLOAD_LEN))
    }

    pub fn encode(&self, e: &mut Encoder) {
        e.u64(self.id).u32(self.participants).u32(self.member).u32(self.round).u64(self.window);
        e.u8((u8::from(self.last) * LAST) | (u8::from(self.abandon) * ABANDON));
    }

    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        let (id, participants, member, round, window, flags) = (d.u64()?, d.u32()?, d.u32()?, d.u32()?, d.u64()?, d.u8()?);
        if participants == 0 || participants > MAX_PARTICIPANTS {
            return Err(DecodeError::Invalid("collective participants out of range"));
        }
        if member >= participants {
            return Err(DecodeError::Invalid("collective member outside its participants"));
        }
        if window == 0 || window > MAX_WINDOW {
            return Err(DecodeError::Invalid("collective window out of range"));
        }
        if flags & !(LAST | ABANDON) != 0 {
            return Err(DecodeError::Invalid("reserved collective flags set"));
        }
        Ok(CollTag { id, participants, member, round, window, last: flags & LAST != 0, abandon: flags & ABANDON != 0 })
    }
}

/// `repeat` pieces of `len` bytes, `stride` apart from `offset` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub offset: u64,
    pub len: u64,
    pub stride: u64,
    pub repeat: u32,
}

/// The fewest runs, greedily from the front, that expand to `pieces` in
/// order (pieces of one length at one stride become one run).
pub fn compact(pieces: &[Piece]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for p in pieces {
        if let Some(r) = runs.last_mut()
            && r.len == p.len
            && r.repeat < u32::MAX
        {
            let last = r.offset.saturating_add(r.stride.saturating_mul(u64::from(r.repeat - 1)));
            if r.repeat == 1 && p.offset > r.offset {
                r.stride = p.offset - r.offset;
                r.repeat = 2;
                continue;
            }
            if r.repeat > 1 && p.offset.checked_sub(last) == Some(r.stride) {
                r.repeat += 1;
                continue;
            }
        }
        runs.push(Run { offset: p.offset, len: p.len, stride: 0, repeat: 1 });
    }
    runs
}

/// The pieces `runs` stand for; an error if they are more than
/// [`MAX_PIECES`] or any of them fails the plain list's checks.
pub fn expand(runs: &[Run]) -> Result<Vec<Piece>, DecodeError> {
    let count = runs.iter().try_fold(0usize, |n, r| n.checked_add(r.repeat as usize).filter(|&n| n <= MAX_PIECES));
    let Some(count) = count else {
        return Err(DecodeError::TooLong { what: "expanded piece list", len: runs.iter().map(|r| u64::from(r.repeat)).sum(), limit: MAX_PIECES as u64 });
    };
    if runs.iter().any(|r| r.len == 0) {
        // Nothing to move, but each would cost the server a held piece.
        return Err(DecodeError::Invalid("empty piece in a collective request"));
    }
    let mut out = Vec::with_capacity(count);
    for r in runs {
        for i in 0..u64::from(r.repeat) {
            let offset = r.stride.checked_mul(i).and_then(|s| s.checked_add(r.offset)).ok_or(DecodeError::Invalid("strided run overflows"))?;
            out.push(Piece { offset, len: r.len });
        }
    }
    pieces_total(&out)?;
    Ok(out)
}

pub fn encode_runs(e: &mut Encoder, runs: &[Run]) {
    e.u32(runs.len() as u32);
    for r in runs {
        e.u64(r.offset).u64(r.len).u64(r.stride).u32(r.repeat);
    }
}

/// Decodes runs and expands them (checked, see [`expand`]).
pub fn decode_runs(d: &mut Decoder<'_>) -> Result<Vec<Piece>, DecodeError> {
    let n = d.count("run list", MAX_PIECES, 28)?;
    let runs: Vec<Run> = (0..n).map(|_| Ok(Run { offset: d.u64()?, len: d.u64()?, stride: d.u64()?, repeat: d.u32()? })).collect::<Result<_, DecodeError>>()?;
    expand(&runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(pieces: &[Piece]) -> Vec<Piece> {
        let mut e = Encoder::new();
        encode_runs(&mut e, &compact(pieces));
        let b = e.finish();
        let mut d = Decoder::new(&b);
        let back = decode_runs(&mut d).unwrap();
        d.finish().unwrap();
        back
    }

    #[test]
    fn a_strided_view_is_one_run() {
        let pieces: Vec<Piece> = (0..1000).map(|i| Piece { offset: 7 + 3240 * 3 * i, len: 3240 }).collect();
        assert_eq!(compact(&pieces), [Run { offset: 7, len: 3240, stride: 9720, repeat: 1000 }]);
        assert_eq!(round_trip(&pieces), pieces);
    }

    #[test]
    fn hostile_runs_are_refused() {
        let too_many = [Run { offset: 0, len: 1, stride: 1, repeat: MAX_PIECES as u32 }, Run { offset: 0, len: 1, stride: 0, repeat: 1 }];
        assert!(matches!(expand(&too_many), Err(DecodeError::TooLong { .. })));
        let overflow = [Run { offset: 1 << 61, len: 1, stride: u64::MAX / 2, repeat: 3 }];
        assert!(expand(&overflow).is_err());
        let past_end = [Run { offset: 0, len: 8, stride: 1 << 61, repeat: 3 }];
        assert!(expand(&past_end).is_err(), "a piece past the largest object end");
        assert!(expand(&[Run { offset: 0, len: 0, stride: 1, repeat: 65_000 }]).is_err(), "empty pieces");
        let huge_total = [Run { offset: 0, len: u64::from(MAX_PAYLOAD_LEN), stride: 0, repeat: 2 }];
        assert!(expand(&huge_total).is_err());
        let mut e = Encoder::new();
        e.u32(u32::MAX);
        let b = e.finish();
        assert!(decode_runs(&mut Decoder::new(&b)).is_err(), "a count past the bytes present");
    }

    #[test]
    fn tags_check_their_fields() {
        let t = CollTag { id: 9, participants: 4, member: 3, round: 2, window: 1 << 20, last: true, abandon: false };
        let mut e = Encoder::new();
        t.encode(&mut e);
        let b = e.finish();
        assert_eq!(b.len(), 29);
        assert_eq!(CollTag::decode(&mut Decoder::new(&b)).unwrap(), t);
        assert_eq!(t.member_share(), 1 << 18);
        let bad = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = b.clone();
            f(&mut b);
            CollTag::decode(&mut Decoder::new(&b)).is_err()
        };
        assert!(bad(&|b| b[12..16].copy_from_slice(&4u32.to_le_bytes())), "member == participants");
        assert!(bad(&|b| b[8..12].copy_from_slice(&0u32.to_le_bytes())), "no participants");
        assert!(bad(&|b| b[20..28].copy_from_slice(&0u64.to_le_bytes())), "empty window");
        assert!(bad(&|b| b[28] = 4), "reserved flag");
    }

    proptest! {
        #[test]
        fn runs_expand_to_exactly_the_pieces(raw in proptest::collection::vec((0u64..1 << 20, 0u64..64), 0..200), strided in any::<bool>()) {
            let pieces: Vec<Piece> = if strided {
                // Mostly regular, as views give: runs must form.
                raw.iter().enumerate().map(|(i, &(o, l))| Piece { offset: (i as u64 / 7) * 1000 + (i as u64 % 7) * 100 + o % 2, len: l % 3 + 1 }).collect()
            } else {
                raw.iter().map(|&(o, l)| Piece { offset: o, len: l + 1 }).collect()
            };
            prop_assert_eq!(round_trip(&pieces), pieces.clone());
            prop_assert!(compact(&pieces).len() <= pieces.len());
        }
    }
}
