//! Reading the files a user hands the harness (result sets, traces, studies) within a bound on
//! memory: a device or a pipe named by mistake (`/dev/zero`, a FIFO without a writer), or a
//! file that grows while it is read, is refused rather than read until memory runs out or
//! waited on for ever.

use std::io::Read as _;
use std::path::Path;

/// Reads the regular file at `path`, of at most `max` bytes; the error says why not, for the
/// caller to name the file in its own error type.
pub fn read_bounded(path: &Path, max: u64) -> std::result::Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    // Looked at before opening: a pipe without a writer would block the open itself.
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > max {
        return Err(format!(
            "{} bytes is more than the {max} such a file may hold",
            meta.len()
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "grew past the {max} bytes such a file may hold while it was read"
        ));
    }
    Ok(bytes)
}

/// [`read_bounded`], as text.
pub fn read_text_bounded(path: &Path, max: u64) -> std::result::Result<String, String> {
    String::from_utf8(read_bounded(path, max)?).map_err(|e| format!("not UTF-8 text: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_pipes_and_files_over_the_bound_are_refused() {
        let e = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let tmp = testkit::scratch_dir("harness-input");
        let dir = tmp.path();
        let f = dir.join("f");
        std::fs::write(&f, [b'x'; 100]).unwrap();
        assert_eq!(read_bounded(&f, 100).unwrap().len(), 100);
        let e = read_bounded(&f, 99).unwrap_err();
        assert!(e.contains("100 bytes is more than the 99"), "{e}");
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_text_bounded(&f, 100).unwrap_err().contains("UTF-8"));
        let e = read_bounded(dir, 100).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
