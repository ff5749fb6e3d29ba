//! The C API (`libweft.so`, `weft.h`) from a C program compiled here with
//! the system's C compiler, against a real cluster, compared byte for byte
//! with the same accesses on a local file (`crates/front/capi/tests/roundtrip.c`).

use weft_testkit::TestCluster;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn a_c_program_writes_reads_and_gets_error_codes_through_libweft() {
    let tc = TestCluster::start("capi", 2);
    // target/<profile>: build libweft.so there now (cargo test builds the
    // rlib this test links, and a stale .so would test old code).
    let target = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf();
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "-q", "-p", "weft-capi", "--lib"]);
    if target.ends_with("release") {
        build.arg("--release");
    }
    let st = build.status().unwrap();
    assert!(st.success(), "cargo build -p weft-capi failed");
    let capi = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = tc.scratch("roundtrip");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(capi.join("include"))
        .arg(capi.join("tests/roundtrip.c"))
        .arg("-L")
        .arg(&target)
        .args(["-lweft", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(&exe).arg(tc.scratch("reference.bin")).env("WEFT_CLUSTER", tc.lc.cluster_file()).env("LD_LIBRARY_PATH", &target).output().unwrap();
    assert!(out.status.success(), "C program failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}
