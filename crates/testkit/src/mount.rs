//! A real `weft mount` of a test cluster (root and /dev/fuse needed).

use crate::{weft, TestCluster};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running `weft mount`, unmounted (and its process reaped) when dropped.
pub struct Mount {
    pub point: PathBuf,
    child: Child,
}

pub fn mounted(point: &Path) -> bool {
    let table = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let p = point.to_string_lossy();
    table.lines().any(|l| l.split_whitespace().nth(1) == Some(&*p))
}

impl Mount {
    pub fn new(tc: &TestCluster, name: &str) -> Mount {
        Self::with_args(tc, name, &[])
    }

    /// A mount with extra `weft mount` options.
    pub fn with_args(tc: &TestCluster, name: &str, args: &[&str]) -> Mount {
        assert!(nix_is_root(), "the FUSE tests need root (CI runs as root)");
        assert!(Path::new("/dev/fuse").exists(), "the FUSE tests need /dev/fuse");
        let point = tc.scratch(name);
        fs::create_dir_all(&point).unwrap();
        let child = Command::new(weft()).arg("--cluster").arg(tc.lc.cluster_file()).arg("mount").arg(&point).args(args).spawn().unwrap();
        let m = Mount { point, child };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !mounted(&m.point) {
            assert!(Instant::now() < deadline, "weft mount did not mount within 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    /// Unmounts with `weft umount` and waits for the mount process to end.
    pub fn unmount(mut self) {
        let st = Command::new(weft()).arg("umount").arg(&self.point).status().unwrap();
        assert!(st.success(), "weft umount failed");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "weft mount exited with {st}");
                break;
            }
            assert!(Instant::now() < deadline, "weft mount did not exit after umount");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::mem::forget(self);
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.point).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn nix_is_root() -> bool {
    fs::read_to_string("/proc/self/status").unwrap_or_default().lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

