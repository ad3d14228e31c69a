//! The table of resources the API serves: one entry per resource (the built-in kinds, the
//! reviews, the resource metrics and, later, custom resources), each with its names, scope,
//! versions, verbs and subresources, and where its objects live. Routing and discovery read
//! only this table (docs/design/resources.md §3).
//!
//! The table is immutable and shared: a change (a custom resource established or removed)
//! builds a new one and swaps it in whole, so a request takes one snapshot and never holds a
//! lock across an await.

use std::cmp::{Ordering, Reverse};
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
        // Built-in kinds are numbered densely from 0; custom ones take the ids after the
        // built-in table's entries (`CUSTOM_IDS`), in the order they were first defined.
        match kind.custom_ordinal() {
            None => ResourceId(kind.index() as u32),
            Some(i) => ResourceId(CUSTOM_IDS + i as u32),
        }
    }
}

/// The first id of a custom resource: past every entry of the built-in table.
const CUSTOM_IDS: u32 = 1024;

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
    /// A custom resource's conversion webhook; None: versions differ only in `apiVersion`
    /// (built-in kinds convert in code, at the edge).
    pub conversion: Option<Arc<crate::crd::Converter>>,
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

/// A named API group with its versions, the preferred one first: in kube-aggregator's order,
/// by the versions' APIService `versionPriority` (highest first), then newest first
/// ([`compare_versions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub name: Arc<str>,
    pub versions: Vec<Arc<str>>,
    /// The APIService `groupPriorityMinimum` of the group (the highest of its versions'):
    /// discovery lists groups by it, highest first ([`priority`]).
    pub priority: i32,
}

/// An APIService's priorities, as kube-apiserver registers them for the group versions it
/// serves: `group` (`groupPriorityMinimum`) orders groups, highest first; `version`
/// (`versionPriority`) orders the versions within a group, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    pub group: i32,
    pub version: i32,
}

/// The priorities of a group version: kube-apiserver's for its built-in groups (kubernetes'
/// `DefaultGenericAPIServicePriorities` in pkg/controlplane/apiserver/aggregator.go merged
/// with the kube-specific `apiVersionPriorities` of cmd/kube-apiserver/app/aggregator.go; the
/// GA groups' have not changed for many releases, the alpha and beta ones are as of a release
/// after 1.32, e.g. resource.k8s.io), the aggregator's own group above all (kube-aggregator's
/// `APIRegistrationGroupPriority`), metrics-server's APIService for metrics.k8s.io, and what
/// kube-aggregator's CRD registration gives any other group (custom resources).
pub fn priority(group: &str, version: &str) -> Priority {
    let (group_priority, version_priority) = match (group, version) {
        ("", "v1") => (18000, 1),
        ("apiregistration.k8s.io", _) => (20001, 15),
        ("apps", "v1") => (17800, 15),
        ("events.k8s.io", "v1") => (17750, 15),
        ("events.k8s.io", "v1beta1") => (17750, 5),
        ("authentication.k8s.io", "v1") => (17700, 15),
        ("authentication.k8s.io", "v1beta1") => (17700, 9),
        ("authentication.k8s.io", "v1alpha1") => (17700, 1),
        ("authorization.k8s.io", "v1") => (17600, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("autoscaling", "v1") => (17500, 15),
        ("autoscaling", "v2beta1") => (17500, 9),
        ("autoscaling", "v2beta2") => (17500, 1),
        ("batch", "v1") => (17400, 15),
        ("batch", "v1beta1" | "v2alpha1") => (17400, 9),
        ("certificates.k8s.io", "v1") => (17300, 15),
        ("certificates.k8s.io", "v1beta1") => (17300, 9),
        ("certificates.k8s.io", "v1alpha1") => (17300, 1),
        ("networking.k8s.io", "v1") => (17200, 15),
        ("networking.k8s.io", "v1beta1") => (17200, 9),
        ("policy", "v1") => (17100, 15),
        ("policy", "v1beta1") => (17100, 9),
        ("rbac.authorization.k8s.io", "v1") => (17000, 15),
        ("storage.k8s.io", "v1") => (16800, 15),
        ("storage.k8s.io", "v1beta1") => (16800, 9),
        ("storage.k8s.io", "v1alpha1") => (16800, 1),
        ("apiextensions.k8s.io", "v1") => (16700, 15),
        ("admissionregistration.k8s.io", "v1") => (16700, 15),
        ("admissionregistration.k8s.io", "v1beta1") => (16700, 12),
        ("admissionregistration.k8s.io", "v1alpha1") => (16700, 9),
        ("scheduling.k8s.io", "v1") => (16600, 15),
        ("coordination.k8s.io", "v1") => (16500, 15),
        ("coordination.k8s.io", "v1beta1") => (16500, 13),
        ("coordination.k8s.io", "v1alpha2") => (16500, 12),
        ("node.k8s.io", "v1") => (16300, 15),
        ("node.k8s.io", "v1beta1") => (16300, 9),
        ("node.k8s.io", "v1alpha1") => (16300, 1),
        ("discovery.k8s.io", "v1") => (16200, 15),
        ("discovery.k8s.io", "v1beta1") => (16200, 12),
        ("flowcontrol.apiserver.k8s.io", "v1") => (16100, 21),
        ("flowcontrol.apiserver.k8s.io", "v1beta3") => (16100, 18),
        ("flowcontrol.apiserver.k8s.io", "v1beta2") => (16100, 15),
        ("flowcontrol.apiserver.k8s.io", "v1beta1") => (16100, 12),
        ("flowcontrol.apiserver.k8s.io", "v1alpha1") => (16100, 9),
        ("internal.apiserver.k8s.io", "v1alpha1") => (16000, 9),
        ("resource.k8s.io", "v1beta2") => (16200, 15),
        ("resource.k8s.io", "v1beta1") => (16200, 9),
        ("resource.k8s.io", "v1alpha3") => (16200, 1),
        ("storagemigration.k8s.io", _) => (15800, 9),
        // metrics-server's APIService v1beta1.metrics.k8s.io.
        ("metrics.k8s.io", _) => (100, 100),
        // kube-aggregator's CRD registration ("CRDs should have relatively low priority"),
        // and so any version not above.
        _ => (1000, 100),
    };
    Priority {
        group: group_priority,
        version: version_priority,
    }
}

/// Kubernetes' order of version names (apimachinery's `CompareKubeAwareVersionStrings`):
/// `Greater` for the newer. Kube-like names (`v<major>[alpha|beta<minor>]`) rank GA over beta
/// over alpha, then by major, then by minor; they are newer than any other name, and other
/// names are newer the earlier they sort alphabetically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match (kube_version(a), kube_version(b)) {
        (None, None) => b.cmp(a),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => x.cmp(&y),
    }
}

