//! The `weft` command as a user runs it: a detached cluster, file commands,
//! clear errors for bad input, and nothing left behind.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// This crate's `weft` binary, built by cargo for these tests.
const WEFT: &str = env!("CARGO_BIN_EXE_weft");

fn weft(cluster: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(WEFT);
    c.args(args).env_remove("WEFT_CLUSTER").env_remove("WEFT_DIR");
    if let Some(p) = cluster {
        c.env("WEFT_CLUSTER", p);
    }
    c.output().unwrap()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "failed: {}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn err(o: Output) -> String {
    assert!(!o.status.success(), "should have failed: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8(o.stderr).unwrap()
}

/// A cluster started with `weft up --detach`; `weft down` when dropped.
struct Detached {
    dir: std::path::PathBuf,
    cf: std::path::PathBuf,
}

impl Detached {
    fn up(name: &str, servers: u32) -> Self {
        let dir = std::env::temp_dir().join(format!("weft-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ok(weft(None, &["up", "--detach", "--servers", &servers.to_string(), "--dir", dir.to_str().unwrap()]));
        let cf = dir.join("cluster.toml");
        Detached { dir, cf }
    }

    fn cf(&self) -> Option<&Path> {
        Some(self.cf.as_path())
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let _ = weft(None, &["down", "--dir", self.dir.to_str().unwrap()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

#[test]
fn detached_cluster_file_commands_and_down() {
    let dir = std::env::temp_dir().join(format!("weft-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    ok(weft(None, &["up", "--detach", "--servers", "2", "--dir", d]));
    let cf = dir.join("cluster.toml");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&cf).unwrap().permissions().mode() & 0o777, 0o600, "cluster file is private");
    let pids: Vec<u32> = std::fs::read_to_string(dir.join("pids")).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(pids.len(), 3);
    let cfp = Some(cf.as_path());

    let status = ok(weft(cfp, &["status"]));
    assert_eq!(status.matches(" up ").count(), 3, "{status}");
    // Servers on this node are reached over shared memory (issue 24).
    assert_eq!(status.matches(" up    shm ").count(), 3, "{status}");

    let local = dir.join("local.bin");
    let data = weft_testkit::pattern(5, 40 << 20);
    std::fs::write(&local, &data).unwrap();
    ok(weft(cfp, &["mkdir", "-p", "weft:/x/y"]));
    ok(weft(cfp, &["cp", local.to_str().unwrap(), "weft:/x/y/f", "--stripe-size", "4k", "--stripe-count", "2"]));
    let ls = ok(weft(cfp, &["ls", "-l", "weft:/x/y"]));
    assert!(ls.contains(&(40u64 << 20).to_string()) && ls.contains("4.0 KiB x2") && ls.contains(" f"), "{ls}");
    let back = dir.join("back.bin");
    ok(weft(cfp, &["cp", "weft:/x/y/f", back.to_str().unwrap()]));
    assert!(std::fs::read(&back).unwrap() == data, "cp round trip");
    let st = ok(weft(cfp, &["stat", "weft:/x/y/f"]));
    assert!(st.contains("size: 41943040") && st.contains("4096 bytes over 2 servers"), "{st}");
    ok(weft(cfp, &["mv", "weft:/x/y/f", "weft:/x/g"]));
    assert_eq!(ok(weft(cfp, &["ls", "weft:/x"])), "g\ny/\n");
    assert!(err(weft(cfp, &["rm", "weft:/x"])).contains("is a directory"));
    // A deeper tree with files at several levels, removed in parallel.
    ok(weft(cfp, &["mkdir", "-p", "weft:/x/y/z/w"]));
    let small = dir.join("small.bin");
    std::fs::write(&small, b"small").unwrap();
    for dst in ["weft:/x/y/z/s1", "weft:/x/y/z/w/s2", "weft:/x/y/s3"] {
        ok(weft(cfp, &["cp", small.to_str().unwrap(), dst]));
    }
    ok(weft(cfp, &["rm", "-r", "weft:/x"]));
    assert_eq!(ok(weft(cfp, &["ls", "weft:/"])), "");

    // Bad input: clear messages, non-zero exit.
    assert!(err(weft(cfp, &["ls", "weft:/nope"])).contains("no such file"));
    assert!(err(weft(cfp, &["cp", "a", "b"])).contains("neither"));
    assert!(err(weft(cfp, &["cp", local.to_str().unwrap(), "weft:/z", "--stripe-size", "0"])).contains("at least 1"));
    assert!(err(weft(cfp, &["cp", local.to_str().unwrap(), "weft:/z", "--stripe-size", "lots"])).contains("not a size"));
    assert!(err(weft(cfp, &["cp", local.to_str().unwrap(), "weft:/z", "--stripe-count", "7"])).contains("exceeds the 2 data servers"));
    assert!(err(weft(cfp, &["mkdir", "relative"])).contains("not a Weft path"));
    assert!(err(weft(None, &["ls"])).contains("WEFT_CLUSTER"));
    assert!(err(weft(Some(&dir.join("missing.toml")), &["ls"])).contains("cannot read cluster file"));

    ok(weft(None, &["down", "--dir", d]));
    let t = Instant::now();
    while pids.iter().any(|&p| alive(p)) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(pids.iter().all(|&p| !alive(p)), "servers left running after down");
    let st = weft(cfp, &["status"]);
    assert!(String::from_utf8_lossy(&st.stdout).contains("DOWN"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn foreground_up_stops_every_server_on_ctrl_c() {
    let dir = std::env::temp_dir().join(format!("weft-cli-fg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut up = Command::new(WEFT).args(["up", "--servers", "2", "--dir", dir.to_str().unwrap()]).stdout(Stdio::null()).spawn().unwrap();
    let cf = dir.join("cluster.toml");
    let t = Instant::now();
    while ok_status(&cf).is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "cluster did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let addrs = weft_net::ClusterFile::load(&cf).unwrap().servers.iter().map(|s| s.addr).collect::<Vec<_>>();
    // SIGINT, as Ctrl-C sends.
    Command::new("kill").args(["-INT", &up.id().to_string()]).status().unwrap();
    assert!(up.wait().unwrap().success());
    for a in addrs {
        assert!(std::net::TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_err(), "server {a} still listening");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn ok_status(cf: &Path) -> Option<()> {
    cf.exists().then_some(())?;
    weft(Some(cf), &["status"]).status.success().then_some(())
}

/// Issue 8: `weft up` on a running cluster's directory rewrote its cluster
/// file with new ports before failing, stranding the running cluster's clients.
#[test]
fn up_on_a_running_clusters_directory_fails_and_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("weft-cli-twice-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    ok(weft(None, &["up", "--detach", "--servers", "1", "--dir", d]));
    let cf = dir.join("cluster.toml");
    let before = std::fs::read(&cf).unwrap();
    let e = err(weft(None, &["up", "--detach", "--servers", "1", "--dir", d]));
    assert!(e.contains("already running"), "{e}");
    assert!(std::fs::read(&cf).unwrap() == before, "cluster file rewritten");
    ok(weft(Some(&cf), &["mkdir", "weft:/still-works"]));
    ok(weft(None, &["down", "--dir", d]));
    // Stopped, the same directory starts again with its data.
    ok(weft(None, &["up", "--detach", "--servers", "1", "--dir", d]));
    assert_eq!(ok(weft(Some(&cf), &["ls", "weft:/"])), "still-works/\n");
    ok(weft(None, &["down", "--dir", d]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 8: `weft ls | head` and `weft up | head` panicked on the broken
/// pipe, and `up` then tore down the cluster it had started.
#[test]
fn output_to_a_closed_pipe_ends_quietly_and_up_keeps_serving() {
    let dir = std::env::temp_dir().join(format!("weft-cli-pipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Foreground up whose stdout reader is gone before it prints.
    let mut up = Command::new(WEFT).args(["up", "--servers", "1", "--dir", dir.to_str().unwrap()]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(up.stdout.take());
    let cf = dir.join("cluster.toml");
    let t = Instant::now();
    while ok_status(&cf).is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "cluster did not come up");
        assert!(up.try_wait().unwrap().is_none(), "up exited when its output pipe closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(weft(Some(&cf), &["mkdir", "weft:/d"]));
    // `ls` into a pipe whose reader has exited.
    let errfile = dir.join("ls.err");
    let script = format!("set -o pipefail; '{WEFT}' ls weft:/ 2>'{}' | true", errfile.display());
    let st = Command::new("bash").arg("-c").arg(&script).env("WEFT_CLUSTER", &cf).status().unwrap();
    let e = std::fs::read_to_string(&errfile).unwrap();
    assert!(st.success() && e.is_empty(), "{st:?}: {e}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(up.try_wait().unwrap().is_none(), "up exited");
    Command::new("kill").args(["-INT", &up.id().to_string()]).status().unwrap();
    let out = up.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 8: `cp f f` truncated the source; `ls -l` showed size 0 for a file
/// path and for files on a server that is down.
#[test]
fn cp_onto_itself_is_refused_and_ls_l_shows_real_or_unknown_sizes() {
    let c = Detached::up("small", 2);
    let (dir, cfp) = (&c.dir, c.cf());
    let local = dir.join("f.bin");
    std::fs::write(&local, weft_testkit::pattern(3, 100_000)).unwrap();
    ok(weft(cfp, &["cp", local.to_str().unwrap(), "weft:/f"]));
    assert!(err(weft(cfp, &["cp", "weft:/f", "weft:/f"])).contains("same file"));
    let ls = ok(weft(cfp, &["ls", "-l", "weft:/f"]));
    assert!(ls.contains(" 100000 "), "{ls}");
    // One data server down: the size is unknown, not 0.
    let pids: Vec<u32> = std::fs::read_to_string(dir.join("pids")).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    Command::new("kill").args(["-KILL", &pids[2].to_string()]).status().unwrap();
    let o = weft(cfp, &["ls", "-l", "weft:/"]);
    let (out, e) = (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
    let size_column = out.lines().find(|l| l.ends_with(" f")).and_then(|l| l.split_whitespace().nth(3));
    assert!(!o.status.success() && size_column == Some("?"), "{out}\n{e}");
    assert!(e.contains("unknown"), "{e}");
}

/// Issue 11: names with a newline or U+202E were printed raw, so a listing
/// could be forged.
#[test]
fn listings_escape_names_that_could_forge_lines_or_reverse_text() {
    let c = Detached::up("names", 1);
    let cfp = c.cf();
    ok(weft(cfp, &["mkdir", "weft:/evil\nroot-owned-file"]));
    ok(weft(cfp, &["mkdir", "weft:/x\u{202e}fdp.exe"]));
    let ls = ok(weft(cfp, &["ls", "weft:/"]));
    assert_eq!(ls.lines().count(), 2, "one line per name: {ls:?}");
    assert!(ls.contains("evil\\nroot-owned-file/") && ls.contains("x\\u{202e}fdp.exe/"), "{ls:?}");
    assert!(!ls.contains('\u{202e}'));
    let long = ok(weft(cfp, &["ls", "-l", "weft:/"]));
    assert_eq!(long.lines().count(), 2, "{long:?}");
}

#[test]
fn config_shows_the_settings_in_effect_and_a_bad_variable_stops_a_server() {
    let o = Command::new(WEFT).args(["config", "--json"]).env_remove("WEFT_CLUSTER").env("WEFT_SERVER_THREADS", "3").env("WEFT_TIMEOUT_MS", "1234").env("WEFT_LOCK_WAIT_MS", "0").env("PMI_RANK", "2").env("PMI_SIZE", "4").output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(o)).unwrap();
    let find = |side: &str, name: &str| v[side].as_array().unwrap().iter().find(|s| s["name"] == name).cloned().unwrap_or_else(|| panic!("{side} {name} in {v}"));
    assert_eq!((find("server", "WEFT_SERVER_THREADS")["value"].as_str(), find("server", "WEFT_SERVER_THREADS")["set"].as_bool()), (Some("3"), Some(true)));
    assert_eq!(find("server", "WEFT_CONN_PARALLEL")["value"], "1", "follows the threads");
    assert_eq!(find("client", "WEFT_TIMEOUT_MS")["value"], "1234 ms");
    assert_eq!(find("client", "WEFT_RECOVERY_MS")["set"], false);
    assert_eq!(find("client", "WEFT_LOCK_WAIT_MS")["value"], "0 ms", "0 is a try-lock, not an error");
    assert_eq!((find("client", "WEFT_RANK")["value"].as_str(), find("client", "WEFT_RANK")["set"].as_bool()), (Some("2"), Some(true)), "from the launcher's variable");
    assert!(v["cluster_file"].is_null());
    // A value that does not parse is an error naming it, in the command...
    let e = err(Command::new(WEFT).args(["config"]).env("WEFT_LOCK_WAIT_MS", "soon").output().unwrap());
    assert!(e.contains("WEFT_LOCK_WAIT_MS=\"soon\""), "{e}");
    // ...and a server refuses to start on it, naming it, rather than
    // serving with a default the operator did not ask for.
    let dir = std::env::temp_dir().join(format!("weft-test-badvar-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = weft_launch::ClusterSpec { data_servers: 1, server_env: vec![("WEFT_SERVER_MEMORY".into(), "lots".into())], ..Default::default() };
    let failed = weft_launch::LocalCluster::start(Path::new(WEFT), &dir, &spec).err().expect("the cluster must not start");
    assert!(failed.to_string().contains("WEFT_SERVER_MEMORY=\"lots\""), "{failed}");
    let _ = std::fs::remove_dir_all(&dir);
}
