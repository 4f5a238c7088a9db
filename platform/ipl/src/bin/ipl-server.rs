//! `ipl-server`: a stand-alone registry for pools whose processes are started by other means.

use clap::Parser;
use std::path::PathBuf;

/// Run a registry that nodes reach through `IPL_SERVER=host:port`.
///
/// The pool secret comes from the environment variable IPL_SECRET or from the first line of
/// --secret-file, never from the command line, where every user of this host could read it.
#[derive(Parser, Debug)]
#[command(name = "ipl-server", version, allow_negative_numbers = true)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7777")]
    bind: String,
    /// File whose first line is the pool secret every node must know (keep it readable only
    /// by you). Default: the environment variable IPL_SECRET.
    #[arg(long, value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// Refused, with a pointer to IPL_SECRET and --secret-file.
    #[arg(long, hide = true, value_name = "SECRET")]
    secret: Option<String>,
}

/// The largest secret file read; only its first line is the secret.
const MAX_SECRET_FILE: u64 = 64 * 1024;

fn secret(a: &Args) -> Result<String, String> {
    if a.secret.is_some() {
        return Err(
            "--secret: a secret on the command line is visible to every user of this \
                    host (ps); give it in IPL_SECRET or in a file named by --secret-file"
                .into(),
        );
    }
    let (secret, from) = match (&a.secret_file, std::env::var("IPL_SECRET")) {
        (Some(_), Ok(_)) => {
            return Err("the secret is given twice, in IPL_SECRET and by --secret-file".into())
        }
        (Some(path), _) => {
            let text = ipl::cli::read_small_file(path, MAX_SECRET_FILE)
                .map_err(|e| format!("--secret-file: cannot read {}: {e}", path.display()))?;
            use std::os::unix::fs::PermissionsExt;
            if let Ok(m) = std::fs::metadata(path) {
                if m.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(
                        "{} can be read by other users than its owner (chmod 600 it)",
                        path.display()
                    );
                }
            }
            let line = text.lines().next().unwrap_or("").to_owned();
            (line, format!("--secret-file {}", path.display()))
        }
        (None, Ok(s)) => (s, "IPL_SECRET".to_owned()),
        (None, Err(_)) => {
            return Err("no pool secret: set IPL_SECRET or give --secret-file FILE".into())
        }
    };
    if secret.trim().is_empty() {
        return Err(format!(
            "{from}: the secret is empty; every node proves it knows the secret, so an empty \
             one admits anybody"
        ));
    }
    Ok(secret)
}

fn main() {
    let a: Args = ipl::cli::parse("ipl-server");
    // Log lines as RUST_LOG says (info by default); one it cannot read is refused, not ignored.
    let logs = ipl::trace::log_filter("info").unwrap_or_else(|e| ipl::cli::refuse("ipl-server", e));
    tracing_subscriber::fmt()
        .with_env_filter(logs)
        .with_writer(std::io::stderr)
        .init();
    let secret = secret(&a).unwrap_or_else(|e| ipl::cli::refuse("ipl-server", e));
    match ipl::RegistryServer::start(&a.bind, &secret) {
        Ok(s) => {
            println!("{}", s.address());
            s.wait();
        }
        Err(e) => ipl::cli::refuse("ipl-server", e),
    }
}