/// (stability: alpha 0, beta 1, GA 2; major; minor) of a kube-like version name.
fn kube_version(v: &str) -> Option<(u8, u64, u64)> {
    fn number(s: &str) -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Go's Atoi: an int64, so a longer number is no version.
        s.parse::<u64>().ok().filter(|n| *n <= i64::MAX as u64)
    }
    let rest = v.strip_prefix('v')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let major = number(&rest[..digits])?;
    let tail = &rest[digits..];
    if tail.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, minor) = if let Some(m) = tail.strip_prefix("alpha") {
        (0, m)
    } else if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else {
        return None;
    };
    Some((stability, major, number(minor)?))
}

/// A resource of an extension API server's group version, as its discovery
/// (`/apis/GROUP/VERSION`, an APIResourceList) lists it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RemoteResource {
    /// `widgets`, or `widgets/status` for a subresource.
    pub name: String,
    pub singular: String,
    pub namespaced: bool,
    pub kind: String,
    /// The group and version of the kind, when the list names them.
    pub group: Option<String>,
    pub version: Option<String>,
    pub verbs: Vec<String>,
    pub short_names: Vec<Arc<str>>,
    pub categories: Vec<Arc<str>>,
}

/// A group version an extension API server serves (a non-local APIService): requests under
/// `/apis/GROUP/VERSION` go to it (`crate::aggregator`), discovery lists it with its
/// APIService's priorities and the resources it last listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    pub group: Arc<str>,
    pub version: Arc<str>,
    pub priority: Priority,
    /// What the backend's discovery listed; None while it is unknown or failing (the
    /// aggregated document then shows the version as Stale, without resources).
    pub resources: Option<Arc<Vec<RemoteResource>>>,
}

