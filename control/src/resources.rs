//! The table of resources the API serves: one entry per resource (the built-in kinds, the
//! reviews, the resource metrics and, later, custom resources), each with its names, scope,
//! versions, verbs and subresources, and where its objects live. Routing and discovery read
//! only this table (docs/design/resources.md §3).
//!
//! The table is immutable and shared: a change (a custom resource established or removed)
//! builds a new one and swaps it in whole, so a request takes one snapshot and never holds a
//! lock across an await.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use api::Kind;

/// A resource's identity inside this process. The built-in kinds take the ids
/// `0..Kind::ALL.len()` in `Kind` order; other resources take the next free ids, never reused
/// while the process lives. Nothing persisted holds an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(u32);

impl ResourceId {
    /// The built-in kind this id stands for.
    pub fn kind(self) -> Option<Kind> {
        Kind::ALL.get(self.0 as usize).copied()
    }

    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl From<Kind> for ResourceId {
    fn from(kind: Kind) -> ResourceId {
        // `Kind::ALL` lists the variants in declaration order.
        ResourceId(kind as u32)
    }
}

/// Where a resource's requests are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// A built-in kind in the store, with its typed model.
    Builtin(Kind),
    /// An access or token review (authorization.k8s.io, authentication.k8s.io): created and
    /// answered, never stored.
    Review,
    /// metrics.k8s.io's NodeMetrics and PodMetrics, computed from the nodes' summaries.
    Metrics,
}

/// A version a resource is served at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub name: Arc<str>,
    /// Objects are stored at this version (exactly one per resource).
    pub storage: bool,
}

/// A subresource as discovery lists it (`pods/log`, `deployments/scale`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subresource {
    pub name: Arc<str>,
    pub kind: Arc<str>,
    /// The group and version of the kind it speaks, when not the resource's own
    /// (`pods/eviction` speaks policy/v1 Eviction).
    pub group_version: Option<(Arc<str>, Arc<str>)>,
    pub verbs: &'static [&'static str],
}

/// One resource of the table.
#[derive(Clone, Debug)]
pub struct Entry {
    pub id: ResourceId,
    /// "" for the core group.
    pub group: Arc<str>,
    /// The storage version first, then the other served versions.
    pub versions: Vec<Version>,
    pub kind: Arc<str>,
    pub plural: Arc<str>,
    pub singular: Arc<str>,
    pub short_names: Vec<Arc<str>>,
    pub categories: Vec<Arc<str>>,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub subresources: Vec<Subresource>,
    pub storage: Storage,
}

impl Entry {
    /// Whether the resource is served at `version`.
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| &*v.name == version)
    }

    /// The version objects are stored at.
    pub fn storage_version(&self) -> &str {
        self.versions
            .iter()
            .find(|v| v.storage)
            .map_or("", |v| &v.name)
    }

    /// The subresource named `name`.
    pub fn subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| &*s.name == name)
    }

    /// The built-in kind, for resources that have one.
    pub fn builtin(&self) -> Option<Kind> {
        match self.storage {
            Storage::Builtin(kind) => Some(kind),
            _ => None,
        }
    }
}

/// A named API group with its versions, the preferred one first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub name: Arc<str>,
    pub versions: Vec<Arc<str>>,
}

/// An immutable snapshot of every resource served.
#[derive(Debug)]
pub struct Table {
    /// Indexed by id; `None` for ids of resources gone.
    entries: Vec<Option<Arc<Entry>>>,
    /// group → plural → id.
    by_plural: HashMap<Arc<str>, HashMap<Arc<str>, ResourceId>>,
    /// The named groups in discovery order, then the core group's versions.
    groups: Vec<Group>,
}

/// The verbs of a stored resource.
pub const STORED_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];

