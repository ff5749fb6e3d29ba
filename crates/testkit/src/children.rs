//! Several processes of one test binary, as ranks of a job.

use std::path::Path;

/// Runs `ranks` copies of the ignored test `child` of this test binary as
/// separate processes (rank in `WEFT_TEST_RANK`, the cluster in
/// `WEFT_CLUSTER`, plus `env`), all at once, and asserts they all succeed.
pub fn run_children(child: &str, ranks: u64, cluster_file: &Path, env: &[(&str, &str)]) {
    let me = std::env::current_exe().unwrap();
    let (bin_var, bin) = crate::binary::bin_env();
    let kids: Vec<_> = (0..ranks)
        .map(|rank| {
            std::process::Command::new(&me)
                .args(["--exact", child, "--ignored", "--test-threads=1"])
                .env("WEFT_TEST_RANK", rank.to_string())
                .env("WEFT_CLUSTER", cluster_file)
                .env(bin_var, bin)
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        // libtest reports a child's panic on its standard output.
        let said = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = said.lines().collect();
        let why = lines.iter().position(|l| l.contains("panicked at")).map_or(String::new(), |i| lines[i..lines.len().min(i + 3)].join("\n"));
        assert!(out.status.success(), "child process {child} failed:\n{why}");
    }
}