/// An immutable snapshot of every resource served.
#[derive(Debug)]
pub struct Table {
    /// Indexed by id; `None` for ids of resources gone.
    entries: Vec<Option<Arc<Entry>>>,
    /// group → plural → id.
    by_plural: HashMap<Arc<str>, HashMap<Arc<str>, ResourceId>>,
    /// The named groups in discovery order (as kube-apiserver's aggregated discovery lists
    /// them: by priority, highest first, then by name), then the core group.
    groups: Vec<Group>,
    /// The group versions served by extension API servers, which take the place of any
    /// local one of the same group version.
    remote: Vec<Remote>,
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
        Table::with_custom(Vec::new())
    }

    /// The built-in table and the entries of established custom resources.
    pub fn with_custom(custom: Vec<Entry>) -> Table {
        Table::with_parts(custom, Vec::new())
    }

    /// The built-in table, the entries of established custom resources and the group
    /// versions of extension API servers.
    pub fn with_parts(custom: Vec<Entry>, remote: Vec<Remote>) -> Table {
        let mut entries: Vec<Entry> = Kind::ALL.iter().map(|k| builtin_entry(*k)).collect();
        let mut next = entries.len() as u32;
        let mut push = |mut e: Entry| {
            e.id = ResourceId(next);
            next += 1;
            entries.push(e);
        };
        // Where a group is listed comes from its priority (`priority`), not from this order.
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
        // events.k8s.io/v1 Events: the core Events' storage under other field names
        // (converted at the edge, `http/events_v1.rs`), as kube-apiserver serves them.
        push(simple(
            crate::http::events_v1::GROUP,
            "v1",
            "Event",
            "events",
            "event",
            true,
            STORED_VERBS,
            Storage::Builtin(Kind::Event),
        ));
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
        entries.extend(custom);
        Table::from_entries(entries, remote)
    }

    fn from_entries(entries: Vec<Entry>, remote: Vec<Remote>) -> Table {
        let shadowed = |group: &str, version: &str| {
            remote
                .iter()
                .any(|r| &*r.group == group && &*r.version == version)
        };
        let mut by_plural: HashMap<Arc<str>, HashMap<Arc<str>, ResourceId>> = HashMap::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut core = Group {
            name: "".into(),
            versions: Vec::new(),
            priority: 0,
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
                    priority: 0,
                });
                groups.last_mut().expect("just pushed")
            };
            for v in &e.versions {
                if !group.versions.contains(&v.name) && !shadowed(&e.group, &v.name) {
                    group.versions.push(v.name.clone());
                }
            }
        }
        for r in &remote {
            let group = if let Some(g) = groups.iter_mut().find(|g| g.name == r.group) {
                g
            } else {
                groups.push(Group {
                    name: r.group.clone(),
                    versions: Vec::new(),
                    priority: 0,
                });
                groups.last_mut().expect("just pushed")
            };
            if !group.versions.contains(&r.version) {
                group.versions.push(r.version.clone());
            }
        }
        // A group's local versions may all be shadowed by remote ones of other names; one
        // left without versions is not served.
        groups.retain(|g| !g.versions.is_empty());
        let priority_of = |group: &str, version: &str| {
            remote
                .iter()
                .find(|r| &*r.group == group && &*r.version == version)
                .map_or_else(|| priority(group, version), |r| r.priority)
        };
        for g in groups.iter_mut().chain(std::iter::once(&mut core)) {
            // kube's aggregated discovery: a group's priority is the highest of its versions'.
            g.priority = g
                .versions
                .iter()
                .map(|v| priority_of(&g.name, v).group)
                .max()
                .unwrap_or(0);
            g.versions.sort_by(|a, b| {
                let (pa, pb) = (
                    priority_of(&g.name, a).version,
                    priority_of(&g.name, b).version,
                );
                pb.cmp(&pa).then_with(|| compare_versions(b, a))
            });
        }
        groups.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| a.name.cmp(&b.name))
        });
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
            remote,
        }
    }

    /// The extension API server's group version `group`/`version`, if one serves it.
    pub fn remote(&self, group: &str, version: &str) -> Option<&Remote> {
        self.remote
            .iter()
            .find(|r| &*r.group == group && &*r.version == version)
    }

    /// Every group version extension API servers serve.
    pub fn remotes(&self) -> &[Remote] {
        &self.remote
    }

    /// The APIService priorities of a group version: an extension API server's own, else
    /// the built-in ones ([`priority`]).
    pub fn priority_of(&self, group: &str, version: &str) -> Priority {
        self.remote(group, version)
            .map_or_else(|| priority(group, version), |r| r.priority)
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

    /// The named groups in discovery order: by priority, highest first, then by name, as
    /// kube-apiserver's aggregated discovery (`apidiscovery.k8s.io/v2`) lists them.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| !g.name.is_empty())
    }

    /// The named groups as kube-aggregator's `/apis` (APIGroupList) lists them: it sorts the
    /// APIServices (one per group version, named `<version>.<group>`) by group priority,
    /// highest first, then by name, and lists each group where its first APIService falls.
    /// The same order as [`Table::groups`] but for ties of priority.
    pub fn legacy_groups(&self) -> Vec<&Group> {
        let mut groups: Vec<&Group> = self.groups().collect();
        groups.sort_by_cached_key(|g| {
            g.versions
                .iter()
                .map(|v| {
                    (
                        Reverse(self.priority_of(&g.name, v).group),
                        format!("{v}.{}", g.name),
                    )
                })
                .min()
        });
        groups
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

    /// The resources of `group` served here at `version`, in discovery order (none for a
    /// group version an extension API server serves).
    pub fn at_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Entry>> + 'a {
        let remote = self.remote(group, version).is_some();
        self.entries()
            .filter(move |e| !remote && &*e.group == group && e.serves(version))
    }
}

