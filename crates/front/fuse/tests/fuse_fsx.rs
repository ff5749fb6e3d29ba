//! An fsx-style checker of the mount (as xfstests' fsx): random writes,
//! truncates (down and up), reads through two descriptors, reads and
//! writes through shared mappings, fsyncs, closes and reopens, and stats
//! by descriptor and by path, each checked at once against an in-memory
//! model of the file. Several processes run at once, each on a file of
//! its own, with fixed seeds; every size and every byte must match the
//! model after every operation. (A size asked of the servers while a
//! queued write was still in flight once gave page-aligned short sizes
//! here under load.) Needs root and /dev/fuse (CI runs as root).

use weft_testkit::mount::Mount;
use weft_testkit::TestCluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Processes at once, and operations each.
const PROCESSES: u64 = 4;
const OPS: usize = 4000;
/// Offsets and truncates stay below this; writes are at most `MAX_WRITE`.
const MAX_LEN: u64 = 300_000;
const MAX_WRITE: usize = 40_000;

/// The file under test and the model it must equal.
struct Fsx {
    path: PathBuf,
    rw: File,
    /// A second, read-only descriptor (another open file of the same inode).
    ro: File,
    model: Vec<u8>,
    log: Vec<String>,
}

fn open_rw(path: &Path) -> File {
    OpenOptions::new().read(true).write(true).open(path).unwrap()
}

impl Fsx {
    fn new(path: PathBuf) -> Fsx {
        let rw = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let ro = File::open(&path).unwrap();
        Fsx { path, rw, ro, model: Vec::new(), log: Vec::new() }
    }

    fn fail(&self, what: String) -> String {
        let last: Vec<&String> = self.log.iter().rev().take(8).rev().collect();
        format!("{}: {what}; the last operations: {last:?}", self.path.display())
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        self.rw.write_all_at(data, off).unwrap();
        let end = off as usize + data.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(data);
    }

    fn truncate(&mut self, len: u64) {
        self.rw.set_len(len).unwrap();
        self.model.resize(len as usize, 0);
    }

    fn check_read(&self, fd: &File, which: &str, off: u64, len: usize) -> Result<(), String> {
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = fd.read_at(&mut buf[got..], off + got as u64).unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        let want = self.model.get(off as usize..).map_or(&[][..], |m| &m[..m.len().min(len)]);
        if &buf[..got] != want {
            let first = buf[..got].iter().zip(want).position(|(a, b)| a != b);
            return Err(self.fail(format!("read ({which}) of {len} at {off}: {got} bytes, want {}; first difference at {first:?}", want.len())));
        }
        Ok(())
    }

    fn check_sizes(&self) -> Result<(), String> {
        let want = self.model.len() as u64;
        let sizes = [self.rw.metadata().unwrap().len(), self.ro.metadata().unwrap().len(), fs::metadata(&self.path).unwrap().len()];
        if sizes.iter().any(|&s| s != want) {
            return Err(self.fail(format!("sizes (fstat rw, fstat ro, stat) {sizes:?}, want {want}")));
        }
        Ok(())
    }

    /// Reads or writes `len` bytes at `off` through a shared mapping of
    /// the whole file (a write past the end extends the file first, as
    /// fsx's mapwrite does).
    fn mapped(&mut self, off: u64, data: Option<&[u8]>, len: usize) -> Result<(), String> {
        let end = off as usize + len;
        if data.is_some() && end > self.model.len() {
            self.truncate(end as u64);
        }
        let size = self.model.len();
        if size == 0 || end > size {
            return Ok(());
        }
        // SAFETY: a fresh shared mapping of `size` bytes of an open file,
        // used only within [0, size) and unmapped before returning.
        unsafe {
            let p = libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, self.rw.as_raw_fd(), 0);
            assert_ne!(p, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
            let bytes = std::slice::from_raw_parts_mut(p.cast::<u8>(), size);
            let r = match data {
                Some(d) => {
                    bytes[off as usize..end].copy_from_slice(d);
                    assert_eq!(libc::msync(p, size, libc::MS_SYNC), 0, "msync: {}", std::io::Error::last_os_error());
                    self.model[off as usize..end].copy_from_slice(d);
                    Ok(())
                }
                None if bytes[off as usize..end] != self.model[off as usize..end] => Err(self.fail(format!("mapped read of {len} at {off} differs"))),
                None => Ok(()),
            };
            libc::munmap(p, size);
            r
        }
    }

