//! batch/v1 Jobs and CronJobs with the real `kubectl` against `skiff server` with its own
//! node and real busybox containers: completions at a parallelism, Indexed pods and their
//! JOB_COMPLETION_INDEX, the back-off limit, a pod failure policy, `kubectl create job`
//! (plain and `--from=cronjob/`), `kubectl create cronjob` firing on its one-minute schedule,
//! `kubectl wait --for=condition=complete`, get, describe and explain. Needs root,
//! /bin/busybox and kubectl.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::process::Output;
use std::time::{Duration, Instant};

use api::batch::{CronJob, Job};
use api::client::Client;
use api::core::Pod;
use common::wait_for;

const IMAGE: &str = "skiff.test/jobs:v1";

use common::NodeServer as Server;

impl Server {
    fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        common::run_kubectl(&self.kubeconfig(), args, stdin)
    }

    /// kubectl that must succeed; its stdout.
    fn ok(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn start() -> (Server, Client) {
    image_util::require_root_and_busybox();
    let id = std::process::id();
    common::start_node_server_with_image(
        &format!("jobs-{id}"),
        &format!("skiff-jobs-{id}"),
        &[],
        |archive| image_util::write_busybox_archive(archive, IMAGE, "jobs"),
    )
}

fn job_manifest(name: &str, extra_spec: &str, command: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
{extra_spec}
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: {IMAGE}
        command: ["sh", "-c", {command:?}]
"#
    )
}

fn get_job(client: &Client, name: &str) -> Job {
    smol::block_on(client.get::<Job>("default", name)).expect("get job")
}

fn job_pods(client: &Client, name: &str) -> Vec<Pod> {
    smol::block_on(client.list::<Pod>(
        Some("default"),
        Some(&format!("batch.kubernetes.io/job-name={name}")),
        None,
    ))
    .expect("list pods")
    .0
}

fn wait_condition(server: &Server, job: &str, condition: &str) {
    server.ok(
        &[
            "wait",
            &format!("--for=condition={condition}"),
            &format!("job/{job}"),
            "--timeout=150s",
        ],
        None,
    );
}

