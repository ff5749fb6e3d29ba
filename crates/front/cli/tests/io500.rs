//! `weft bench io500` (issue 12) at a tiny size: every IO500 phase runs on
//! a real mount and on a local directory, each read checks the bytes it
//! gets (interleaved 47,008-byte segments of several processes in one
//! file, 3,901-byte files in one shared directory), and the scores come
//! out. Not a timing: a mount that loses or mixes bytes fails it. Needs
//! root and /dev/fuse (CI has both).

use std::process::Command;

#[test]
fn io500_shapes_run_on_the_mount_and_their_reads_check_out() {
    let dir = std::env::temp_dir().join(format!("weft-io500-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "io500", "--procs", "3", "--easy-size", "1m", "--hard-segments", "40", "--files", "30", "--repeats", "1", "--servers", "2", "--json", "--csv"])
        .arg(dir.join("io500.csv"))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let phases: Vec<&str> = rows.iter().map(|r| r["phase"].as_str().unwrap()).collect();
    assert_eq!(phases.len(), 14, "{phases:?}");
    for p in ["ior-easy-write", "ior-hard-read", "mdtest-easy-stat", "mdtest-hard-read", "mdtest-hard-delete", "score-bandwidth", "score-metadata", "score"] {
        assert!(phases.contains(&p), "{p} missing: {phases:?}");
    }
    for r in rows {
        for side in ["mount", "local"] {
            let x = r[side].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{r}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
