//! Store reads, writes, revisions, batches and reopening, against real redb files.

use std::time::Duration;

use api::meta::ObjectMeta;
use api::{AnyObject, Kind};
use skiff_control::store::{Store, StoreConfig, StoreError};

/// A ConfigMap whose payload is its `v` label (the store treats objects opaquely).
fn cm(namespace: &str, name: &str, value: &str) -> AnyObject {
    let mut metadata = ObjectMeta {
        name: name.into(),
        namespace: Some(namespace.into()),
        ..Default::default()
    };
    metadata.labels.insert("v".into(), value.into());
    AnyObject::ConfigMap(api::core::ConfigMap {
        metadata,
        ..Default::default()
    })
}

fn node(name: &str) -> AnyObject {
    AnyObject::Node(api::core::Node {
        metadata: ObjectMeta {
            name: name.into(),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn label(obj: &AnyObject) -> &str {
    obj.meta().labels.get("v").map(String::as_str).unwrap_or("")
}

fn names(objs: &[AnyObject]) -> Vec<String> {
    objs.iter()
        .map(|o| format!("{}/{}", o.meta().namespace(), o.meta().name))
        .collect()
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(StoreConfig::in_dir(dir.path())).unwrap()
}

async fn put(store: &Store, obj: AnyObject) -> Result<AnyObject, StoreError> {
    store.write(move |txn| txn.put(obj)).await
}

/// Creates, refusing an existing object, as the registry will.
async fn create(store: &Store, obj: AnyObject) -> Result<AnyObject, StoreError> {
    store
        .write(move |txn| {
            let (kind, ns, name) = (obj.kind(), obj.meta().namespace(), obj.meta().name.clone());
            if txn.get(kind, ns, &name)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    kind,
                    namespace: ns.to_string(),
                    name,
                });
            }
            txn.put(obj)
        })
        .await
}

#[test]
fn create_get_list_update_delete_with_one_revision_per_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        assert_eq!(store.revision(), 0);
        let a = create(&store, cm("default", "a", "1")).await.unwrap();
        assert_eq!(a.meta().resource_version, "1");
        let b = create(&store, cm("default", "b", "1")).await.unwrap();
        assert_eq!(b.meta().resource_version, "2");
        create(&store, cm("other", "c", "1")).await.unwrap();
        let n = create(&store, node("n1")).await.unwrap();
        assert_eq!(n.meta().resource_version, "4");
        assert_eq!(store.revision(), 4);

        let got = store.get(Kind::ConfigMap, "default", "a").await.unwrap();
        assert_eq!(got, a);
        let got = store.get(Kind::Node, "", "n1").await.unwrap();
        assert_eq!(got, n);

        let (all, rev) = store.list(Kind::ConfigMap, None).await.unwrap();
        assert_eq!(rev, 4);
        assert_eq!(names(&all), ["default/a", "default/b", "other/c"]);
        let (default, _) = store.list(Kind::ConfigMap, Some("default")).await.unwrap();
        assert_eq!(names(&default), ["default/a", "default/b"]);
        let (none, _) = store.list(Kind::ConfigMap, Some("defaul")).await.unwrap();
        assert!(none.is_empty());
        let (nodes, _) = store.list(Kind::Node, None).await.unwrap();
        assert_eq!(names(&nodes), ["/n1"]);

        let a2 = put(&store, cm("default", "a", "2")).await.unwrap();
        assert_eq!(a2.meta().resource_version, "5");
        let got = store.get(Kind::ConfigMap, "default", "a").await.unwrap();
        assert_eq!(label(&got), "2");
        assert_eq!(got.meta().resource_version, "5");

        let deleted = store
            .write(|txn| txn.delete(Kind::ConfigMap, "default", "b"))
            .await
            .unwrap();
        assert_eq!(deleted.meta().resource_version, "6");
        assert_eq!(deleted.meta().name, "b");
        assert!(matches!(
            store.get(Kind::ConfigMap, "default", "b").await,
            Err(StoreError::NotFound {
                kind: Kind::ConfigMap,
                ..
            })
        ));
        let (rest, rev) = store.list(Kind::ConfigMap, None).await.unwrap();
        assert_eq!(rev, 6);
        assert_eq!(names(&rest), ["default/a", "other/c"]);
        assert_eq!(store.revision(), 6);
    });
}

