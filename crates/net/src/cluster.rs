//! The cluster file (`cluster.toml`): every server, its address and
//! services, and how peers authenticate. Written by `weft up`, read by
//! servers and clients (found through `WEFT_CLUSTER` or `--cluster`).
//!
//! In secret mode (the default) it holds the shared secret and is
//! readable by its owner only. In MUNGE mode (`auth = "munge"`) it holds
//! no key and any user may read it: the servers' secret is in `key_file`
//! (readable by the servers' user only), clients prove who they are with
//! MUNGE credentials from the `munged` at `munge_socket`, and servers
//! prove themselves with credentials of `server_uid`.
//!
//! ```toml
//! secret = "5f1c..."            # hex; secret mode only
//! default_stripe_size = 65536
//! [[server]]
//! id = 0
//! addr = "127.0.0.1:41000"
//! services = ["meta", "lock"]
//! dir = "/tmp/weft/srv0"
//! ```

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use thiserror::Error;
use crate::ClientAuth;
use weft_wire::{Secret, ServerId};

/// Environment variable naming the cluster file.
pub const CLUSTER_ENV: &str = "WEFT_CLUSTER";

/// The services a server can host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    Meta,
    Data,
    Lock,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerEntry {
    pub id: u32,
    pub addr: SocketAddr,
    pub services: Vec<Service>,
    /// Where this server keeps its database and objects.
    pub dir: PathBuf,
    /// Where it serves Prometheus metrics over HTTP (`GET /metrics`);
    /// none if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SocketAddr>,
}

/// How clients prove themselves (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    #[default]
    Secret,
    Munge,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    #[serde(default)]
    pub auth: AuthMode,
    /// Hex-encoded shared secret every connection must prove (secret mode).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret: String,
    /// MUNGE mode: the file holding the servers' secret (hex), readable by
    /// the servers' user only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// MUNGE mode: the `munged` socket (default: the system's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub munge_socket: Option<PathBuf>,
    /// MUNGE mode: the uid the servers run as; clients accept only servers
    /// whose credentials carry it.
    #[serde(default)]
    pub server_uid: u32,
    /// Stripe size for files created without a hint.
    #[serde(default = "default_stripe_size")]
    pub default_stripe_size: u64,
    /// How long a lock session lives without renewal (clients renew every
    /// third of it); a dead client's locks are freed after this long.
    #[serde(default = "default_lock_ttl_ms")]
    pub lock_ttl_ms: u64,
    /// Requests asserting uid 0 are served as `nobody` (65534): a client
    /// that holds the cluster file cannot act as root (NFS's root_squash).
    #[serde(default)]
    pub root_squash: bool,
    /// Metadata changes are made durable within this many milliseconds, or
    /// at a client's fsync (`weft up --meta-sync window`); 0: each before
    /// its answer (`--meta-sync op`). See docs/semantics.md.
    #[serde(default = "default_meta_sync_window_ms")]
    pub meta_sync_window_ms: u64,
    #[serde(rename = "server")]
    pub servers: Vec<ServerEntry>,
}

fn default_stripe_size() -> u64 {
    64 * 1024
}

fn default_lock_ttl_ms() -> u64 {
    10_000
}

/// Like a local file system's journal commit, but much shorter.
pub const DEFAULT_META_SYNC_WINDOW_MS: u64 = 10;

fn default_meta_sync_window_ms() -> u64 {
    DEFAULT_META_SYNC_WINDOW_MS
}

/// The most metadata shards a cluster may have (each shard keeps every
/// directory, so a directory change costs one message per shard).
pub const MAX_META_SHARDS: usize = 64;

/// The longest window accepted: a crash loses at most this much.
pub const MAX_META_SYNC_WINDOW_MS: u64 = 60_000;

#[derive(Debug, Error)]
pub enum ClusterError {
    #[error("cannot read cluster file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write cluster file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cluster file {path} is invalid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("no cluster file: pass --cluster FILE or set {CLUSTER_ENV}")]
    NotGiven,
}

