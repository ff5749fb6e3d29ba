//! One access's memory: where the caller's buffer lies (from the address,
//! the count and the memory datatype), and the move between it and the
//! file, straight from the buffer when its bytes are all the access's,
//! through a packed buffer otherwise. Split in two so that a nonblocking
//! access checks its arguments in the caller's thread and moves its bytes
//! in a worker's ([`crate::posted`]).

use crate::errors::{Class, Fail, Result};
use crate::file::{Buf, OpenFile, Position};
use crate::memory::{self, memory_span};
use weft_client::Datatype;

/// The memory of an access: its first byte's address, the bytes it spans,
/// the memory type shifted to start there, and how its pieces lie.
#[derive(Debug, Clone)]
pub struct Placed {
    at: usize,
    span: usize,
    shifted: Datatype,
    layout: memory::Layout,
}

impl Placed {
    /// Places `count` copies of `memtype` at `buf`: checks the count and
    /// that every byte lies inside the address space.
    pub fn new(buf: *mut u8, count: i64, memtype: &Datatype) -> Result<Placed> {
        if count < 0 {
            return Err(Fail::new(Class::Count, format!("weft: negative count {count}")));
        }
        let (lb, span, shifted) = memory_span(memtype, count)?;
        let span = usize::try_from(span).ok().filter(|&s| s <= isize::MAX as usize).ok_or_else(|| Fail::new(Class::Count, "weft: access larger than memory"))?;
        if span > 0 && buf.is_null() && lb == 0 {
            return Err(Fail::new(Class::Arg, "weft: NULL buffer"));
        }
        let at = (buf as usize)
            .checked_add_signed(lb as isize)
            .filter(|a| a.checked_add(span).is_some())
            .ok_or_else(|| Fail::new(Class::Arg, "weft: the datatype places data outside the address space"))?;
        let layout = memory::layout(&shifted, span);
        Ok(Placed { at, span, shifted, layout })
    }

    /// The memory type, shifted to start at the first byte.
    pub fn memtype(&self) -> &Datatype {
        &self.shifted
    }
}

/// Runs one access of `f` (see [`OpenFile::access`]) on the placed memory,
/// or on nothing when `placed` is an error (a collective still takes part).
/// Returns the bytes moved.
///
/// # Safety
/// The memory `placed` describes is the caller's for the whole call:
/// readable, and for a read writable, with nothing else touching it.
pub unsafe fn perform(f: &OpenFile, pos: Position, collective: bool, write: bool, placed: &Result<Placed>) -> Result<u64> {
    let (c, w) = (collective, write);
    match placed {
        Err(e) => f.access(pos, c, w, Err(e.clone())),
        Ok(Placed { span: 0, shifted, .. }) => {
            let b = if w { Buf::Write(&[]) } else { Buf::Read(&mut []) };
            f.access(pos, c, w, Ok((b, shifted)))
        }
        // Pieces with memory between them that is not the access's: moved
        // through a buffer of the data alone (`memory`). A problem here
        // still lets the rank take part in a collective.
        Ok(Placed { at, shifted, layout, .. }) if *layout != memory::Layout::Whole => {
            let overlaps = *layout == memory::Layout::Gaps { overlaps: true };
            let dense = i64::try_from(shifted.size())
                .map_err(|_| Fail::new(Class::Count, "weft: access larger than memory"))
                .and_then(|n| Datatype::contiguous(n, &Datatype::byte()).map_err(|e| Fail::new(Class::Count, format!("weft: {e}"))));
            if w {
                // SAFETY: the caller's memory of the access, readable
                // (contract): every piece of the type placed at `at`.
                let data = dense.and_then(|t| unsafe { memory::gather(*at, shifted) }.map(|d| (d, t)));
                f.access(pos, c, w, data.as_ref().map(|(d, t)| (Buf::Write(d), t)).map_err(Clone::clone))
            } else {
                let mut data = match overlaps {
                    true => Err(Fail::new(Class::Type, "weft: bad memory datatype: the pieces of a read's memory type overlap")),
                    false => dense.and_then(|t| memory::buffer(shifted.size()).map(|d| (d, t))),
                };
                let moved = f.access(pos, c, w, data.as_mut().map(|(d, t)| (Buf::Read(d), &*t)).map_err(|e| e.clone()))?;
                if let Ok((d, _)) = &data {
                    // SAFETY: as above, and writable for a read (contract).
                    unsafe { memory::scatter(*at, shifted, &d[..(moved as usize).min(d.len())]) };
                }
                Ok(moved)
            }
        }
        Ok(Placed { at, span, shifted, .. }) if w => {
            // SAFETY: the caller's memory of the access, readable
            // (contract); `at` is its first byte, `span` its extent, every
            // byte of it the access's (no gaps).
            let b = unsafe { std::slice::from_raw_parts(*at as *const u8, *span) };
            f.access(pos, c, w, Ok((Buf::Write(b), shifted)))
        }
        Ok(Placed { at, span, shifted, .. }) => {
            // SAFETY: as above, and writable for a read (contract).
            let b = unsafe { std::slice::from_raw_parts_mut(*at as *mut u8, *span) };
            f.access(pos, c, w, Ok((Buf::Read(b), shifted)))
        }
    }
}