/// The resource table of one server: a snapshot read per request, swapped whole on change.
#[derive(Debug)]
pub struct Resources {
    table: RwLock<Arc<Table>>,
    /// What the table is built from besides the built-in kinds: custom resources' entries
    /// and extension API servers' group versions (each set by its own installer).
    parts: std::sync::Mutex<(Vec<Entry>, Vec<Remote>)>,
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
            parts: Default::default(),
        }
    }

    /// Replaces the custom resources' entries (the CRD installer, `crate::crd`).
    pub fn set_custom(&self, custom: Vec<Entry>) {
        let mut parts = self
            .parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        parts.0 = custom;
        self.rebuild(&parts);
    }

    /// Replaces the extension API servers' group versions (`crate::aggregator`); a set equal
    /// to the one in force leaves the table (and the discovery documents built from it) as
    /// it is.
    pub fn set_remote(&self, remote: Vec<Remote>) {
        let mut parts = self
            .parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if parts.1 == remote {
            return;
        }
        parts.1 = remote;
        self.rebuild(&parts);
    }

    fn rebuild(&self, parts: &(Vec<Entry>, Vec<Remote>)) {
        let table = Arc::new(Table::with_parts(parts.0.clone(), parts.1.clone()));
        *self
            .table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = table;
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
        conversion: None,
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
            subresources.push(sub("ephemeralcontainers", "Pod", GET_PATCH_UPDATE));
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
        conversion: None,
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
        assert_eq!(names.first(), Some(&"apiregistration.k8s.io"));
        assert_eq!(names.last(), Some(&"metrics.k8s.io"));
        let authn = names.iter().position(|g| *g == "authentication.k8s.io");
        let authz = names.iter().position(|g| *g == "authorization.k8s.io");
        assert!(authn < authz);
        assert!(!names.contains(&""));
    }

    #[test]
    fn groups_in_kube_apiserver_order() {
        let t = Table::builtin();
        let names: Vec<&str> = t.groups().map(|g| &*g.name).collect();
        // kube-apiserver 1.32's order of these groups (their APIService priorities), with
        // metrics-server's group last.
        assert_eq!(
            names,
            [
                "apiregistration.k8s.io",
                "apps",
                "events.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "autoscaling",
                "batch",
                "certificates.k8s.io",
                "networking.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
                "storage.k8s.io",
                "admissionregistration.k8s.io",
                "apiextensions.k8s.io",
                "scheduling.k8s.io",
                "coordination.k8s.io",
                "node.k8s.io",
                "discovery.k8s.io",
                "flowcontrol.apiserver.k8s.io",
                "metrics.k8s.io",
            ]
        );
        let legacy: Vec<&str> = t.legacy_groups().iter().map(|g| &*g.name).collect();
        assert_eq!(legacy, names);
        assert_eq!(t.group("apps").map(|g| g.priority), Some(17800));
        assert_eq!(t.group("metrics.k8s.io").map(|g| g.priority), Some(100));
        assert_eq!(priority("autoscaling", "v2").version, 30);
        assert_eq!(
            priority("example.com", "v1"),
            Priority {
                group: 1000,
                version: 100
            }
        );
    }

    #[test]
    fn extension_servers_group_versions_take_their_place() {
        let remote = |group: &str, version: &str, g: i32, v: i32| Remote {
            group: group.into(),
            version: version.into(),
            priority: Priority {
                group: g,
                version: v,
            },
            resources: None,
        };
        let t = Table::with_parts(
            Vec::new(),
            vec![
                remote("metrics.example.com", "v1beta1", 1500, 20),
                remote("metrics.example.com", "v1alpha1", 1500, 5),
                // metrics-server taking over the server's own resource metrics.
                remote("metrics.k8s.io", "v1beta1", 100, 100),
            ],
        );
        assert!(t.serves("metrics.example.com", "v1beta1"));
        let ours = t.group("metrics.example.com").expect("the group");
        assert_eq!(ours.priority, 1500);
        assert_eq!(ours.versions, [Arc::from("v1beta1"), Arc::from("v1alpha1")]);
        assert_eq!(t.at_version("metrics.k8s.io", "v1beta1").count(), 0);
        assert!(t.by_plural("metrics.k8s.io", "nodes").is_some());
        let names: Vec<&str> = t.groups().map(|g| &*g.name).collect();
        let at = |g: &str| names.iter().position(|n| *n == g).expect(g);
        assert!(at("discovery.k8s.io") < at("metrics.example.com"));
        assert!(at("metrics.example.com") < at("metrics.k8s.io"));
        assert_eq!(t.priority_of("metrics.example.com", "v1alpha1").version, 5);
        use crate::http::route::{parse, Route};
        for (path, group) in [
            ("/apis/metrics.example.com/v1beta1", "metrics.example.com"),
            (
                "/apis/metrics.example.com/v1beta1/namespaces/d/widgets/w",
                "metrics.example.com",
            ),
            ("/apis/metrics.k8s.io/v1beta1/nodes", "metrics.k8s.io"),
        ] {
            assert_eq!(
                parse(&t, path),
                Ok(Route::Aggregated {
                    group: group.into(),
                    version: "v1beta1".into()
                }),
                "{path}"
            );
        }
        assert_eq!(
            parse(&t, "/apis/metrics.example.com"),
            Ok(Route::Group("metrics.example.com".into()))
        );
    }

    #[test]
    fn ties_of_priority() {
        // Two groups of custom resources (priority 1000 both), one at v1, one at v1beta1 and v1.
        let mut b = simple(
            "b.example.com",
            "v1",
            "B",
            "bs",
            "b",
            true,
            STORED_VERBS,
            Storage::Review,
        );
        b.id = ResourceId(0);
        let mut a = simple(
            "a.example.com",
            "v1beta1",
            "A",
            "as",
            "a",
            true,
            STORED_VERBS,
            Storage::Review,
        );
        a.id = ResourceId(1);
        a.versions.push(Version {
            name: "v1".into(),
            storage: false,
        });
        let t = Table::from_entries(vec![b, a], Vec::new());
        // Aggregated discovery breaks the tie by group name...
        let names: Vec<&str> = t.groups().map(|g| &*g.name).collect();
        assert_eq!(names, ["a.example.com", "b.example.com"]);
        // ... kube-aggregator's APIGroupList by APIService name: v1.a < v1.b.
        let legacy: Vec<&str> = t.legacy_groups().iter().map(|g| &*g.name).collect();
        assert_eq!(legacy, ["a.example.com", "b.example.com"]);
        // Versions newest first when their priorities tie.
        let a = t.group("a.example.com").expect("a");
        assert_eq!(a.versions, [Arc::from("v1"), Arc::from("v1beta1")]);

        let mut c = simple(
            "c.example.com",
            "v1beta1",
            "C",
            "cs",
            "c",
            true,
            STORED_VERBS,
            Storage::Review,
        );
        c.id = ResourceId(0);
        let mut d = simple(
            "d.example.com",
            "v1",
            "D",
            "ds",
            "d",
            true,
            STORED_VERBS,
            Storage::Review,
        );
        d.id = ResourceId(1);
        let t = Table::from_entries(vec![d, c], Vec::new());
        let names: Vec<&str> = t.groups().map(|g| &*g.name).collect();
        assert_eq!(names, ["c.example.com", "d.example.com"]);
        // "v1.d.example.com" < "v1beta1.c.example.com".
        let legacy: Vec<&str> = t.legacy_groups().iter().map(|g| &*g.name).collect();
        assert_eq!(legacy, ["d.example.com", "c.example.com"]);
    }

    #[test]
    fn kube_aware_version_order() {
        let mut versions = vec![
            "v1alpha1",
            "foo",
            "v2",
            "v1beta1",
            "v1",
            "bar",
            "v10",
            "v11alpha2",
            "v1beta2",
            "v1gamma1",
            "v99999999999999999999",
        ];
        versions.sort_by(|a, b| compare_versions(b, a));
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v1beta2",
                "v1beta1",
                "v11alpha2",
                "v1alpha1",
                "bar",
                "foo",
                "v1gamma1",
                "v99999999999999999999",
            ]
        );
    }
}
