//! What the mount asks the metadata service per system call, counted by
//! the server itself: each round trip is most of what a small-file
//! operation costs through the mount (issue 21: `tar xf` sets the times,
//! owner and mode of every file it writes). Needs root and /dev/fuse
//! (CI runs as root).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use weft_testkit::mount::Mount;
use weft_testkit::{meta_quiet, meta_requests, TestCluster};

/// chmod, utimens and chown of a file closed earlier each take one
/// request: the change, answered with the size the service knows, and no
/// stat after it; nor one before a chown (the kernel's refresh of the
/// mode to drop setuid itself, which the mount takes over:
/// `FUSE_HANDLE_KILLPRIV`).
#[test]
#[ignore = "needs root: FUSE mounts (make test runs it as root)"]
fn an_attribute_change_of_a_closed_file_is_one_request() {
    let tc = TestCluster::start("fuse-requests", 2);
    let m = Mount::new(&tc, "mnt");
    let c = tc.client();
    let file = m.point.join("f");
    fs::write(&file, vec![7u8; 5000]).unwrap();
    // Looked up and closed everywhere before counting.
    assert_eq!(fs::metadata(&file).unwrap().len(), 5000);
    let cost = |what: &str, want: u64, change: &dyn Fn()| {
        let before = meta_quiet(&c);
        change();
        let after = meta_requests(&c);
        // The status request that read `after` counts itself.
        let n = after - before - 1;
        assert_eq!(n, want, "{what} asked the metadata service {n} times");
    };
    cost("chmod", 1, &|| fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap());
    cost("utimens", 1, &|| {
        let path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
        let times = [libc::timespec { tv_sec: 1_000_000_000, tv_nsec: 0 }; 2];
        // SAFETY: a NUL-terminated path and two timespecs, as utimensat(2) takes.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(rc, 0, "utimensat: {}", std::io::Error::last_os_error());
    });
    cost("chown", 1, &|| std::os::unix::fs::chown(&file, Some(0), Some(0)).unwrap());
    let md = fs::metadata(&file).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((md.len(), md.permissions().mode() & 0o7777, md.mtime()), (5000, 0o600, 1_000_000_000), "the size, mode and time as changed");
    m.unmount();
}
