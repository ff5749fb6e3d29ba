//! The order an access's requests are sent in (paper 000's decentralized
//! scheduling): the schedule's strategy, or an edge colouring of the whole
//! group's transfers when every member's access is known.

use super::File;
use crate::{Result, Schedule};
use weft_layout::Segment;
use weft_sched::{edge_colouring, order, Strategy};
use super::plan::Chunk;

impl File {
    /// The sending order of `chunks` (in file order) under `sched`, with
    /// each chunk's slot (its colour, or its position in the order).
    pub(super) fn order(&self, chunks: &[Chunk], sched: &Schedule) -> Result<Vec<(usize, u32)>> {
        let servers: Vec<usize> = chunks.iter().map(|c| c.server).collect();
        if sched.strategy == Strategy::Colour
            && let Some(colours) = self.colours(&servers, sched)?
        {
            let mut o: Vec<(usize, u32)> = colours.into_iter().enumerate().map(|(k, c)| (k, c as u32)).collect();
            o.sort_by_key(|&(k, c)| (c, k));
            return Ok(o);
        }
        let seed = u64::from(sched.rank) ^ self.attr.id.0.rotate_left(17);
        let o = order(sched.strategy, sched.rank as usize, self.servers.len(), &servers, seed);
        Ok(o.into_iter().enumerate().map(|(pos, k)| (k, pos as u32)).collect())
    }

    /// Colours of this client's chunks in an edge colouring of the whole
    /// group's transfer graph, which every member computes alike from the
    /// same `group_accesses`. `None` (order like hash) if the accesses are
    /// not given or this access is not the one listed for this rank.
    fn colours(&self, mine: &[usize], sched: &Schedule) -> Result<Option<Vec<usize>>> {
        let Some(acc) = &sched.group_accesses else { return Ok(None) };
        let mut edges = Vec::new();
        let mut own = Vec::new();
        for (member, &(off, len)) in acc.iter().enumerate() {
            let chunks = self.plan(&[Segment { file: off, mem: 0, len }], sched.block)?;
            for c in chunks {
                if member == sched.rank as usize {
                    own.push(c.server);
                }
                edges.push((member, c.server));
            }
        }
        if own != mine {
            return Ok(None);
        }
        let colours = edge_colouring(acc.len(), self.servers.len(), &edges);
        let start = edges.iter().position(|e| e.0 == sched.rank as usize).unwrap_or(0);
        Ok(Some(colours[start..start + own.len()].to_vec()))
    }

    /// The requests a write of `[offset, offset + len)` under `sched` would
    /// send, in sending order: (server index in the layout, file offset of
    /// the first byte, bytes, slot). The slot is the block's colour for the
    /// colour strategy, else its position. For tests and for seeing what a
    /// hint does.
    pub fn send_order(&self, offset: u64, len: u64, sched: &Schedule) -> Result<Vec<(usize, u64, u64, u32)>> {
        let plan = self.plan(&[Segment { file: offset, mem: 0, len }], sched.block)?;
        Ok(self.order(&plan, sched)?.into_iter().map(|(k, slot)| (plan[k].server, plan[k].first, plan[k].len, slot)).collect())
    }
}
