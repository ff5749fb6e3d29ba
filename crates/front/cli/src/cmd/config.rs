//! `weft config`: the settings in effect here: the cluster file's (what
//! every server and client of the cluster shares), and those this
//! process's variables give a client and a server (each layer reads them
//! once, at start; see `weft_net::settings`).

use anyhow::{Context, Result};
use clap::Args;
use std::path::Path;
use weft_net::settings::{Setting, Vars};

#[derive(Args)]
pub struct ConfigArgs {
    /// Print JSON: {"cluster_file", "cluster", "client", "server"}, each
    /// setting as {"name", "value", "set", "doc"}.
    #[arg(long)]
    json: bool,
}

pub fn config(cluster: Option<&Path>, a: ConfigArgs) -> Result<()> {
    let vars = Vars::env();
    let client = weft_client::ClientOptions::from_vars(&vars).context("a client setting is wrong")?.settings(&vars);
    let server = weft_services::ServerConfig::from_vars(&vars).context("a server setting is wrong")?.settings(&vars);
    // No cluster file, or one that does not load, is not an error here:
    // the variables still show, and the cluster section says why.
    let located = super::locate(cluster).ok();
    let cluster_settings = located.as_ref().map(|p| weft_net::ClusterFile::load(p).map(|c| cluster_rows(&c)).map_err(|e| e.to_string()));
    if a.json {
        let rows = |s: &[Setting]| s.iter().map(|s| serde_json::json!({"name": s.name, "value": s.value, "set": s.set, "doc": s.doc})).collect::<Vec<_>>();
        let doc = serde_json::json!({
            "cluster_file": located.as_ref().map(|p| p.display().to_string()),
            "cluster": match &cluster_settings {
                Some(Ok(c)) => serde_json::json!(c.iter().map(|(k, v)| serde_json::json!({"name": k, "value": v})).collect::<Vec<_>>()),
                Some(Err(e)) => serde_json::json!({"error": e}),
                None => serde_json::Value::Null,
            },
            "client": rows(&client),
            "server": rows(&server),
        });
        out!("{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    match (&located, &cluster_settings) {
        (Some(p), Some(Ok(c))) => {
            out!("cluster file {} (shared by every server and client):", p.display())?;
            for (k, v) in c {
                out!("  {k:<28} {v}")?;
            }
        }
        (Some(_), Some(Err(e))) => out!("cluster file: {e}")?,
        _ => out!("no cluster file (--cluster FILE or WEFT_CLUSTER)")?,
    }
    show("client settings, from this process's variables (* set here):", &client)?;
    show("server settings, for a `weft serve` started with these variables (* set here):", &server)?;
    Ok(())
}

fn show(title: &str, settings: &[Setting]) -> Result<()> {
    out!("\n{title}")?;
    for s in settings {
        out!("  {}{:<32} {:<18} {}", if s.set { "*" } else { " " }, s.name, s.value, s.doc)?;
    }
    Ok(())
}

/// The cluster file's settings that every member shares.
fn cluster_rows(c: &weft_net::ClusterFile) -> Vec<(&'static str, String)> {
    vec![
        ("auth", format!("{:?}", c.auth).to_lowercase()),
        ("servers", format!("{} ({} metadata shards, {} data servers)", c.servers.len(), c.meta_shards().len(), c.data_servers().len())),
        ("default_stripe_size", format!("{} bytes", c.default_stripe_size)),
        ("lock_ttl_ms", format!("{} ms", c.lock_ttl_ms)),
        ("meta_sync_window_ms", format!("{} ms", c.meta_sync_window_ms)),
        ("root_squash", c.root_squash.to_string()),
        ("metrics", format!("{} of {} servers", c.servers.iter().filter(|s| s.metrics.is_some()).count(), c.servers.len())),
    ]
}
