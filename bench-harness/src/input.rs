//! Reading the files a user hands the harness (result sets, traces, studies) within a bound on
//! memory: a device or a pipe named by mistake (`/dev/zero`, a FIFO without a writer), or a
//! file that grows while it is read, is refused rather than read until memory runs out or
//! waited on for ever.

use std::io::ErrorKind;
use std::path::Path;

/// Reads the regular file at `path`, of at most `max` bytes, through
/// [`ipl::cli::read_bounded_file`]; the error says why not, for the caller to name the file
/// in its own error type.
pub fn read_bounded(path: &Path, max: u64) -> std::result::Result<Vec<u8>, String> {
    ipl::cli::read_bounded_file(path, max).map_err(|e| match e.kind() {
        ErrorKind::InvalidInput => "not a regular file".to_string(),
        _ if e.raw_os_error().is_none() => e.to_string(),
        _ => format!("cannot read: {e}"),
    })
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
        assert!(e.contains("larger than 99 bytes (100 bytes)"), "{e}");
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_text_bounded(&f, 100).unwrap_err().contains("UTF-8"));
        let e = read_bounded(dir, 100).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // A FIFO without a writer: refused at once, where opening it to read would wait.
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid, NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_bounded(&fifo, 100).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_bounded(&dir.join("absent"), 100).unwrap_err();
        assert!(e.starts_with("cannot read: "), "{e}");
    }
}
