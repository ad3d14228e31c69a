//! The `skiff-agent` command line: version, self-check, image subcommands, join errors.
//! None of these need root.

use std::process::Command;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_skiff-agent"))
}

#[test]
fn version_and_self_check() {
    let out = agent().arg("--version").output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("skiff-agent "), "{text}");

    let dir = tempfile::tempdir().expect("dir");
    // A mirror for docker.io, as a site points its boards at its own registry.
    let registries = dir.path().join("registries.yaml");
    std::fs::write(
        &registries,
        "mirrors:\n  docker.io:\n    endpoint: [\"https://mirror.site.test:5000\"]\n",
    )
    .expect("write registries.yaml");
    let out = agent()
        .arg("--registries-config")
        .arg(&registries)
        .arg("--tunnel")
        .args([
            "--share-images",
            "--node-label",
            "topology.kubernetes.io/zone=shop-12",
        ])
        .arg("self-check")
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "arch: ",
        "cgroup: ",
        "overlay: ",
        "namespace mnt: ",
        "joined: no",
        "tunnel: on (",
        "registry mirrors: docker.io (from ",
        "image sharing: on, site shop-12 (",
    ] {
        assert!(text.contains(line), "{line} missing in:\n{text}");
    }

    // The config file's key is the flag's name; off by default.
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "share-images = true\n").expect("write agent.toml");
    let self_check = |config: Option<&std::path::Path>| {
        let mut cmd = agent();
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let out = cmd
            .arg("self-check")
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .expect("run");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = self_check(Some(&config));
    assert!(text.contains("image sharing: on, but no "), "{text}");
    let text = self_check(None);
    assert!(text.contains("image sharing: off"), "{text}");
}

#[test]
fn image_subcommands_use_the_data_dir() {
    let dir = tempfile::tempdir().expect("dir");
    let out = agent()
        .args(["image", "ls", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("images").is_dir());
}

#[test]
fn refuses_to_start_unjoined_or_with_bad_flags() {
    let dir = tempfile::tempdir().expect("dir");
    let out = agent()
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has not joined yet"), "{err}");

    let out = agent()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--server", "https://127.0.0.1:1", "--token", "nonsense"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("malformed join token"), "{err}");

    let out = agent()
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--register-with-taints", "gpu:Sometimes"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad taint"), "{err}");
}
