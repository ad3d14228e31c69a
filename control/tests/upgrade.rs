//! A newer `skiff` opens data dirs written by earlier releases.
//!
//! `tests/fixtures/data-vX.Y.Z/` holds `state.redb` as release X.Y.Z left it (a few objects
//! of several kinds, from `opsutil::MANIFEST`) and `expected.json`, the objects' identities
//! (`kind/namespace/name`, uid) at that time. The server makes a new PKI on the copy.
//!
//! Adding the next release's fixture, from a checkout of that release:
//!
//! ```sh
//! SKIFF_FIXTURE_OUT=control/tests/fixtures/data-v0.2.0 \
//!     cargo test -p skiff-control --test upgrade -- --ignored make_fixture
//! ```
//!
//! then add `data-v0.2.0` to `FIXTURES` below and commit both.

mod opsutil;

use std::path::{Path, PathBuf};

use opsutil::{apply, uids, Server, KINDS, MANIFEST};

const FIXTURES: &[&str] = &["data-v0.1.0"];

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

type Identities = Vec<(String, String)>;

fn identities(server: &Server) -> Identities {
    uids(server, KINDS)
        .into_iter()
        .map(|(k, u, _)| (k, u))
        .collect()
}

#[test]
fn data_dirs_of_earlier_releases_open() {
    for name in FIXTURES {
        let src = fixture_dir(name);
        let expected: Identities = serde_json::from_slice(
            &std::fs::read(src.join("expected.json")).expect("expected.json"),
        )
        .expect("expected.json");
        assert!(!expected.is_empty());
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("data dir");
        std::fs::copy(src.join("state.redb"), data.join("state.redb")).expect("copy fixture");
        let server = Server::start(&data);
        let found = identities(&server);
        for e in &expected {
            assert!(found.contains(e), "{name}: {e:?} missing from {found:?}");
        }
        // The old objects can be changed and new ones made.
        apply(
            &server,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: shop}\ndata: {greeting: upgraded}\n",
        );
        let out = server.cli(&["get", "configmap", "settings", "-n", "shop", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["data"]["greeting"], "upgraded", "{name}");
        assert!(server.terminate().success(), "{name}: clean stop");
    }
}

/// Writes a fixture for the current code into `$SKIFF_FIXTURE_OUT`.
#[test]
#[ignore = "writes a new upgrade fixture; see the module docs"]
fn make_fixture() {
    let out = PathBuf::from(std::env::var("SKIFF_FIXTURE_OUT").expect("SKIFF_FIXTURE_OUT"));
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path());
    apply(&server, MANIFEST);
    std::thread::sleep(std::time::Duration::from_secs(3));
    let ids = identities(&server);
    assert!(server.terminate().success());
    std::fs::create_dir_all(&out).expect("fixture dir");
    std::fs::copy(dir.path().join("state.redb"), out.join("state.redb")).expect("copy");
    std::fs::write(
        out.join("expected.json"),
        serde_json::to_vec_pretty(&ids).expect("json"),
    )
    .expect("write expected.json");
}