impl ClusterFile {
    pub fn load(path: &Path) -> Result<Self, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Read { path: path.into(), source })?;
        let cf: ClusterFile =
            toml::from_str(&text).map_err(|e| ClusterError::Invalid { path: path.into(), reason: e.to_string() })?;
        cf.validate().map_err(|reason| ClusterError::Invalid { path: path.into(), reason })?;
        Ok(cf)
    }

    /// Finds the cluster file: the explicit path, else `WEFT_CLUSTER`.
    pub fn locate(explicit: Option<&Path>, vars: &crate::settings::Vars<'_>) -> Result<PathBuf, ClusterError> {
        match explicit {
            Some(p) => Ok(p.to_path_buf()),
            None => vars.text(CLUSTER_ENV).map(PathBuf::from).ok_or(ClusterError::NotGiven),
        }
    }

    /// Writes the file: readable and writable by its owner only in secret
    /// mode (it holds the secret), readable by all in MUNGE mode.
    pub fn save(&self, path: &Path) -> Result<(), ClusterError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let text = toml::to_string_pretty(self).expect("cluster file serializes");
        let tmp = path.with_extension("toml.tmp");
        let err = |source| ClusterError::Write { path: path.into(), source };
        let mode = if self.auth == AuthMode::Munge { 0o644 } else { 0o600 };
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(err)?;
        f.write_all(text.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
    }

    fn validate(&self) -> Result<(), String> {
        if self.servers.is_empty() {
            return Err("no servers".into());
        }
        match self.auth {
            AuthMode::Secret if self.secret_bytes().is_none() => return Err("secret must be an even number of hex digits, at least 16".into()),
            // A file every user reads must not hold what lets them forge.
            AuthMode::Munge if !self.secret.is_empty() => return Err("auth = \"munge\" keeps the servers' secret in key_file, never in the cluster file".into()),
            AuthMode::Munge if self.key_file.is_none() => return Err("auth = \"munge\" needs key_file (the servers' secret)".into()),
            _ => {}
        }
        if self.default_stripe_size == 0 {
            return Err("default_stripe_size must be at least 1".into());
        }
        if self.meta_sync_window_ms > MAX_META_SYNC_WINDOW_MS {
            return Err(format!("meta_sync_window_ms {} exceeds the longest, {MAX_META_SYNC_WINDOW_MS}", self.meta_sync_window_ms));
        }
        if self.default_stripe_size > weft_wire::limits::MAX_STRIPE_SIZE {
            return Err(format!("default_stripe_size {} exceeds the largest, {}", self.default_stripe_size, weft_wire::limits::MAX_STRIPE_SIZE));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.id as usize != i {
                return Err(format!("server ids must be 0, 1, 2, ... in order; entry {i} has id {}", s.id));
            }
        }
        let metas = self.meta_shards().len();
        if metas == 0 {
            return Err("no server hosts the meta service".into());
        }
        if metas > MAX_META_SHARDS {
            return Err(format!("{metas} servers host the meta service; at most {MAX_META_SHARDS} metadata shards are supported"));
        }
        if self.data_servers().is_empty() {
            return Err("no server hosts the data service".into());
        }
        Ok(())
    }

    fn secret_bytes(&self) -> Option<Vec<u8>> {
        hex_bytes(&self.secret)
    }

    /// The servers' secret: the cluster file's in secret mode; in MUNGE
    /// mode read from `key_file` (only the servers' user can).
    pub fn server_secret(&self) -> Result<Secret, ClusterError> {
        let Some(path) = self.key_file.as_ref().filter(|_| self.auth == AuthMode::Munge) else { return Ok(self.secret()) };
        let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Read { path: path.clone(), source })?;
        hex_bytes(text.trim()).map(Secret::new).ok_or_else(|| ClusterError::Invalid { path: path.clone(), reason: "the key must be an even number of hex digits, at least 16".into() })
    }

    /// How a client of this cluster proves itself: the secret, or MUNGE.
    pub fn client_auth(&self) -> Result<ClientAuth, crate::munge::MungeError> {
        match self.auth {
            AuthMode::Secret => Ok(ClientAuth::Secret(self.secret())),
            AuthMode::Munge => Ok(ClientAuth::Munge { munge: crate::munge::Munge::new(self.munge_socket.as_deref())?, server_uid: self.server_uid }),
        }
    }
}

fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    let s = text.as_bytes();
    if s.len() < 16 || !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2).map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok()).collect()
}

impl ClusterFile {
    /// The secret clients and servers prove. In MUNGE mode the servers'
    /// (from `key_file`) when this process can read it; else a key no
    /// server takes, so secret handshakes fail with "wrong cluster secret".
    pub fn secret(&self) -> Secret {
        match self.auth {
            AuthMode::Secret => Secret::new(self.secret_bytes().unwrap_or_else(|| self.secret.as_bytes().to_vec())),
            AuthMode::Munge => self.server_secret().unwrap_or_else(|_| Secret::new(Vec::new())),
        }
    }

