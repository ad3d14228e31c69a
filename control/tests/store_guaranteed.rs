//! The store's guaranteed writes: closures run on a snapshot before the write, then their
//! writes are stored only if nothing they read changed since (retried otherwise), against
//! real redb files and many concurrent writers.

use api::meta::ObjectMeta;
use api::{AnyObject, Kind};
use skiff_control::store::{Committed, Store, StoreConfig, StoreError, Txn};

const TASKS: usize = 32;

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

fn label(obj: &AnyObject) -> &str {
    obj.meta().labels.get("v").map(String::as_str).unwrap_or("")
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(StoreConfig {
        optimistic_writes: true,
        ..StoreConfig::in_dir(dir.path())
    })
    .unwrap()
}

/// A guaranteed write whose answer is the object it wrote, with its committed
/// resourceVersion.
async fn write_object<F>(store: &Store, f: F) -> Result<AnyObject, StoreError>
where
    F: FnMut(&mut Txn<'_, '_>) -> Result<AnyObject, StoreError> + Send + 'static,
{
    let Committed {
        mut value,
        renumber,
    } = store.guaranteed_write(f, false).await?;
    renumber.fix(value.meta_mut());
    Ok(value)
}

/// Runs `TASKS` tasks of `each` concurrently and gathers their answers.
fn concurrently<T, Fut>(store: &Store, each: impl Fn(Store, usize) -> Fut) -> Vec<T>
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    smol::block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| smol::spawn(each(store.clone(), t)))
            .collect();
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await);
        }
        out
    })
}

#[test]
fn answers_carry_the_revisions_the_writes_were_committed_at() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let answers = concurrently(&store, |store, t| async move {
        let mut written = Vec::new();
        for w in 0..10 {
            let obj = cm("default", &format!("t{t}-{w}"), "1");
            written.push(
                write_object(&store, move |txn| txn.put(obj.clone()))
                    .await
                    .unwrap(),
            );
        }
        written
    });
    let mut revisions = Vec::new();
    smol::block_on(async {
        for obj in answers.into_iter().flatten() {
            let stored = store
                .get(Kind::ConfigMap, "default", &obj.meta().name)
                .await
                .unwrap();
            assert_eq!(
                obj.meta().resource_version,
                stored.meta().resource_version,
                "the answer names the stored revision of {}",
                obj.meta().name
            );
            revisions.push(obj.meta().revision());
        }
    });
    revisions.sort_unstable();
    let total = (TASKS * 10) as u64;
    assert_eq!(revisions, (1..=total).collect::<Vec<_>>());
    assert_eq!(store.revision(), total);
}

#[test]
fn concurrent_read_modify_writes_of_one_object_lose_no_update() {
    const ROUNDS: usize = 15;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(store.write(|txn| txn.put(cm("default", "counter", "0")))).unwrap();
    concurrently(&store, |store, _| async move {
        for _ in 0..ROUNDS {
            write_object(&store, |txn| {
                let mut current = txn.get(Kind::ConfigMap, "default", "counter")?.unwrap();
                let n: usize = label(&current).parse().unwrap();
                current
                    .meta_mut()
                    .labels
                    .insert("v".into(), (n + 1).to_string());
                txn.put(current)
            })
            .await
            .unwrap();
        }
    });
    let counter = smol::block_on(store.get(Kind::ConfigMap, "default", "counter")).unwrap();
    assert_eq!(label(&counter), (TASKS * ROUNDS).to_string());
    assert_eq!(store.revision(), (TASKS * ROUNDS + 1) as u64);
    let stats = store.commit_stats();
    assert!(stats.conflicts > 0, "racing writes of one object conflict");
    assert_eq!(stats.writes, (TASKS * ROUNDS + 1) as u64);
}

