//! Namespace deletion: a terminating namespace is emptied, then removed.

use std::collections::BTreeSet;
use std::time::Duration;

use api::meta::DeleteOptions;
use api::{with_kind, Kind};

use crate::error::ApiError;
use crate::registry::Registry;

/// How often a namespace that still holds objects (pods waiting for their node) is retried.
const RETRY: Duration = Duration::from_secs(2);

/// Runs forever: watches namespaces and empties and removes the terminating ones.
pub async fn run(registry: Registry) {
    loop {
        if let Err(e) = pass(&registry).await {
            tracing::warn!(error = %e, "namespace controller pass failed");
        }
        // Terminating namespaces are rare: a short poll keeps this simple and bounded, and a
        // watch wakes the loop early when a namespace changes.
        let rev = registry.store.revision();
        if let Ok(mut w) = registry.store.watch(&[Kind::Namespace], Some(rev)).await {
            let _ = futures_lite::future::or(async { w.next().await.map(|_| ()) }, async {
                smol::Timer::after(RETRY).await;
                None
            })
            .await;
        } else {
            smol::Timer::after(RETRY).await;
        }
    }
}

async fn pass(registry: &Registry) -> Result<(), ApiError> {
    let (namespaces, _) = registry.store.list(Kind::Namespace, None).await?;
    let terminating: BTreeSet<String> = namespaces
        .iter()
        .filter(|n| n.meta().deletion_timestamp.is_some())
        .map(|n| n.meta().name.clone())
        .collect();
    for ns in terminating {
        if empty_namespace(registry, &ns).await? {
            registry
                .store
                .write(move |txn| match txn.get(Kind::Namespace, "", &ns)? {
                    Some(n) if n.meta().deletion_timestamp.is_some() => {
                        txn.delete(Kind::Namespace, "", &ns).map(|_| ())
                    }
                    _ => Ok(()),
                })
                .await?;
        }
    }
    Ok(())
}

/// Deletes everything in `ns`; true once nothing is left.
async fn empty_namespace(registry: &Registry, ns: &str) -> Result<bool, ApiError> {
    let mut empty = true;
    // Custom resources' objects too (kinds of definitions since deleted find nothing).
    let kinds = Kind::ALL.iter().copied().chain(Kind::defined_custom());
    for kind in kinds.filter(|k| k.info().namespaced) {
        let (items, _) = registry.store.list(kind, Some(ns)).await?;
        for item in items {
            empty = false;
            if item.meta().deletion_timestamp.is_some() {
                continue;
            }
            let name = item.meta().name.clone();
            let result = with_kind!(kind, K, {
                super::gc::delete_boxed::<K>(
                    registry.for_kind(kind),
                    ns,
                    &name,
                    DeleteOptions::default(),
                )
                .await
            });
            match result {
                Ok(()) => {}
                Err(e) if e.code() == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(empty)
}
