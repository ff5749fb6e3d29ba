//! Where this build's `weft` binary is, built fresh.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Names a `weft` binary to use as is (set for the processes
/// [`crate::run_children`] starts, so they do not build it again).
const BIN_VAR: &str = "WEFT_TEST_BIN";

/// This build's `weft` binary, `target/<profile>/weft` beside the test
/// binary's `deps/` folder, built (or found up to date) by cargo once per
/// test process: `cargo test -p <one crate>` builds no other crate's
/// binary, and one left from an earlier build would run old servers.
pub fn weft() -> &'static str {
    static WEFT: OnceLock<String> = OnceLock::new();
    WEFT.get_or_init(|| {
        if let Some(bin) = std::env::var_os(BIN_VAR) {
            return bin.to_string_lossy().into_owned();
        }
        let exe = std::env::current_exe().expect("the test binary's own path");
        // target/<profile>/deps/<test>-<hash>
        let profile = exe.parent().and_then(Path::parent).expect("a test binary lives in target/<profile>/deps");
        // What `cargo test --workspace` (make test) builds, so there it
        // finds everything up to date: a narrower build (`-p weft-cli`)
        // unifies the dependencies' features differently and would build
        // the servers once more.
        let mut build = Command::new(env!("CARGO"));
        build.args(["test", "-q", "--workspace", "--no-run"]).current_dir(env!("CARGO_MANIFEST_DIR"));
        let shown = match profile.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "cargo test --workspace --no-run".to_owned(),
            Some("release") => {
                build.arg("--release");
                "cargo test --workspace --no-run --release".to_owned()
            }
            Some(other) => {
                build.args(["--profile", other]);
                format!("cargo test --workspace --no-run --profile {other}")
            }
        };
        let built = build.status().is_ok_and(|s| s.success());
        let bin = profile.join("weft");
        assert!(built && bin.is_file(), "the weft binary could not be built at {} (`{shown}` failed; run it to see why)", bin.display());
        bin.to_string_lossy().into_owned()
    })
}

/// The environment that makes [`weft`] in a child process use this one's
/// binary.
pub(crate) fn bin_env() -> (&'static str, &'static str) {
    (BIN_VAR, weft())
}

/// The `weft` binary that runs the servers: this build's, or
/// `WEFT_TEST_SERVER_BIN` to run the tests against another build (an older
/// one shows which tests catch its defects).
pub fn server_bin() -> PathBuf {
    std::env::var_os("WEFT_TEST_SERVER_BIN").map_or_else(|| PathBuf::from(weft()), PathBuf::from)
}

/// The build's target folder (`target/debug` or `target/release`).
pub fn target_dir() -> PathBuf {
    PathBuf::from(weft()).parent().expect("the binary is in a folder").to_path_buf()
}