#[test]
fn creates_of_one_name_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let answers = concurrently(&store, |store, t| async move {
        write_object(&store, move |txn| {
            if txn.get(Kind::ConfigMap, "default", "only")?.is_some() {
                return Err(StoreError::AlreadyExists {
                    kind: Kind::ConfigMap,
                    namespace: "default".into(),
                    name: "only".into(),
                });
            }
            txn.put(cm("default", "only", &t.to_string()))
        })
        .await
    });
    let winners: Vec<_> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "one create wins");
    assert!(answers
        .iter()
        .filter_map(|a| a.as_ref().err())
        .all(|e| matches!(e, StoreError::AlreadyExists { .. })));
    let stored = smol::block_on(store.get(Kind::ConfigMap, "default", "only")).unwrap();
    assert_eq!(label(&stored), label(winners[0]));
    assert_eq!(store.revision(), 1);
}

/// A closure that counts a namespace's objects (as quota admission does) is refused if an
/// object was added to that namespace since its snapshot.
#[test]
fn a_listed_namespace_guards_a_count() {
    const LIMIT: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let answers = concurrently(&store, |store, t| async move {
        let outside = cm("elsewhere", &format!("o{t}"), "1");
        write_object(&store, move |txn| txn.put(outside.clone()))
            .await
            .unwrap();
        write_object(&store, move |txn| {
            let used = txn.list(Kind::ConfigMap, Some("limited"))?.len();
            if used >= LIMIT {
                return Err(StoreError::Forbidden(format!("{used} of {LIMIT} used")));
            }
            txn.put(cm("limited", &format!("c{t}"), "1"))
        })
        .await
    });
    let created = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!(created, LIMIT);
    let (limited, _) = smol::block_on(store.list(Kind::ConfigMap, Some("limited"))).unwrap();
    assert_eq!(limited.len(), LIMIT);
    let (elsewhere, _) = smol::block_on(store.list(Kind::ConfigMap, Some("elsewhere"))).unwrap();
    assert_eq!(elsewhere.len(), TASKS);
}

#[test]
fn dry_runs_and_closures_that_write_nothing_never_reach_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        let base = store
            .write(|txn| txn.put(cm("default", "a", "1")))
            .await
            .unwrap();
        let commits = store.commit_stats().commits;
        let dry = store
            .guaranteed_write(
                |txn: &mut Txn<'_, '_>| {
                    txn.put(cm("default", "a", "2"))?;
                    txn.put(cm("default", "b", "2"))
                },
                true,
            )
            .await
            .unwrap();
        assert_eq!(label(&dry.value), "2");
        assert_eq!(
            dry.value.meta().resource_version,
            "",
            "a new object has none"
        );
        let read = store
            .guaranteed_write(
                |txn: &mut Txn<'_, '_>| txn.get(Kind::ConfigMap, "default", "a"),
                false,
            )
            .await
            .unwrap();
        assert_eq!(read.value.as_ref(), Some(&base));
        assert_eq!(store.commit_stats().commits, commits);
        assert_eq!(store.revision(), 1);
        let b = store.get(Kind::ConfigMap, "default", "b").await;
        assert!(matches!(b, Err(StoreError::NotFound { .. })));
    });
}

/// A delete and a create in one closure keep their order and revisions, and a failing
/// closure's writes are dropped.
#[test]
fn planned_deletes_and_failures() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    smol::block_on(async {
        store
            .write(|txn| txn.put(cm("default", "old", "1")))
            .await
            .unwrap();
        let mut watch = store.watch(&[Kind::ConfigMap], Some(1)).await.unwrap();
        let gone = write_object(&store, |txn| {
            let gone = txn.delete(Kind::ConfigMap, "default", "old")?;
            txn.put(cm("default", "new", "1"))?;
            Ok(gone)
        })
        .await
        .unwrap();
        assert_eq!(gone.meta().resource_version, "2");
        let failed = write_object(&store, |txn| {
            txn.put(cm("default", "never", "1"))?;
            Err(StoreError::BadRequest("no".into()))
        })
        .await;
        assert!(matches!(failed, Err(StoreError::BadRequest(_))));
        let deleted = watch.next().await.unwrap();
        assert_eq!(
            (deleted.event_type.as_str(), deleted.revision),
            ("DELETED", 2)
        );
        assert_eq!(deleted.object.meta().name, "old");
        let added = watch.next().await.unwrap();
        assert_eq!((added.event_type.as_str(), added.revision), ("ADDED", 3));
        assert_eq!(added.object.meta().resource_version, "3");
        assert_eq!(store.revision(), 3);
    });
}
