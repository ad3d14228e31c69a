//! The `skiff` binary: the server and the command-line client.

use skiff_control::cli::{self, AlreadyReported, Command};

// See the `jemalloc` feature in Cargo.toml.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (its `malloc_conf`, read once at start):
/// - a background thread hands freed memory back to the system within about a second, also
///   while the server is idle. Without it, memory freed after a burst (a large list, a
///   re-listing watcher) stayed resident until the next allocations: 460 MiB instead of
///   170 MiB after the scheduling benchmark's backlog run;
/// - smaller thread caches (objects up to 1 KiB, at most 64 of a size per thread, instead of
///   32 KiB and 200): each of the server's threads keeps what it last freed, and an idle
///   thread never gives it back. 1.6–3 MiB less resident with 10,000 pods and 100 watchers,
///   create throughput unchanged (docs/benchmarks.md, issue 14).
#[cfg(feature = "jemalloc")]
#[unsafe(export_name = "_rjem_malloc_conf")]
#[used]
static JEMALLOC_CONF: &[u8; 103] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,\
tcache_max:1024,tcache_nslots_small_max:64\0";

fn init_tracing() {
    // The in-process agent's libcontainer logs from inside forked container children, where
    // a log event must not take locks: keep its events at `error`.
    let mut spec = std::env::var("SKIFF_LOG").unwrap_or_else(|_| "info".into());
    for quiet in ["libcontainer", "libcgroups"] {
        if !spec.contains(quiet) {
            spec.push_str(&format!(",{quiet}=error"));
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,libcontainer=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() {
    // A process kept only to hold a container's stdin or terminal open (see
    // agent::runtime::stdio) starts as this binary re-executed.
    #[cfg(feature = "embedded-agent")]
    agent::sys::run_fd_holder_if_asked();
    let parsed = match cli::parse_args() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            match e.kind() {
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
                _ => {
                    let text = e.to_string();
                    let first = text.lines().next().unwrap_or("invalid arguments");
                    let first = first.strip_prefix("error: ").unwrap_or(first);
                    eprintln!("error: {first} (see skiff --help)");
                    std::process::exit(2);
                }
            }
        }
    };
    let result = match parsed.command {
        Command::Server(args) => {
            init_tracing();
            skiff_control::server::run(*args)
        }
        _ => cli::run(parsed),
    };
    if let Err(e) = result {
        if e.downcast_ref::<AlreadyReported>().is_none() {
            eprintln!("error: {}", cli::error_line(&e));
        }
        std::process::exit(1);
    }
}
