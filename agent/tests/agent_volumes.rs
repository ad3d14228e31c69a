//! Pod volumes end to end: a real `skiff server`, a real `skiff-agent`, real containers.
//! emptyDir (disk and memory) shared by two containers, hostPath (with type checks),
//! configMap (items, subPath, updates) and secret (mode, tmpfs, updates), read-only mounts,
//! waiting for missing objects, adoption after an agent restart, and a clean teardown.
//! Needs root and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::path::Path;
use std::time::Duration;

use agent::runtime::{ContainerId, Runtime, RuntimeConfig};
use api::core::{
    ByteString, ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource,
    HostPathVolumeSource, KeyToPath, Pod, PodSpec, Secret, SecretVolumeSource, Volume, VolumeMount,
};
use api::meta::{DeleteOptions, ObjectMeta, Quantity};
use common::{get_pod, phase, wait_for, wait_phase, TestAgent, TestServer};

const IMAGE: &str = "skiff.test/testbox:v1";

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: name.into(),
        namespace: Some("default".into()),
        ..Default::default()
    }
}

fn container(name: &str, script: &str, mounts: Vec<VolumeMount>) -> Container {
    Container {
        name: name.into(),
        image: Some(IMAGE.into()),
        args: vec!["sh".into(), "-c".into(), script.into()],
        volume_mounts: mounts,
        ..Default::default()
    }
}

fn pod(name: &str, node: &str, volumes: Vec<Volume>, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: meta(name),
        spec: PodSpec {
            node_name: Some(node.into()),
            termination_grace_period_seconds: Some(1),
            volumes,
            containers,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, sub: Option<&str>, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        sub_path: sub.map(str::to_string),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str, memory: Option<&str>) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: memory.map(|_| "Memory".into()),
            size_limit: memory.map(|s| Quantity(s.into())),
        }),
        ..Default::default()
    }
}

fn host_path(name: &str, path: &Path, type_: &str) -> Volume {
    Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource {
            path: path.display().to_string(),
            type_: Some(type_.into()),
        }),
        ..Default::default()
    }
}

fn config_map_volume(name: &str, cm: &str, items: Vec<KeyToPath>, mode: Option<i32>) -> Volume {
    Volume {
        name: name.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: Some(cm.into()),
            items,
            default_mode: mode,
            optional: None,
        }),
        ..Default::default()
    }
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap {
        metadata: meta(name),
        ..Default::default()
    };
    for (k, v) in data {
        cm.data.insert(k.to_string(), v.to_string());
    }
    cm
}

/// The first app container's waiting (reason, message).
fn waiting(p: &Pod) -> Option<(String, String)> {
    let w = p
        .status
        .container_statuses
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?;
    Some((
        w.reason.clone().unwrap_or_default(),
        w.message.clone().unwrap_or_default(),
    ))
}

fn runtime_of(agent: &TestAgent) -> Runtime {
    Runtime::new(RuntimeConfig::new(
        agent.run.path(),
        agent.cgroup_parent.clone(),
    ))
    .expect("runtime")
}

/// Runs a shell script inside a container of the pod: (exit code, trimmed output).
fn sh(rt: &Runtime, pod: &Pod, container: &str, script: &str) -> (i32, String) {
    let id = ContainerId::new(&pod.metadata.uid, container).expect("id");
    let argv = ["sh", "-c", script].map(String::from);
    let r = rt
        .exec(&id, &argv, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("exec {script:?} in {container}: {e}"));
    (
        r.exit_code,
        String::from_utf8_lossy(&r.output).trim().to_string(),
    )
}

/// Runs a script that must succeed; answers its output.
fn out(rt: &Runtime, pod: &Pod, container: &str, script: &str) -> String {
    let (code, text) = sh(rt, pod, container, script);
    assert_eq!(code, 0, "{script:?} in {container}: {text}");
    text
}

fn wait_output(rt: &Runtime, pod: &Pod, container: &str, script: &str, want: &str) {
    wait_for(
        &format!("{script:?} in {container} to print {want:?}"),
        Duration::from_secs(30),
        || (sh(rt, pod, container, script) == (0, want.to_string())).then_some(()),
    );
}