#[test]
fn closures_report_already_exists_and_not_found_and_see_their_own_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        create(&store, cm("default", "a", "1")).await.unwrap();
        let err = create(&store, cm("default", "a", "2")).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { ref name, .. } if name == "a"));
        assert_eq!(err.to_string(), "configmaps \"a\" already exists");
        let err = store
            .write(|txn| txn.delete(Kind::ConfigMap, "default", "missing"))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound { ref name, .. } if name == "missing"));
        assert_eq!(store.revision(), 1, "failed writes take no revision");

        let seen = store
            .write(|txn| {
                txn.put(cm("default", "b", "1"))?;
                txn.put(cm("default", "b", "2"))?;
                let b = txn.get(Kind::ConfigMap, "default", "b")?.unwrap();
                let listed = txn.list(Kind::ConfigMap, Some("default"))?;
                txn.delete(Kind::ConfigMap, "default", "a")?;
                let after_delete = txn.list(Kind::ConfigMap, None)?;
                let gone = txn.get(Kind::ConfigMap, "default", "a")?;
                Ok::<_, StoreError>((b, names(&listed), names(&after_delete), gone))
            })
            .await
            .unwrap();
        assert_eq!(label(&seen.0), "2");
        assert_eq!(seen.0.meta().resource_version, "3");
        assert_eq!(seen.1, ["default/a", "default/b"]);
        assert_eq!(seen.2, ["default/b"]);
        assert_eq!(seen.3, None);
        assert_eq!(store.revision(), 4);
        let (objs, _) = store.list(Kind::ConfigMap, None).await.unwrap();
        assert_eq!(names(&objs), ["default/b"]);
        assert_eq!(objs[0].meta().resource_version, "3");
    });
}

#[test]
fn objects_without_a_usable_identity_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        for obj in [
            cm("", "a", "1"),
            cm("default", "", "1"),
            cm("default", "a/b", "1"),
        ] {
            let err = put(&store, obj).await.unwrap_err();
            assert!(matches!(err, StoreError::BadRequest(_)), "{err}");
        }
        let mut namespaced_node = node("n");
        namespaced_node.meta_mut().namespace = Some("default".into());
        assert!(matches!(
            put(&store, namespaced_node).await,
            Err(StoreError::BadRequest(_))
        ));
        assert_eq!(store.revision(), 0);
    });
}

/// Blocks the writer inside a closure so that the writes sent meanwhile form one batch.
async fn hold_writer(store: &Store) -> smol::Task<()> {
    let (started_tx, started_rx) = async_channel::bounded(1);
    let s = store.clone();
    let task = smol::spawn(async move {
        s.write(move |_txn| {
            let _ = started_tx.try_send(());
            std::thread::sleep(Duration::from_millis(300));
            Ok::<_, StoreError>(())
        })
        .await
        .unwrap();
    });
    started_rx.recv().await.unwrap();
    task
}

#[test]
fn a_failing_closure_leaves_no_trace_while_the_rest_of_its_batch_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        put(&store, cm("default", "base", "0")).await.unwrap();
        let holder = hold_writer(&store).await;
        let commits_before = store.commit_stats().commits;

        let s = store.clone();
        let first = smol::spawn(async move { put(&s, cm("default", "x", "1")).await });
        smol::Timer::after(Duration::from_millis(20)).await;
        let s = store.clone();
        let failing = smol::spawn(async move {
            s.write(|txn| {
                txn.put(cm("default", "y", "1"))?;
                txn.delete(Kind::ConfigMap, "default", "base")?;
                Err::<(), _>(StoreError::Conflict {
                    kind: Kind::ConfigMap,
                    namespace: "default".into(),
                    name: "y".into(),
                    message: "changed my mind".into(),
                })
            })
            .await
        });
        smol::Timer::after(Duration::from_millis(20)).await;
        let s = store.clone();
        let last = smol::spawn(async move {
            s.write(|txn| {
                let x = txn.get(Kind::ConfigMap, "default", "x")?;
                let z = txn.put(cm("default", "z", "1"))?;
                Ok::<_, StoreError>((x.is_some(), z))
            })
            .await
        });

        holder.await;
        let x = first.await.unwrap();
        assert!(matches!(
            failing.await,
            Err(StoreError::Conflict { ref message, .. }) if message == "changed my mind"
        ));
        let (saw_x, z) = last.await.unwrap();
        let stats = store.commit_stats();
        assert_eq!(
            stats.commits,
            commits_before + 1,
            "the holder wrote nothing (no commit), then one commit for the three writes"
        );
        assert_eq!(stats.last_batch_size, 3);
        assert!(saw_x, "a closure sees the earlier closures of its batch");
        // base=1, holder took none, x=2, the failing closure gave back 3 and 4, z=3.
        assert_eq!(x.meta().resource_version, "2");
        assert_eq!(z.meta().resource_version, "3");
        assert_eq!(store.revision(), 3);
        assert!(matches!(
            store.get(Kind::ConfigMap, "default", "y").await,
            Err(StoreError::NotFound { .. })
        ));
        let base = store.get(Kind::ConfigMap, "default", "base").await.unwrap();
        assert_eq!(base.meta().resource_version, "1");
        let (objs, rev) = store.list(Kind::ConfigMap, None).await.unwrap();
        assert_eq!(rev, 3);
        assert_eq!(names(&objs), ["default/base", "default/x", "default/z"]);
    });
}