    /// A fresh random secret, hex-encoded.
    /// A secret as the cluster file writes it (hex), decoded.
    pub fn secret_from_hex(text: &str) -> Option<Secret> {
        hex_bytes(text).map(Secret::new)
    }

    pub fn random_secret() -> String {
        let bytes: [u8; 32] = rand::random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn server(&self, id: ServerId) -> Option<&ServerEntry> {
        self.servers.get(id.0 as usize)
    }

    /// The first metadata shard (shard 0: shared file pointers, errors'
    /// addresses).
    pub fn meta_server(&self) -> &ServerEntry {
        self.servers.iter().find(|s| s.services.contains(&Service::Meta)).expect("validated: a meta server")
    }

    /// The metadata shards in order: shard `k` is the `k`-th server of
    /// the file hosting the meta service. Their number is fixed for a
    /// cluster's life (entries are placed by it, see `weft_wire::shard`).
    pub fn meta_shards(&self) -> Vec<&ServerEntry> {
        self.servers.iter().filter(|s| s.services.contains(&Service::Meta)).collect()
    }

    /// How many metadata shards (K).
    pub fn meta_shard_count(&self) -> u32 {
        self.meta_shards().len() as u32
    }

    /// The server hosting the lock service, if any (the first of several).
    pub fn lock_server(&self) -> Option<&ServerEntry> {
        self.servers.iter().find(|s| s.services.contains(&Service::Lock))
    }

    /// Every server hosting the lock service, in order: file `id`'s locks
    /// are kept by the `weft_wire::shard::home_shard(id, n)`-th of the `n`.
    pub fn lock_servers(&self) -> Vec<&ServerEntry> {
        self.servers.iter().filter(|s| s.services.contains(&Service::Lock)).collect()
    }

    pub fn data_servers(&self) -> Vec<ServerId> {
        self.servers.iter().filter(|s| s.services.contains(&Service::Data)).map(|s| ServerId(s.id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterFile {
        ClusterFile {
            auth: AuthMode::Secret,
            key_file: None,
            munge_socket: None,
            server_uid: 0,
            secret: ClusterFile::random_secret(),
            default_stripe_size: 65536,
            lock_ttl_ms: 10_000,
            root_squash: false,
            meta_sync_window_ms: DEFAULT_META_SYNC_WINDOW_MS,
            servers: vec![
                ServerEntry { id: 0, addr: "127.0.0.1:1".parse().unwrap(), services: vec![Service::Meta], dir: "/a".into(), metrics: None },
                ServerEntry { id: 1, addr: "127.0.0.1:2".parse().unwrap(), services: vec![Service::Data], dir: "/b".into(), metrics: None },
            ],
        }
    }

    #[test]
    fn saved_file_loads_back_and_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("weft-cluster-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("cluster.toml");
        sample().save(&p).unwrap();
        assert_eq!(ClusterFile::load(&p).unwrap(), sample_with_secret(&ClusterFile::load(&p).unwrap().secret));
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn sample_with_secret(s: &str) -> ClusterFile {
        ClusterFile { secret: s.into(), ..sample() }
    }

    #[test]
    fn invalid_files_say_why() {
        let mut c = sample();
        for s in &mut c.servers {
            s.services.retain(|s| *s != Service::Meta);
        }
        assert!(c.validate().unwrap_err().contains("no server hosts the meta"));
        let mut c = sample();
        c.servers[1].services.push(Service::Meta);
        assert_eq!(c.meta_shard_count(), 2, "a second meta server is a second shard");
        // Shards in MUNGE mode: they prove the servers' key_file secret.
        c.auth = AuthMode::Munge;
        c.secret.clear();
        c.key_file = Some("/k".into());
        assert_eq!(c.validate(), Ok(()));
        c.secret = "00112233445566778899".into();
        assert!(c.validate().unwrap_err().contains("never in the cluster file"), "a MUNGE cluster file must not hold the key");
        let mut c = sample();
        c.secret = "xyz".into();
        assert!(c.validate().unwrap_err().contains("hex"));
        let mut c = sample();
        c.servers[1].id = 5;
        assert!(c.validate().unwrap_err().contains("in order"));
    }
}
