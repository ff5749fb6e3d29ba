//! The request planner, pure: an access's segments become requests
//! ([`Chunk`]s), each one server's pieces of the file with the caller's
//! buffer ranges that fill them. No I/O: [`super::File`] plans, orders
//! (`order.rs`) and sends (`transfer.rs`).

use crate::{Error, Result};
use weft_layout::{Segment, Striping};
use weft_wire::Piece;

/// One request: a server, the object pieces it covers (in the order the
/// payload carries them), and the caller's buffer ranges that fill them.
pub(crate) struct Chunk {
    pub(crate) server: usize,
    /// File offset of the chunk's first byte: its place in file order.
    pub(crate) first: u64,
    pub(crate) pieces: Vec<Piece>,
    pub(crate) mem: Vec<(usize, usize)>,
    pub(crate) len: u64,
}

/// Memory pieces this small on average are copied through one buffer per
/// request: a copy of a few bytes is cheaper than an iovec for it.
const PACK_BELOW: u64 = 256;

impl Chunk {
    pub(crate) fn packed(&self) -> bool {
        self.mem.len() > 16 && self.len < PACK_BELOW * self.mem.len() as u64
    }
}

/// Groups an access's segments into requests: per server, pieces are
/// appended in stream order and joined when they touch (list I/O); a
/// request is closed at `block` bytes or `most_pieces` pieces. Without
/// list I/O every stripe piece is a request of its own. Chunks come out in
/// file order (of their first byte). A segment whose end overflows is an
/// error; a zero block or piece cap counts as one.
pub(crate) fn plan(striping: &Striping, segments: &[Segment], block: u64, most_pieces: usize, list_io: bool) -> Result<Vec<Chunk>> {
    let max = block.max(1);
    let max_pieces = if list_io { most_pieces.max(1) } else { 1 };
    let mut open: Vec<Option<Chunk>> = (0..striping.count()).map(|_| None).collect();
    let mut out = Vec::new();
    for seg in segments {
        seg.file.checked_add(seg.len).ok_or_else(|| Error::BadRequest(format!("access at {} + {} overflows", seg.file, seg.len)))?;
        let mut mem = seg.mem;
        let mut file = seg.file;
        for (server, mut obj, mut len) in striping.walk(seg.file, seg.len) {
            while len > 0 {
                let c = open[server].get_or_insert_with(|| Chunk { server, first: file, pieces: Vec::new(), mem: Vec::new(), len: 0 });
                let take = len.min(max - c.len);
                match c.pieces.last_mut() {
                    Some(p) if list_io && p.offset + p.len == obj => p.len += take,
                    _ => c.pieces.push(Piece { offset: obj, len: take }),
                }
                match c.mem.last_mut() {
                    Some(m) if m.0 + m.1 == mem => m.1 += take as usize,
                    _ => c.mem.push((mem, take as usize)),
                }
                c.len += take;
                if c.len == max || c.pieces.len() == max_pieces {
                    out.push(open[server].take().expect("open chunk"));
                }
                obj += take;
                mem += take as usize;
                file += take;
                len -= take;
            }
        }
    }
    out.extend(open.into_iter().flatten());
    out.sort_by_key(|c| c.first);
    Ok(out)
}

/// Bytes of an access's stream (its segments in order) that lie before
/// `eof`: a read at the end of the file counts exactly these.
pub(crate) fn bytes_before(segments: &[Segment], eof: u64) -> u64 {
    let mut read = 0;
    for s in segments {
        if s.file >= eof {
            break;
        }
        read += s.len.min(eof - s.file);
        if s.file + s.len > eof {
            break;
        }
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Where each byte of the access goes: (server, object offset, buffer
    /// offset), from the chunks.
    fn placed(chunks: &[Chunk]) -> Vec<(usize, u64, usize)> {
        let mut all = Vec::new();
        for c in chunks {
            let objs = c.pieces.iter().flat_map(|p| p.offset..p.offset + p.len);
            let mems = c.mem.iter().flat_map(|&(o, l)| o..o + l);
            let (objs, mems): (Vec<u64>, Vec<usize>) = (objs.collect(), mems.collect());
            assert_eq!(objs.len(), mems.len(), "a chunk's pieces and buffer ranges differ in length");
            assert_eq!(objs.len() as u64, c.len);
            all.extend(objs.into_iter().zip(mems).map(|(o, m)| (c.server, o, m)));
        }
        all.sort_unstable();
        all
    }

    /// The same, byte by byte from the striping alone.
    fn reference(striping: &Striping, segments: &[Segment]) -> Vec<(usize, u64, usize)> {
        let mut all = Vec::new();
        for s in segments {
            for i in 0..s.len {
                let (server, obj, _) = striping.walk(s.file + i, 1).next().unwrap();
                all.push((server, obj, s.mem + i as usize));
            }
        }
        all.sort_unstable();
        all
    }

    proptest! {
        /// Every byte goes to its striping's server and object offset from
        /// its buffer offset, once; no request passes the block or the
        /// piece cap; requests come in file order; list I/O off gives one
        /// piece per request.
        #[test]
        fn chunks_place_every_byte_once_within_the_caps(
            stripe in 1u64..64, count in 1usize..5,
            segs in proptest::collection::vec((0u64..600, 0u64..150), 0..10),
            block in 0u64..200, most in 0usize..6, list_io: bool,
        ) {
            let striping = Striping::new(stripe, count).unwrap();
            let mut mem = 0;
            let segments: Vec<Segment> = segs.iter().map(|&(file, len)| { let s = Segment { file, mem, len }; mem += len as usize; s }).collect();
            let chunks = plan(&striping, &segments, block, most, list_io).unwrap();
            prop_assert_eq!(placed(&chunks), reference(&striping, &segments));
            for c in &chunks {
                prop_assert!(c.len >= 1 && c.len <= block.max(1));
                let cap = if list_io { most.max(1) } else { 1 };
                prop_assert!(c.pieces.len() <= cap);
                prop_assert!(c.server < count);
            }
            prop_assert!(chunks.windows(2).all(|w| w[0].first <= w[1].first));
        }
    }

    #[test]
    fn an_access_past_the_largest_offset_is_refused() {
        let striping = Striping::new(4, 2).unwrap();
        let r = plan(&striping, &[Segment { file: u64::MAX - 1, mem: 0, len: 4 }], 16, 8, true);
        assert!(matches!(r, Err(Error::BadRequest(_))));
    }
}
