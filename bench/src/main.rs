//! skiff-bench: drives a running skiff server and prints figures.
//!
//! `watch-fanout`: N watchers on pods; writes one pod at a time and measures, per write, the
//! time from the write's acknowledgement to the moment the last watcher has the event.
//! `fill`: creates N pods with C concurrent clients (for memory figures).
//! `status-writes`: after a `fill`, C clients patch the status of those pods round and round
//! (the write path of the kubelets' status reports, with its field ownership).
//! `watchers`: holds N watches open until killed (for memory figures).
//! `proc`: CPU and disk-write figures of a process over an interval.
//! `schedule`: scheduling throughput and create-to-bound latency on simulated nodes.
//! `webhook`: an HTTPS admission webhook (bench/admission.sh).

mod schedule;
mod webhook;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use api::client::{Client, ClientConfig};
use api::kubeconfig::Kubeconfig;
mod podstart;

use clap::{Parser, Subcommand};
use futures_lite::StreamExt;
use serde_json::{json, Value};

#[derive(Parser)]
struct Cli {
    #[arg(long, global = true, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    WatchFanout {
        #[arg(long, default_value_t = 1000)]
        watchers: usize,
        #[arg(long, default_value_t = 50)]
        writes: usize,
    },
    Fill {
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    Watchers {
        #[arg(long, default_value_t = 100)]
        watchers: usize,
    },
    StatusWrites {
        /// The pods `fill` created (fill-0 ... fill-N-1).
        #[arg(long, default_value_t = 1000)]
        pods: usize,
        #[arg(long, default_value_t = 10_000)]
        writes: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    Schedule {
        /// Wait for this many Ready nodes first (`skiff-agent --simulate N`).
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        #[arg(long, default_value_t = 30_000)]
        pods: usize,
        #[arg(long, default_value_t = 1000)]
        burst: usize,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Backlog mode: create the pods while no node exists, then run this command (after
        /// `--`, e.g. `skiff-agent --simulate N ...`) and measure how fast the scheduler binds
        /// the backlog once the nodes are Ready.
        #[arg(last = true)]
        start_nodes: Vec<String>,
    },
    Proc {
        #[arg(long)]
        pid: u32,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// Pod create -> Running (seen on a watch), one by one and in a burst.
    PodStart {
        /// Bind the pods to this node directly (default: through the scheduler).
        #[arg(long)]
        node: Option<String>,
        #[arg(long, default_value = "skiff.local/busybox:latest")]
        image: String,
        #[arg(long, default_value_t = 100)]
        sequential: usize,
        #[arg(long, default_value_t = 20)]
        concurrent: usize,
    },
    /// An admission webhook (`/mutate` labels, `/validate` allows) until stdin has a line.
    Webhook {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        cert: PathBuf,
        #[arg(long)]
        key: PathBuf,
    },
    /// Wall time of a command that returns once its container runs (`{}` = an index).
    CommandLatency {
        #[arg(long, default_value_t = 100)]
        sequential: usize,
        #[arg(long, default_value_t = 20)]
        concurrent: usize,
        #[arg(long, default_value = "command")]
        label: String,
        #[arg(trailing_var_arg = true, required = true)]
        argv: Vec<String>,
    },
}

fn client(path: &Option<PathBuf>) -> anyhow::Result<Client> {
    let path = path
        .clone()
        .context("--kubeconfig or KUBECONFIG is required")?;
    let kc = Kubeconfig::load(&path)?;
    Ok(Client::new(ClientConfig::from_kubeconfig(&kc, None)?)?)
}

fn pod(name: &str) -> Value {
    let template = include_str!("../pod.json");
    let mut v: Value = serde_json::from_str(template).expect("bench/pod.json is JSON");
    v["metadata"]["name"] = json!(name);
    v
}

const PODS: &str = "/api/v1/namespaces/default/pods";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// What `watch-fanout` reads of a watch event.
#[derive(serde::Deserialize)]
struct EventHead<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    object: ObjectHead<'a>,
}

#[derive(serde::Deserialize)]
struct ObjectHead<'a> {
    #[serde(borrow)]
    metadata: NameHead<'a>,
}

#[derive(serde::Deserialize)]
struct NameHead<'a> {
    name: &'a str,
}

