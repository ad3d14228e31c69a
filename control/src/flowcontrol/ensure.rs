//! The configuration objects the server keeps (kube-apiserver's
//! `apiserver/bootstrap-system-flowcontrol-configuration` hook and its ensurer), and the
//! FlowSchemas' Dangling condition (kube's config consumer writes it).
//!
//! * Mandatory objects (`exempt` and `catch-all`): created when missing; their spec is put
//!   back whenever it changes (but the `exempt` level's `spec.exempt`, which admins may
//!   tune); their `apf.kubernetes.io/autoupdate-spec` annotation is kept `true`.
//! * Suggested objects: created when missing (a deleted one comes back, as in kube); their
//!   spec is updated only while the annotation says true. An object without the annotation
//!   (or with one that is not a boolean) is updated when its generation is 1, since nobody
//!   changed it, and gets the annotation: true at generation 1, false after.
//! * Objects with the annotation true that are no longer bootstrap objects are deleted.
//!
//! This runs at start (retried every second until it succeeds), then every minute and
//! whenever a FlowSchema or PriorityLevelConfiguration changes. Unlike kube-apiserver, where
//! every server runs it, only the server that runs the controllers does (the leader, with
//! several servers), as for skiff's other server-side writers.

use std::time::Duration;

use api::flowcontrol::bootstrap;
use api::flowcontrol::{FlowSchema, PriorityLevelConfiguration, AUTO_UPDATE_ANNOTATION, EXEMPT};
use api::meta::DeleteOptions;
use api::object::Resource;
use api::Kind;

use crate::error::ApiError;
use crate::machinery::informer::Cache;
use crate::machinery::Context;
use crate::registry::{Part, Registry};

/// The field manager of the writes of bootstrap objects (kube's).
pub const PRODUCER: &str = "api-priority-and-fairness-config-producer-v1";
/// The field manager of the Dangling conditions (kube's).
pub const CONSUMER: &str = "api-priority-and-fairness-config-consumer-v1";

/// How often the bootstrap objects are checked without a change.
const RESYNC: Duration = Duration::from_secs(60);

/// Starts the ensurer and the condition writer (on the server that runs the controllers).
pub fn start(ctx: &Context) {
    let changes = ctx
        .informers
        .subscribe(&[Kind::FlowSchema, Kind::PriorityLevelConfiguration]);
    let producer = ctx.registry.with_manager(PRODUCER);
    let consumer = ctx.registry.with_manager(CONSUMER);
    let informers = ctx.informers.clone();
    smol::spawn(async move {
        use futures_lite::FutureExt;
        let cache = informers.cache().clone();
        // At start: until the objects are all there.
        while let Err(e) = ensure(&producer, &cache).await {
            tracing::warn!(error = %e, "ensuring the API Priority and Fairness configuration; retrying");
            smol::Timer::after(Duration::from_secs(1)).await;
        }
        loop {
            write_conditions(&consumer, &cache).await;
            let changed = async { changes.recv().await.is_ok() }
                .or(async {
                    smol::Timer::after(RESYNC).await;
                    true
                })
                .await;
            if !changed {
                return;
            }
            // Let a burst of changes (and our own writes) land in the cache first.
            smol::Timer::after(Duration::from_millis(200)).await;
            while changes.try_recv().is_ok() {}
            if let Err(e) = ensure(&producer, &cache).await {
                tracing::warn!(error = %e, "ensuring the API Priority and Fairness configuration");
            }
        }
    })
    .detach();
}

/// What an ensured object needs: its spec's comparison and replacement.
trait Configuration: Resource + Default {
    /// Whether `actual`'s spec is the bootstrap one, as kube compares them (the `exempt`
    /// level's tunable section aside).
    fn spec_equalish(bootstrap: &Self, actual: &Self) -> bool;
    fn replace_spec(&mut self, from: &Self);
}

impl Configuration for FlowSchema {
    fn spec_equalish(bootstrap: &Self, actual: &Self) -> bool {
        bootstrap.spec == actual.spec
    }
    fn replace_spec(&mut self, from: &Self) {
        self.spec = from.spec.clone();
    }
}

impl Configuration for PriorityLevelConfiguration {
    fn spec_equalish(bootstrap: &Self, actual: &Self) -> bool {
        let mut expected = bootstrap.spec.clone();
        if bootstrap.metadata.name == EXEMPT {
            let Some(exempt) = &actual.spec.exempt else {
                return false;
            };
            expected.exempt = Some(exempt.clone());
        }
        expected == actual.spec
    }
    fn replace_spec(&mut self, from: &Self) {
        self.spec = from.spec.clone();
    }
}