impl Table {
    /// The table of what every server serves: the built-in kinds, the reviews and the
    /// resource metrics.
    pub fn builtin() -> Table {
        let mut entries: Vec<Entry> = Kind::ALL.iter().map(|k| builtin_entry(*k)).collect();
        let mut next = entries.len() as u32;
        let mut push = |mut e: Entry| {
            e.id = ResourceId(next);
            next += 1;
            entries.push(e);
        };
        // authentication.k8s.io comes before authorization.k8s.io in `/apis`.
        for group in [
            crate::http::route::AUTHENTICATION_GROUP,
            crate::http::route::AUTHORIZATION_GROUP,
        ] {
            for (g, plural, namespaced) in crate::http::review::PLURALS {
                if *g == group {
                    let kind = crate::http::review::kind_of(plural);
                    push(simple(
                        group,
                        "v1",
                        kind,
                        plural,
                        &kind.to_ascii_lowercase(),
                        *namespaced,
                        &["create"],
                        Storage::Review,
                    ));
                }
            }
        }
        let metrics = crate::http::route::METRICS_GROUP;
        let version = crate::http::route::METRICS_VERSION;
        for (kind, plural, namespaced) in [
            ("NodeMetrics", "nodes", false),
            ("PodMetrics", "pods", true),
        ] {
            push(simple(
                metrics,
                version,
                kind,
                plural,
                "",
                namespaced,
                &["get", "list"],
                Storage::Metrics,
            ));
        }
        Table::from_entries(entries)
    }

    fn from_entries(entries: Vec<Entry>) -> Table {
        let mut by_plural: HashMap<Arc<str>, HashMap<Arc<str>, ResourceId>> = HashMap::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut core = Group {
            name: "".into(),
            versions: Vec::new(),
        };
        for e in &entries {
            by_plural
                .entry(e.group.clone())
                .or_default()
                .insert(e.plural.clone(), e.id);
            let group = if e.group.is_empty() {
                &mut core
            } else if let Some(g) = groups.iter_mut().find(|g| g.name == e.group) {
                g
            } else {
                groups.push(Group {
                    name: e.group.clone(),
                    versions: Vec::new(),
                });
                groups.last_mut().expect("just pushed")
            };
            for v in &e.versions {
                if !group.versions.contains(&v.name) {
                    group.versions.push(v.name.clone());
                }
            }
        }
        groups.push(core);
        let mut slots: Vec<Option<Arc<Entry>>> = Vec::new();
        for e in entries {
            let i = e.id.index();
            if slots.len() <= i {
                slots.resize(i + 1, None);
            }
            slots[i] = Some(Arc::new(e));
        }
        Table {
            entries: slots,
            by_plural,
            groups,
        }
    }

    pub fn get(&self, id: ResourceId) -> Option<&Arc<Entry>> {
        self.entries.get(id.index()).and_then(Option::as_ref)
    }

    /// The entry of a built-in kind (always present).
    pub fn of_kind(&self, kind: Kind) -> &Arc<Entry> {
        self.get(kind.into())
            .expect("every built-in kind has an entry")
    }

    /// The resource `plural` of `group` ("" for core), at any version.
    pub fn by_plural(&self, group: &str, plural: &str) -> Option<&Arc<Entry>> {
        self.by_plural
            .get(group)
            .and_then(|plurals| plurals.get(plural))
            .and_then(|id| self.get(*id))
    }

    /// Every resource, in discovery order.
    pub fn entries(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.entries.iter().flatten()
    }

    /// The named groups in discovery order.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| !g.name.is_empty())
    }

    /// A named group, or the core group for "".
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| &*g.name == name)
    }

    /// Whether `group` is served at `version`.
    pub fn serves(&self, group: &str, version: &str) -> bool {
        self.group(group)
            .is_some_and(|g| g.versions.iter().any(|v| &**v == version))
    }

    /// The resources of `group` served at `version`, in discovery order.
    pub fn at_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Entry>> + 'a {
        self.entries()
            .filter(move |e| &*e.group == group && e.serves(version))
    }
}

/// The resource table of one server: a snapshot read per request, swapped whole on change.
#[derive(Debug)]
pub struct Resources {
    table: RwLock<Arc<Table>>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources::new()
    }
}

impl Resources {
    pub fn new() -> Resources {
        Resources {
            table: RwLock::new(Arc::new(Table::builtin())),
        }
    }

    pub fn snapshot(&self) -> Arc<Table> {
        self.table
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[allow(clippy::too_many_arguments)]
fn simple(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    singular: &str,
    namespaced: bool,
    verbs: &'static [&'static str],
    storage: Storage,
) -> Entry {
    Entry {
        id: ResourceId(u32::MAX),
        group: group.into(),
        versions: vec![Version {
            name: version.into(),
            storage: true,
        }],
        kind: kind.into(),
        plural: plural.into(),
        singular: singular.into(),
        short_names: Vec::new(),
        categories: Vec::new(),
        namespaced,
        verbs,
        subresources: Vec::new(),
        storage,
    }
}

fn sub(name: &str, kind: &str, verbs: &'static [&'static str]) -> Subresource {
    Subresource {
        name: name.into(),
        kind: kind.into(),
        group_version: None,
        verbs,
    }
}