async fn watch_fanout(
    kubeconfig: &Option<PathBuf>,
    watchers: usize,
    writes: usize,
) -> anyhow::Result<()> {
    let writer = client(kubeconfig)?;
    let list = writer
        .request_json("GET", PODS, None, "application/json")
        .await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    // name -> arrival times at each watcher
    let arrivals: Arc<Mutex<std::collections::HashMap<String, Vec<Instant>>>> = Arc::default();
    let ready = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let c = client(kubeconfig)?;
        let arrivals = arrivals.clone();
        let ready = ready.clone();
        let path = format!("{PODS}?watch=true&resourceVersion={rv}&timeoutSeconds=600");
        tasks.push(smol::spawn(async move {
            let mut stream = c.stream_raw_lines(&path, "application/json").await?;
            ready.fetch_add(1, Ordering::SeqCst);
            let mut seen = 0;
            while let Some(line) = stream.next().await {
                let line = line?;
                // Only the event's type and the object's name, without building the whole
                // object: the 1,000 watchers share the machine's two cores with the server.
                let ev: EventHead<'_> = serde_json::from_slice(&line)?;
                if ev.kind == "ADDED" {
                    let name = ev.object.metadata.name.to_string();
                    arrivals
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(name)
                        .or_default()
                        .push(Instant::now());
                    seen += 1;
                    if seen == writes {
                        break;
                    }
                }
            }
            anyhow::Ok(())
        }));
    }
    let opened = Instant::now();
    while ready.load(Ordering::SeqCst) < watchers {
        if opened.elapsed() > Duration::from_secs(120) {
            bail!(
                "only {} of {watchers} watches opened",
                ready.load(Ordering::SeqCst)
            );
        }
        smol::Timer::after(Duration::from_millis(20)).await;
    }
    println!("{watchers} watches open after {}", ms(opened.elapsed()));
    let mut acks = Vec::new();
    for i in 0..writes {
        let name = format!("fanout-{i}");
        let body = serde_json::to_vec(&pod(&name))?;
        let r = writer
            .request(
                "POST",
                PODS,
                Some(("application/json", body)),
                "application/json",
            )
            .await?;
        let acked = Instant::now();
        if r.status != 201 {
            bail!("create answered {}", r.status);
        }
        acks.push((name, acked));
        // One write in flight at a time, then let every watcher take it.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = arrivals
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&acks[i].0)
                .map_or(0, Vec::len);
            if got == watchers {
                break;
            }
            if Instant::now() > deadline {
                bail!("write {i}: only {got} of {watchers} watchers got it");
            }
            smol::Timer::after(Duration::from_millis(1)).await;
        }
    }
    for t in tasks {
        t.await?;
    }
    let arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner());
    let mut last = Vec::new();
    let mut all = Vec::new();
    for (name, acked) in &acks {
        let times = &arrivals[name];
        let lat: Vec<Duration> = times
            .iter()
            .map(|t| t.saturating_duration_since(*acked))
            .collect();
        last.push(*lat.iter().max().unwrap_or(&Duration::ZERO));
        all.extend(lat);
    }
    last.sort();
    all.sort();
    println!(
        "watch fan-out: {watchers} watchers, {writes} writes; ack -> last watcher: p50 {} p99 {} max {}; ack -> any delivery: p50 {} p99 {}",
        ms(percentile(&last, 0.5)),
        ms(percentile(&last, 0.99)),
        ms(*last.last().unwrap_or(&Duration::ZERO)),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
    );
    Ok(())
}

/// Runs `each(client, i)` for every `i` below `total`, from `concurrency` clients at once;
/// returns the seconds it took.
async fn run_concurrently<F, Fut>(
    kubeconfig: &Option<PathBuf>,
    total: usize,
    concurrency: usize,
    each: F,
) -> anyhow::Result<f64>
where
    F: Fn(Client, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let c = client(kubeconfig)?;
        let next = next.clone();
        let each = each.clone();
        tasks.push(smol::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    return anyhow::Ok(());
                }
                each(c.clone(), i).await?;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(started.elapsed().as_secs_f64())
}

async fn fill(kubeconfig: &Option<PathBuf>, pods: usize, concurrency: usize) -> anyhow::Result<()> {
    let secs = run_concurrently(kubeconfig, pods, concurrency, |c, i| async move {
        let body = serde_json::to_vec(&pod(&format!("fill-{i}")))?;
        let r = c
            .request(
                "POST",
                PODS,
                Some(("application/json", body)),
                "application/json",
            )
            .await?;
        if r.status != 201 && r.status != 409 {
            bail!("create answered {}", r.status);
        }
        Ok(())
    })
    .await?;
    println!(
        "created {pods} pods in {secs:.1} s ({:.0}/s)",
        pods as f64 / secs
    );
    Ok(())
}