#[test]
fn a_batch_that_writes_nothing_commits_nothing() {
    // An empty redb commit still syncs the file: an idle SD card must not see one for a
    // write closure that only read (a heartbeat that changed nothing), failed or was a dry run.
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        put(&store, cm("default", "a", "1")).await.unwrap();
        let before = store.commit_stats().commits;
        let seen = store
            .write(|txn| -> Result<bool, StoreError> {
                Ok(txn.get(Kind::ConfigMap, "default", "a")?.is_some())
            })
            .await
            .unwrap();
        assert!(seen);
        let failed = store
            .write(|txn| -> Result<(), StoreError> {
                txn.put(cm("default", "b", "1"))?;
                Err(StoreError::BadRequest("no".into()))
            })
            .await;
        assert!(failed.is_err());
        store
            .write_dry_run(|txn| txn.put(cm("default", "c", "1")).map(drop))
            .await
            .unwrap();
        assert_eq!(store.commit_stats().commits, before);
        assert_eq!(store.revision(), 1);
        // The store still commits what follows.
        let d = put(&store, cm("default", "d", "1")).await.unwrap();
        assert_eq!(d.meta().resource_version, "2");
        assert_eq!(store.commit_stats().commits, before + 1);
    });
}

#[test]
fn a_panicking_closure_is_dropped_and_the_store_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        let err = store
            .write(|txn| -> Result<(), StoreError> {
                txn.put(cm("default", "p", "1"))?;
                panic!("bug in a closure");
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Closed));
        let a = put(&store, cm("default", "a", "1")).await.unwrap();
        assert_eq!(a.meta().resource_version, "1");
        assert!(store.get(Kind::ConfigMap, "default", "p").await.is_err());
    });
}

#[test]
fn concurrent_writers_all_land_in_fewer_commits() {
    const TASKS: usize = 64;
    const WRITES: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let store = store.clone();
                smol::spawn(async move {
                    let mut revisions = Vec::new();
                    for w in 0..WRITES {
                        let obj = put(&store, cm("load", &format!("t{t}-w{w}"), "x")).await?;
                        revisions.push(obj.meta().revision());
                    }
                    Ok::<_, StoreError>(revisions)
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            let revisions = task.await.unwrap();
            assert!(revisions.windows(2).all(|w| w[0] < w[1]));
            all.extend(revisions);
        }
        all.sort_unstable();
        let total = (TASKS * WRITES) as u64;
        assert_eq!(
            all,
            (1..=total).collect::<Vec<_>>(),
            "each write took its own revision"
        );
        assert_eq!(store.revision(), total);
        let (objs, rev) = store.list(Kind::ConfigMap, Some("load")).await.unwrap();
        assert_eq!(objs.len() as u64, total);
        assert_eq!(rev, total);
        let stats = store.commit_stats();
        assert_eq!(stats.writes, total);
        assert!(
            stats.commits < total,
            "group commit: {} commits for {total} writes",
            stats.commits
        );
        assert!(stats.max_batch_size > 1);
        eprintln!(
            "{total} writes in {} commits (largest batch {}), mean commit {:?}",
            stats.commits,
            stats.max_batch_size,
            stats.total_commit_time / stats.commits as u32
        );
    });
}

#[test]
fn reopening_keeps_data_and_revision() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(&dir);
        smol::block_on(async {
            for i in 0..10 {
                put(&store, cm("default", &format!("o{i}"), &i.to_string()))
                    .await
                    .unwrap();
            }
            store
                .write(|txn| txn.delete(Kind::ConfigMap, "default", "o3"))
                .await
                .unwrap();
        });
        assert_eq!(store.revision(), 11);
    }
    let store = open(&dir);
    assert_eq!(store.revision(), 11);
    smol::block_on(async {
        let (objs, rev) = store.list(Kind::ConfigMap, None).await.unwrap();
        assert_eq!(rev, 11);
        assert_eq!(objs.len(), 9);
        let o7 = store.get(Kind::ConfigMap, "default", "o7").await.unwrap();
        assert_eq!(label(&o7), "7");
        assert_eq!(o7.meta().resource_version, "8");
        let next = put(&store, cm("default", "new", "1")).await.unwrap();
        assert_eq!(next.meta().resource_version, "12");
        // The event log survived too: resume from before the restart.
        let mut watch = store.watch(&[Kind::ConfigMap], Some(9)).await.unwrap();
        let revisions: Vec<u64> = std::iter::from_fn(|| watch.try_next())
            .map(|e| e.revision)
            .collect();
        assert_eq!(revisions, [10, 11, 12]);
    });
}

