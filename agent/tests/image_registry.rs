//! Pulls from a real registry (apt `docker-registry`) on 127.0.0.1 over HTTPS.
//! Needs root (layer unpacking, overlay) and /usr/bin/docker-registry.

mod image_util;

use agent::image::{
    ImageError, ImageStore, Platform, PullOptions, PullPolicy, RegistryAuth, RegistryConfig,
    RegistryHost,
};
use image_util::*;

fn new_store() -> (tempfile::TempDir, ImageStore) {
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&tmp.path().join("images")).unwrap();
    (tmp, store)
}

#[test]
fn pull_over_https_verifies_and_unpacks_and_honours_policies() {
    require_root_and_busybox();
    let reg = Registry::start(None);
    let image = busybox_image("pulled over https\n");
    reg.push("skiff/busybox", "1.0", &image);
    let (tmp, store) = new_store();
    let reference = format!("{}/skiff/busybox:1.0", reg.host());
    let opts = reg.pull_options();

    let info = smol::block_on(store.pull(&reference, &RegistryAuth::Anonymous, &opts)).unwrap();
    assert_eq!(info.reference, reference);
    assert_eq!(info.digest, image.manifest_digest());
    assert_eq!(info.manifest_digest, image.manifest_digest());
    assert_eq!(info.id, image.config_digest());
    assert_eq!(info.layers, image.diff_ids);
    assert_eq!(info.config.entrypoint, vec!["/bin/busybox"]);
    assert_eq!(
        info.size,
        image.config.len() as u64 + image.layers.iter().map(|l| l.0.len() as u64).sum::<u64>()
    );
    assert_eq!(
        info.repo_digest(),
        format!("{}/skiff/busybox@{}", reg.host(), image.manifest_digest())
    );
    assert_eq!(store.resolve(&reference), Some(info.clone()));
    // Pinned by digest, the same image resolves and pulls.
    let by_digest = format!("{}/skiff/busybox@{}", reg.host(), image.manifest_digest());
    let pinned = smol::block_on(store.pull(&by_digest, &RegistryAuth::Anonymous, &opts)).unwrap();
    assert_eq!(pinned.id, info.id);

    // The pulled root filesystem works.
    let target = tmp.path().join("rootfs");
    let mount = store
        .mount_rootfs(&info, &tmp.path().join("scratch"), &target)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(target.join("hello.txt")).unwrap(),
        "pulled over https\n"
    );
    assert!(!target.join("etc/removed").exists());
    mount.unmount().unwrap();

    // IfNotPresent does not contact the registry again; Always does but downloads no layer.
    let layer = &image.layer_digests()[0];
    assert_eq!(reg.blob_gets(layer), 1);
    let manifest_gets = || {
        reg.log_text()
            .lines()
            .filter(|l| l.contains("\"GET /v2/skiff/busybox/manifests/1.0 "))
            .count()
    };
    let before = manifest_gets();
    smol::block_on(store.ensure(
        &reference,
        PullPolicy::IfNotPresent,
        &RegistryAuth::Anonymous,
        &opts,
    ))
    .unwrap();
    assert_eq!(manifest_gets(), before);
    smol::block_on(store.ensure(
        &reference,
        PullPolicy::Always,
        &RegistryAuth::Anonymous,
        &opts,
    ))
    .unwrap();
    assert_eq!(manifest_gets(), before + 1);
    assert_eq!(
        reg.blob_gets(layer),
        1,
        "present layers are not downloaded again"
    );

    // Unknown tags and repositories are ErrImagePull / not found.
    let err = smol::block_on(store.pull(
        &format!("{}/skiff/busybox:nope", reg.host()),
        &RegistryAuth::Anonymous,
        &opts,
    ))
    .unwrap_err();
    assert!(matches!(err, ImageError::NotFound { .. }), "{err}");
    assert_eq!(err.reason(), "ErrImagePull");

    // Without the CA the TLS handshake fails (the pull really is over HTTPS).
    let err = smol::block_on(store.pull(
        &reference,
        &RegistryAuth::Anonymous,
        &PullOptions::default(),
    ))
    .unwrap_err();
    assert!(matches!(err, ImageError::Network { .. }), "{err}");
    assert!(err.to_string().contains("TLS"), "{err}");
    // Plain HTTP to a TLS port fails too, rather than silently downgrading.
    let mut insecure = RegistryConfig::default();
    insecure.registries.insert(
        reg.host(),
        RegistryHost {
            insecure_http: true,
            ..Default::default()
        },
    );
    let opts_http = PullOptions {
        registries: insecure,
        platform: None,
        site: None,
    };
    assert!(smol::block_on(store.pull(&reference, &RegistryAuth::Anonymous, &opts_http)).is_err());
}

