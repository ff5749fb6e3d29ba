//! The nodes of a job: a host file (Open MPI's `host slots=N` or MPICH's
//! `host:N` lines) or Slurm's compressed node list (`n[1-4,7],io01`). One
//! server runs per distinct host, in the order first named: rank k on
//! host k, so an error can name the node of a rank that never came up.

use super::rank::MAX_SERVERS;

/// Longest host name accepted (a DNS name is at most 253 bytes).
const MAX_HOST_LEN: usize = 253;

/// Whether `h` is a plain host name or address. Host names reach a remote
/// shell (ssh), so nothing a shell would interpret gets through.
pub fn valid_host(h: &str) -> bool {
    !h.is_empty() && h.len() <= MAX_HOST_LEN && !h.starts_with('-') && h.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// The distinct hosts of a host file, in order. Errors name the line.
pub fn parse_hostfile(text: &str) -> Result<Vec<String>, String> {
    let mut hosts: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some(first) = line.split_whitespace().next() else { continue };
        let host = first.split(':').next().unwrap_or(first);
        if !valid_host(host) {
            return Err(format!("line {}: {host:?} is not a host name", n + 1));
        }
        if seen.insert(host.to_string()) {
            if hosts.len() >= MAX_SERVERS as usize {
                return Err(format!("more than {MAX_SERVERS} hosts"));
            }
            hosts.push(host.to_string());
        }
    }
    if hosts.is_empty() {
        return Err("no hosts in it".into());
    }
    Ok(hosts)
}

/// Splits at commas outside brackets.
fn top_level_items(list: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut items) = (0usize, 0usize, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or_else(|| format!("unbalanced ']' in {list:?}"))?,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced '[' in {list:?}"));
    }
    items.push(&list[start..]);
    Ok(items)
}

/// Expands a Slurm node list (`SLURM_JOB_NODELIST`): `n[1-3,05]` gives
/// n1, n2, n3, n05 (zero padding kept from the range's first number).
pub fn expand_nodelist(list: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for item in top_level_items(list.trim())? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        expand_item(item, &mut out)?;
    }
    if out.is_empty() {
        return Err(format!("no nodes in {list:?}"));
    }
    // One server per node, however often the list names it.
    let mut seen = std::collections::HashSet::new();
    out.retain(|n| seen.insert(n.clone()));
    Ok(out)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        if !valid_host(item) {
            return Err(format!("{item:?} is not a node name"));
        }
        out.push(item.to_string());
        return Ok(());
    };
    let close = open + item[open..].find(']').ok_or_else(|| format!("unbalanced '[' in {item:?}"))?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let width = lo.len();
        let bad = || format!("{range:?} in {item:?} is not a range of node numbers");
        let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        if a > b || b - a >= u64::from(MAX_SERVERS) {
            return Err(bad());
        }
        for n in a..=b {
            // A later bracket group expands after this one's number.
            expand_item(&format!("{prefix}{n:0width$}{rest}"), out)?;
            if out.len() > MAX_SERVERS as usize {
                return Err(format!("more than {MAX_SERVERS} nodes"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn host_files_of_both_mpis() {
        let text = "# nodes\nn1 slots=4\nn2:8\n\n n3  # login\nn1\n";
        assert_eq!(parse_hostfile(text).unwrap(), ["n1", "n2", "n3"]);
        assert!(parse_hostfile("# only a comment\n").is_err());
        assert!(parse_hostfile("n1\n$(reboot)\n").unwrap_err().contains("line 2"));
        assert!(parse_hostfile("-oProxyCommand=x\n").is_err());
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(expand_nodelist("n[1-3,5]").unwrap(), ["n1", "n2", "n3", "n5"]);
        assert_eq!(expand_nodelist("io[08-10],login").unwrap(), ["io08", "io09", "io10", "login"]);
        assert_eq!(expand_nodelist("r[1-2]c[1-2]").unwrap(), ["r1c1", "r1c2", "r2c1", "r2c2"]);
        assert_eq!(expand_nodelist("single").unwrap(), ["single"]);
        assert_eq!(expand_nodelist("n[1-2],n1").unwrap(), ["n1", "n2"]);
        for bad in ["n[1-", "n[3-1]", "n[a-b]", "n]1[", "", "n[0-99999999]"] {
            assert!(expand_nodelist(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// Compressing numbers into a bracket list and expanding it gives them back.
        #[test]
        fn expansion_inverts_compression(nums in proptest::collection::btree_set(0u32..500, 1..40), width in 1usize..4) {
            let list: Vec<String> = nums.iter().map(|n| format!("{n:0width$}")).collect();
            let compressed = format!("node[{}]", list.join(","));
            let expanded = expand_nodelist(&compressed).unwrap();
            let want: Vec<String> = list.iter().map(|n| format!("node{n}")).collect();
            prop_assert_eq!(expanded, want);
        }
    }
}
