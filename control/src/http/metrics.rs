//! Prometheus text metrics: request counts and latencies by verb, resource and code.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Latency bucket bounds in seconds.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<(String, String), Histogram>,
}

/// Request metrics; cheap enough to update on every request.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    /// Whether this server leads the controllers, when it takes part in an election.
    leading: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Metrics {
    pub fn observe(&self, verb: &str, resource: &str, code: u16, elapsed: Duration) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *m.requests
            .entry((verb.to_string(), resource.to_string(), code))
            .or_default() += 1;
        if verb != "WATCH" {
            m.latency
                .entry((verb.to_string(), resource.to_string()))
                .or_default()
                .observe(elapsed.as_secs_f64());
        }
    }

    /// Reports leadership from now on (`leader_election_master_status`, as
    /// kube-controller-manager names it).
    pub fn set_leading(&self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        let _ = self.leading.set(flag);
    }

    /// Renders request metrics plus the store's figures given by the caller.
    pub fn render(&self, store: &crate::store::CommitStats, watchers: usize) -> String {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        out.push_str("# HELP apiserver_request_total Requests by verb, resource and HTTP code.\n");
        out.push_str("# TYPE apiserver_request_total counter\n");
        for ((verb, resource, code), n) in &m.requests {
            let _ = writeln!(
                out,
                "apiserver_request_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP apiserver_request_duration_seconds Request latency by verb and resource.\n",
        );
        out.push_str("# TYPE apiserver_request_duration_seconds histogram\n");
        for ((verb, resource), h) in &m.latency {
            h.render(
                &mut out,
                "apiserver_request_duration_seconds",
                &format!("verb=\"{verb}\",resource=\"{resource}\""),
            );
        }
        if let Some(flag) = self.leading.get() {
            out.push_str("# HELP leader_election_master_status Whether this server leads the controllers (1) or not (0).\n");
            out.push_str("# TYPE leader_election_master_status gauge\n");
            let _ = writeln!(
                out,
                "leader_election_master_status{{name=\"{}\"}} {}",
                crate::leader::LEASE_NAME,
                u8::from(flag.load(std::sync::atomic::Ordering::Relaxed))
            );
        }
        out.push_str("# HELP skiff_store_commits_total Durable store transactions.\n");
        out.push_str("# TYPE skiff_store_commits_total counter\n");
        let _ = writeln!(out, "skiff_store_commits_total {}", store.commits);
        out.push_str("# HELP skiff_store_writes_total Writes carried by store transactions.\n");
        out.push_str("# TYPE skiff_store_writes_total counter\n");
        let _ = writeln!(out, "skiff_store_writes_total {}", store.writes);
        out.push_str("# HELP skiff_store_conflicts_total Writes refused because what they read changed after their snapshot; each runs again.\n");
        out.push_str("# TYPE skiff_store_conflicts_total counter\n");
        let _ = writeln!(out, "skiff_store_conflicts_total {}", store.conflicts);
        out.push_str("# HELP skiff_store_commit_duration_seconds Time spent committing store transactions.\n");
        out.push_str("# TYPE skiff_store_commit_duration_seconds summary\n");
        let _ = writeln!(
            out,
            "skiff_store_commit_duration_seconds_sum {}",
            store.total_commit_time.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "skiff_store_commit_duration_seconds_count {}",
            store.commits
        );
        out.push_str("# HELP skiff_store_sync_duration_seconds_total Part of the commit time spent in the database's commit (page writes and fsync).\n");
        out.push_str("# TYPE skiff_store_sync_duration_seconds_total counter\n");
        let _ = writeln!(
            out,
            "skiff_store_sync_duration_seconds_total {}",
            store.total_sync_time.as_secs_f64()
        );
        out.push_str(
            "# HELP skiff_store_last_commit_duration_seconds Duration of the latest commit.\n",
        );
        out.push_str("# TYPE skiff_store_last_commit_duration_seconds gauge\n");
        let _ = writeln!(
            out,
            "skiff_store_last_commit_duration_seconds {}",
            store.last_commit_time.as_secs_f64()
        );
        out.push_str("# HELP skiff_store_max_batch_size Most writes carried by one commit.\n");
        out.push_str("# TYPE skiff_store_max_batch_size gauge\n");
        let _ = writeln!(out, "skiff_store_max_batch_size {}", store.max_batch_size);
        out.push_str("# HELP apiserver_registered_watchers Open watches.\n");
        out.push_str("# TYPE apiserver_registered_watchers gauge\n");
        let _ = writeln!(out, "apiserver_registered_watchers {watchers}");
        out
    }
}