#[test]
fn concurrent_pulls_of_one_image_download_once() {
    require_root_and_busybox();
    let reg = Registry::start(None);
    let image = busybox_image("concurrent\n");
    reg.push("skiff/conc", "v1", &image);
    let (_tmp, store) = new_store();
    let reference = format!("{}/skiff/conc:v1", reg.host());
    let opts = reg.pull_options();
    let results = smol::block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                let reference = reference.clone();
                let opts = opts.clone();
                smol::spawn(async move {
                    store
                        .pull(&reference, &RegistryAuth::Anonymous, &opts)
                        .await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await);
        }
        out
    });
    for r in &results {
        assert_eq!(r.as_ref().unwrap().digest, image.manifest_digest());
    }
    for d in image.layer_digests() {
        assert_eq!(
            reg.blob_gets(&d),
            1,
            "blob {d} fetched once:\n{}",
            reg.log_text()
        );
    }
    let manifest_gets = reg
        .log_text()
        .lines()
        .filter(|l| l.contains("\"GET /v2/skiff/conc/manifests/v1 "))
        .count();
    assert_eq!(manifest_gets, 1);
}

#[test]
fn manifest_lists_resolve_to_the_platform() {
    require_root_and_busybox();
    let reg = Registry::start(None);
    let host_image = busybox_image("host arch\n");
    let other_arch = if host_arch() == "amd64" {
        "arm64"
    } else {
        "amd64"
    };
    let other = build_image(
        vec![single_file_layer("other.txt", b"other arch\n")],
        other_arch,
        &["other"],
    );
    let index_digest = reg.push_index(
        "skiff/multi",
        "latest",
        &[
            (&other, other_arch, (other_arch == "arm64").then_some("v8")),
            (
                &host_image,
                host_arch(),
                (host_arch() == "arm64").then_some("v8"),
            ),
        ],
    );
    let (_tmp, store) = new_store();
    let reference = format!("{}/skiff/multi", reg.host());
    let info =
        smol::block_on(store.pull(&reference, &RegistryAuth::Anonymous, &reg.pull_options()))
            .unwrap();
    assert_eq!(info.reference, format!("{reference}:latest"));
    assert_eq!(info.digest, index_digest, "the repo digest is the index's");
    assert_eq!(info.manifest_digest, host_image.manifest_digest());
    assert_eq!(info.config.architecture, host_arch());
    assert_eq!(info.layers, host_image.diff_ids);
    // Pinning the index digest finds the same image locally.
    assert!(store
        .resolve(&format!("{reference}@{index_digest}"))
        .is_some());

    // Another platform on request.
    let mut opts = reg.pull_options();
    opts.platform = Some(Platform {
        os: "linux".into(),
        architecture: other_arch.into(),
        variant: None,
    });
    let info = smol::block_on(store.pull(
        &format!("{reference}:latest"),
        &RegistryAuth::Anonymous,
        &opts,
    ))
    .unwrap();
    assert_eq!(info.manifest_digest, other.manifest_digest());
    assert_eq!(info.config.cmd, vec!["other"]);

    // A platform the index lacks.
    opts.platform = Some(Platform {
        os: "linux".into(),
        architecture: "s390x".into(),
        variant: None,
    });
    let err = smol::block_on(store.pull(&reference, &RegistryAuth::Anonymous, &opts)).unwrap_err();
    assert!(
        matches!(err, ImageError::NoMatchingPlatform { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("linux/s390x"), "{err}");
}

#[test]
fn corrupted_blobs_are_refused() {
    require_root_and_busybox();
    let reg = Registry::start(None);
    let image = busybox_image("tampered\n");
    reg.push("skiff/bad", "1", &image);
    // Flip bytes of the upper layer in the registry's storage (same length).
    let layer = &image.layer_digests()[1];
    let file = reg.blob_file(layer);
    let mut data = std::fs::read(&file).unwrap();
    let pos = data.windows(6).position(|w| w == b"tamper").unwrap();
    data[pos] = b'T';
    std::fs::write(&file, data).unwrap();

    let (_tmp, store) = new_store();
    let reference = format!("{}/skiff/bad:1", reg.host());
    let err = smol::block_on(store.pull(&reference, &RegistryAuth::Anonymous, &reg.pull_options()))
        .unwrap_err();
    match &err {
        ImageError::DigestMismatch { expected, .. } => assert_eq!(expected, layer),
        other => panic!("expected a digest mismatch, got {other}"),
    }
    assert_eq!(err.reason(), "ErrImagePull");
    assert!(store.resolve(&reference).is_none());
    assert!(!store.layer_path(&image.diff_ids[1]).exists());
    let tmp_left = std::fs::read_dir(store.root().join("tmp")).unwrap().count();
    assert_eq!(tmp_left, 0, "no temp files left behind");
}

#[test]
fn basic_auth_is_used_and_bad_passwords_are_unauthorized() {
    require_root_and_busybox();
    let reg = Registry::start(Some(("skiff", "s3cret")));
    let image = busybox_image("private\n");
    reg.push("private/app", "1", &image);
    let (_tmp, store) = new_store();
    let reference = format!("{}/private/app:1", reg.host());
    let opts = reg.pull_options();

    let err = smol::block_on(store.pull(&reference, &RegistryAuth::Anonymous, &opts)).unwrap_err();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{err}");
    assert_eq!(err.reason(), "ErrImagePull");

    let wrong = RegistryAuth::Basic {
        username: "skiff".into(),
        password: "wrong".into(),
    };
    let err = smol::block_on(store.pull(&reference, &wrong, &opts)).unwrap_err();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{err}");

    let right = RegistryAuth::Basic {
        username: "skiff".into(),
        password: "s3cret".into(),
    };
    let info = smol::block_on(store.pull(&reference, &right, &opts)).unwrap();
    assert_eq!(info.id, image.config_digest());

    // Credentials from the node's registry configuration work too.
    let (_tmp2, store2) = new_store();
    let mut opts2 = opts.clone();
    let host = opts2.registries.registries.get_mut(&reg.host()).unwrap();
    host.username = Some("skiff".into());
    host.password = Some("s3cret".into());
    smol::block_on(store2.pull(&reference, &RegistryAuth::Anonymous, &opts2)).unwrap();
}

#[test]
fn bearer_token_challenges_fetch_a_token_with_basic_credentials() {
    require_root_and_busybox();
    let tokens = TokenService::start("skiff", "t0ken-pass");
    let mut reg = Registry::start_with(None, Some((&tokens.realm, &tokens.bundle)));
    reg.push_token = Some(tokens.token("tok/app"));
    let image = busybox_image("behind a token service\n");
    reg.push("tok/app", "1", &image);
    let (_tmp, store) = new_store();
    let reference = format!("{}/tok/app:1", reg.host());
    let opts = reg.pull_options();
    let token_requests = || tokens.requests.load(std::sync::atomic::Ordering::SeqCst);

    // Anonymous: the token service refuses, the pull is unauthorized.
    let err = smol::block_on(store.pull(&reference, &RegistryAuth::Anonymous, &opts)).unwrap_err();
    assert!(matches!(err, ImageError::Unauthorized { .. }), "{err}");
    assert_eq!(token_requests(), 1);

    let creds = RegistryAuth::Basic {
        username: "skiff".into(),
        password: "t0ken-pass".into(),
    };
    let info = smol::block_on(store.pull(&reference, &creds, &opts)).unwrap();
    assert_eq!(info.id, image.config_digest());
    assert_eq!(info.layers, image.diff_ids);
    assert_eq!(token_requests(), 2, "one token serves the whole pull");

    // A ready bearer token is sent as is.
    let (_tmp2, store2) = new_store();
    let bearer = RegistryAuth::Bearer(tokens.token("tok/app"));
    smol::block_on(store2.pull(&reference, &bearer, &opts)).unwrap();
    assert_eq!(token_requests(), 2);
}

#[test]
fn mirrors_rewrite_and_fall_back_to_the_registry() {
    require_root_and_busybox();
    let reg = Registry::start(None);
    let image = busybox_image("pulled through a mirror\n");
    reg.push("site/busybox", "1.0", &image);
    reg.push("skiff/direct", "1.0", &image);
    let (_tmp, store) = new_store();
    // A registry name nobody resolves, mirrored by a dead endpoint then the local registry,
    // with Docker Hub's `library/` rewritten to the site's project: the pull never leaves
    // 127.0.0.1, and the image keeps the name it was asked by.
    let yaml = format!(
        r#"
mirrors:
  "images.example.invalid":
    endpoint:
      - "https://127.0.0.1:1"
      - "https://{host}"
    rewrite:
      "^library/(.*)": "site/$1"
  "{host}":
    endpoint: ["https://127.0.0.1:1"]
configs:
  "{host}":
    tls:
      ca_file: "{ca}"
"#,
        host = reg.host(),
        ca = reg.ca_file.display()
    );
    let registries = RegistryConfig::from_yaml("registries.yaml", &yaml).expect("parses");
    let opts = PullOptions {
        registries,
        platform: None,
        site: None,
    };
    let reference = "images.example.invalid/library/busybox:1.0";
    let info = smol::block_on(store.pull(reference, &RegistryAuth::Anonymous, &opts)).unwrap();
    assert_eq!(info.reference, reference);
    assert_eq!(info.manifest_digest, image.manifest_digest());
    assert!(
        reg.log_text().contains("/v2/site/busybox/manifests/1.0"),
        "the rewritten repository was asked for"
    );
    // A mirror that fails: the registry itself answers.
    let direct = format!("{}/skiff/direct:1.0", reg.host());
    let info = smol::block_on(store.pull(&direct, &RegistryAuth::Anonymous, &opts)).unwrap();
    assert_eq!(info.reference, direct);
}
