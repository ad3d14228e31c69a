//! Watch: live delivery, resumption from the event log, expiry, compaction, slow watchers
//! and fan-out, against real redb files.

use std::sync::Arc;
use std::time::Duration;

use api::meta::ObjectMeta;
use api::{AnyObject, Kind};
use futures_lite::future;
use skiff_control::store::{
    EventType, Store, StoreConfig, StoreError, Watch, WatchEnd, WatchEvent,
};

fn cm(namespace: &str, name: &str) -> AnyObject {
    AnyObject::ConfigMap(api::core::ConfigMap {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
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

async fn put(store: &Store, obj: AnyObject) -> AnyObject {
    store.write(move |txn| txn.put(obj)).await.unwrap()
}

/// The next event, failing the test if none comes within five seconds.
async fn next(watch: &mut Watch) -> Option<Arc<WatchEvent>> {
    future::or(watch.next(), async {
        smol::Timer::after(Duration::from_secs(5)).await;
        panic!("no watch event within 5s");
    })
    .await
}

fn drain(watch: &mut Watch) -> Vec<u64> {
    std::iter::from_fn(|| watch.try_next())
        .map(|e| e.revision)
        .collect()
}

#[test]
fn live_events_carry_type_revision_and_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::in_dir(dir.path())).unwrap();
    smol::block_on(async {
        let mut cms = store.watch(&[Kind::ConfigMap], None).await.unwrap();
        let mut everything = store.watch(&[], None).await.unwrap();
        assert_eq!(store.watcher_count(), 2);

        let added = put(&store, cm("default", "a")).await;
        put(&store, node("n1")).await;
        let modified = put(&store, cm("default", "a")).await;
        let deleted = store
            .write(|txn| txn.delete(Kind::ConfigMap, "default", "a"))
            .await
            .unwrap();

        let e = next(&mut cms).await.unwrap();
        assert_eq!(
            (e.event_type, e.revision, &*e.object),
            (EventType::Added, 1, &added)
        );
        let e = next(&mut cms).await.unwrap();
        assert_eq!(
            (e.event_type, e.revision, &*e.object),
            (EventType::Modified, 3, &modified)
        );
        let e = next(&mut cms).await.unwrap();
        assert_eq!(e.event_type, EventType::Deleted);
        assert_eq!(e.revision, 4);
        assert_eq!(*e.object, deleted);
        assert_eq!(e.object.meta().resource_version, "4");
        assert!(
            cms.try_next().is_none(),
            "the Node event is not for this watch"
        );

        assert_eq!(drain(&mut everything), [1, 2, 3, 4]);
        assert_eq!(everything.last_revision(), 4);
        drop(cms);
        assert_eq!(store.watcher_count(), 1);
    });
}

#[test]
fn resuming_replays_exactly_the_missed_events_then_goes_live() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::in_dir(dir.path())).unwrap();
    smol::block_on(async {
        for i in 0..10 {
            put(&store, cm("default", &format!("o{i}"))).await;
        }
        put(&store, node("n1")).await; // revision 11, filtered out
        let mut watch = store.watch(&[Kind::ConfigMap], Some(4)).await.unwrap();
        let mut replayed = Vec::new();
        for _ in 5..=10 {
            let e = next(&mut watch).await.unwrap();
            assert_eq!(e.event_type, EventType::Added);
            assert_eq!(e.object.meta().resource_version, e.revision.to_string());
            replayed.push(e.revision);
        }
        assert_eq!(replayed, [5, 6, 7, 8, 9, 10]);
        assert!(watch.try_next().is_none());
        for i in 0..3 {
            put(&store, cm("default", &format!("live{i}"))).await;
        }
        assert_eq!(drain(&mut watch), [12, 13, 14]);

        // Resuming at the current revision replays nothing; past it waits for later ones.
        let mut at_head = store.watch(&[], Some(14)).await.unwrap();
        let mut ahead = store.watch(&[], Some(15)).await.unwrap();
        put(&store, cm("default", "p")).await;
        put(&store, cm("default", "q")).await;
        assert_eq!(drain(&mut at_head), [15, 16]);
        assert_eq!(drain(&mut ahead), [16]);
    });
}

#[test]
fn watches_started_during_heavy_writing_see_every_revision_once() {
    const WRITERS: usize = 8;
    const WRITES: usize = 40;
    let total = (WRITERS * WRITES) as u64;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::in_dir(dir.path())).unwrap();
    smol::block_on(async {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = store.clone();
                smol::spawn(async move {
                    for i in 0..WRITES {
                        put(&store, cm("default", &format!("w{w}-{i}"))).await;
                    }
                })
            })
            .collect();
        let mut watches = Vec::new();
        while watches.len() < 4 || store.revision() < total - 20 {
            let head = store.revision();
            let after = match watches.len() % 3 {
                0 => None,
                1 => Some(head.saturating_sub(7)),
                _ => Some(head / 2),
            };
            let watch = store.watch(&[Kind::ConfigMap], after).await.unwrap();
            let start = after.unwrap_or(watch.last_revision());
            watches.push((start, watch));
            smol::Timer::after(Duration::from_millis(2)).await;
        }
        for w in writers {
            w.await;
        }
        for (start, mut watch) in watches {
            let mut expected = start + 1;
            while expected <= total {
                let e = next(&mut watch).await.unwrap();
                assert_eq!(e.revision, expected, "watch from {start}");
                expected += 1;
            }
            assert!(watch.try_next().is_none());
        }
    });
}