#[test]
fn pod_volumes_end_to_end() {
    image_util::require_root_and_busybox();
    let server = TestServer::start();
    let client = server.client();
    let token = server.join_token();
    let mut agent = TestAgent::new(&server);
    let archive = agent.data_dir().join("testbox.tar");
    image_util::write_oci_archive(&archive, &image_util::busybox_image("hello"), IMAGE);
    agent.import(&archive);
    agent.start(Some(&token));
    let node = agent.node_name.clone();
    let rt = runtime_of(&agent);

    let host = tempfile::tempdir().expect("host dir");
    std::fs::write(host.path().join("host.txt"), "from-host").expect("host file");

    smol::block_on(client.create(&config_map(
        "app-config",
        &[("app.conf", "v1"), ("other", "x")],
    )))
    .expect("configmap");
    let mut secret = Secret {
        metadata: meta("creds"),
        ..Default::default()
    };
    secret
        .data
        .insert("password".into(), ByteString(b"s3cret".to_vec()));
    smol::block_on(client.create(&secret)).expect("secret");

    // A volumeMount naming no volume is refused by the API.
    let bad = pod(
        "bad-mount",
        &node,
        vec![],
        vec![container(
            "main",
            "true",
            vec![mount("nope", "/x", None, false)],
        )],
    );
    let err = smol::block_on(client.create(&bad)).expect_err("unknown volume refused");
    assert!(err.to_string().contains("nope"), "{err}");

    let items = vec![KeyToPath {
        key: "app.conf".into(),
        path: "sub/renamed.conf".into(),
        mode: Some(0o600),
    }];
    let volumes = vec![
        empty_dir("cache", None),
        empty_dir("mem", Some("8Mi")),
        host_path("host", host.path(), "Directory"),
        config_map_volume("cfg", "app-config", vec![], Some(0o440)),
        config_map_volume("cfgitems", "app-config", items, None),
        Volume {
            name: "creds".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("creds".into()),
                default_mode: Some(0o400),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "opt".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: Some("absent".into()),
                optional: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    let writer = container(
        "writer",
        "echo hello > /cache/msg; cat /host/host.txt > /cache/from-host; \
         echo written > /host/written; exec sleep 3600",
        vec![
            mount("cache", "/cache", None, false),
            mount("host", "/host", None, false),
        ],
    );
    let reader = container(
        "reader",
        "exec sleep 3600",
        vec![
            mount("cache", "/shared", None, true),
            mount("cache", "/nested", Some("nested/dir"), false),
            mount("mem", "/mem", None, false),
            mount("cfg", "/etc/cfg", None, false),
            mount("cfgitems", "/etc/cfgitems", None, false),
            mount(
                "cfgitems",
                "/etc/renamed.conf",
                Some("sub/renamed.conf"),
                false,
            ),
            mount("creds", "/etc/creds", None, false),
            mount("opt", "/etc/opt", None, false),
        ],
    );
    smol::block_on(client.create(&pod("vols", &node, volumes, vec![writer, reader])))
        .expect("create pod");
    let vols = wait_phase(&client, "vols", "Running", Duration::from_secs(60));
    let uid = vols.metadata.uid.clone();
    let pod_dir = agent.data_dir().join("pods").join(&uid);

    // emptyDir: shared between the containers; a read-only mount refuses writes.
    wait_output(&rt, &vols, "reader", "cat /shared/msg", "hello");
    assert_eq!(
        out(&rt, &vols, "reader", "cat /shared/from-host"),
        "from-host"
    );
    let (code, _) = sh(&rt, &vols, "reader", "echo x > /shared/nope");
    assert_ne!(code, 0, "a readOnly mount must refuse writes");
    out(&rt, &vols, "writer", "echo more > /cache/more");
    // subPath of an emptyDir: created, and the same directory as seen through the volume.
    out(&rt, &vols, "reader", "echo deep > /nested/f");
    assert_eq!(out(&rt, &vols, "writer", "cat /cache/nested/dir/f"), "deep");
    assert!(pod_dir
        .join("volumes/kubernetes.io~empty-dir/cache/nested/dir/f")
        .is_file());

    // emptyDir medium Memory: a tmpfs of the given size.
    let mem = out(
        &rt,
        &vols,
        "reader",
        "awk '$2==\"/mem\"{print $3, $4}' /proc/mounts",
    );
    assert!(mem.starts_with("tmpfs "), "{mem}");
    assert!(mem.contains("size=8192k"), "{mem}");

    // hostPath: the host's files, and writes land on the host.
    wait_for(
        "the writer's hostPath write",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(host.path().join("written"))
                .ok()
                .filter(|s| s.trim() == "written")
        },
    );

    // configMap: every key, with defaultMode, read-only.
    assert_eq!(out(&rt, &vols, "reader", "cat /etc/cfg/app.conf"), "v1");
    assert_eq!(out(&rt, &vols, "reader", "ls /etc/cfg"), "app.conf\nother");
    assert_eq!(
        out(&rt, &vols, "reader", "stat -L -c %a /etc/cfg/app.conf"),
        "440"
    );
    let (code, _) = sh(&rt, &vols, "reader", "echo x > /etc/cfg/new");
    assert_ne!(code, 0, "configMap volumes are read-only");
    // Items: only the listed key, at its path, with its mode; and one file by subPath.
    assert_eq!(
        out(&rt, &vols, "reader", "cat /etc/cfgitems/sub/renamed.conf"),
        "v1"
    );
    assert_eq!(
        out(
            &rt,
            &vols,
            "reader",
            "stat -L -c %a /etc/cfgitems/sub/renamed.conf"
        ),
        "600"
    );
    let (code, _) = sh(&rt, &vols, "reader", "test -e /etc/cfgitems/other");
    assert_ne!(code, 0, "only the listed items are projected");
    assert_eq!(out(&rt, &vols, "reader", "cat /etc/renamed.conf"), "v1");
    // An optional, absent configMap: an empty volume.
    assert_eq!(out(&rt, &vols, "reader", "ls /etc/opt"), "");

    // secret: decoded bytes, defaultMode, on a tmpfs (inside the container and on the host).
    assert_eq!(
        out(&rt, &vols, "reader", "cat /etc/creds/password"),
        "s3cret"
    );
    assert_eq!(
        out(&rt, &vols, "reader", "stat -L -c %a /etc/creds/password"),
        "400"
    );
    let fs_type = out(
        &rt,
        &vols,
        "reader",
        "awk '$2==\"/etc/creds\"{print $3}' /proc/mounts",
    );
    assert_eq!(fs_type, "tmpfs");
    let secret_dir = std::fs::canonicalize(pod_dir.join("volumes/kubernetes.io~secret/creds"))
        .expect("secret dir");
    let host_mounts = agent::sys::mounts_under(Path::new("/proc"), &secret_dir).expect("mountinfo");
    assert_eq!(host_mounts, vec![secret_dir.clone()]);

    // Updates: a whole-volume mount sees the new contents; a subPath mount keeps the old.
    let mut cm = smol::block_on(client.get::<ConfigMap>("default", "app-config")).expect("cm");
    cm.data.insert("app.conf".into(), "v2".into());
    smol::block_on(client.replace(&cm)).expect("update configmap");
    wait_output(&rt, &vols, "reader", "cat /etc/cfg/app.conf", "v2");
    wait_output(
        &rt,
        &vols,
        "reader",
        "cat /etc/cfgitems/sub/renamed.conf",
        "v2",
    );
    assert_eq!(out(&rt, &vols, "reader", "cat /etc/renamed.conf"), "v1");
    let mut s = smol::block_on(client.get::<Secret>("default", "creds")).expect("secret");
    s.data
        .insert("password".into(), ByteString(b"n3w-pass".to_vec()));
    s.data.insert("user".into(), ByteString(b"admin".to_vec()));
    smol::block_on(client.replace(&s)).expect("update secret");
    wait_output(&rt, &vols, "reader", "cat /etc/creds/user", "admin");
    assert_eq!(
        out(&rt, &vols, "reader", "cat /etc/creds/password"),
        "n3w-pass"
    );

    // A hostPath of type File that does not exist: the pod waits with a clear message,
    // and starts once the file is there.
    let later = host.path().join("later.txt");
    smol::block_on(client.create(&pod(
        "needs-file",
        &node,
        vec![host_path("f", &later, "File")],
        vec![container(
            "main",
            "exec sleep 3600",
            vec![mount("f", "/later", None, true)],
        )],
    )))
    .expect("create pod");
    let p = wait_for(
        "needs-file to wait for its hostPath",
        Duration::from_secs(30),
        || {
            get_pod(&client, "needs-file")
                .filter(|p| waiting(p).is_some_and(|(_, m)| !m.is_empty()))
        },
    );
    let (reason, message) = waiting(&p).expect("waiting");
    assert_eq!(reason, "ContainerCreating");
    assert!(
        message.contains("hostPath type check failed") && message.contains("later.txt"),
        "{message}"
    );
    assert!(
        message.contains("MountVolume.SetUp failed for volume \"f\""),
        "{message}"
    );
    assert_eq!(phase(&p), "Pending");

    // A missing configMap: the same, until it is created.
    smol::block_on(client.create(&pod(
        "needs-cm",
        &node,
        vec![config_map_volume("c", "late", vec![], None)],
        vec![container(
            "main",
            "exec sleep 3600",
            vec![mount("c", "/etc/late", None, false)],
        )],
    )))
    .expect("create pod");
    let p = wait_for(
        "needs-cm to wait for its configmap",
        Duration::from_secs(30),
        || get_pod(&client, "needs-cm").filter(|p| waiting(p).is_some_and(|(_, m)| !m.is_empty())),
    );
    let (reason, message) = waiting(&p).expect("waiting");
    assert_eq!(reason, "ContainerCreating");
    assert!(
        message.contains("configmap \"late\" not found"),
        "{message}"
    );

    std::fs::write(&later, "now").expect("later file");
    smol::block_on(client.create(&config_map("late", &[("k", "arrived")]))).expect("cm");
    let p = wait_phase(&client, "needs-file", "Running", Duration::from_secs(30));
    assert_eq!(out(&rt, &p, "main", "cat /later"), "now");
    let p = wait_phase(&client, "needs-cm", "Running", Duration::from_secs(30));
    assert_eq!(out(&rt, &p, "main", "cat /etc/late/k"), "arrived");

    // kill -9 and restart: the pod is adopted with its volumes intact, and updates go on.
    let before = vols.status.container_statuses.clone();
    agent.kill9();
    agent.start(None);
    std::thread::sleep(Duration::from_secs(3));
    let again = wait_phase(&client, "vols", "Running", Duration::from_secs(30));
    let ids = |s: &[api::core::ContainerStatus]| -> Vec<Option<String>> {
        s.iter().map(|c| c.container_id.clone()).collect()
    };
    assert_eq!(ids(&again.status.container_statuses), ids(&before));
    assert_eq!(out(&rt, &again, "reader", "cat /shared/msg"), "hello");
    assert_eq!(out(&rt, &again, "reader", "cat /etc/creds/user"), "admin");
    let mut cm = smol::block_on(client.get::<ConfigMap>("default", "app-config")).expect("cm");
    cm.data.insert("app.conf".into(), "v3".into());
    smol::block_on(client.replace(&cm)).expect("update configmap");
    wait_output(&rt, &again, "reader", "cat /etc/cfg/app.conf", "v3");

    // Teardown: nothing is left mounted, and the pod directories are gone.
    let names = ["vols", "needs-file", "needs-cm"];
    let uids: Vec<String> = names
        .iter()
        .map(|n| get_pod(&client, n).expect("pod").metadata.uid)
        .collect();
    for n in names {
        smol::block_on(client.delete::<Pod>("default", n, &DeleteOptions::default()))
            .expect("delete");
    }
    wait_for("the pods to disappear", Duration::from_secs(40), || {
        names
            .iter()
            .all(|n| get_pod(&client, n).is_none())
            .then_some(())
    });
    for uid in &uids {
        assert!(!agent.data_dir().join("pods").join(uid).exists(), "{uid}");
    }
    let data = std::fs::canonicalize(agent.data_dir()).expect("data dir");
    let left = agent::sys::mounts_under(Path::new("/proc"), &data).expect("mountinfo");
    assert!(left.is_empty(), "mounts left: {left:?}");
    // The host's files are the host's: the hostPath survives its pod.
    assert!(host.path().join("host.txt").is_file());
}
