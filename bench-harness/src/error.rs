//! The errors of the harness: bad arguments, missing binaries and result sets, and failures to
//! read, write or draw, each with the context that tells the user what to do.

use std::path::PathBuf;

/// Shorthand for results with the harness's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the harness. Failed or timed-out runs of an app are not
/// errors: they are recorded in the result set with their status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An app name the harness does not know.
    #[error("unknown app '{name}' (known apps: {known})")]
    UnknownApp {
        /// The name given.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// A command-line value that is not acceptable.
    #[error("invalid {what} '{value}': {reason}")]
    InvalidArgument {
        /// Which argument (e.g. `--nodes`).
        what: String,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// `plot` was given a directory that holds no result set.
    #[error(
        "no result set at {}: expected a directory with meta.json and runs.jsonl \
         (written by `bench-harness run` or `quick`)",
        path.display()
    )]
    MissingResultSet {
        /// The path given.
        path: PathBuf,
    },
    /// A trace file (or directory of them) that `timeline` cannot use.
    #[error("trace {}: {reason}", path.display())]
    BadTrace {
        /// The file or directory at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A result set whose files cannot be understood.
    #[error("result set {}: {reason}", path.display())]
    BadResultSet {
        /// The file or directory at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A new result set would overwrite an existing one.
    #[error("result set {} already exists; choose another --name", path.display())]
    ResultSetExists {
        /// The existing directory.
        path: PathBuf,
    },
    /// A program the harness needs is not in the binary directory.
    #[error(
        "{program} not found in {}: build the workspace's programs with \
         `cargo build --release --workspace --bins`, or point --bin-dir at the directory that holds them",
        dir.display()
    )]
    BinaryNotFound {
        /// The program's file name.
        program: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// A cluster launcher (`mpirun`, `srun`) that is not on `PATH`.
    #[error(
        "launcher '{program}' is not installed (not found on PATH); \
         the first command would have been: {example}\n\
         (use --dry-run to print every command line without running them)"
    )]
    LauncherNotInstalled {
        /// The launcher's program name.
        program: String,
        /// The first command line that would have been run.
        example: String,
    },
    /// A launcher that cannot do what was asked (e.g. `ipl-run` without `--hostfile`).
    #[error("launcher '{launcher}': {reason}")]
    LauncherUnsupported {
        /// The launcher.
        launcher: String,
        /// What it cannot do.
        reason: String,
    },
    /// Reading or writing a file or starting a process failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file or line that does not decode.
    #[error("{context}")]
    Json {
        /// What was being decoded.
        context: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// Drawing a chart failed.
    #[error("drawing {}: {message}", path.display())]
    Chart {
        /// The chart file.
        path: PathBuf,
        /// The drawing library's message.
        message: String,
    },
}

impl Error {
    /// An [`Error::Io`] with a description of what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`Error::InvalidArgument`].
    pub fn invalid(
        what: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::InvalidArgument {
            what: what.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }
}