/// Suggested objects, then mandatory ones, then bootstrap objects no longer wanted.
pub async fn ensure(registry: &Registry, cache: &Cache) -> Result<(), ApiError> {
    for pl in bootstrap::suggested_priority_levels() {
        ensure_one(registry, cache, pl, false).await?;
    }
    for fs in bootstrap::suggested_flow_schemas() {
        ensure_one(registry, cache, fs, false).await?;
    }
    for pl in bootstrap::mandatory_priority_levels() {
        ensure_one(registry, cache, pl, true).await?;
    }
    for fs in bootstrap::mandatory_flow_schemas() {
        ensure_one(registry, cache, fs, true).await?;
    }
    let fs_names: Vec<String> = bootstrap::mandatory_flow_schemas()
        .into_iter()
        .chain(bootstrap::suggested_flow_schemas())
        .map(|f| f.metadata.name)
        .collect();
    remove_unwanted::<FlowSchema>(registry, cache, &fs_names).await?;
    let pl_names: Vec<String> = bootstrap::mandatory_priority_levels()
        .into_iter()
        .chain(bootstrap::suggested_priority_levels())
        .map(|p| p.metadata.name)
        .collect();
    remove_unwanted::<PriorityLevelConfiguration>(registry, cache, &pl_names).await
}

/// What the ensurer does to a stored object (kube's ReviseIfNeeded): None when nothing.
fn revise<K: Configuration>(current: &K, bootstrap: &K, mandatory: bool) -> Option<K> {
    let annotation = api::flowcontrol::auto_update(current.meta());
    let auto_update =
        mandatory || annotation.unwrap_or_else(|| current.meta().generation.unwrap_or(0) == 1);
    let fix_annotation = annotation != Some(auto_update);
    let fix_spec = auto_update && !K::spec_equalish(bootstrap, current);
    if !fix_annotation && !fix_spec {
        return None;
    }
    let mut revised = current.clone();
    if fix_spec {
        revised.replace_spec(bootstrap);
    }
    if fix_annotation {
        revised
            .meta_mut()
            .annotations
            .insert(AUTO_UPDATE_ANNOTATION.into(), auto_update.to_string());
    }
    Some(revised)
}

