//! The kube-rs operator (src/lib.rs) against a real `skiff server`: its own process on
//! 127.0.0.1, real TLS, the admin kubeconfig the server writes, and the operator as its own
//! process reading that kubeconfig. As `tests/python/test_kopf_operator.py` does for kopf, it
//! checks that a Greeting gets its ConfigMap (data and controller ownerReference), its status
//! and an Event; that a spec change reaches the ConfigMap; that deleting the Greeting runs the
//! operator's finalizer and the ConfigMap is then garbage-collected. On the way it checks what
//! the operator's requests rely on: the definition's printer columns in a Table, metadata-only
//! reads, no writes when nothing changed (server-side apply of an unchanged object), and
//! bookmarks on a short watch.
//!
//! The server binary is `SKIFF_BIN`, or the workspace's `target/debug/skiff`; the test fails
//! when it is missing.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::{json, Value};
use skiff_kube_rs_operator::{
    config_map_name, Greeting, GreetingSpec, GreetingStatus, FINALIZER, MANAGER,
};

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn skiff_bin() -> PathBuf {
    let bin = std::env::var_os("SKIFF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/skiff"));
    assert!(
        bin.is_file(),
        "no skiff binary at {} (build it with `cargo build -p skiff-control`, or set SKIFF_BIN)",
        bin.display()
    );
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts `skiff server` without its own node and waits for its kubeconfig and port.
fn start_server(dir: &Path) -> (Process, PathBuf) {
    let port = free_port();
    let child = Command::new(skiff_bin())
        .args([
            "server",
            "--disable-agent",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir)
        .env("SKIFF_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("start skiff server");
    let server = Process(child);
    let kubeconfig = dir.join("admin.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(kubeconfig.exists() && TcpStream::connect(("127.0.0.1", port)).is_ok()) {
        assert!(Instant::now() < deadline, "skiff server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, kubeconfig)
}

async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("a kube config from the kubeconfig");
    Client::try_from(config).expect("a kube client")
}

/// Polls `f` every 200 ms until it answers Some, for at most `secs`; panics with `what` and
/// the operator's log otherwise.
async fn wait<T, F, Fut>(secs: u64, what: &str, log: &Path, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail = &log[log.len().saturating_sub(4000)..];
            panic!("timed out after {secs} s: {what}\n--- operator log ---\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_operator_reconciles_a_custom_resource() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, kubeconfig) = start_server(dir.path());
    let client = client(&kubeconfig).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let log = dir.path().join("operator.log");
    wait(30, "the server answers", &log, || async {
        namespaces.get_opt("default").await.ok().flatten()
    })
    .await;

    // The operator, as its own process with KUBECONFIG, as it would be deployed.
    let log_file = std::fs::File::create(&log).expect("log file");
    let operator = Process(
        Command::new(env!("CARGO_BIN_EXE_skiff-kube-rs-operator"))
            .arg("default")
            .env("KUBECONFIG", &kubeconfig)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file)
            .spawn()
            .expect("start the operator"),
    );

    // It applies its definition (server-side) and waits until it is established.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = wait(
        30,
        "the operator applies an established definition",
        &log,
        || async {
            let crd = crds
                .get_opt("greetings.demo.skiff.dev")
                .await
                .ok()
                .flatten()?;
            let established = crd
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(crd)
        },
    )
    .await;
    let managers: Vec<_> = crd
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(managers.contains(&MANAGER.to_string()), "{managers:?}");
    let version = &crd.spec.versions[0];
    assert!(version
        .subresources
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .is_some());
    assert_eq!(
        version
            .additional_printer_columns
            .as_ref()
            .map(|c| c[0].name.as_str()),
        Some("Message")
    );

    let greetings: Api<Greeting> = Api::namespaced(client.clone(), "default");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = greetings
        .create(
            &PostParams::default(),
            &Greeting::new(
                "hello",
                GreetingSpec {
                    message: "hi".into(),
                },
            ),
        )
        .await
        .expect("create the Greeting");
    let uid = created.uid().expect("a uid");
    let cm_name = config_map_name("hello");

    // The ConfigMap, with the message and the Greeting as its controller.
    let cm = wait(60, "the operator makes the ConfigMap", &log, || async {
        config_maps.get_opt(&cm_name).await.ok().flatten()
    })
    .await;
    assert_eq!(
        cm.data,
        Some(BTreeMap::from([("message".to_string(), "hi".to_string())]))
    );
    let owners = cm.owner_references();
    assert_eq!(owners.len(), 1, "{owners:?}");
    let owner = &owners[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        ("demo.skiff.dev/v1", "Greeting", "hello", uid.as_str())
    );
    assert_eq!(owner.controller, Some(true));
    assert!(
        cm.managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some(MANAGER)
                && m.operation.as_deref() == Some("Apply")),
        "{:?}",
        cm.managed_fields()
    );

    // The finalizer, and the status written through the status subresource.
    let reconciled = wait(30, "the operator writes the status", &log, || async {
        let g = greetings.get_status("hello").await.ok()?;
        let want = GreetingStatus {
            config_map: cm_name.clone(),
            observed_generation: 1,
        };
        (g.status.as_ref() == Some(&want)).then_some(g)
    })
    .await;
    assert_eq!(reconciled.finalizers(), [FINALIZER.to_string()]);
    assert_eq!(reconciled.spec.message, "hi");

    // The definition's printer columns in kubectl's Table.
    let req = http::Request::get("/apis/demo.skiff.dev/v1/namespaces/default/greetings/hello")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .expect("request");
    let table: Value =
        serde_json::from_str(&client.request_text(req).await.expect("a Table")).expect("JSON");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    // Name, then the definition's columns (no Age: kube-apiserver adds it only to a
    // definition that lists no columns).
    assert_eq!(columns, ["Name", "Message", "ConfigMap"], "{table}");
    assert_eq!(table["rows"][0]["cells"][1], "hi", "{table}");
    assert_eq!(table["rows"][0]["cells"][2], "hello-greeting", "{table}");

    // The Event, as events.k8s.io/v1 and through the core view of the same Events.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event = wait(30, "the operator publishes an Event", &log, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("Greeted")
                    && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid.as_str())
            })
    })
    .await;
    assert_eq!(event.note.as_deref(), Some("made ConfigMap hello-greeting"));
    assert_eq!(event.reporting_controller.as_deref(), Some(MANAGER));
    assert_eq!(event.action.as_deref(), Some("Reconcile"));
    let regarding = event.regarding.as_ref().expect("regarding");
    assert_eq!(
        (
            regarding.kind.as_deref(),
            regarding.name.as_deref(),
            regarding.api_version.as_deref()
        ),
        (Some("Greeting"), Some("hello"), Some("demo.skiff.dev/v1"))
    );
    let core_events: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let core = core_events
        .get(&event.name_any())
        .await
        .expect("the core Event");
    assert_eq!(
        (
            core.involved_object.kind.as_deref(),
            core.message.as_deref()
        ),
        (Some("Greeting"), Some("made ConfigMap hello-greeting"))
    );

    // The ConfigMap's metadata alone, as the operator's metadata-only watch reads it.
    let meta = config_maps
        .get_metadata(&cm_name)
        .await
        .expect("metadata only");
    assert_eq!(
        meta.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(meta.owner_references()[0].uid, uid);

    // Once reconciled, nothing is written again: the operator applies its ConfigMap on each
    // pass, and an apply that changes nothing must not make a new resourceVersion (or each
    // pass would trigger the next through the ConfigMap watch).
    let (greeting_rv, cm_rv) = (reconciled.resource_version(), cm.resource_version());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = config_maps.get(&cm_name).await.expect("the ConfigMap");
    assert_eq!(
        again.resource_version(),
        cm_rv,
        "the ConfigMap was written again"
    );
    let g = greetings.get("hello").await.expect("the Greeting");
    assert_eq!(
        g.resource_version(),
        greeting_rv,
        "the Greeting was written again"
    );

    // A watch that asked for bookmarks gets one before its timeout, as the operator's
    // watchers do (kube-apiserver sends it 2 s before the deadline).
    let mut watch = greetings
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default()
            }
            .timeout(4),
            &g.resource_version().expect("a resourceVersion"),
        )
        .await
        .expect("a watch")
        .boxed();
    let mut bookmark = None;
    while let Some(ev) = watch.try_next().await.expect("a watch event") {
        if let WatchEvent::Bookmark(b) = ev {
            bookmark = Some(b.metadata.resource_version);
        }
    }
    let bookmark = bookmark.expect("a bookmark before the watch's timeout");
    assert!(bookmark.parse::<u64>().is_ok(), "{bookmark}");

    // A spec change reaches the ConfigMap, and the status follows the generation.
    greetings
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"message": "hello again"}})),
        )
        .await
        .expect("patch the Greeting");
    wait(30, "the operator updates the ConfigMap", &log, || async {
        let cm = config_maps.get(&cm_name).await.ok()?;
        (cm.data?.get("message")? == "hello again").then_some(())
    })
    .await;
    wait(
        30,
        "the status follows the new generation",
        &log,
        || async {
            let g = greetings.get_status("hello").await.ok()?;
            (g.status?.observed_generation == 2).then_some(())
        },
    )
    .await;
    let updated = |count: i32| {
        let events = events.clone();
        let uid = uid.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("Updated")
                        && e.note.as_deref() == Some("updated ConfigMap hello-greeting")
                        && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid.as_str())
                        && e.series.as_ref().map_or(1, |s| s.count) == count
                })
        }
    };
    wait(30, "an Event about the update", &log, || updated(1)).await;

    // Another update: the Recorder counts the repeat in the Event's series (a merge patch of
    // the events.k8s.io Event).
    greetings
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"message": "and again"}})),
        )
        .await
        .expect("patch the Greeting");
    wait(
        30,
        "the operator updates the ConfigMap again",
        &log,
        || async {
            let cm = config_maps.get(&cm_name).await.ok()?;
            (cm.data?.get("message")? == "and again").then_some(())
        },
    )
    .await;
    let repeated = wait(30, "the repeat counted in the Event's series", &log, || {
        updated(2)
    })
    .await;
    let series = repeated.series.expect("a series");
    assert!(
        series.last_observed_time.0 >= repeated.event_time.expect("eventTime").0,
        "{series:?}"
    );

    // Deleting the Greeting: the operator's cleanup runs (its Event names the ConfigMap it
    // found through a metadata-only list), it removes its finalizer, the Greeting goes, and
    // the garbage collector deletes the ConfigMap.
    greetings
        .delete("hello", &DeleteParams::default())
        .await
        .expect("delete the Greeting");
    wait(
        60,
        "the Greeting is gone once the operator lets it go",
        &log,
        || async { matches!(greetings.get_opt("hello").await, Ok(None)).then_some(()) },
    )
    .await;
    wait(30, "the operator's cleanup Event", &log, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("CleanedUp")
                    && e.note.as_deref()
                        == Some("left ConfigMap(s) hello-greeting to the garbage collector")
            })
    })
    .await;
    wait(30, "the ConfigMap is garbage-collected", &log, || async {
        matches!(config_maps.get_opt(&cm_name).await, Ok(None)).then_some(())
    })
    .await;

    // The operator ran throughout, and none of its requests failed: its watches (of the
    // Greetings, and metadata-only of the ConfigMaps) and its writes were all answered as it
    // expects. (The controller prints every failed reconciliation and watch error.)
    let mut operator = operator;
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        operator.0.try_wait().expect("operator status").is_none(),
        "the operator exited: {log}"
    );
    assert!(
        !log.contains("failed") && !log.contains("error"),
        "the operator met errors:\n{log}"
    );
    assert!(log.contains("reconciled default/hello"), "{log}");
}
