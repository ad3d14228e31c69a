//! The ClusterRole aggregation controller (Kubernetes' clusterrole-aggregation): a
//! ClusterRole with an `aggregationRule` gets as its rules the union of the rules of every
//! other ClusterRole its selectors match, in name order, without repeats. It runs on every
//! ClusterRole change; chains (admin aggregates edit, which aggregates view) settle through
//! the changes the controller's own writes cause.

use api::rbac::{ClusterRole, PolicyRule};
use api::selector::Selector;
use api::Kind;

use crate::machinery::informer::Objects;
use crate::machinery::Context;
use crate::registry::Part;

/// The rules `role` should have, or None when it is not aggregated.
pub fn aggregated_rules(role: &ClusterRole, objects: &Objects) -> Option<Vec<PolicyRule>> {
    aggregate(role, objects.iter::<ClusterRole>(None))
}

/// [`aggregated_rules`] over the ClusterRoles `all`.
pub fn aggregate(
    role: &ClusterRole,
    all: impl IntoIterator<Item = ClusterRole>,
) -> Option<Vec<PolicyRule>> {
    let rule = role.aggregation_rule.as_ref()?;
    let selectors: Vec<Selector> = rule
        .cluster_role_selectors
        .iter()
        .filter_map(|s| Selector::from_label_selector(s).ok())
        .collect();
    let mut sources: Vec<ClusterRole> = all
        .into_iter()
        .filter(|other| other.metadata.name != role.metadata.name)
        .filter(|other| selectors.iter().any(|s| s.matches(&other.metadata.labels)))
        .collect();
    sources.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for r in sources.into_iter().flat_map(|s| s.rules) {
        if !rules.contains(&r) {
            rules.push(r);
        }
    }
    Some(rules)
}

/// Starts the controller.
pub fn start(ctx: &Context) {
    let changes = ctx.informers.subscribe(&[Kind::ClusterRole]);
    let ctx = ctx.clone();
    smol::spawn(async move {
        let registry = ctx
            .registry
            .with_manager("clusterrole-aggregation-controller");
        loop {
            let stale: Vec<(String, Vec<PolicyRule>)> = {
                let objects = ctx.informers.cache().read();
                objects
                    .iter::<ClusterRole>(None)
                    .filter_map(|role| {
                        let want = aggregated_rules(&role, &objects)?;
                        (want != role.rules).then(|| (role.metadata.name.clone(), want))
                    })
                    .collect()
            };
            for (name, rules) in stale {
                let result = registry
                    .mutate::<ClusterRole>("", &name, Part::Main, move |r| {
                        r.rules = rules.clone();
                        Ok(())
                    })
                    .await;
                if let Err(e) = result {
                    tracing::warn!(clusterrole = %name, "aggregating rules: {e}");
                }
            }
            if changes.recv().await.is_err() {
                return;
            }
            while changes.try_recv().is_ok() {}
        }
    })
    .detach();
}
