//! Data sieving on the server: a request of many small pieces close
//! together is served with one read (and, for writes, one write-back) of
//! the extent that covers them, instead of one system call per piece.
//!
//! ROMIO does this on the client, where it needs file locks, because other
//! processes may write the holes in between. Here the data server is the
//! only writer of its objects and serializes a sieving write against every
//! other write to the object (`Object::rmw`), so nothing written into the
//! holes can be lost.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use weft_wire::Piece;

/// Fewer pieces than this are cheaper one call each.
const MIN_PIECES: usize = 8;
/// Pieces this large on average are cheaper one call each than copied
/// twice more through an extent buffer.
const MAX_MEAN_PIECE: u64 = 2048;
/// Largest extent read (and written back) at once.
const MAX_EXTENT: u64 = 4 << 20;
/// The extent may be at most this many times the bytes asked for: sieving
/// a sparse request would move more bytes than it saves calls.
const MAX_SPARSENESS: u64 = 4;

/// The extent `(start, len)` to sieve, if the pieces are many, sorted,
/// disjoint and dense enough.
pub fn sieve_extent(pieces: &[Piece]) -> Option<(u64, u64)> {
    if pieces.len() < MIN_PIECES {
        return None;
    }
    let mut total = 0u64;
    for w in pieces.windows(2) {
        if w[0].offset + w[0].len > w[1].offset {
            return None;
        }
    }
    for p in pieces {
        total += p.len;
    }
    let start = pieces[0].offset;
    let last = pieces[pieces.len() - 1];
    let len = last.offset + last.len - start;
    let small = total < MAX_MEAN_PIECE * pieces.len() as u64;
    (small && len <= MAX_EXTENT && len <= total.saturating_mul(MAX_SPARSENESS)).then_some((start, len))
}

/// Reads `[start, start + len)` (zeros past the object's end) into `buf`.
fn read_extent(f: &File, size: u64, (start, len): (u64, u64), buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    buf.resize(len as usize, 0);
    let avail = size.saturating_sub(start).min(len) as usize;
    let mut done = 0;
    while done < avail {
        match f.read_at(&mut buf[done..avail], start + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Where each piece sits: (position in the extent buffer, position in the
/// payload, length), pieces in list order.
fn places(extent: (u64, u64), pieces: &[Piece]) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    let mut pos = 0usize;
    pieces.iter().map(move |p| {
        let place = ((p.offset - extent.0) as usize, pos, p.len as usize);
        pos += p.len as usize;
        place
    })
}

/// Patches the pieces (payload in list order) into the extent and writes
/// it back. The caller holds the object's `rmw` lock exclusively.
pub fn write(f: &File, extent: (u64, u64), pieces: &[Piece], payload: &[u8]) -> io::Result<()> {
    let size = f.metadata()?.len();
    let mut buf = Vec::new();
    read_extent(f, size, extent, &mut buf)?;
    for (at, pos, len) in places(extent, pieces) {
        buf[at..at + len].copy_from_slice(&payload[pos..pos + len]);
    }
    f.write_all_at(&buf, extent.0)
}

/// Reads the extent once and copies the pieces out, in list order.
pub fn read(f: &File, size: u64, extent: (u64, u64), pieces: &[Piece], out: &mut [u8]) -> io::Result<()> {
    let mut buf = Vec::new();
    read_extent(f, size, extent, &mut buf)?;
    for (at, pos, len) in places(extent, pieces) {
        out[pos..pos + len].copy_from_slice(&buf[at..at + len]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(v: &[(u64, u64)]) -> Vec<Piece> {
        v.iter().map(|&(offset, len)| Piece { offset, len }).collect()
    }

    #[test]
    fn only_many_dense_sorted_disjoint_pieces_are_sieved() {
        let dense: Vec<(u64, u64)> = (0..10).map(|i| (i * 16, 8)).collect();
        assert_eq!(sieve_extent(&pieces(&dense)), Some((0, 152)));
        assert_eq!(sieve_extent(&pieces(&dense[..5])), None, "too few");
        let sparse: Vec<(u64, u64)> = (0..10).map(|i| (i * 64, 8)).collect();
        assert_eq!(sieve_extent(&pieces(&sparse)), None, "too sparse");
        let mut unsorted = dense.clone();
        unsorted.swap(2, 3);
        assert_eq!(sieve_extent(&pieces(&unsorted)), None);
        let mut overlapping = dense.clone();
        overlapping[4].1 = 20;
        assert_eq!(sieve_extent(&pieces(&overlapping)), None);
        let large: Vec<(u64, u64)> = (0..10).map(|i| (i * 6480, 3240)).collect();
        assert_eq!(sieve_extent(&pieces(&large)), None, "pieces large enough for one call each");
        let wide: Vec<(u64, u64)> = (0..10).map(|i| (i * (1 << 20), 1000)).collect();
        assert_eq!(sieve_extent(&pieces(&wide)), None, "extent too large");
    }
}
