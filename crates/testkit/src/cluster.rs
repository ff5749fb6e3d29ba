//! A real local cluster of `weft serve` processes in a temporary folder,
//! stopped and removed when dropped.

use crate::binary::server_bin;
use std::path::PathBuf;
use std::time::Duration;
use weft_client::{Client, ClientOptions};
use weft_launch::{ClusterSpec, LocalCluster};
use weft_net::ClusterFile;

pub struct TestCluster {
    pub lc: LocalCluster,
    dir: PathBuf,
}

impl TestCluster {
    pub fn start(name: &str, data_servers: usize) -> Self {
        Self::start_spec(name, ClusterSpec { data_servers, ..ClusterSpec::default() })
    }

    pub fn start_spec(name: &str, spec: ClusterSpec) -> Self {
        let dir = std::env::temp_dir().join(format!("weft-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let lc = LocalCluster::start(&server_bin(), &dir, &spec).expect("cluster starts");
        TestCluster { lc, dir }
    }

    pub fn cluster(&self) -> ClusterFile {
        ClusterFile::load(&self.lc.cluster_file()).unwrap()
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.lc.cluster_file()).unwrap()
    }

    /// A client whose reads all go through the servers, never through
    /// objects they lend (local reads): for tests that count what the
    /// servers served.
    pub fn client_through_servers(&self) -> Client {
        Client::with_options(self.cluster(), ClientOptions { local_reads: false, ..ClientOptions::default() }).unwrap()
    }

    /// A client whose operations give up after `timeout`, and at once
    /// when a server went away (no riding through restarts).
    pub fn client_with_timeout(&self, timeout: Duration) -> Client {
        self.client_with(timeout, Duration::ZERO)
    }

    /// A client whose operations give up after `timeout`, and ride through
    /// a server's restart for `recovery`. Its reads go through the servers
    /// (no local reads), so a server's failure meets reads too.
    pub fn client_with(&self, timeout: Duration, recovery: Duration) -> Client {
        let mut o = ClientOptions { recovery, local_reads: false, ..ClientOptions::default() };
        o.endpoint.op_timeout = timeout;
        o.endpoint.connect_timeout = timeout;
        Client::with_options(self.cluster(), o).unwrap()
    }

    /// Kills each server of `victims` in turn with -9 and starts it again:
    /// `before` after the last step, then the kill, `down` later the
    /// restart (what a crash and an operator's restart look like to a
    /// running workload).
    pub fn kill_and_restart(&mut self, victims: &[usize], before: Duration, down: Duration) {
        for &victim in victims {
            std::thread::sleep(before);
            self.lc.kill(victim);
            std::thread::sleep(down);
            self.lc.restart(victim).unwrap();
        }
    }

    /// A path under the cluster's scratch folder (removed with it).
    pub fn scratch(&self, name: &str) -> PathBuf {
        let p = self.dir.join("scratch");
        std::fs::create_dir_all(&p).unwrap();
        p.join(name)
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.lc.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