fn sub_of(
    name: &str,
    kind: &str,
    group: &str,
    version: &str,
    verbs: &'static [&'static str],
) -> Subresource {
    Subresource {
        group_version: Some((group.into(), version.into())),
        ..sub(name, kind, verbs)
    }
}

fn builtin_entry(kind: Kind) -> Entry {
    let i = kind.info();
    let mut versions = vec![Version {
        name: i.version.into(),
        storage: true,
    }];
    if kind == Kind::HorizontalPodAutoscaler {
        // Also served at autoscaling/v1, converted at the edge (`autoscaling_v1`).
        versions.push(Version {
            name: api::autoscaling::LEGACY_VERSION.into(),
            storage: false,
        });
    }
    let mut subresources = Vec::new();
    if i.has_status {
        subresources.push(sub("status", i.kind, GET_PATCH_UPDATE));
    }
    match kind {
        Kind::Pod => {
            subresources.push(sub("binding", "Binding", &["create"]));
            // As Kubernetes lists them: kind PodExecOptions etc., get and create.
            subresources.push(sub("attach", "PodAttachOptions", &["create", "get"]));
            subresources.push(sub("exec", "PodExecOptions", &["create", "get"]));
            subresources.push(sub(
                "portforward",
                "PodPortForwardOptions",
                &["create", "get"],
            ));
            subresources.push(sub("log", "Pod", &["get"]));
            // kubectl drain evicts only when this entry names Eviction's group and version;
            // without them it deletes the pods.
            subresources.push(sub_of(
                "eviction",
                "Eviction",
                api::policy::GROUP,
                "v1",
                &["create"],
            ));
        }
        Kind::CertificateSigningRequest => {
            subresources.push(sub(
                "approval",
                "CertificateSigningRequest",
                GET_PATCH_UPDATE,
            ));
        }
        Kind::ServiceAccount => {
            subresources.push(sub_of(
                "token",
                "TokenRequest",
                crate::http::route::AUTHENTICATION_GROUP,
                "v1",
                &["create"],
            ));
        }
        Kind::Namespace => subresources.push(sub("finalize", "Namespace", &["update"])),
        Kind::Deployment | Kind::ReplicaSet | Kind::ReplicationController | Kind::StatefulSet => {
            subresources.push(sub_of(
                "scale",
                "Scale",
                "autoscaling",
                "v1",
                GET_PATCH_UPDATE,
            ));
        }
        _ => {}
    }
    Entry {
        id: kind.into(),
        group: i.group.into(),
        versions,
        kind: i.kind.into(),
        plural: i.plural.into(),
        singular: i.singular.into(),
        short_names: i.short_names.iter().map(|s| Arc::from(*s)).collect(),
        categories: i.categories.iter().map(|s| Arc::from(*s)).collect(),
        namespaced: i.namespaced,
        verbs: STORED_VERBS,
        subresources,
        storage: Storage::Builtin(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_ids_are_the_kinds() {
        let t = Table::builtin();
        for (i, k) in Kind::ALL.iter().enumerate() {
            let id = ResourceId::from(*k);
            assert_eq!(id.index(), i);
            assert_eq!(id.kind(), Some(*k));
            assert_eq!(t.of_kind(*k).builtin(), Some(*k));
            assert_eq!(&*t.of_kind(*k).plural, k.info().plural);
        }
        let reviews = t.by_plural("authorization.k8s.io", "subjectaccessreviews");
        assert!(reviews.is_some_and(|e| e.id.kind().is_none() && e.storage == Storage::Review));
    }

    #[test]
    fn groups_and_versions() {
        let t = Table::builtin();
        let autoscaling = t.group("autoscaling").expect("autoscaling");
        assert_eq!(autoscaling.versions, [Arc::from("v2"), Arc::from("v1")]);
        assert!(t.serves("", "v1"));
        assert!(t.serves("metrics.k8s.io", "v1beta1"));
        assert!(!t.serves("apps", "v2"));
        let names: Vec<&str> = t.groups().map(|g| &*g.name).collect();
        assert_eq!(names.first(), Some(&"apps"));
        assert_eq!(names.last(), Some(&"metrics.k8s.io"));
        let authn = names.iter().position(|g| *g == "authentication.k8s.io");
        let authz = names.iter().position(|g| *g == "authorization.k8s.io");
        assert!(authn < authz);
        assert!(!names.contains(&""));
    }
}
