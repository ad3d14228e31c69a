//! The local APIServices, kept as kube-apiserver's autoregister controller keeps them (with
//! the CRD registration controller's wishes): one per built-in group version, synced once
//! per start (`automanaged: onstart`), and one per served version of a custom resource group,
//! kept continuously (`automanaged: true`) and deleted when no definition serves it.
//!
//! For each name that is wished for or exists (kube's table, in its order):
//!
//! | current \ desired                 | none      | on start      | always  |
//! |-----------------------------------|-----------|---------------|---------|
//! | missing                           | -         | create once   | create  |
//! | not automanaged                   | -         | -             | -       |
//! | on start, made after this start   | -         | -             | -       |
//! | on start, there at this start     | delete once | update once | update once |
//! | always                            | delete    | update once   | update  |
//!
//! One deviation: an automanaged APIService that was given a service (an extension API
//! server took over the group version, such as metrics-server's `v1beta1.metrics.k8s.io`
//! over skiff's own resource metrics) is not set back to local at a restart.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use api::apiextensions::CustomResourceDefinition;
use api::apiregistration::{
    APIService, APIServiceSpec, AUTOMANAGED_LABEL, MANAGE_CONTINUOUSLY, MANAGE_ON_START,
};
use api::meta::{DeleteOptions, ObjectMeta};
use api::Kind;

use crate::error::ApiError;
use crate::machinery::Context;
use crate::registry::{Part, Registry};
use crate::resources::{priority, Table};

/// The APIServices of the group versions every server serves: the built-in table's, but
/// the aggregator's own group (kube-apiserver registers none for it).
pub fn builtin(table: &Table) -> Vec<APIService> {
    let mut out = Vec::new();
    let core = table
        .group("")
        .map(|g| g.versions.clone())
        .unwrap_or_default();
    for v in core {
        out.push(wanted("", &v, MANAGE_ON_START, priority("", &v)));
    }
    for g in table.groups() {
        if &*g.name == api::apiregistration::GROUP {
            continue;
        }
        for v in &g.versions {
            out.push(wanted(&g.name, v, MANAGE_ON_START, priority(&g.name, v)));
        }
    }
    out
}

