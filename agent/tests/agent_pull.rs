//! A pod pulls its image from a real registry (apt `docker-registry` on 127.0.0.1, HTTPS,
//! htpasswd auth) with the credentials of its `imagePullSecrets`; a pod without them gets
//! ErrImagePull and then ImagePullBackOff. Needs root and /bin/busybox.

mod common;
#[path = "image_util/mod.rs"]
mod image_util;

use std::collections::BTreeMap;
use std::time::Duration;

use api::client::Client;
use api::core::{ByteString, Container, LocalObjectReference, Pod, PodSpec, Secret};
use api::meta::ObjectMeta;
use base64::Engine as _;
use common::{wait_for, waiting_reason, TestAgent, TestServer};

fn pod(name: &str, node: &str, image: &str, secret: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: PodSpec {
            node_name: Some(node.into()),
            termination_grace_period_seconds: Some(1),
            image_pull_secrets: secret
                .map(|s| LocalObjectReference {
                    name: Some(s.into()),
                })
                .into_iter()
                .collect(),
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                args: vec!["sleep".into(), "3600".into()],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn get(c: &Client, name: &str) -> Option<Pod> {
    smol::block_on(c.get::<Pod>("default", name)).ok()
}

#[test]
fn pods_pull_from_a_registry_with_their_pull_secret() {
    image_util::require_root_and_busybox();
    let reg = image_util::Registry::start(Some(("puller", "s3cret")));
    let image = image_util::busybox_image("pulled by a pod\n");
    reg.push("skiff/app", "1.0", &image);
    let reference = format!("{}/skiff/app:1.0", reg.host());

    let server = TestServer::start();
    let client = server.client();
    let mut agent = TestAgent::new(&server);
    // The node trusts the registry's certificate; it holds no credentials of its own.
    let registries = serde_json::json!({
        "registries": { reg.host(): { "ca_file": reg.ca_file } }
    });
    std::fs::create_dir_all(agent.data_dir()).expect("data dir");
    std::fs::write(
        agent.data_dir().join("registries.json"),
        serde_json::to_vec(&registries).expect("json"),
    )
    .expect("registries.json");
    agent.start(Some(&server.join_token()));
    let node = agent.node_name.clone();

    let auth = base64::engine::general_purpose::STANDARD.encode("puller:s3cret");
    let config = serde_json::json!({"auths": {reg.host(): {"auth": auth}}});
    let secret = Secret {
        metadata: ObjectMeta {
            name: "regcred".into(),
            namespace: Some("default".into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: BTreeMap::from([(
            ".dockerconfigjson".to_string(),
            ByteString(serde_json::to_vec(&config).expect("json")),
        )]),
        ..Default::default()
    };
    smol::block_on(client.create(&secret)).expect("secret");

    smol::block_on(client.create(&pod("with-secret", &node, &reference, Some("regcred"))))
        .expect("pod");
    // Always: the registry is asked even once the image is on the node, as in Kubernetes
    // (IfNotPresent would use the image the other pod pulled).
    let mut without = pod("without", &node, &reference, None);
    without.spec.containers[0].image_pull_policy = Some("Always".into());
    smol::block_on(client.create(&without)).expect("pod");

    let running = wait_for("the pulled pod to run", Duration::from_secs(90), || {
        get(&client, "with-secret").filter(|p| p.status.phase.as_deref() == Some("Running"))
    });
    let cs = &running.status.container_statuses[0];
    assert!(
        cs.image_id.contains(&image.manifest_digest()),
        "imageID {} names the pulled manifest {}",
        cs.image_id,
        image.manifest_digest()
    );
    assert!(reg.blob_gets(&image.layer_digests()[0]) >= 1);

    // Without credentials the registry refuses; the agent backs off.
    let refused = wait_for("ImagePullBackOff", Duration::from_secs(60), || {
        get(&client, "without").filter(|p| waiting_reason(p).as_deref() == Some("ImagePullBackOff"))
    });
    assert_eq!(refused.status.phase.as_deref(), Some("Pending"));
    let message = refused.status.container_statuses[0]
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.message.clone())
        .unwrap_or_default();
    assert!(message.contains("Back-off pulling image"), "{message}");
}

#[test]
fn agents_pull_through_the_mirrors_their_server_hands_out() {
    image_util::require_root_and_busybox();
    let reg = image_util::Registry::start(None);
    let image = image_util::busybox_image("pulled through the site mirror\n");
    reg.push("site/busybox", "1.0", &image);
    // The server's registries.yaml: a registry name nobody resolves is mirrored by the local
    // registry, Docker Hub style `library/` rewritten to the site's project.
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("registries.yaml");
    std::fs::write(
        &file,
        format!(
            "mirrors:\n  images.example.invalid:\n    endpoint: [\"https://{host}\"]\n    rewrite:\n      \"^library/(.*)\": \"site/$1\"\nconfigs:\n  \"{host}\":\n    tls:\n      ca_file: \"{ca}\"\n",
            host = reg.host(),
            ca = reg.ca_file.display()
        ),
    )
    .expect("write registries.yaml");
    let server = TestServer::start_with(&["--registries-config", file.to_str().expect("path")]);
    let client = server.client();
    // Admins read it too.
    let r = smol::block_on(client.request("GET", "/skiff/v1/registries", None, "application/yaml"))
        .expect("GET");
    assert_eq!(r.status, 200);
    assert!(String::from_utf8_lossy(&r.body).contains("images.example.invalid"));
    let mut agent = TestAgent::new(&server);
    let mut cmd = agent.command(Some(&server.join_token()));
    // The node has no file of its own: it takes the server's.
    cmd.args(["--registries-config", "/nonexistent/registries.yaml"]);
    {
        use std::os::unix::process::CommandExt;
        let child = cmd.process_group(0).spawn().expect("start skiff-agent");
        agent.groups.push(child.id() as i32);
        agent.child = Some(child);
    }
    let node = agent.node_name.clone();
    smol::block_on(client.create(&pod(
        "mirrored",
        &node,
        "images.example.invalid/library/busybox:1.0",
        None,
    )))
    .expect("create pod");
    let p = wait_for("the mirrored pod running", Duration::from_secs(60), || {
        get(&client, "mirrored").filter(|p| p.status.phase.as_deref() == Some("Running"))
    });
    let status = &p.status.container_statuses[0];
    assert_eq!(status.image, "images.example.invalid/library/busybox:1.0");
    assert!(
        agent.data_dir().join("registries.server.yaml").exists(),
        "a copy is kept"
    );
    agent.clean_up();
}
