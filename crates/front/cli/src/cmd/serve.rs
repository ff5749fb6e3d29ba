//! `weft serve --cluster FILE --id K`.

use anyhow::{Context, Result};
use clap::Args;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use weft_net::ClusterFile;
use weft_services::Server;
use weft_wire::ServerId;

#[derive(Args)]
pub struct ServeArgs {
    /// This server's id in the cluster file.
    #[arg(long)]
    id: u32,
}

pub fn serve(cluster: Option<&Path>, a: ServeArgs) -> Result<()> {
    let path = ClusterFile::locate(cluster)?;
    let cf = ClusterFile::load(&path)?;
    let me = cf.server(ServerId(a.id)).with_context(|| format!("server id {} is not in {}", a.id, path.display()))?.clone();
    let server = Arc::new(Server::open(&cf, ServerId(a.id))?);
    let listener = TcpListener::bind(me.addr).with_context(|| format!("cannot listen on {}", me.addr))?;
    let _ = out!("weft serve: server {} listening on {} with {:?} in {}", a.id, me.addr, me.services, me.dir.display());
    weft_services::run(server, listener).context("the server's event loop failed")
}