#[test]
fn resuming_before_the_window_is_expired_and_the_log_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::in_dir(dir.path());
    cfg.event_window = 5;
    {
        let store = Store::open(cfg.clone()).unwrap();
        smol::block_on(async {
            for i in 0..20 {
                put(&store, cm("default", &format!("o{}", i % 4))).await;
            }
            assert_eq!(store.oldest_resumable_revision(), 15);
            let err = store.watch(&[], Some(3)).await.unwrap_err();
            assert!(matches!(
                err,
                StoreError::Expired {
                    requested: 3,
                    oldest: 15
                }
            ));
            assert_eq!(err.to_string(), "too old resource version: 3 (15)");
            assert!(matches!(
                store.watch(&[], Some(14)).await,
                Err(StoreError::Expired { .. })
            ));
            let mut watch = store.watch(&[], Some(15)).await.unwrap();
            assert_eq!(drain(&mut watch), [16, 17, 18, 19, 20]);
            assert_eq!(store.watcher_count(), 1);
        });
    }
    // The log holds exactly the window, and the compaction point survives a restart.
    {
        use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
        let db = redb::Database::open(dir.path().join("state.redb")).unwrap();
        let rtx = db.begin_read().unwrap();
        let log: TableDefinition<u64, &[u8]> = TableDefinition::new("_event_log");
        assert_eq!(rtx.open_table(log).unwrap().len().unwrap(), 5);
    }
    let store = Store::open(cfg).unwrap();
    assert_eq!(store.oldest_resumable_revision(), 15);
    smol::block_on(async {
        assert!(matches!(
            store.watch(&[], Some(10)).await,
            Err(StoreError::Expired { .. })
        ));
        put(&store, cm("default", "x")).await;
        assert_eq!(store.oldest_resumable_revision(), 16);
        let mut watch = store.watch(&[], Some(16)).await.unwrap();
        assert_eq!(drain(&mut watch), [17, 18, 19, 20, 21]);
    });
}

#[test]
fn a_slow_watcher_is_cut_off_without_holding_back_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::in_dir(dir.path());
    cfg.watch_queue_capacity = 8;
    let store = Store::open(cfg).unwrap();
    smol::block_on(async {
        let mut slow = store.watch(&[], None).await.unwrap();
        let mut fast = store.watch(&[], None).await.unwrap();
        for i in 1..=20u64 {
            put(&store, cm("default", &format!("o{i}"))).await;
            assert_eq!(next(&mut fast).await.unwrap().revision, i);
        }
        assert_eq!(
            store.watcher_count(),
            1,
            "the slow watcher was unregistered"
        );
        assert_eq!(slow.end_reason(), Some(WatchEnd::TooSlow));
        assert_eq!(fast.end_reason(), None);
        let mut got = Vec::new();
        while let Some(e) = next(&mut slow).await {
            got.push(e.revision);
        }
        assert_eq!(
            got,
            (1..=8).collect::<Vec<_>>(),
            "queued events, then the end"
        );
        // It resumes where it stopped, from the event log.
        let mut resumed = store.watch(&[], Some(slow.last_revision())).await.unwrap();
        assert_eq!(drain(&mut resumed), (9..=20).collect::<Vec<_>>());
    });
}

#[test]
fn a_thousand_watchers_all_receive_one_shared_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::in_dir(dir.path())).unwrap();
    smol::block_on(async {
        let mut watches = Vec::new();
        for i in 0..1000 {
            let kinds: &[Kind] = if i % 2 == 0 {
                &[Kind::ConfigMap]
            } else {
                &[Kind::Pod, Kind::ConfigMap]
            };
            watches.push(store.watch(kinds, None).await.unwrap());
        }
        let mut others = store.watch(&[Kind::Node], None).await.unwrap();
        assert_eq!(store.watcher_count(), 1001);
        put(&store, cm("default", "a")).await;
        let mut first: Option<Arc<WatchEvent>> = None;
        for watch in &mut watches {
            let e = next(watch).await.unwrap();
            assert_eq!(e.revision, 1);
            match &first {
                None => first = Some(e),
                Some(f) => assert!(Arc::ptr_eq(f, &e), "one event shared by all"),
            }
        }
        assert!(others.try_next().is_none());
        drop(watches);
        assert_eq!(store.watcher_count(), 1);
    });
}

#[test]
fn a_waiting_watcher_wakes_for_a_live_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::in_dir(dir.path())).unwrap();
    smol::block_on(async {
        let mut watch = store.watch(&[Kind::ConfigMap], None).await.unwrap();
        let waiting = smol::spawn(async move {
            let e = next(&mut watch).await.unwrap();
            (e.revision, e.event_type)
        });
        smol::Timer::after(Duration::from_millis(50)).await;
        put(&store, cm("default", "a")).await;
        assert_eq!(waiting.await, (1, EventType::Added));
    });
}
