//! Request targets, query strings and headers, through the server's own parsing of them: the
//! path it routes on, list and watch options, log options (and the agent's parsing of the
//! query the server sends it, and of any query), delete options, dry runs, the field manager
//! and field validation, content negotiation, patch types and impersonation headers.
//!
//! An input is a request head without the method: the target on the first line, then
//! `Name: value` header lines, then (after an empty line) a DeleteOptions body.
#![no_main]

use std::time::{Duration, Instant, SystemTime};

use control::http;
use libfuzzer_sys::fuzz_target;

/// The agent's answer to a log request with `query`.
fn agent_log_request(
    query: &str,
    now_nanos: i64,
) -> Result<agent::node::logs::LogRequest, agent::node::logs::Refusal> {
    agent::node::logs::parse_request(
        &format!("GET /containerLogs/default/web-0/app?{query} HTTP/1.1\r\nHost: n1\r\n\r\n"),
        now_nanos,
    )
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let target = lines.next().unwrap_or_default();
    let headers: Vec<(&str, &str)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(name, value)| (name.trim(), value.trim()))
        .collect();
    // As tide's `header(..).last()`: the last of a repeated header.
    let header = |name: &str| {
        headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    };
    let query = target
        .split_once('?')
        .map_or("", |(_, q)| q.split('#').next().unwrap_or_default());

    // The path, decoded as sent, then routed.
    let path = http::decode_sent_path(Some(target), "/");
    static TABLE: std::sync::OnceLock<control::resources::Table> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(control::resources::Table::builtin);
    let _ = http::route::parse(table, &path);
    let _ = http::route::parse(table, target);

    // List and watch options; a watch's deadline is computed from its timeout.
    if let Ok(options) = http::list_options(query) {
        let _ = Instant::now().checked_add(options.timeout);
        let _ = options.watch_after();
    }
    for (k, v) in query.split('&').filter_map(|p| p.split_once('=')) {
        if k == "timeoutSeconds" {
            if let Ok(timeout) = http::watch_timeout(Some(v)) {
                let _ = Instant::now().checked_add(timeout);
            }
        }
    }

    // Log options at three clocks; what the server asks the agent, the agent takes.
    let now_nanos = 1_800_000_000_000_000_000;
    for now in [
        SystemTime::now(),
        SystemTime::UNIX_EPOCH,
        SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799),
    ] {
        if let Ok(options) = http::log_options(query, now) {
            if let Err(refusal) = agent_log_request(&options.agent_query, now_nanos) {
                panic!(
                    "the agent refuses the server's log query {:?}: {refusal:?}",
                    options.agent_query
                );
            }
        }
    }
    for nanos in [now_nanos, i64::MIN, i64::MAX, 0] {
        let _ = agent_log_request(query, nanos);
    }
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let _ = agent::node::portforward::parse_request(&segs, query);
    let _ = agent::node::exec::parse_stream_request(false, &segs, query);

    // Delete options (query over body), and the deletion time a grace period gives.
    let media = http::media_type_of(header("Content-Type"));
    if let Ok(options) = http::delete_options_of(query, &media, body.as_bytes()) {
        if let Some(grace) = options.grace_period_seconds {
            let _ = api::meta::Time::now().plus_seconds(grace).to_string();
        }
        let _ = http::dry_run_of(query, "DeleteOptions", &options.dry_run);
    }
    let _ = http::dry_run_of(query, "CreateOptions", &[]);
    let _ = http::field_manager(query, header("User-Agent"));
    let _ = http::field_validation(query);

    // Content negotiation.
    let _ = http::accepts_protobuf_first(header("Accept"));
    let _ = http::accepts_table_first(header("Accept"));
    let _ = http::metadata::accepts_metadata(header("Accept"));
    let _ = http::discovery::negotiate_aggregated(header("Accept"));
    let _ = http::patch_type_of(&media);

    // Impersonation.
    let _ = control::impersonation::wanted(headers.iter().copied());
});
