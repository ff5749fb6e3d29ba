//! Parsing of absolute Weft paths into checked components.

use weft_wire::limits::{MAX_NAME_LEN, MAX_PATH_LEN};

/// Splits `/a/b/c` into `["a", "b", "c"]`. Repeated slashes and `.` are
/// ignored; `..`, relative paths, NUL bytes and over-long names are refused,
/// with the reason.
pub fn components(path: &str) -> Result<Vec<&str>, String> {
    if path.len() > MAX_PATH_LEN {
        return Err(format!("path is {} bytes, the limit is {MAX_PATH_LEN}", path.len()));
    }
    if !path.starts_with('/') {
        return Err(format!("path {path:?} is not absolute"));
    }
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(format!("path {path:?} contains '..'")),
            c if c.len() > MAX_NAME_LEN => return Err(format!("name of {} bytes exceeds the limit {MAX_NAME_LEN}", c.len())),
            c if c.contains('\0') => return Err("path contains a NUL byte".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::components;

    #[test]
    fn paths_are_split_and_checked() {
        assert_eq!(components("/").unwrap(), Vec::<&str>::new());
        assert_eq!(components("//a/./b/").unwrap(), vec!["a", "b"]);
        assert!(components("a/b").is_err());
        assert!(components("/a/../b").is_err());
        assert!(components(&format!("/{}", "x".repeat(256))).is_err());
        assert!(components("/a\0b").is_err());
    }
}
