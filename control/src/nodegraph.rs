//! What a node may read, as Kubernetes' Node authorizer decides it: a node (an agent's
//! certificate, `system:node:NAME`) reads a Secret, a ConfigMap or a PersistentVolumeClaim
//! only when a pod bound to it uses the object (volumes, projected sources, environment,
//! `envFrom`, `imagePullSecrets`). skiff adds one edge: every node runs the ingress proxy,
//! which serves every Ingress of skiff's class, so every node may read the TLS Secrets those
//! Ingresses name (and no other Secret).
//!
//! The graph is kept from the informers' change feed, which carries whole objects (the
//! cache's own pods drop the environment and most volumes). A pod counts once it is bound
//! and until it is gone. A decision the graph denies is checked once more against the store
//! ([`NodeGraph::confirm`]): a node may ask for a new pod's Secret a moment before the
//! binding reaches the graph.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use api::core::{Pod, PodSpec};
use api::networking::{Ingress, IngressClass};
use api::{AnyObject, Kind};

use crate::machinery::informer::{Cache, Change, Informers};
use crate::store::{Store, StoreError};

/// The kinds whose reads by nodes the graph decides.
pub const KINDS: [Kind; 3] = [Kind::Secret, Kind::ConfigMap, Kind::PersistentVolumeClaim];

/// An object a pod uses: its kind (one of [`KINDS`]) and name, in the pod's namespace.
type Use = (Kind, Box<str>);
/// (kind, namespace, name).
type Target = (Kind, Box<str>, Box<str>);
/// An object's namespace and name.
type ObjectKey = (Box<str>, Box<str>);
/// A bound pod's node and what it uses.
type PodUses = (Arc<str>, Box<[Use]>);
/// An Ingress's class (None: the default) and the TLS Secrets it names.
type IngressTls = (Option<Box<str>>, Box<[Box<str>]>);

#[derive(Default)]
struct Graph {
    /// Each bound pod (by namespace and name): its node and what it uses.
    pods: HashMap<ObjectKey, PodUses>,
    /// By node: what its pods use, and by how many of them.
    by_node: HashMap<Arc<str>, HashMap<Target, u32>>,
    /// Each Ingress with TLS: its class (None: the default) and the Secrets it names.
    ingresses: HashMap<ObjectKey, IngressTls>,
}

impl Graph {
    fn remove_pod(&mut self, key: &ObjectKey) {
        let Some((node, uses)) = self.pods.remove(key) else {
            return;
        };
        if let Some(targets) = self.by_node.get_mut(&node) {
            for (kind, name) in uses.iter() {
                let t = (*kind, key.0.clone(), name.clone());
                if let Some(n) = targets.get_mut(&t) {
                    *n -= 1;
                    if *n == 0 {
                        targets.remove(&t);
                    }
                }
            }
            if targets.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    fn put_pod(&mut self, pod: &Pod) {
        let key: ObjectKey = (
            pod.metadata.namespace().into(),
            pod.metadata.name.as_str().into(),
        );
        self.remove_pod(&key);
        let Some(node) = pod.spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
            return;
        };
        let node: Arc<str> = match self.by_node.get_key_value(node) {
            Some((k, _)) => k.clone(),
            None => node.into(),
        };
        let uses = uses_of(&pod.spec);
        let targets = self.by_node.entry(node.clone()).or_default();
        for (kind, name) in uses.iter() {
            *targets
                .entry((*kind, key.0.clone(), name.clone()))
                .or_default() += 1;
        }
        self.pods.insert(key, (node, uses));
    }

    fn put_ingress(&mut self, ing: &Ingress) {
        let key: ObjectKey = (
            ing.metadata.namespace().into(),
            ing.metadata.name.as_str().into(),
        );
        let secrets: Box<[Box<str>]> = ing
            .spec
            .tls
            .iter()
            .filter_map(|t| t.secret_name.as_deref())
            .filter(|s| !s.is_empty())
            .map(Into::into)
            .collect();
        if secrets.is_empty() {
            self.ingresses.remove(&key);
        } else {
            let class = api::networking::class_of(ing).map(Into::into);
            self.ingresses.insert(key, (class, secrets));
        }
    }

    fn apply(&mut self, obj: &AnyObject, deleted: bool) {
        match obj {
            AnyObject::Pod(p) if deleted => self.remove_pod(&(
                p.metadata.namespace().into(),
                p.metadata.name.as_str().into(),
            )),
            AnyObject::Pod(p) => self.put_pod(p),
            AnyObject::Ingress(i) if deleted => {
                self.ingresses.remove(&(
                    i.metadata.namespace().into(),
                    i.metadata.name.as_str().into(),
                ));
            }
            AnyObject::Ingress(i) => self.put_ingress(i),
            _ => {}
        }
    }

    fn pod_uses(&self, node: &str, kind: Kind, ns: &str, name: &str) -> bool {
        self.by_node
            .get(node)
            .is_some_and(|t| t.contains_key(&(kind, ns.into(), name.into())))
    }
}

/// The Secrets, ConfigMaps and claims a pod spec uses.
fn uses_of(spec: &PodSpec) -> Box<[Use]> {
    let mut out: Vec<Use> = Vec::new();
    let mut add = |kind: Kind, name: Option<&str>| {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            if !out.iter().any(|(k, m)| *k == kind && &**m == n) {
                out.push((kind, n.into()));
            }
        }
    };
    for r in &spec.image_pull_secrets {
        add(Kind::Secret, r.name.as_deref());
    }
    for v in &spec.volumes {
        if let Some(s) = &v.secret {
            add(Kind::Secret, s.secret_name.as_deref());
        }
        if let Some(c) = &v.config_map {
            add(Kind::ConfigMap, c.name.as_deref());
        }
        for s in v.projected.iter().flat_map(|p| &p.sources) {
            if let Some(x) = &s.secret {
                add(Kind::Secret, x.name.as_deref());
            }
            if let Some(x) = &s.config_map {
                add(Kind::ConfigMap, x.name.as_deref());
            }
        }
        if let Some(c) = &v.persistent_volume_claim {
            add(Kind::PersistentVolumeClaim, Some(&c.claim_name));
        }
    }
    for c in spec.init_containers.iter().chain(&spec.containers) {
        for e in &c.env {
            if let Some(from) = &e.value_from {
                if let Some(r) = &from.secret_key_ref {
                    add(Kind::Secret, r.name.as_deref());
                }
                if let Some(r) = &from.config_map_key_ref {
                    add(Kind::ConfigMap, r.name.as_deref());
                }
            }
        }
        for e in &c.env_from {
            if let Some(r) = &e.secret_ref {
                add(Kind::Secret, r.name.as_deref());
            }
            if let Some(r) = &e.config_map_ref {
                add(Kind::ConfigMap, r.name.as_deref());
            }
        }
    }
    out.into_boxed_slice()
}