/// The APIServices the custom resource definitions ask for: each served version of their
/// groups, with the CRD registration's priorities (1000, 100), unless a built-in one has
/// the name.
pub fn for_crds(crds: &[CustomResourceDefinition], builtin: &[APIService]) -> Vec<APIService> {
    let taken: HashSet<&str> = builtin.iter().map(|s| s.metadata.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for crd in crds {
        for v in crd.spec.versions.iter().filter(|v| v.served) {
            let name = APIService::name_for(&crd.spec.group, &v.name);
            if taken.contains(name.as_str()) || !seen.insert(name) {
                continue;
            }
            out.push(wanted(
                &crd.spec.group,
                &v.name,
                MANAGE_CONTINUOUSLY,
                crate::resources::Priority {
                    group: 1000,
                    version: 100,
                },
            ));
        }
    }
    out
}

fn wanted(
    group: &str,
    version: &str,
    manage: &str,
    priority: crate::resources::Priority,
) -> APIService {
    APIService {
        metadata: ObjectMeta {
            name: APIService::name_for(group, version),
            labels: [(AUTOMANAGED_LABEL.to_string(), manage.to_string())].into(),
            ..Default::default()
        },
        spec: APIServiceSpec {
            service: None,
            group: (!group.is_empty()).then(|| group.to_string()),
            version: Some(version.to_string()),
            insecure_skip_tls_verify: None,
            ca_bundle: None,
            group_priority_minimum: priority.group,
            version_priority: priority.version,
        },
        status: Default::default(),
    }
}

/// Runs the registration on the cluster's controllers (the leader).
pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

async fn run(ctx: Context) {
    let registry = ctx.registry.with_manager("kube-apiserver");
    let cache = ctx.informers.cache().clone();
    let changes = ctx
        .informers
        .subscribe(&[Kind::APIService, Kind::CustomResourceDefinition]);
    let builtin = builtin(&Table::builtin());
    let mut state = State {
        at_start: cache
            .list::<APIService>(None)
            .into_iter()
            .map(|s| s.metadata.name)
            .collect(),
        synced: HashSet::new(),
    };
    loop {
        let crds: Vec<CustomResourceDefinition> = cache.list(None);
        let mut desired: BTreeMap<String, APIService> = builtin
            .iter()
            .cloned()
            .chain(for_crds(&crds, &builtin))
            .map(|s| (s.metadata.name.clone(), s))
            .collect();
        let current: BTreeMap<String, APIService> = cache
            .list::<APIService>(None)
            .into_iter()
            .map(|s| (s.metadata.name.clone(), s))
            .collect();
        let names: BTreeSet<String> = desired.keys().chain(current.keys()).cloned().collect();
        let mut failed = false;
        for name in names {
            let want = desired.remove(&name);
            let have = current.get(&name);
            match state.check(&registry, &name, want, have).await {
                Ok(()) => {
                    state.synced.insert(name);
                }
                Err(e) => {
                    if e.code() != 409 {
                        tracing::warn!(apiservice = %name, error = %e, "registering the APIService");
                    }
                    failed = true;
                }
            }
        }
        let changed = crate::machinery::informer::Informers::next_that_matters(&changes, |_| true);
        if failed {
            futures_lite::future::or(
                async {
                    changed.await;
                },
                async {
                    smol::Timer::after(Duration::from_secs(1)).await;
                },
            )
            .await;
        } else if !changed.await {
            return;
        }
    }
}

struct State {
    /// The APIServices that existed when the registration started.
    at_start: HashSet<String>,
    /// The names synced at least once since.
    synced: HashSet<String>,
}

fn manage(s: Option<&APIService>) -> Option<&str> {
    s.and_then(APIService::automanaged)
}

impl State {
    /// kube's `checkAPIService`, in its order.
    async fn check(
        &self,
        registry: &Registry,
        name: &str,
        desired: Option<APIService>,
        current: Option<&APIService>,
    ) -> Result<(), ApiError> {
        let synced = self.synced.contains(name);
        if desired.is_none() && current.is_none() {
            return Ok(());
        }
        // An on-start one is synced once per start.
        if manage(desired.as_ref()) == Some(MANAGE_ON_START) && synced {
            return Ok(());
        }
        let Some(current) = current else {
            let Some(desired) = desired else {
                return Ok(());
            };
            return match registry.create(desired, None).await {
                Ok(_) => Ok(()),
                // Written meanwhile (the cache is behind): the next pass looks again.
                Err(e) if e.code() == 409 => Ok(()),
                Err(e) => Err(e),
            };
        };
        match manage(Some(current)) {
            // Not ours to manage.
            None => return Ok(()),
            // Made after this start, or synced already.
            Some(MANAGE_ON_START) if !self.at_start.contains(name) || synced => return Ok(()),
            _ => {}
        }
        let Some(desired) = desired else {
            return match registry
                .delete::<APIService>("", name, DeleteOptions::default())
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if e.code() == 404 => Ok(()),
                Err(e) => Err(e),
            };
        };
        if current.spec == desired.spec {
            return Ok(());
        }
        // The deviation: an extension API server that took the group version over keeps it.
        if current.spec.service.is_some() && manage(Some(current)) == Some(MANAGE_ON_START) {
            return Ok(());
        }
        let spec = desired.spec;
        registry
            .mutate::<APIService>("", name, Part::Main, move |s| {
                s.spec = spec.clone();
                Ok(())
            })
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_group_versions_as_kube_apiserver_names_them() {
        let services = builtin(&Table::builtin());
        let names: Vec<&str> = services.iter().map(|s| s.metadata.name.as_str()).collect();
        for want in [
            "v1.",
            "v1.apps",
            "v2.autoscaling",
            "v1.autoscaling",
            "v1.events.k8s.io",
            "v1.authentication.k8s.io",
            "v1.admissionregistration.k8s.io",
            "v1beta1.metrics.k8s.io",
        ] {
            assert!(names.contains(&want), "{want} in {names:?}");
        }
        assert!(!names.iter().any(|n| n.ends_with("apiregistration.k8s.io")));
        let core = &services[0];
        assert_eq!(core.metadata.name, "v1.");
        assert_eq!(core.spec.group, None);
        assert_eq!(
            (core.spec.group_priority_minimum, core.spec.version_priority),
            (18000, 1)
        );
        assert_eq!(core.automanaged(), Some(MANAGE_ON_START));
        let mut v = core.clone();
        use api::object::Resource as _;
        v.set_defaults();
        assert!(v.validate().is_empty(), "{:?}", v.validate());
    }

    #[test]
    fn crds_ask_for_their_served_versions() {
        let crd: CustomResourceDefinition = api::codec::from_json(serde_json::json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true},
                                  {"name": "v1alpha1", "served": false, "storage": false}]}
        }))
        .expect("a CRD");
        let wanted = for_crds(&[crd], &builtin(&Table::builtin()));
        assert_eq!(wanted.len(), 1);
        assert_eq!(wanted[0].metadata.name, "v1.example.com");
        assert_eq!(wanted[0].automanaged(), Some(MANAGE_CONTINUOUSLY));
        assert_eq!(
            (
                wanted[0].spec.group_priority_minimum,
                wanted[0].spec.version_priority
            ),
            (1000, 100)
        );
    }
}