#[test]
fn close_drains_queued_writes_then_refuses_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        let mut watch = store.watch(&[], None).await.unwrap();
        let holder = hold_writer(&store).await;
        let s = store.clone();
        let queued = smol::spawn(async move { put(&s, cm("default", "q", "1")).await });
        smol::Timer::after(Duration::from_millis(20)).await;
        let closing = {
            let s = store.clone();
            smol::spawn(async move { s.close().await })
        };
        holder.await;
        closing.await;
        assert_eq!(queued.await.unwrap().meta().resource_version, "1");
        assert!(matches!(
            put(&store, cm("default", "late", "1")).await,
            Err(StoreError::Closed)
        ));
        assert_eq!(watch.next().await.map(|e| e.revision), Some(1));
        assert!(watch.next().await.is_none());
        assert_eq!(
            watch.end_reason(),
            Some(skiff_control::store::WatchEnd::Closed)
        );
        assert!(matches!(
            store.watch(&[], None).await,
            Err(StoreError::Closed)
        ));
        // Reads still work on the closed store.
        assert!(store.get(Kind::ConfigMap, "default", "q").await.is_ok());
    });
    drop(store);
    let reopened = open(&dir);
    assert_eq!(reopened.revision(), 1);
}

#[test]
fn delete_and_recreate_in_one_closure_emits_both_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        put(&store, cm("default", "a", "1")).await.unwrap();
        let mut watch = store.watch(&[Kind::ConfigMap], None).await.unwrap();
        let recreated = store
            .write(|txn| {
                txn.delete(Kind::ConfigMap, "default", "a")?;
                txn.put(cm("default", "a", "2"))
            })
            .await
            .unwrap();
        assert_eq!(recreated.meta().resource_version, "3");
        let mut seen = Vec::new();
        while let Some(e) = watch.try_next() {
            seen.push((e.event_type, e.revision, label(&e.object).to_string()));
        }
        use skiff_control::store::EventType::{Added, Deleted};
        assert_eq!(seen, [(Deleted, 2, "1".into()), (Added, 3, "2".into())]);
        let a = store.get(Kind::ConfigMap, "default", "a").await.unwrap();
        assert_eq!(a, recreated);
    });
}

fn namespace(name: &str, value: &str) -> AnyObject {
    let mut metadata = ObjectMeta {
        name: name.into(),
        ..Default::default()
    };
    metadata.labels.insert("v".into(), value.into());
    AnyObject::Namespace(api::core::Namespace {
        metadata,
        ..Default::default()
    })
}

/// Namespaces are among the kinds the writer decodes once per batch; a closure must still see
/// what the earlier closures of its batch wrote, through `get` and `list` alike.
#[test]
fn reads_cached_for_a_batch_see_the_batch_s_earlier_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        put(&store, namespace("a", "0")).await.unwrap();
        let holder = hold_writer(&store).await;
        let read = |store: &Store| {
            let s = store.clone();
            smol::spawn(async move {
                s.write(|txn| {
                    let got = txn.get(Kind::Namespace, "", "a")?.unwrap();
                    let all = txn.list(Kind::Namespace, None)?;
                    let labels: Vec<String> = all.iter().map(|o| label(o).to_string()).collect();
                    Ok::<_, StoreError>((label(&got).to_string(), names(&all), labels))
                })
                .await
                .unwrap()
            })
        };
        let first = read(&store);
        smol::Timer::after(Duration::from_millis(20)).await;
        let s = store.clone();
        let change = smol::spawn(async move {
            s.write(|txn| {
                txn.put(namespace("a", "1"))?;
                txn.put(namespace("b", "1"))
            })
            .await
            .unwrap();
        });
        smol::Timer::after(Duration::from_millis(20)).await;
        let second = read(&store);
        holder.await;
        change.await;
        let (label_then, all_then, labels_then) = first.await;
        assert_eq!(
            (label_then.as_str(), all_then, labels_then),
            ("0", vec!["/a".to_string()], vec!["0".to_string()])
        );
        let (label_now, all_now, labels_now) = second.await;
        assert_eq!(label_now, "1");
        assert_eq!(all_now, ["/a", "/b"]);
        assert_eq!(labels_now, ["1", "1"]);
        assert_eq!(
            store.commit_stats().last_batch_size,
            3,
            "the three closures shared a batch"
        );
    });
}
