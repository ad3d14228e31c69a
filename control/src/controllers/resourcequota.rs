//! ResourceQuota controller: keeps each quota's `status.hard` and `status.used` current.
//! Admission raises `used` as objects are created; this loop brings it back down as they
//! go (Kubernetes' replenishment) and fills the status of new or changed quotas. Changes of
//! the cached kinds trigger a pass over their namespace's quotas; a periodic full pass
//! catches the kinds the cache does not hold (ConfigMaps, Secrets).

use std::collections::BTreeSet;
use std::time::Duration;

use api::quota::ResourceQuota;
use api::Kind;

use crate::machinery::informer::Change;
use crate::machinery::Context;

/// How often every quota is recomputed whatever happened (Kubernetes: 5 minutes).
pub const RESYNC: Duration = Duration::from_secs(30);
/// Changes arriving within this time are handled in one pass.
const SETTLE: Duration = Duration::from_millis(200);

pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

async fn run(ctx: Context) {
    let kinds: Vec<Kind> = crate::machinery::CACHED_KINDS
        .iter()
        .copied()
        .filter(|k| k.info().namespaced)
        .collect();
    let changes = ctx.informers.subscribe(&kinds);
    // None: every namespace.
    let mut due: Option<BTreeSet<String>> = None;
    loop {
        sync(&ctx, due.as_ref()).await;
        let first = futures_lite::future::or(async { changes.recv().await.ok() }, async {
            smol::Timer::after(RESYNC).await;
            None
        })
        .await;
        let Some(first) = first else {
            due = None;
            continue;
        };
        smol::Timer::after(SETTLE).await;
        let mut set = BTreeSet::new();
        let mut all = false;
        for c in std::iter::once(first).chain(std::iter::from_fn(|| changes.try_recv().ok())) {
            match namespace_of(&c) {
                Some(ns) => {
                    set.insert(ns);
                }
                None => all = true,
            }
        }
        due = (!all).then_some(set);
    }
}

fn namespace_of(c: &Change) -> Option<String> {
    match c {
        Change::Resync => None,
        Change::Added { new, .. } | Change::Modified { new, .. } => {
            Some(new.meta().namespace().to_string())
        }
        Change::Deleted(obj) => Some(obj.meta().namespace().to_string()),
    }
}

async fn sync(ctx: &Context, namespaces: Option<&BTreeSet<String>>) {
    let quotas: Vec<ResourceQuota> = match namespaces {
        None => ctx
            .registry
            .store
            .list(Kind::ResourceQuota, None)
            .await
            .map(|(l, _)| l)
            .unwrap_or_default()
            .into_iter()
            .filter_map(api::object::Resource::from_any)
            .collect(),
        Some(set) => {
            let mut out = Vec::new();
            for ns in set {
                if let Ok((l, _)) = ctx.registry.store.list(Kind::ResourceQuota, Some(ns)).await {
                    out.extend(l.into_iter().filter_map(api::object::Resource::from_any));
                }
            }
            out
        }
    };
    for q in quotas {
        if let Err(e) = ctx
            .registry
            .sync_quota(q.metadata.namespace(), &q.metadata.name)
            .await
        {
            tracing::debug!(quota = %q.metadata.name, error = %e, "syncing quota status failed");
        }
    }
}