    /// One random operation, checked.
    fn step(&mut self, rng: &mut StdRng) -> Result<(), String> {
        let off = rng.gen_range(0..MAX_LEN);
        let len = rng.gen_range(1..=MAX_WRITE);
        match rng.gen_range(0..100) {
            0..35 => {
                let data: Vec<u8> = weft_testkit::pattern(rng.r#gen(), len);
                self.log.push(format!("write {len} at {off}"));
                self.write(off, &data);
            }
            35..45 => {
                let to = rng.gen_range(0..MAX_LEN);
                self.log.push(format!("truncate to {to}"));
                self.truncate(to);
            }
            45..60 => {
                self.log.push(format!("read {len} at {off}"));
                self.check_read(&self.rw, "rw", off, len)?;
            }
            60..68 => {
                self.log.push(format!("read (other descriptor) {len} at {off}"));
                self.check_read(&self.ro, "ro", off, len)?;
            }
            68..78 => {
                self.log.push("stat".into());
                self.check_sizes()?;
            }
            78..83 => {
                // Within the file, as fsx's mapread.
                let size = self.model.len() as u64;
                if size > 0 {
                    let off = off % size;
                    let len = len.min((size - off) as usize);
                    self.log.push(format!("mapped read {len} at {off}"));
                    self.mapped(off, None, len)?;
                }
            }
            83..88 => {
                let data: Vec<u8> = weft_testkit::pattern(rng.r#gen(), len);
                self.log.push(format!("mapped write {len} at {off}"));
                self.mapped(off, Some(&data), len)?;
            }
            88..93 => {
                self.log.push("fsync".into());
                self.rw.sync_all().unwrap();
            }
            _ => {
                // Close both, reopen, and read the whole file at once.
                self.log.push("close and reopen".into());
                self.rw = open_rw(&self.path);
                self.ro = File::open(&self.path).unwrap();
                let all = fs::read(&self.path).unwrap();
                if all != self.model {
                    return Err(self.fail(format!("reopened: {} bytes, want {}", all.len(), self.model.len())));
                }
            }
        }
        Ok(())
    }
}

/// One process's run (a child of the test below).
#[test]
#[ignore = "run by random_operations_match_a_model_in_several_processes"]
fn fsx_child() {
    let rank: u64 = std::env::var("WEFT_TEST_RANK").unwrap().parse().unwrap();
    let dir = PathBuf::from(std::env::var("WEFT_FSX_DIR").unwrap());
    let mut fsx = Fsx::new(dir.join(format!("fsx-{rank}")));
    let mut rng = StdRng::seed_from_u64(0x5eed_0000 + rank);
    for i in 0..OPS {
        if let Err(e) = fsx.step(&mut rng) {
            panic!("rank {rank}, operation {i}: {e}");
        }
    }
    fsx.check_sizes().unwrap();
}

#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn random_operations_match_a_model_in_several_processes() {
    random_operations_on_a_mount("fuse-fsx", &[]);
}

/// The same under the kernel's writeback cache (`--writeback-cache`):
/// the kernel keeps sizes and times and sends pages late, through any
/// handle of the file.
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn random_operations_match_a_model_under_the_writeback_cache() {
    random_operations_on_a_mount("fuse-fsx-wbc", &["--writeback-cache"]);
}

fn random_operations_on_a_mount(name: &str, mount_args: &[&str]) {
    let tc = TestCluster::start(name, 4);
    let m = Mount::with_args(&tc, "mnt", mount_args);
    let dir = m.point.join("fsx");
    fs::create_dir(&dir).unwrap();
    weft_testkit::run_children("fsx_child", PROCESSES, &tc.lc.cluster_file(), &[("WEFT_FSX_DIR", dir.to_str().unwrap())]);
    // The same seeds on a local directory give the same files: the model
    // is what a local file system does.
    let local = tc.scratch("local");
    fs::create_dir_all(&local).unwrap();
    weft_testkit::run_children("fsx_child", PROCESSES, &tc.lc.cluster_file(), &[("WEFT_FSX_DIR", local.to_str().unwrap())]);
    for rank in 0..PROCESSES {
        let name = format!("fsx-{rank}");
        assert!(fs::read(dir.join(&name)).unwrap() == fs::read(local.join(&name)).unwrap(), "{name} differs from the local run");
    }
    m.unmount();
}
