//! The cluster file (`cluster.toml`): every server, its address and
//! services, and the shared secret. Written by `weft up`, read by servers
//! and clients (found through `WEFT_CLUSTER` or `--cluster`).
//!
//! ```toml
//! secret = "5f1c..."            # hex; the file is readable by its owner only
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterFile {
    /// Hex-encoded shared secret every connection must prove.
    pub secret: String,
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
    #[serde(rename = "server")]
    pub servers: Vec<ServerEntry>,
}

fn default_stripe_size() -> u64 {
    64 * 1024
}

fn default_lock_ttl_ms() -> u64 {
    10_000
}

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
    pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, ClusterError> {
        match explicit {
            Some(p) => Ok(p.to_path_buf()),
            None => std::env::var_os(CLUSTER_ENV).map(PathBuf::from).ok_or(ClusterError::NotGiven),
        }
    }

    /// Writes the file readable and writable by its owner only (it holds the secret).
    pub fn save(&self, path: &Path) -> Result<(), ClusterError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let text = toml::to_string_pretty(self).expect("cluster file serializes");
        let tmp = path.with_extension("toml.tmp");
        let err = |source| ClusterError::Write { path: path.into(), source };
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).map_err(err)?;
        f.write_all(text.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
    }

    fn validate(&self) -> Result<(), String> {
        if self.servers.is_empty() {
            return Err("no servers".into());
        }
        if self.secret_bytes().is_none() {
            return Err("secret must be an even number of hex digits, at least 16".into());
        }
        if self.default_stripe_size == 0 {
            return Err("default_stripe_size must be at least 1".into());
        }
        if self.default_stripe_size > weft_wire::limits::MAX_STRIPE_SIZE {
            return Err(format!("default_stripe_size {} exceeds the largest, {}", self.default_stripe_size, weft_wire::limits::MAX_STRIPE_SIZE));
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.id as usize != i {
                return Err(format!("server ids must be 0, 1, 2, ... in order; entry {i} has id {}", s.id));
            }
        }
        let metas = self.servers.iter().filter(|s| s.services.contains(&Service::Meta)).count();
        if metas != 1 {
            return Err(format!("exactly one server must host the meta service, found {metas}"));
        }
        if self.data_servers().is_empty() {
            return Err("no server hosts the data service".into());
        }
        Ok(())
    }

    fn secret_bytes(&self) -> Option<Vec<u8>> {
        let s = self.secret.as_bytes();
        if s.len() < 16 || !s.len().is_multiple_of(2) {
            return None;
        }
        s.chunks(2).map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok()).collect()
    }

    pub fn secret(&self) -> Secret {
        Secret::new(self.secret_bytes().unwrap_or_else(|| self.secret.as_bytes().to_vec()))
    }

    /// A fresh random secret, hex-encoded.
    pub fn random_secret() -> String {
        let bytes: [u8; 32] = rand::random();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn server(&self, id: ServerId) -> Option<&ServerEntry> {
        self.servers.get(id.0 as usize)
    }

    pub fn meta_server(&self) -> &ServerEntry {
        self.servers.iter().find(|s| s.services.contains(&Service::Meta)).expect("validated: one meta server")
    }

    /// The server hosting the lock service, if any.
    pub fn lock_server(&self) -> Option<&ServerEntry> {
        self.servers.iter().find(|s| s.services.contains(&Service::Lock))
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
            secret: ClusterFile::random_secret(),
            default_stripe_size: 65536,
            lock_ttl_ms: 10_000,
            root_squash: false,
            servers: vec![
                ServerEntry { id: 0, addr: "127.0.0.1:1".parse().unwrap(), services: vec![Service::Meta], dir: "/a".into() },
                ServerEntry { id: 1, addr: "127.0.0.1:2".parse().unwrap(), services: vec![Service::Data], dir: "/b".into() },
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
        c.servers[1].services = vec![Service::Meta];
        assert!(c.validate().unwrap_err().contains("exactly one server"));
        let mut c = sample();
        c.secret = "xyz".into();
        assert!(c.validate().unwrap_err().contains("hex"));
        let mut c = sample();
        c.servers[1].id = 5;
        assert!(c.validate().unwrap_err().contains("in order"));
    }
}
