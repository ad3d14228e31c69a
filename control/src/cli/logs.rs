//! `skiff logs [-f] [-c CONTAINER] [--tail N] [--since DURATION] [--timestamps] [--previous]
//! POD`: a container's log, as `kubectl logs` prints it.

use std::io::Write;

use api::client::encode_query;
use futures_lite::StreamExt;

use super::Session;

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The pod.
    pub pod: String,
    /// The container (default: the pod's only container).
    #[arg(short = 'c', long)]
    pub container: Option<String>,
    /// Keep streaming new output until the container ends or Ctrl-C.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the last N lines (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub tail: i64,
    /// Only lines newer than this, e.g. `10s`, `5m`, `1h`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<std::time::Duration>,
    /// Prefix each line with its time (RFC 3339).
    #[arg(long)]
    pub timestamps: bool,
    /// The log of the previous run of the container (after a restart).
    #[arg(short = 'p', long)]
    pub previous: bool,
}

/// The API path of the request these arguments ask for.
pub fn log_path(namespace: &str, args: &LogsArgs) -> String {
    let mut q = Vec::new();
    if let Some(c) = &args.container {
        q.push(format!("container={}", encode_query(c)));
    }
    if args.follow {
        q.push("follow=true".to_string());
    }
    if args.tail >= 0 {
        q.push(format!("tailLines={}", args.tail));
    }
    if let Some(since) = args.since {
        q.push(format!("sinceSeconds={}", since.as_secs().max(1)));
    }
    if args.timestamps {
        q.push("timestamps=true".to_string());
    }
    if args.previous {
        q.push("previous=true".to_string());
    }
    let mut path = format!("/api/v1/namespaces/{namespace}/pods/{}/log", args.pod);
    if !q.is_empty() {
        path.push('?');
        path.push_str(&q.join("&"));
    }
    path
}

/// Prints the log to stdout as it arrives.
pub async fn run(session: &Session, args: &LogsArgs) -> anyhow::Result<()> {
    let path = log_path(&session.namespace, args);
    let mut body = session.client.stream_bytes(&path, "*/*").await?;
    let stdout = std::io::stdout();
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        let mut out = stdout.lock();
        out.write_all(&chunk)?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: LogsArgs,
    }

    #[test]
    fn builds_the_request_path() {
        let w = Wrap::try_parse_from([
            "x",
            "web",
            "-c",
            "main",
            "-f",
            "--tail",
            "5",
            "--since",
            "10s",
            "--timestamps",
        ])
        .expect("parse");
        assert_eq!(
            log_path("default", &w.args),
            "/api/v1/namespaces/default/pods/web/log?container=main&follow=true&tailLines=5&sinceSeconds=10&timestamps=true"
        );
        let w = Wrap::try_parse_from(["x", "web", "--previous"]).expect("parse");
        assert_eq!(
            log_path("ns", &w.args),
            "/api/v1/namespaces/ns/pods/web/log?previous=true"
        );
    }
}
