//! `schedule`: scheduling throughput against simulated nodes. Waits for `--nodes` Ready
//! nodes, watches pods, creates `--pods` pods in bursts of `--burst` (each burst with
//! `--concurrency` concurrent creates), and reports bound pods per second and the time from
//! each create's response to the moment the watch shows the pod bound (creationTimestamp has
//! one-second precision, so both ends are measured here), plus when the pods were Running.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use api::client::{Client, ListOptions};
use api::Kind;
use futures_lite::StreamExt;

use crate::{ms, percentile, pod, PODS};

#[derive(Default)]
struct Seen {
    created: HashMap<String, Instant>,
    bound: HashMap<String, Instant>,
    running: std::collections::HashSet<String>,
    last_running: Option<Instant>,
}

/// Waits until `count` nodes report Ready=True.
async fn wait_for_nodes(c: &Client, count: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let v = c
            .list_value(Kind::Node, None, &ListOptions::default())
            .await?;
        let ready = v["items"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .count()
        });
        if ready >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {count} nodes became ready");
        }
        smol::Timer::after(Duration::from_millis(500)).await;
    }
}

/// What to run.
pub struct Plan {
    pub nodes: usize,
    pub pods: usize,
    pub burst: usize,
    pub concurrency: usize,
    /// Backlog mode when not empty: the command that starts the nodes once the pods exist.
    pub start_nodes: Vec<String>,
}

/// A watch line: its type, and its object unparsed (an ERROR event carries a Status, not a
/// pod).
#[derive(serde::Deserialize)]
struct EventLine<'a> {
    #[serde(rename = "type")]
    type_: String,
    #[serde(borrow)]
    object: Option<&'a serde_json::value::RawValue>,
}