async fn ensure_one<K: Configuration>(
    registry: &Registry,
    cache: &Cache,
    bootstrap: K,
    mandatory: bool,
) -> Result<(), ApiError> {
    let name = bootstrap.meta().name.clone();
    let current = match cache.get::<K>("", &name) {
        Some(c) => c,
        None => match registry.get::<K>("", &name).await {
            Ok(c) => c,
            Err(e) if e.code() == 404 => match registry.create(bootstrap.clone(), None).await {
                Ok(_) => {
                    tracing::info!(kind = ?K::KIND, %name, "created an API Priority and Fairness object");
                    return Ok(());
                }
                Err(e) if e.code() == 409 => registry.get::<K>("", &name).await?,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        },
    };
    let Some(revised) = revise(&current, &bootstrap, mandatory) else {
        return Ok(());
    };
    match registry.update(revised, None, &name, Part::Main).await {
        Ok(_) => {
            tracing::info!(kind = ?K::KIND, %name, "updated an API Priority and Fairness object");
            Ok(())
        }
        // Changed meanwhile (or gone): looked at again on the next pass.
        Err(e) if e.code() == 409 || e.code() == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes objects annotated `apf.kubernetes.io/autoupdate-spec: true` that are not
/// bootstrap objects (kube's RemoveUnwantedObjects).
async fn remove_unwanted<K: Configuration>(
    registry: &Registry,
    cache: &Cache,
    wanted: &[String],
) -> Result<(), ApiError> {
    for obj in cache.list::<K>(None) {
        let name = &obj.meta().name;
        if wanted.contains(name) || api::flowcontrol::auto_update(obj.meta()) != Some(true) {
            continue;
        }
        match registry
            .delete::<K>("", name, DeleteOptions::default())
            .await
        {
            Ok(_) => {
                tracing::info!(kind = ?K::KIND, %name, "deleted an unwanted API Priority and Fairness object")
            }
            Err(e) if e.code() == 404 || e.code() == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes each FlowSchema's Dangling condition where it is not what it should be.
async fn write_conditions(registry: &Registry, cache: &Cache) {
    let levels: Vec<PriorityLevelConfiguration> = cache.list(None);
    for fs in cache.list::<FlowSchema>(None) {
        let Some(condition) = super::dangling_condition(&fs, &levels) else {
            continue;
        };
        let result = registry
            .mutate::<FlowSchema>("", &fs.metadata.name, Part::Status, move |f| {
                f.status.conditions.retain(|c| c.type_ != condition.type_);
                f.status.conditions.push(condition.clone());
                Ok(())
            })
            .await;
        if let Err(e) = result.map(|_| ()).or_else(ignore_gone) {
            tracing::warn!(flowschema = %fs.metadata.name, error = %e, "writing a FlowSchema's Dangling condition");
        }
    }
}

fn ignore_gone(e: ApiError) -> Result<(), ApiError> {
    if e.code() == 404 || e.code() == 409 {
        Ok(())
    } else {
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn with(
        annotation: Option<&str>,
        generation: i64,
        mut pl: PriorityLevelConfiguration,
    ) -> PriorityLevelConfiguration {
        pl.metadata.annotations = BTreeMap::new();
        if let Some(a) = annotation {
            pl.metadata
                .annotations
                .insert(AUTO_UPDATE_ANNOTATION.into(), a.into());
        }
        pl.metadata.generation = Some(generation);
        pl
    }

    fn suggested(name: &str) -> PriorityLevelConfiguration {
        bootstrap::suggested_priority_levels()
            .into_iter()
            .find(|p| p.metadata.name == name)
            .expect("suggested")
    }

    fn shares(pl: &PriorityLevelConfiguration) -> i32 {
        pl.shares()
    }

    #[test]
    fn suggested_objects_follow_their_annotation() {
        let boot = suggested("global-default");
        let mut changed = boot.clone();
        if let Some(l) = changed.spec.limited.as_mut() {
            l.nominal_concurrency_shares = Some(99);
        }
        // true: the spec is put back.
        let r = revise(&with(Some("true"), 3, changed.clone()), &boot, false).expect("revised");
        assert_eq!(shares(&r), 20);
        // false: left alone.
        assert!(revise(&with(Some("false"), 3, changed.clone()), &boot, false).is_none());
        // Missing at generation 1: updated, annotated true.
        let r = revise(&with(None, 1, changed.clone()), &boot, false).expect("revised");
        assert_eq!(shares(&r), 20);
        assert_eq!(r.metadata.annotations[AUTO_UPDATE_ANNOTATION], "true");
        // Missing after a change (generation 2): kept, annotated false.
        let r = revise(&with(None, 2, changed.clone()), &boot, false).expect("annotated");
        assert_eq!(shares(&r), 99);
        assert_eq!(r.metadata.annotations[AUTO_UPDATE_ANNOTATION], "false");
        // Not a boolean: as if missing.
        let r = revise(&with(Some("maybe"), 1, boot.clone()), &boot, false).expect("annotated");
        assert_eq!(r.metadata.annotations[AUTO_UPDATE_ANNOTATION], "true");
        // Up to date: nothing to do.
        assert!(revise(&with(Some("true"), 1, boot.clone()), &boot, false).is_none());
    }

    #[test]
    fn mandatory_objects_are_always_put_back() {
        let boot = bootstrap::mandatory_priority_levels().remove(0);
        let mut changed = with(Some("false"), 4, boot.clone());
        if let Some(l) = changed.spec.limited.as_mut() {
            l.nominal_concurrency_shares = Some(50);
        }
        let r = revise(&changed, &boot, true).expect("revised");
        assert_eq!(shares(&r), 5);
        assert_eq!(r.metadata.annotations[AUTO_UPDATE_ANNOTATION], "true");
        // The exempt level's own section is the admin's.
        let exempt = bootstrap::mandatory_priority_levels().remove(1);
        let mut tuned = with(Some("true"), 2, exempt.clone());
        tuned.spec.exempt = Some(api::flowcontrol::ExemptPriorityLevelConfiguration {
            nominal_concurrency_shares: Some(10),
            lendable_percent: Some(5),
        });
        assert!(revise(&tuned, &exempt, true).is_none());
        let mut schema = bootstrap::mandatory_flow_schemas().remove(1);
        let boot_schema = schema.clone();
        schema.spec.matching_precedence = 9999;
        let r = revise(&schema, &boot_schema, true).expect("revised");
        assert_eq!(r.spec.matching_precedence, 10_000);
    }
}
