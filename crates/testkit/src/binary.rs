//! Where this build's `weft` binary is.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This build's `weft` binary: beside the test binary's `deps/` folder
/// (`target/<profile>/weft`). Panics with what to do when it is not built
/// (`cargo test -p <one crate>` does not build another crate's binary).
pub fn weft() -> &'static str {
    static WEFT: OnceLock<String> = OnceLock::new();
    WEFT.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's own path");
        // target/<profile>/deps/<test>-<hash>
        let profile = exe.parent().and_then(Path::parent).expect("a test binary lives in target/<profile>/deps");
        let bin = profile.join("weft");
        assert!(bin.is_file(), "the weft binary is not built at {}: run `cargo build --bin weft` (with the same profile) first, or run every test with `make test` / `cargo test --workspace`, which builds it", bin.display());
        bin.to_string_lossy().into_owned()
    })
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
