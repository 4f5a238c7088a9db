//! Command lines of the platform's programs: parse errors as one line and exit status 2, and
//! output files claimed before the work that fills them.

use std::path::{Path, PathBuf};

/// Parses the command line into `P`. Help and version requests print and exit 0; anything
/// else clap refuses prints one line, `NAME: what is wrong`, and exits with status 2.
pub fn parse<P: clap::Parser>(name: &str) -> P {
    match P::try_parse() {
        Ok(p) => p,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                e.exit();
            }
            eprintln!("{name}: {}", one_line(&e.to_string()));
            std::process::exit(2);
        }
    }
}

/// Exits with status 2 after printing `NAME: reason` (a value the program cannot serve).
pub fn refuse(name: &str, reason: impl std::fmt::Display) -> ! {
    eprintln!("{name}: {}", one_line(&reason.to_string()));
    std::process::exit(2);
}

/// An output file claimed before a run, so that a path the program cannot write fails at
/// once instead of after all the work: an empty temporary file is created beside it up front,
/// the program writes its output there ([`ClaimedFile::temp`]), and [`ClaimedFile::commit`]
/// renames it over the path. Dropped without a commit (the run failed, or another process of
/// the pool wrote the output), the temporary file is removed.
#[derive(Debug)]
pub struct ClaimedFile {
    path: PathBuf,
    temp: PathBuf,
    committed: bool,
}

impl ClaimedFile {
    /// Claims `path`: fails if it is a directory, names no file, or its directory does not
    /// let this process create a file.
    pub fn claim(path: &Path) -> std::io::Result<ClaimedFile> {
        if path.is_dir() {
            return Err(std::io::Error::other("it is a directory"));
        }
        let name = path
            .file_name()
            .ok_or_else(|| std::io::Error::other("it names no file"))?;
        let temp = path.with_file_name(format!(
            ".{}.{}.partial",
            name.to_string_lossy(),
            std::process::id()
        ));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        Ok(ClaimedFile {
            path: path.to_path_buf(),
            temp,
            committed: false,
        })
    }

    /// The path claimed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary file to write the output to.
    pub fn temp(&self) -> &Path {
        &self.temp
    }

    /// Moves the temporary file, written, over the path claimed.
    pub fn commit(mut self) -> std::io::Result<()> {
        std::fs::rename(&self.temp, &self.path)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for ClaimedFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Reads the regular file at `path`, of at most `max` bytes (a host file, a secret file, an
/// application's input, a result set). Anything else fails with an error saying what it is,
/// before more than `max` bytes are read: a device such as `/dev/zero` would be read until
/// memory ran out, and a pipe without a writer would never open. The error's kind tells the
/// cases apart for callers that word them their own way: [`InvalidInput`] for what is not a
/// regular file, [`InvalidData`] for a file over the bound (or one that grew past it while it
/// was read), and the system's errors as they come.
///
/// [`InvalidInput`]: std::io::ErrorKind::InvalidInput
/// [`InvalidData`]: std::io::ErrorKind::InvalidData
pub fn read_bounded_file(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    // Opening a FIFO for reading waits for a writer, unless it does not block.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    if meta.len() > max {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("it is larger than {max} bytes ({} bytes)", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("it is larger than {max} bytes (it grew while it was read)"),
        ));
    }
    Ok(bytes)
}

/// [`read_bounded_file`] of a text file, in UTF-8.
pub fn read_small_file(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_bounded_file(path, max)?)
        .map_err(|_| std::io::Error::other("it is not UTF-8 text"))
}

/// clap's message without its usage and hint paragraphs, on one line.
fn one_line(msg: &str) -> String {
    let body = msg
        .split("\n\n")
        .next()
        .unwrap_or(msg)
        .trim()
        .trim_start_matches("error: ");
    body.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_file_appears_only_when_committed() {
        let tmp = testkit::scratch_dir("ipl-claim");
        let dir = tmp.path();
        let path = dir.join("out.txt");
        let claim = ClaimedFile::claim(&path).unwrap();
        assert!(claim.temp().exists() && !path.exists());
        drop(claim);
        assert_eq!(
            std::fs::read_dir(dir).unwrap().count(),
            0,
            "the claim is gone"
        );
        let claim = ClaimedFile::claim(&path).unwrap();
        std::fs::write(claim.temp(), "done").unwrap();
        claim.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "done");
        assert!(ClaimedFile::claim(dir).is_err(), "a directory");
        assert!(ClaimedFile::claim(&dir.join("no/such/dir/x")).is_err());
    }

    #[test]
    fn clap_messages_become_one_line() {
        let m = "error: the following required arguments were not provided:\n  --secret \
                 <SECRET>\n\nUsage: x --secret <SECRET>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(m),
            "the following required arguments were not provided: --secret <SECRET>"
        );
        assert_eq!(
            one_line("error: invalid value 'x' for '--n <N>': bad\n\nFor more, try '--help'."),
            "invalid value 'x' for '--n <N>': bad"
        );
    }
}
