//! `GET /stats/summary` on the agent endpoint (the kubelet's path): the node's and its running
//! containers' CPU and memory, read from cgroups when asked. The agent keeps no history and
//! writes nothing: the server turns two readings of the cumulative CPU time into a rate.
//!
//! Node figures come from the root cgroup (v1 `cpuacct`/`memory`, v2 `cpu.stat`), or from
//! `/proc` where the root cgroup does not account them (v2's root has no `memory.current`).

use std::path::Path;

use api::core::Pod;
use api::meta::Time;
use api::stats::{
    ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats, Summary,
};
use futures_lite::{AsyncWrite, AsyncWriteExt};

use super::logs::LogSource;
use crate::runtime::cgroup::{self, CgroupVersion, MemoryUsage};
use crate::runtime::{ContainerState, Runtime};

/// The path the server asks.
pub const PATH: &str = "/stats/summary";

/// Whether a request head asks for the summary.
pub fn is_summary_request(head: &str) -> bool {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    method == "GET" && target.split('?').next() == Some(PATH)
}

fn cpu(ns: Option<u64>, now: Time) -> Option<CpuStats> {
    ns.map(|n| CpuStats {
        time: Some(now),
        usage_core_nano_seconds: Some(n),
    })
}

fn memory(m: Option<MemoryUsage>, now: Time) -> Option<MemoryStats> {
    m.map(|m| MemoryStats {
        time: Some(now),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
    })
}

/// The node's own figures: its root cgroup, else `/proc`.
pub fn node_stats(node_name: &str, cgroup_root: &Path, proc_root: &Path, now: Time) -> NodeStats {
    let cpu_ns =
        cgroup::cpu_usage_ns(cgroup_root, "").or_else(|| cgroup::proc_cpu_usage_ns(proc_root));
    let mem = match cgroup::detect(cgroup_root) {
        CgroupVersion::V1 => cgroup::memory_usage(cgroup_root, ""),
        CgroupVersion::V2 => None,
    }
    .or_else(|| cgroup::meminfo_usage(proc_root));
    NodeStats {
        node_name: node_name.to_string(),
        cpu: cpu(cpu_ns, now),
        memory: memory(mem, now),
    }
}

/// The summary: the node, and every running container grouped by pod (pods named from the
/// local cache of desired pods). Blocking: cgroup files and the cache's redb file.
pub fn summary(node_name: &str, runtime: &Runtime, pods: &[Pod]) -> Summary {
    let cfg = runtime.config();
    let now = Time::now();
    let mut out = Summary {
        node: node_stats(node_name, &cfg.cgroup_root, &cfg.proc_root, now),
        pods: Vec::new(),
    };
    let mut ids = runtime.list().unwrap_or_default();
    ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    for id in ids {
        let ContainerState::Running { started_at, .. } =
            runtime.state(&id).unwrap_or(ContainerState::Unknown)
        else {
            continue;
        };
        let rel = format!("{}/{}/{}", cfg.cgroup_parent, id.pod_uid(), id.name());
        let stats = ContainerStats {
            name: id.name().to_string(),
            start_time: started_at.map(Time::from_system),
            cpu: cpu(cgroup::cpu_usage_ns(&cfg.cgroup_root, &rel), now),
            memory: memory(cgroup::memory_usage(&cfg.cgroup_root, &rel), now),
        };
        if let Some(p) = out.pods.iter_mut().find(|p| p.pod_ref.uid == id.pod_uid()) {
            p.containers.push(stats);
            continue;
        }
        let pod = pods.iter().find(|p| p.metadata.uid == id.pod_uid());
        out.pods.push(PodStats {
            pod_ref: PodReference {
                name: pod.map(|p| p.metadata.name.clone()).unwrap_or_default(),
                namespace: pod
                    .map(|p| p.metadata.namespace().to_string())
                    .unwrap_or_default(),
                uid: id.pod_uid().to_string(),
            },
            containers: vec![stats],
        });
    }
    out
}

/// Answers a summary request on `out` (a JSON body, then the connection closes).
pub async fn answer<W: AsyncWrite + Unpin>(
    out: &mut W,
    source: &std::sync::Arc<LogSource>,
) -> std::io::Result<()> {
    let src = source.clone();
    let body = smol::unblock(move || {
        let pods = src.cache.list().unwrap_or_default();
        let s = summary(&src.node_name, &src.runtime, &pods);
        serde_json::to_vec(&s).unwrap_or_default()
    })
    .await;
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes()).await?;
    out.write_all(&body).await?;
    out.flush().await?;
    out.close().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_requests() {
        assert!(is_summary_request("GET /stats/summary HTTP/1.1\r\n\r\n"));
        assert!(is_summary_request(
            "GET /stats/summary?only_cpu_and_memory=true HTTP/1.1\r\n"
        ));
        assert!(!is_summary_request("POST /stats/summary HTTP/1.1\r\n"));
        assert!(!is_summary_request("GET /containerLogs/a/b/c HTTP/1.1\r\n"));
    }

    #[test]
    fn node_figures_fall_back_to_proc_on_v2() {
        let v2 = tempfile::tempdir().expect("tempdir");
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu memory").expect("write");
        std::fs::write(v2.path().join("cpu.stat"), "usage_usec 7\n").expect("write");
        let n = node_stats("n1", v2.path(), Path::new("/proc"), Time::now());
        assert_eq!(n.node_name, "n1");
        assert_eq!(n.cpu.and_then(|c| c.usage_core_nano_seconds), Some(7000));
        let m = n.memory.expect("memory from /proc/meminfo");
        assert!(m.working_set_bytes.unwrap() > 0);
        assert!(m.working_set_bytes <= m.usage_bytes);
    }
}