/// Whether skiff's ingress proxy serves Ingresses of `class` (None: the default class),
/// given the IngressClasses that exist.
fn served_by_skiff(class: Option<&str>, classes: &[IngressClass]) -> bool {
    let class = match class {
        Some(c) => classes.iter().find(|x| x.metadata.name == c),
        None => classes
            .iter()
            .find(|c| api::networking::is_default_class(c)),
    };
    class.is_some_and(|c| c.spec.controller.as_deref() == Some(api::networking::SKIFF_CONTROLLER))
}

/// The node authorizer's graph, shared by every request.
#[derive(Default)]
pub struct NodeGraph {
    graph: RwLock<Graph>,
    /// False until the first build: nodes are refused until then (they retry).
    ready: AtomicBool,
    /// The informers' cache, for IngressClasses.
    cache: OnceLock<Cache>,
}

impl std::fmt::Debug for NodeGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeGraph").finish_non_exhaustive()
    }
}

impl NodeGraph {
    pub fn new() -> Arc<NodeGraph> {
        Arc::new(NodeGraph::default())
    }

    /// Builds the graph from the store and keeps it current from the informers' changes.
    /// The cache must hold IngressClasses.
    pub fn start(self: &Arc<Self>, informers: &Arc<Informers>) {
        let changes = informers.subscribe(&[Kind::Pod, Kind::Ingress]);
        let _ = self.cache.set(informers.cache().clone());
        let this = self.clone();
        let store = informers.store().clone();
        smol::spawn(async move {
            loop {
                match this.rebuild(&store).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!("node authorizer: listing pods: {e}; trying again");
                        smol::Timer::after(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
            while let Ok(change) = changes.recv().await {
                match &change {
                    Change::Resync => {
                        if let Err(e) = this.rebuild(&store).await {
                            tracing::warn!("node authorizer: relisting: {e}");
                        }
                    }
                    Change::Deleted(o) => this.write().apply(o, true),
                    Change::Added { new, .. } | Change::Modified { new, .. } => {
                        this.write().apply(new, false)
                    }
                }
            }
        })
        .detach();
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Graph> {
        self.graph.write().unwrap_or_else(|e| e.into_inner())
    }

    async fn rebuild(&self, store: &Store) -> Result<(), StoreError> {
        let mut graph = Graph::default();
        for kind in [Kind::Pod, Kind::Ingress] {
            let (items, _) = store.list(kind, None).await?;
            for o in &items {
                graph.apply(o, false);
            }
        }
        *self.write() = graph;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether `node` may read the object: a pod bound to it uses it, or (Secrets) an Ingress
    /// skiff's proxy serves names it.
    pub fn may_read(&self, node: &str, kind: Kind, ns: &str, name: &str) -> bool {
        if !self.ready.load(Ordering::Acquire) {
            return false;
        }
        let graph = self.graph.read().unwrap_or_else(|e| e.into_inner());
        if graph.pod_uses(node, kind, ns, name) {
            return true;
        }
        if kind != Kind::Secret {
            return false;
        }
        let classes: Vec<IngressClass> = self.cache.get().map(|c| c.list(None)).unwrap_or_default();
        graph
            .ingresses
            .iter()
            .filter(|((ing_ns, _), _)| &**ing_ns == ns)
            .any(|(_, (class, secrets))| {
                secrets.iter().any(|s| &**s == name) && served_by_skiff(class.as_deref(), &classes)
            })
    }

    /// [`NodeGraph::may_read`], and when it says no, the store's pods of the namespace (a
    /// pod just bound may not have reached the graph yet).
    pub async fn confirm(
        &self,
        store: &Store,
        node: &str,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<bool, StoreError> {
        if self.may_read(node, kind, ns, name) {
            return Ok(true);
        }
        let (pods, _) = store.list(Kind::Pod, Some(ns)).await?;
        Ok(pods.iter().any(|o| match o {
            AnyObject::Pod(p) => {
                p.spec.node_name.as_deref() == Some(node)
                    && uses_of(&p.spec)
                        .iter()
                        .any(|(k, n)| *k == kind && &**n == name)
            }
            _ => false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{
        Container, EnvFromReference, EnvFromSource, EnvVar, EnvVarSource, KeySelector,
        LocalObjectReference, SecretVolumeSource, Volume,
    };

    fn pod(name: &str, node: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = Some("ns".into());
        p.spec.node_name = node.map(String::from);
        p.spec.image_pull_secrets.push(LocalObjectReference {
            name: Some("pull".into()),
        });
        p.spec.volumes.push(Volume {
            name: "v".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some("vol".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        p.spec.containers.push(Container {
            name: "c".into(),
            env: vec![EnvVar {
                name: "X".into(),
                value_from: Some(EnvVarSource {
                    config_map_key_ref: Some(KeySelector {
                        name: Some("cm".into()),
                        key: "k".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            env_from: vec![EnvFromSource {
                secret_ref: Some(EnvFromReference {
                    name: Some("from".into()),
                    optional: None,
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn ready(g: Graph) -> NodeGraph {
        let n = NodeGraph::default();
        *n.write() = g;
        n.ready.store(true, Ordering::Release);
        n
    }

    #[test]
    fn a_node_reads_what_its_pods_use_and_nothing_else() {
        let mut g = Graph::default();
        g.apply(&AnyObject::Pod(pod("a", Some("n1"))), false);
        g.apply(&AnyObject::Pod(pod("b", Some("n1"))), false);
        g.apply(&AnyObject::Pod(pod("pending", None)), false);
        let graph = ready(g);
        for (kind, name) in [
            (Kind::Secret, "pull"),
            (Kind::Secret, "vol"),
            (Kind::Secret, "from"),
            (Kind::ConfigMap, "cm"),
        ] {
            assert!(graph.may_read("n1", kind, "ns", name), "{name}");
            assert!(!graph.may_read("n2", kind, "ns", name), "{name}");
            assert!(!graph.may_read("n1", kind, "other", name), "{name}");
        }
        assert!(!graph.may_read("n1", Kind::ConfigMap, "ns", "vol"));
        assert!(!graph.may_read("n1", Kind::Secret, "ns", "elsewhere"));
        // One pod goes: the other still uses the same objects; then both go.
        graph
            .write()
            .apply(&AnyObject::Pod(pod("a", Some("n1"))), true);
        assert!(graph.may_read("n1", Kind::Secret, "ns", "vol"));
        graph
            .write()
            .apply(&AnyObject::Pod(pod("b", Some("n1"))), true);
        assert!(!graph.may_read("n1", Kind::Secret, "ns", "vol"));
        assert!(graph.graph.read().unwrap().by_node.is_empty());
        // A pod moved (rebound) counts on its new node only.
        graph
            .write()
            .apply(&AnyObject::Pod(pod("c", Some("n1"))), false);
        graph
            .write()
            .apply(&AnyObject::Pod(pod("c", Some("n2"))), false);
        assert!(!graph.may_read("n1", Kind::Secret, "ns", "vol"));
        assert!(graph.may_read("n2", Kind::Secret, "ns", "vol"));
    }

    #[test]
    fn only_skiff_served_ingresses_open_their_tls_secrets() {
        let skiff = api::networking::skiff_default_class();
        let mut other = IngressClass::default();
        other.metadata.name = "nginx".into();
        other.spec.controller = Some("k8s.io/ingress-nginx".into());
        let classes = [skiff.clone(), other];
        assert!(served_by_skiff(Some(&skiff.metadata.name), &classes));
        assert!(served_by_skiff(None, &classes));
        assert!(!served_by_skiff(Some("nginx"), &classes));
        assert!(!served_by_skiff(Some("missing"), &classes));
    }
}