async fn status_writes(
    kubeconfig: &Option<PathBuf>,
    pods: usize,
    writes: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let secs = run_concurrently(kubeconfig, writes, concurrency, move |c, i| async move {
        // Every write changes the status: a condition's message names the write.
        let body = serde_json::to_vec(&json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "message": format!("write {i}")}
        ]}}))?;
        let path = format!("{PODS}/fill-{}/status", i % pods);
        let r = c
            .request(
                "PATCH",
                &path,
                Some(("application/strategic-merge-patch+json", body)),
                "application/json",
            )
            .await?;
        if r.status != 200 {
            bail!("status patch answered {}", r.status);
        }
        Ok(())
    })
    .await?;
    println!(
        "{writes} status writes in {secs:.1} s ({:.0}/s)",
        writes as f64 / secs
    );
    Ok(())
}

async fn hold_watchers(kubeconfig: &Option<PathBuf>, watchers: usize) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let c = client(kubeconfig)?;
        tasks.push(smol::spawn(async move {
            let list = c
                .request_json("GET", &format!("{PODS}?limit=1"), None, "application/json")
                .await?;
            let rv = list["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("0")
                .to_string();
            let mut s = c
                .stream_lines(
                    &format!("{PODS}?watch=true&resourceVersion={rv}&timeoutSeconds=3600"),
                    "application/json",
                )
                .await?;
            while let Some(ev) = s.next().await {
                ev?;
            }
            anyhow::Ok(())
        }));
    }
    println!("{watchers} watchers open");
    for t in tasks {
        t.await?;
    }
    Ok(())
}

struct ProcSample {
    cpu_ticks: u64,
    write_bytes: u64,
    rss_kib: u64,
}

fn sample(pid: u32) -> anyhow::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat; after the comm they are at 11 and 12.
    let cpu_ticks = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    let write_bytes = io
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .context("no write_bytes")?
        .trim()
        .parse()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmRSS")?
        .parse()?;
    Ok(ProcSample {
        cpu_ticks,
        write_bytes,
        rss_kib,
    })
}

fn proc_figures(pid: u32, seconds: u64) -> anyhow::Result<()> {
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let a = sample(pid)?;
    std::thread::sleep(Duration::from_secs(seconds));
    let b = sample(pid)?;
    let cpu = (b.cpu_ticks - a.cpu_ticks) as f64 / ticks_per_sec / seconds as f64 * 100.0;
    println!(
        "pid {pid} over {seconds} s: cpu {cpu:.3}% of a core, disk writes {} bytes, rss {:.1} MiB",
        b.write_bytes - a.write_bytes,
        b.rss_kib as f64 / 1024.0
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::WatchFanout { watchers, writes } => {
            smol::block_on(watch_fanout(&cli.kubeconfig, watchers, writes))
        }
        Cmd::Fill { pods, concurrency } => smol::block_on(fill(&cli.kubeconfig, pods, concurrency)),
        Cmd::Watchers { watchers } => smol::block_on(hold_watchers(&cli.kubeconfig, watchers)),
        Cmd::StatusWrites {
            pods,
            writes,
            concurrency,
        } => smol::block_on(status_writes(&cli.kubeconfig, pods, writes, concurrency)),
        Cmd::Proc { pid, seconds } => proc_figures(pid, seconds),
        Cmd::Webhook { port, cert, key } => webhook::serve(port, &cert, &key),
        Cmd::PodStart {
            node,
            image,
            sequential,
            concurrent,
        } => smol::block_on(podstart::pod_start(
            client(&cli.kubeconfig)?,
            node,
            image,
            sequential,
            concurrent,
        )),
        Cmd::CommandLatency {
            sequential,
            concurrent,
            label,
            argv,
        } => podstart::command_latency(argv, sequential, concurrent, &label),
        Cmd::Schedule {
            nodes,
            pods,
            burst,
            concurrency,
            start_nodes,
        } => {
            let kc = cli.kubeconfig.clone();
            smol::block_on(schedule::schedule(
                || client(&kc),
                schedule::Plan {
                    nodes,
                    pods,
                    burst,
                    concurrency,
                    start_nodes,
                },
            ))
        }
    }
}