#[test]
fn jobs_and_cronjobs_with_kubectl() {
    let (server, client) = start();

    // Everything starts at once; the waits below overlap.
    server.ok(
        &["apply", "-f", "-"],
        Some(
            job_manifest(
                "three",
                "  completions: 3\n  parallelism: 2",
                "sleep 1; echo done",
            )
            .as_bytes(),
        ),
    );
    server.ok(
        &["apply", "-f", "-"],
        Some(
            job_manifest(
                "indexed",
                "  completions: 2\n  parallelism: 2\n  completionMode: Indexed",
                "echo index=$JOB_COMPLETION_INDEX host=$(hostname)",
            )
            .as_bytes(),
        ),
    );
    server.ok(
        &["apply", "-f", "-"],
        Some(job_manifest("failing", "  backoffLimit: 1", "exit 3").as_bytes()),
    );
    server.ok(
        &["apply", "-f", "-"],
        Some(
            job_manifest(
                "policy",
                "  backoffLimit: 6\n  podFailurePolicy:\n    rules:\n    - action: FailJob\n      onExitCodes:\n        containerName: main\n        operator: In\n        values: [42]",
                "exit 42",
            )
            .as_bytes(),
        ),
    );
    // kubectl create sends protobuf.
    server.ok(
        &[
            "create",
            "job",
            "cli",
            &format!("--image={IMAGE}"),
            "--",
            "sh",
            "-c",
            "exit 0",
        ],
        None,
    );
    server.ok(
        &[
            "create",
            "cronjob",
            "tick",
            &format!("--image={IMAGE}"),
            "--schedule=* * * * *",
            "--",
            "sh",
            "-c",
            "exit 0",
        ],
        None,
    );
    let created = Instant::now();
    server.ok(&["create", "job", "manual", "--from=cronjob/tick"], None);

    // completions 3 at parallelism 2.
    wait_condition(&server, "three", "complete");
    let three = get_job(&client, "three");
    assert_eq!(three.status.succeeded, Some(3));
    assert_eq!(three.status.active.unwrap_or(0), 0);
    assert!(three.status.completion_time.is_some());
    assert!(three.status.is_true("SuccessCriteriaMet"));
    let pods = job_pods(&client, "three");
    assert_eq!(pods.len(), 3, "one pod per completion");
    for p in &pods {
        assert_eq!(p.status.phase.as_deref(), Some("Succeeded"));
        assert_eq!(p.metadata.labels["job-name"], "three");
        assert_eq!(
            p.metadata.labels["batch.kubernetes.io/controller-uid"],
            three.metadata.uid
        );
        assert_eq!(p.metadata.owner_references[0].kind, "Job");
    }
    let table = server.ok(&["get", "job", "three"], None);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["three", "Complete", "3/3"], "{table}");
    let described = server.ok(&["describe", "job", "three"], None);
    assert!(described.contains("Pods Statuses:"), "{described}");
    assert!(described.contains("3 Succeeded"), "{described}");

    // Indexed: each pod sees its index, and its hostname is NAME-INDEX.
    wait_condition(&server, "indexed", "complete");
    let idx = get_job(&client, "indexed");
    assert_eq!(idx.status.completed_indexes.as_deref(), Some("0-1"));
    let mut seen = Vec::new();
    for p in job_pods(&client, "indexed") {
        let i = &p.metadata.annotations["batch.kubernetes.io/job-completion-index"];
        let logs = server.ok(&["logs", &p.metadata.name], None);
        assert_eq!(logs.trim(), format!("index={i} host=indexed-{i}"));
        seen.push(i.clone());
    }
    seen.sort();
    assert_eq!(seen, ["0", "1"]);

    // Two failures exceed backoffLimit 1 (after a 10 s back-off).
    wait_condition(&server, "failing", "failed");
    let failing = get_job(&client, "failing");
    let c = failing.status.condition("Failed").unwrap();
    assert_eq!(c.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(failing.status.failed, Some(2));
    assert_eq!(job_pods(&client, "failing").len(), 2);

    // Exit code 42 fails the job at once, whatever the back-off limit.
    wait_condition(&server, "policy", "failed");
    let policy = get_job(&client, "policy");
    let c = policy.status.condition("Failed").unwrap();
    assert_eq!(c.reason.as_deref(), Some("PodFailurePolicy"));
    assert!(
        c.message
            .as_deref()
            .unwrap()
            .contains("failed with exit code 42 matching FailJob rule at index 0"),
        "{c:?}"
    );
    assert_eq!(job_pods(&client, "policy").len(), 1);

    wait_condition(&server, "cli", "complete");
    wait_condition(&server, "manual", "complete");
    let manual = get_job(&client, "manual");
    assert_eq!(manual.metadata.owner_references[0].kind, "CronJob");

    // The one-minute schedule fires within a minute (and a bit) of the CronJob's creation.
    let scheduled = wait_for("the CronJob's first Job", Duration::from_secs(80), || {
        let cj = smol::block_on(client.get::<CronJob>("default", "tick")).ok()?;
        cj.status.last_schedule_time?;
        smol::block_on(client.list::<Job>(Some("default"), None, None))
            .ok()?
            .0
            .into_iter()
            .find(|j| {
                j.metadata.name.starts_with("tick-")
                    && j.metadata
                        .annotations
                        .contains_key("batch.kubernetes.io/cronjob-scheduled-timestamp")
            })
    });
    assert!(created.elapsed() < Duration::from_secs(80));
    wait_condition(&server, &scheduled.metadata.name, "complete");
    let table = server.ok(&["get", "cronjob", "tick"], None);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"],
        "{table}"
    );
    assert!(table.contains("* * * * *"), "{table}");
    server.ok(&["get", "cj"], None);
    server.ok(&["describe", "cronjob", "tick"], None);
    let explained = server.ok(&["explain", "job.spec.completions"], None);
    assert!(explained.contains("completions"), "{explained}");
    let explained = server.ok(&["explain", "cronjob.spec.schedule"], None);
    assert!(explained.contains("schedule"), "{explained}");

    // Deleting a Job takes its pods with it.
    server.ok(&["delete", "job", "three", "--wait=true"], None);
    wait_for("the Job's pods to go", Duration::from_secs(60), || {
        job_pods(&client, "three").is_empty().then_some(())
    });
}
