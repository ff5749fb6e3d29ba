//! Clusters of several metadata shards, and names placed on a chosen shard.

use crate::TestCluster;
use weft_client::{Client, CreateOptions, FileId};
use weft_launch::ClusterSpec;
use weft_wire::shard::entry_shard;
use weft_wire::{Cred, MetaReq, Request, Response};

/// The shard count of these tests' clusters.
pub const K: u32 = 3;

/// A cluster of two data servers and `K` metadata shards.
pub fn sharded(name: &str) -> TestCluster {
    TestCluster::start_spec(name, ClusterSpec { data_servers: 2, meta_shards: K as usize, ..ClusterSpec::default() })
}

pub fn excl() -> CreateOptions {
    CreateOptions { exclusive: true, ..CreateOptions::default() }
}

/// A name in directory `dir` kept by shard `shard` (`prefix` plus a number).
pub fn name_on(dir: FileId, shard: u32, prefix: &str) -> String {
    (0..).map(|i| format!("{prefix}{i}")).find(|n| entry_shard(dir, n, K) == shard).unwrap()
}

pub fn id_of(c: &Client, path: &str) -> FileId {
    c.stat(path).unwrap().0.id
}

/// Asks shard `shard` alone (no routing) for `op`, as root.
pub fn ask(tc: &TestCluster, shard: u32, op: MetaReq) -> Response {
    ask_as(tc, shard, Cred::new(0, 0), op)
}

/// [`ask`] as `cred`.
pub fn ask_as(tc: &TestCluster, shard: u32, cred: Cred, op: MetaReq) -> Response {
    let cf = tc.cluster();
    let ep = weft_net::Endpoint::new(cf.client_auth().unwrap(), weft_net::EndpointConfig::default()).unwrap();
    crate::meta_call(&ep, cf.meta_shards()[shard as usize].addr, cred, op)
}

/// Whether shard `shard`'s own copy of the tree has directory `path`
/// (a listing of it there; `None` if that shard does not answer).
pub fn dir_on_shard(tc: &TestCluster, shard: u32, path: &str) -> Option<bool> {
    let cf = tc.cluster();
    let ep = weft_net::Endpoint::new(cf.client_auth().unwrap(), weft_net::EndpointConfig { op_timeout: std::time::Duration::from_secs(2), ..Default::default() }).ok()?;
    let op = MetaReq::ReaddirShard { path: path.into(), after: String::new(), max: 1, shards: K };
    let reply = ep.call(cf.meta_shards()[shard as usize].addr, Request::Meta { cred: Cred::new(0, 0), op }.encode()).ok()?;
    match Response::decode(&reply.body).ok()? {
        Response::Entries { .. } => Some(true),
        Response::Error { code: weft_wire::ErrorCode::NotFound, .. } => Some(false),
        _ => None,
    }
}
