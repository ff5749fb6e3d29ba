//! What the servers report of themselves, and waiting on it.

/// The counters of every data server that answers.
pub fn data_stats(c: &weft_client::Client) -> Vec<weft_wire::ServerStats> {
    c.status().into_iter().filter(|s| s.server.services.contains(&weft_net::Service::Data)).filter_map(|s| s.stats.ok()).collect()
}

/// Data objects on every data server, once `done` holds of their count or
/// after 10 s (the count then): the metadata service deletes a removed
/// file's objects shortly after the removal, not before its answer.
pub fn objects_when(c: &weft_client::Client, done: impl Fn(u64) -> bool) -> u64 {
    let count = || -> u64 { data_stats(c).iter().map(|s| s.objects).sum() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = count();
        if done(n) || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Returns once the data servers received nothing for 600 ms (longer than
/// the metadata service's deletion rounds' poll) but the status requests
/// asking (at most 10 s): its deletions of removed files' objects are done.
pub fn data_servers_quiet(c: &weft_client::Client) {
    let count = || -> (u64, u64) {
        let data = data_stats(c);
        (data.iter().map(|s| s.requests).sum(), data.len() as u64)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (mut last, _) = count();
    let mut quiet = 0;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (now, servers) = count();
        quiet = if now == last + servers { quiet + 1 } else { 0 };
        if quiet == 6 {
            return;
        }
        last = now;
    }
}

/// Requests the metadata server has received so far (a status request,
/// counted too, asks).
pub fn meta_requests(c: &weft_client::Client) -> u64 {
    c.status().into_iter().filter(|s| s.server.services.contains(&weft_net::Service::Meta)).filter_map(|s| s.stats.ok()).map(|s| s.requests).sum()
}

/// The metadata server's count once nothing but these asks reach it for
/// three looks in a row (the kernel's release of a closed file comes after
/// close(2) returns).
pub fn meta_quiet(c: &weft_client::Client) -> u64 {
    let mut last = meta_requests(c);
    let mut still = 0;
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(30));
        let now = meta_requests(c);
        still = if now == last + 1 { still + 1 } else { 0 };
        last = now;
        if still == 3 {
            break;
        }
    }
    last
}
