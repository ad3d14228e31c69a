//! Pod start latency: API create to `Running` seen on a watch, for pods one after another and
//! for a burst created at once; and, for the peers (`podman run -d`, `runc run -d`), the wall
//! time of a command that returns once its container runs.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::client::Client;
use futures_lite::StreamExt;
use serde_json::{json, Value};

use crate::{ms, percentile};

const PODS: &str = "/api/v1/namespaces/default/pods";
const LABEL: &str = "skiff-bench=podstart";

fn pod(name: &str, node: Option<&str>, image: &str) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [{
            "name": "main",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            // Exits at once on SIGTERM so teardown between rounds is quick.
            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
        }],
    });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"skiff-bench": "podstart"}},
        "spec": spec,
    })
}

type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Records when each pod is first seen Running.
async fn watch_running(client: Client, rv: String, seen: Seen) -> anyhow::Result<()> {
    let path = format!(
        "{PODS}?watch=true&resourceVersion={rv}&labelSelector={}&timeoutSeconds=3600",
        api::client::encode_query(LABEL)
    );
    let mut stream = client.stream_lines(&path, "application/json").await?;
    while let Some(ev) = stream.next().await {
        let ev = ev?;
        if ev["object"]["status"]["phase"] == "Running" {
            let name = ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(name)
                .or_insert_with(Instant::now);
        }
    }
    Ok(())
}

async fn wait_seen(seen: &Seen, name: &str, timeout: Duration) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(t) = seen.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Ok(*t);
        }
        anyhow::ensure!(Instant::now() < deadline, "pod {name} did not run in time");
        smol::Timer::after(Duration::from_millis(1)).await;
    }
}

async fn delete_all(client: &Client) -> anyhow::Result<()> {
    let q = api::client::encode_query(LABEL);
    client
        .request(
            "DELETE",
            &format!("{PODS}?labelSelector={q}"),
            None,
            "application/json",
        )
        .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = client
            .request_json(
                "GET",
                &format!("{PODS}?labelSelector={q}"),
                None,
                "application/json",
            )
            .await?;
        if list["items"].as_array().is_none_or(|a| a.is_empty()) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the benchmark pods did not go away"
        );
        smol::Timer::after(Duration::from_millis(200)).await;
    }
}

fn report(what: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "{what}: n={} p50={} p99={} max={}",
        v.len(),
        ms(percentile(&v, 0.5)),
        ms(percentile(&v, 0.99)),
        ms(v.last().copied().unwrap_or_default())
    );
}

/// Creates pods and measures create -> Running on a watch. Without `node` the pods go
/// through the scheduler.
pub async fn pod_start(
    client: Client,
    node: Option<String>,
    image: String,
    sequential: usize,
    concurrent: usize,
) -> anyhow::Result<()> {
    delete_all(&client).await?;
    let list = client
        .request_json("GET", PODS, None, "application/json")
        .await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let seen: Seen = Arc::default();
    let watcher = smol::spawn(watch_running(client.clone(), rv, seen.clone()));
    smol::Timer::after(Duration::from_millis(200)).await;

    let mut one_by_one = Vec::new();
    for i in 0..sequential {
        let name = format!("seq-{i}");
        let body = pod(&name, node.as_deref(), &image);
        let t0 = Instant::now();
        client
            .request_json("POST", PODS, Some(&body), "application/json")
            .await
            .with_context(|| format!("creating {name}"))?;
        let t1 = wait_seen(&seen, &name, Duration::from_secs(60)).await?;
        one_by_one.push(t1 - t0);
    }
    report("sequential create->Running", one_by_one);
    delete_all(&client).await?;

    let mut tasks = Vec::new();
    for i in 0..concurrent {
        let (client, seen) = (client.clone(), seen.clone());
        let name = format!("burst-{i}");
        let body = pod(&name, node.as_deref(), &image);
        tasks.push(smol::spawn(async move {
            let t0 = Instant::now();
            client
                .request_json("POST", PODS, Some(&body), "application/json")
                .await?;
            let t1 = wait_seen(&seen, &name, Duration::from_secs(120)).await?;
            anyhow::Ok(t1 - t0)
        }));
    }
    let mut burst = Vec::new();
    for t in tasks {
        burst.push(t.await?);
    }
    report(&format!("{concurrent} at once create->Running"), burst);
    delete_all(&client).await?;
    drop(watcher);
    Ok(())
}

fn run_timed(argv: &[String], i: usize) -> anyhow::Result<Duration> {
    let args: Vec<String> = argv
        .iter()
        .map(|a| a.replace("{}", &i.to_string()))
        .collect();
    let t0 = Instant::now();
    let status = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .with_context(|| format!("running {}", args[0]))?;
    let took = t0.elapsed();
    anyhow::ensure!(status.success(), "{args:?} failed: {status}");
    Ok(took)
}

/// Runs `argv` (`{}` replaced by an index) `sequential` times one after another, then
/// `concurrent` at once, and reports each invocation's wall time.
pub fn command_latency(
    argv: Vec<String>,
    sequential: usize,
    concurrent: usize,
    label: &str,
) -> anyhow::Result<()> {
    anyhow::ensure!(!argv.is_empty(), "no command given");
    let mut seq = Vec::new();
    for i in 0..sequential {
        seq.push(run_timed(&argv, i)?);
    }
    report(&format!("{label} sequential"), seq);
    let handles: Vec<_> = (0..concurrent)
        .map(|i| {
            let argv = argv.clone();
            std::thread::spawn(move || run_timed(&argv, sequential + i))
        })
        .collect();
    let mut burst = Vec::new();
    for h in handles {
        burst.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("a runner panicked"))??,
        );
    }
    report(&format!("{label} {concurrent} at once"), burst);
    Ok(())
}