/// The parts of a watched pod the benchmark reads; serde skips the rest without building it.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct PodState {
    metadata: NameOnly,
    spec: NodeNameOnly,
    status: PhaseOnly,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct NameOnly {
    name: String,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NodeNameOnly {
    node_name: Option<String>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct PhaseOnly {
    phase: Option<String>,
}

/// The watch of the benchmark's pods from `rv`, as raw lines.
async fn watch_pods(c: &Client, rv: &str) -> anyhow::Result<api::client::LineStream> {
    let options = ListOptions {
        resource_version: Some(rv.to_string()),
        ..Default::default()
    };
    Ok(
        c.watch_lines(Kind::Pod, Some("default"), &options, "application/json")
            .await?,
    )
}

pub async fn schedule(
    make_client: impl Fn() -> anyhow::Result<Client>,
    plan: Plan,
) -> anyhow::Result<()> {
    let Plan {
        nodes,
        pods,
        burst,
        concurrency,
        start_nodes,
    } = plan;
    let backlog = !start_nodes.is_empty();
    let c = make_client()?;
    let t0 = Instant::now();
    if !backlog {
        wait_for_nodes(&c, nodes).await?;
        println!(
            "{nodes} simulated nodes ready ({:.1} s after the benchmark started)",
            t0.elapsed().as_secs_f64()
        );
    }

    let seen = Arc::new(Mutex::new(Seen::default()));
    let list = c
        .list_value(Kind::Pod, Some("default"), &ListOptions::default())
        .await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut stream = watch_pods(&c, &rv).await?;
    // A watcher that falls too far behind is cut off by the server (as kube-apiserver does);
    // it then lists the pods once, counts what it missed as seen at that moment (an upper
    // bound) and watches on from the list.
    let watcher = {
        let seen = seen.clone();
        let c = make_client()?;
        smol::spawn(async move {
            let note = |p: &PodState, now: Instant| {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if p.spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
                    && !s.bound.contains_key(&p.metadata.name)
                {
                    s.bound.insert(p.metadata.name.clone(), now);
                }
                if p.status.phase.as_deref() == Some("Running")
                    && s.running.insert(p.metadata.name.clone())
                {
                    s.last_running = Some(now);
                }
                s.bound.len() >= pods && s.running.len() >= pods
            };
            let mut relists = 0;
            loop {
                while let Some(line) = stream.next().await {
                    let Ok(line) = line else { break };
                    let ev: EventLine = match serde_json::from_slice(&line) {
                        Ok(ev) => ev,
                        Err(e) => bail!("unreadable watch event: {e}"),
                    };
                    match ev.type_.as_str() {
                        "ADDED" | "MODIFIED" => {}
                        "ERROR" => break,
                        _ => continue,
                    }
                    let pod: PodState = match ev.object.map(|o| serde_json::from_str(o.get())) {
                        Some(Ok(pod)) => pod,
                        Some(Err(e)) => bail!("unreadable pod in a watch event: {e}"),
                        None => continue,
                    };
                    if note(&pod, Instant::now()) {
                        return anyhow::Ok(relists);
                    }
                }
                relists += 1;
                if relists > 100 {
                    bail!("the watch kept ending");
                }
                let list = c
                    .list_value(Kind::Pod, Some("default"), &ListOptions::default())
                    .await?;
                let now = Instant::now();
                let mut done = false;
                for obj in list["items"].as_array().into_iter().flatten() {
                    let p = <PodState as serde::Deserialize>::deserialize(obj)?;
                    done |= note(&p, now);
                }
                if done {
                    return Ok(relists);
                }
                let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
                stream = watch_pods(&c, rv).await?;
            }
        })
    };

    let mut clients = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        clients.push(make_client()?);
    }
    let started = Instant::now();
    let mut done = 0;
    while done < pods {
        let this_burst = burst.min(pods - done);
        let next = Arc::new(AtomicUsize::new(done));
        let end = done + this_burst;
        let mut tasks = Vec::new();
        for cl in &clients {
            let (cl, next, seen) = (cl.clone(), next.clone(), seen.clone());
            tasks.push(smol::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= end {
                        return anyhow::Ok(());
                    }
                    let name = format!("sched-{i}");
                    let body = serde_json::to_vec(&pod(&name))?;
                    let r = cl
                        .request(
                            "POST",
                            PODS,
                            Some(("application/json", body)),
                            "application/json",
                        )
                        .await?;
                    if r.status != 201 {
                        bail!("create answered {}", r.status);
                    }
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .created
                        .insert(name, Instant::now());
                }
            }));
        }
        for t in tasks {
            t.await?;
        }
        done = end;
    }
    let created_in = started.elapsed();
    println!(
        "created {pods} pods in bursts of {burst} ({concurrency} concurrent) in {:.1} s ({:.0}/s)",
        created_in.as_secs_f64(),
        pods as f64 / created_in.as_secs_f64()
    );
    // Backlog mode: the nodes come only now.
    let mut node_process = None;
    let mut nodes_ready = None;
    if backlog {
        let bound_before = seen.lock().unwrap_or_else(|e| e.into_inner()).bound.len();
        anyhow::ensure!(
            bound_before == 0,
            "{bound_before} pods were bound before any node was started"
        );
        let child = std::process::Command::new(&start_nodes[0])
            .args(&start_nodes[1..])
            .spawn()
            .with_context(|| format!("starting {}", start_nodes[0]))?;
        let t = Instant::now();
        if let Err(e) = wait_for_nodes(&c, nodes).await {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        node_process = Some(child);
        nodes_ready = Some(Instant::now());
        println!(
            "{nodes} simulated nodes started and Ready in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let timeout = async {
        smol::Timer::after(Duration::from_secs(900)).await;
        Err(anyhow::anyhow!(
            "timed out waiting for the pods to be bound and Running"
        ))
    };
    let waited = futures_lite::future::or(watcher, timeout).await;
    if let Ok(relists) = &waited {
        if *relists > 0 {
            println!("(the watch fell behind and was re-listed {relists} times: times seen in a list are upper bounds)");
        }
    }
    if let Some(mut child) = node_process {
        let _ = child.kill();
        let _ = child.wait();
    }
    waited.context("waiting for the pods")?;

    let s = seen.lock().unwrap_or_else(|e| e.into_inner());
    let last_bound = s.bound.values().max().copied().unwrap_or(started);
    if backlog {
        let first_bound = s.bound.values().min().copied().unwrap_or(started);
        let span = last_bound.duration_since(first_bound).as_secs_f64();
        println!(
            "backlog: bound {} pods in {span:.1} s from the first bind to the last: {:.0} pods/s",
            s.bound.len(),
            s.bound.len() as f64 / span.max(f64::EPSILON)
        );
        if let Some(ready) = nodes_ready {
            println!(
                "backlog: last bind {:.1} s after all nodes were Ready",
                last_bound.saturating_duration_since(ready).as_secs_f64()
            );
        }
        return Ok(());
    }
    let mut latencies: Vec<Duration> = s
        .created
        .iter()
        .filter_map(|(name, at)| s.bound.get(name).map(|b| b.saturating_duration_since(*at)))
        .collect();
    latencies.sort();
    let span = last_bound.duration_since(started).as_secs_f64();
    println!(
        "bound {} pods in {span:.1} s from the first create: {:.0} pods/s",
        s.bound.len(),
        s.bound.len() as f64 / span
    );
    println!(
        "create response -> bound (watch): p50 {}  p99 {}  max {}",
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
    if let Some(last) = s.last_running {
        println!(
            "all {pods} Running {:.1} s after the first create",
            last.duration_since(started).as_secs_f64()
        );
    }
    Ok(())
}
