//! Crash safety: a child process (this test binary, re-executed) writes in a loop and prints
//! each acknowledged key; the parent kills it with SIGKILL at a random moment, reopens the
//! file and checks that every acknowledged write is there.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use api::meta::ObjectMeta;
use api::{AnyObject, Kind};
use skiff_control::store::{Store, StoreConfig};

const CHILD_ENV: &str = "SKIFF_STORE_CRASH_CHILD_DIR";
const WRITERS: usize = 4;

fn cm(name: &str) -> AnyObject {
    AnyObject::ConfigMap(api::core::ConfigMap {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some("crash".into()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The child's body; run only by `store_survives_kill_9_at_random_moments`.
#[test]
#[ignore = "helper process for the crash test, started by it"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: String = std::env::var("SKIFF_STORE_CRASH_ROUND").unwrap_or_default();
    let store = Store::open(StoreConfig::in_dir(dir)).unwrap();
    smol::block_on(async {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = store.clone();
                let round = round.clone();
                smol::spawn(async move {
                    for i in 0.. {
                        let name = format!("r{round}-w{w}-{i}");
                        let obj = cm(&name);
                        let stored = store.write(move |txn| txn.put(obj)).await.unwrap();
                        // Printed only after the write was acknowledged (durable).
                        println!("ACK {name} {}", stored.meta().resource_version);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await;
        }
    });
}

fn random_below(n: u64) -> u64 {
    RandomState::new().build_hasher().finish() % n
}

#[test]
fn store_survives_kill_9_at_random_moments() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut total_acked = 0;
    for round in 0..5u64 {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_ENV, dir.path())
            .env("SKIFF_STORE_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acked = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("ACK ") {
                    let (name, rv) = rest.split_once(' ').unwrap();
                    acked.push((name.to_string(), rv.parse::<u64>().unwrap()));
                    if acked.len() == 1 {
                        let _ = first_tx.send(());
                    }
                }
            }
            acked
        });
        first_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the child acknowledged no write within 60s");
        std::thread::sleep(Duration::from_millis(10 + random_below(400)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let acked = reader.join().unwrap();
        assert!(!acked.is_empty());
        total_acked += acked.len();

        let store = Store::open(StoreConfig::in_dir(dir.path())).unwrap();
        smol::block_on(async {
            let max_rv = acked.iter().map(|(_, rv)| *rv).max().unwrap();
            assert!(
                store.revision() >= max_rv,
                "round {round}: revision {} < acknowledged {max_rv}",
                store.revision()
            );
            for (name, rv) in &acked {
                let obj = store
                    .get(Kind::ConfigMap, "crash", name)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: acknowledged {name} lost: {e}"));
                assert_eq!(obj.meta().resource_version, rv.to_string());
            }
            // The whole file reads back: every table and the event log.
            for kind in Kind::ALL {
                store.list(*kind, None).await.unwrap();
            }
            let (objs, rev) = store.list(Kind::ConfigMap, Some("crash")).await.unwrap();
            assert_eq!(rev, store.revision());
            // One object per revision, but for the create+delete pair of each earlier round.
            assert_eq!(
                objs.len() as u64,
                rev - 2 * round,
                "no unacknowledged extras"
            );
            let mut watch = store
                .watch(&[], Some(store.oldest_resumable_revision()))
                .await
                .unwrap();
            let mut replayed = 0;
            while watch.try_next().is_some() {
                replayed += 1;
            }
            assert_eq!(replayed, rev - store.oldest_resumable_revision());
            // And it accepts writes after recovery.
            let obj = store.write(|txn| txn.put(cm("after-crash"))).await.unwrap();
            assert_eq!(obj.meta().revision(), rev + 1);
            store
                .write(|txn| txn.delete(Kind::ConfigMap, "crash", "after-crash"))
                .await
                .unwrap();
        });
        eprintln!(
            "round {round}: {} acknowledged writes survived",
            acked.len()
        );
    }
    assert!(total_acked > 0);
}
