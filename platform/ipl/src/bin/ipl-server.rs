//! `ipl-server`: a stand-alone registry for pools whose processes are started by other means.

use clap::Parser;

/// Run a registry that nodes reach through `IPL_SERVER=host:port`.
#[derive(Parser, Debug)]
#[command(name = "ipl-server", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:7777")]
    bind: String,
    /// Pool secret every node must know.
    #[arg(long, env = "IPL_SECRET", hide_env_values = true)]
    secret: String,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    match ipl::RegistryServer::start(&a.bind, &a.secret) {
        Ok(s) => {
            println!("{}", s.address());
            s.wait();
        }
        Err(e) => {
            eprintln!("ipl-server: {e}");
            std::process::exit(2);
        }
    }
}
