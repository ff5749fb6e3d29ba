//! Edge colouring of a bipartite multigraph with Δ colours (König's
//! theorem), by alternating-path flips. In the unit-transfer model the
//! colours are time slots: no two transfers of one colour share a client or
//! a server, so a colouring with Δ colours is a schedule of length Δ, the
//! lower bound.
//!
//! Cost: O(E · V) worst case; at 1,000 clients x 8 servers x 4 blocks
//! (32,000 edges) it takes milliseconds.

/// Colours the edges `(left, right)` of a bipartite multigraph with
/// `max degree` colours; returns each edge's colour, in input order.
pub fn edge_colouring(left: usize, right: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut degree = vec![0usize; left + right];
    for &(u, v) in edges {
        degree[u] += 1;
        degree[left + v] += 1;
    }
    let delta = degree.iter().copied().max().unwrap_or(0);
    // at[vertex][colour] = the edge of that colour at that vertex.
    let mut at: Vec<Vec<Option<usize>>> = vec![vec![None; delta]; left + right];
    let mut colour = vec![usize::MAX; edges.len()];
    let ends = |e: usize| (edges[e].0, left + edges[e].1);
    for e in 0..edges.len() {
        let (u, v) = ends(e);
        let a = (0..delta).find(|&c| at[u][c].is_none()).expect("u has a free colour: its degree is at most delta");
        let b = (0..delta).find(|&c| at[v][c].is_none()).expect("v has a free colour");
        if at[v][a].is_some() {
            // Flip the a/b path from v; it cannot reach u (bipartite, a free
            // at u), and afterwards a is free at v.
            let mut path = Vec::new();
            let (mut cur, mut c) = (v, a);
            while let Some(f) = at[cur][c] {
                path.push(f);
                let (x, y) = ends(f);
                cur = if x == cur { y } else { x };
                c = if c == a { b } else { a };
            }
            for &f in &path {
                let (x, y) = ends(f);
                at[x][colour[f]] = None;
                at[y][colour[f]] = None;
            }
            for &f in &path {
                let (x, y) = ends(f);
                colour[f] = if colour[f] == a { b } else { a };
                at[x][colour[f]] = Some(f);
                at[y][colour[f]] = Some(f);
            }
        }
        debug_assert!(at[u][a].is_none() && at[v][a].is_none());
        colour[e] = a;
        at[u][a] = Some(e);
        at[v][a] = Some(e);
    }
    colour
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn colouring_is_proper_with_max_degree_colours(
            left in 1usize..12, right in 1usize..6,
            raw in proptest::collection::vec((0usize..100, 0usize..100), 0..120),
        ) {
            let edges: Vec<(usize, usize)> = raw.iter().map(|&(a, b)| (a % left, b % right)).collect();
            let c = edge_colouring(left, right, &edges);
            let mut deg = vec![0usize; left + right];
            for &(u, v) in &edges { deg[u] += 1; deg[left + v] += 1; }
            let delta = deg.iter().copied().max().unwrap_or(0);
            let mut seen = std::collections::HashSet::new();
            for (e, &(u, v)) in edges.iter().enumerate() {
                prop_assert!(c[e] < delta);
                prop_assert!(seen.insert((u, c[e])), "client {u} has two edges of colour {}", c[e]);
                prop_assert!(seen.insert((left + v, c[e])), "server {v} has two edges of colour {}", c[e]);
            }
        }
    }
}
