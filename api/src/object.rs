//! The kinds skiff serves, the [`Resource`] trait they implement, and [`AnyObject`], the one
//! enum the store, the watch hub and the HTTP edge pass around.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::meta::ObjectMeta;
use crate::validation::FieldError;

/// Static facts about a kind: its REST names and discovery entry.
#[derive(Debug)]
pub struct KindInfo {
    pub kind: &'static str,
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub namespaced: bool,
    /// Has a `status` subresource; writes to the main resource keep the stored status.
    pub has_status: bool,
    pub categories: &'static [&'static str],
}

impl KindInfo {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The name Kubernetes uses in messages: `pods`, `deployments.apps`.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// Every resource kind stored by the server.
pub trait Resource:
    Clone + Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static
{
    const KIND: Kind;

    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    fn into_any(self) -> AnyObject;
    fn from_any(o: AnyObject) -> Option<Self>;
    fn from_any_ref(o: &AnyObject) -> Option<&Self>;

    /// This object's kind: `Self::KIND`, except for custom objects, which carry theirs.
    fn kind_of(&self) -> Kind {
        Self::KIND
    }

    /// Sets the kind of an object decoded for `kind` (custom objects; built-in kinds are
    /// their type).
    fn set_kind(&mut self, _kind: Kind) {}

    /// Kubernetes' defaulting (SetDefaults_*), applied on every create and update.
    fn set_defaults(&mut self) {}

    /// Semantic validation; an empty list means valid.
    fn validate(&self) -> Vec<FieldError> {
        Vec::new()
    }

    /// The part of [`Resource::validate`] that looks at the status: all a status write needs,
    /// since it keeps the stored (valid) spec and metadata. Kinds that check their status
    /// call it from `validate` too.
    fn validate_status(&self) -> Vec<FieldError> {
        Vec::new()
    }

    /// Encoded form of the fields whose change bumps `metadata.generation` (the spec).
    fn spec_fingerprint(&self) -> Vec<u8>;

    /// Replace this object's status with `other`'s (main-resource writes keep the stored
    /// status). A no-op for kinds without a status.
    fn copy_status_from(&mut self, _other: &Self) {}

    /// Replace everything but the status with `other`'s (status writes keep the stored spec
    /// and metadata).
    fn copy_all_but_status_from(&mut self, other: &Self) {
        let mut merged = other.clone();
        merged.copy_status_from(self);
        *self = merged;
    }

    /// Clears the status, as create does for kinds with a status subresource.
    fn clear_status(&mut self) {}

    /// A field for field selectors (`spec.nodeName`, `status.phase`, ...), beyond the
    /// metadata fields every kind has.
    fn field(&self, _path: &str) -> Option<String> {
        None
    }
}

macro_rules! kinds {
    ($( $variant:ident => $module:ident :: $name:ident ),* $(,)?) => {
        /// The built-in kinds' ordinals, in declaration order.
        #[derive(Clone, Copy)]
        #[repr(u32)]
        enum Ordinal { $( $variant ),* }

        /// A kind of object the server stores: one of the built-in kinds (the associated
        /// constants, numbered in declaration order, which is also their variant index in the
        /// stored [`AnyObject`]) or a custom resource's, defined at run time
        /// ([`Kind::define_custom`]). Copy and cheap to compare; custom kinds' numbers are
        /// process-local and never stored.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct Kind(u32);

        #[allow(non_upper_case_globals)]
        impl Kind {
            $( pub const $variant: Kind = Kind(Ordinal::$variant as u32); )*

            /// Every built-in kind.
            pub const ALL: &'static [Kind] = &[ $( Kind::$variant ),* ];

            /// The Rust name of a built-in kind.
            fn builtin_name(self) -> Option<&'static str> {
                match self { $( Kind::$variant => Some(stringify!($variant)), )* _ => None }
            }

            /// The Kubernetes name of the kind's OpenAPI definition
            /// (`io.k8s.api.core.v1.Pod`; see [`crate::schema`]); a custom resource's is its
            /// group reversed, version and kind (`com.example.v1.Widget`), as
            /// kube-apiserver names it.
            pub fn schema_name(self) -> String {
                match self {
                    $( Kind::$variant => <$crate::$module::$name as schemars::JsonSchema>::schema_name().into_owned(), )*
                    _ => {
                        let info = self.info();
                        let group: Vec<&str> = info.group.split('.').rev().collect();
                        format!("{}.{}.{}", group.join("."), info.version, info.kind)
                    }
                }
            }

            /// Adds the kind's schema, and those it refers to, to `generator`'s definitions
            /// (built-in kinds only: a custom resource's schema is its definition's).
            pub fn add_schema(self, generator: &mut schemars::SchemaGenerator) {
                match self {
                    $( Kind::$variant => { generator.subschema_for::<$crate::$module::$name>(); } )*
                    _ => {}
                }
            }
        }

        /// An object of any kind.
        #[derive(Clone, Debug, PartialEq)]
        #[allow(clippy::large_enum_variant)] // objects are moved rarely; boxing every variant costs more
        pub enum AnyObject {
            $( $variant($crate::$module::$name), )*
            /// An object of a custom resource.
            Custom($crate::custom::CustomObject),
        }

        impl AnyObject {
            pub fn kind(&self) -> Kind {
                match self {
                    $( AnyObject::$variant(_) => Kind::$variant, )*
                    AnyObject::Custom(o) => o.kind,
                }
            }
            pub fn meta(&self) -> &ObjectMeta {
                match self { $( AnyObject::$variant(o) => o.meta(), )* AnyObject::Custom(o) => o.meta() }
            }
            pub fn meta_mut(&mut self) -> &mut ObjectMeta {
                match self { $( AnyObject::$variant(o) => o.meta_mut(), )* AnyObject::Custom(o) => o.meta_mut() }
            }
            pub fn spec_fingerprint(&self) -> Vec<u8> {
                match self {
                    $( AnyObject::$variant(o) => o.spec_fingerprint(), )*
                    AnyObject::Custom(o) => o.spec_fingerprint(),
                }
            }
            /// A field for field selectors, including the metadata ones.
            pub fn field(&self, path: &str) -> Option<String> {
                match path {
                    "metadata.name" => Some(self.meta().name.clone()),
                    "metadata.namespace" => Some(self.meta().namespace().to_string()),
                    _ => match self {
                        $( AnyObject::$variant(o) => o.field(path), )*
                        AnyObject::Custom(o) => o.field(path),
                    },
                }
            }
            /// The Kubernetes JSON of this object, with `apiVersion` and `kind`.
            pub fn to_json(&self) -> serde_json::Value {
                match self {
                    $( AnyObject::$variant(o) => crate::codec::to_json(o), )*
                    AnyObject::Custom(o) => crate::codec::to_json(o),
                }
            }
            /// The Kubernetes JSON of this object appended to `out` ([`AnyObject::to_json`]
            /// written in one pass).
            pub fn write_json(&self, out: &mut Vec<u8>) {
                match self {
                    $( AnyObject::$variant(o) => crate::codec::write_json(o, out), )*
                    AnyObject::Custom(o) => crate::codec::write_json(o, out),
                }
            }
            /// This object as an item of a list ([`crate::codec::View::ListItem`]).
            pub fn write_json_item(&self, out: &mut Vec<u8>) {
                match self {
                    $( AnyObject::$variant(o) => crate::codec::write_json_item(o, out), )*
                    AnyObject::Custom(o) => crate::codec::write_json_item(o, out),
                }
            }
            /// This object in Kubernetes' JSON shape, to embed in a larger document.
            pub fn as_json(&self) -> AnyJson<'_> {
                AnyJson(self)
            }
        }

        /// The stored form: the variant index (postcard's varint) of a built-in kind is its
        /// ordinal; custom objects take [`CUSTOM_VARIANT`], far above any built-in kind, so
        /// adding built-in kinds never renumbers what is stored.
        impl Serialize for AnyObject {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( AnyObject::$variant(o) => s.serialize_newtype_variant(
                        "AnyObject", Ordinal::$variant as u32, stringify!($variant), o), )*
                    AnyObject::Custom(o) => s.serialize_newtype_variant(
                        "AnyObject", CUSTOM_VARIANT, "Custom", o),
                }
            }
        }

        impl<'de> Deserialize<'de> for AnyObject {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AnyObject, D::Error> {
                use serde::de::{EnumAccess, Error as _, VariantAccess};
                const NAMES: &[&str] = &[ $( stringify!($variant), )* "Custom" ];
                struct Tag(u32);
                struct TagVisitor;
                impl serde::de::Visitor<'_> for TagVisitor {
                    type Value = Tag;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an AnyObject variant")
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Tag, E> {
                        u32::try_from(v).map(Tag).map_err(|_| E::custom("variant index out of range"))
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Tag, E> {
                        match v {
                            $( stringify!($variant) => Ok(Tag(Ordinal::$variant as u32)), )*
                            "Custom" => Ok(Tag(CUSTOM_VARIANT)),
                            other => Err(E::unknown_variant(other, NAMES)),
                        }
                    }
                }
                impl<'de> Deserialize<'de> for Tag {
                    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Tag, D::Error> {
                        d.deserialize_identifier(TagVisitor)
                    }
                }
                struct AnyVisitor;
                impl<'de> serde::de::Visitor<'de> for AnyVisitor {
                    type Value = AnyObject;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object of any kind")
                    }
                    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<AnyObject, A::Error> {
                        let (tag, variant): (Tag, _) = data.variant()?;
                        $( if tag.0 == Ordinal::$variant as u32 {
                            return variant.newtype_variant().map(AnyObject::$variant);
                        } )*
                        if tag.0 == CUSTOM_VARIANT {
                            return variant.newtype_variant().map(AnyObject::Custom);
                        }
                        Err(A::Error::custom(format_args!("unknown kind number {}", tag.0)))
                    }
                }
                d.deserialize_enum("AnyObject", NAMES, AnyVisitor)
            }
        }

        /// An object of any kind in Kubernetes' JSON shape ([`AnyObject::as_json`]).
        pub struct AnyJson<'a>(&'a AnyObject);

        impl Serialize for AnyJson<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self.0 {
                    $( AnyObject::$variant(o) => crate::codec::json(o).serialize(s), )*
                    AnyObject::Custom(o) => crate::codec::json(o).serialize(s),
                }
            }
        }

        /// Runs `$body` with the type alias `$k` bound to the Rust type of `$kind`
        /// ([`crate::custom::CustomObject`] for a custom resource's kind).
        #[macro_export]
        macro_rules! with_kind {
            ($kind:expr, $k:ident, $body:block) => {{
                match $kind {
                    // `$crate`, not `crate`: the paths must resolve in the caller's crate too.
                    $( $crate::object::Kind::$variant => { type $k = $crate::$module::$name; $body } )*
                    _ => { type $k = $crate::custom::CustomObject; $body }
                }
            }};
        }
    };
}

/// The stored variant index of [`AnyObject::Custom`].
const CUSTOM_VARIANT: u32 = 0x4000;

kinds! {
    Namespace => core::Namespace,
    Node => core::Node,
    Pod => core::Pod,
    Service => core::Service,
    Endpoints => core::Endpoints,
    ConfigMap => core::ConfigMap,
    Secret => core::Secret,
    Event => core::Event,
    Deployment => apps::Deployment,
    ReplicaSet => apps::ReplicaSet,
    DaemonSet => apps::DaemonSet,
    Ingress => networking::Ingress,
    IngressClass => networking::IngressClass,
    Role => rbac::Role,
    ClusterRole => rbac::ClusterRole,
    RoleBinding => rbac::RoleBinding,
    ClusterRoleBinding => rbac::ClusterRoleBinding,
    CertificateSigningRequest => certificates::CertificateSigningRequest,
    Job => batch::Job,
    CronJob => batch::CronJob,
    PodDisruptionBudget => policy::PodDisruptionBudget,
    ServiceAccount => core::ServiceAccount,
    ReplicationController => replication::ReplicationController,
    PriorityClass => scheduling::PriorityClass,
    ResourceQuota => quota::ResourceQuota,
    LimitRange => quota::LimitRange,
    PersistentVolume => storage::PersistentVolume,
    PersistentVolumeClaim => storage::PersistentVolumeClaim,
    StorageClass => storage::StorageClass,
    StatefulSet => apps::StatefulSet,
    ControllerRevision => apps::ControllerRevision,
    HorizontalPodAutoscaler => autoscaling::HorizontalPodAutoscaler,
    Lease => coordination::Lease,
    EndpointSlice => discovery::EndpointSlice,
    RuntimeClass => node::RuntimeClass,
    CustomResourceDefinition => apiextensions::CustomResourceDefinition,
    NetworkPolicy => networking::NetworkPolicy,
    MutatingWebhookConfiguration => admissionregistration::MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration => admissionregistration::ValidatingWebhookConfiguration,
    ValidatingAdmissionPolicy => admissionpolicy::ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding => admissionpolicy::ValidatingAdmissionPolicyBinding,
    APIService => apiregistration::APIService,
    FlowSchema => flowcontrol::FlowSchema,
    PriorityLevelConfiguration => flowcontrol::PriorityLevelConfiguration,
}

const ALL_CATEGORY: &[&str] = &["all"];

/// The first number of a custom resource's [`Kind`].
const CUSTOM_BASE: u32 = 1 << 20;

/// The names of a custom resource, from its CustomResourceDefinition ([`Kind::define_custom`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CustomKindInfo {
    pub kind: String,
    pub group: String,
    /// The storage version.
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    pub has_status: bool,
    pub categories: Vec<String>,
}

impl CustomKindInfo {
    fn describes(&self, info: &KindInfo) -> bool {
        self.kind == info.kind
            && self.group == info.group
            && self.version == info.version
            && self.plural == info.plural
            && self.singular == info.singular
            && self
                .short_names
                .iter()
                .map(String::as_str)
                .eq(info.short_names.iter().copied())
            && self.namespaced == info.namespaced
            && self.has_status == info.has_status
            && self
                .categories
                .iter()
                .map(String::as_str)
                .eq(info.categories.iter().copied())
    }

    /// A `'static` [`KindInfo`]: custom resources' names change only when their definition
    /// does, so the few hundred bytes each change leaves behind are bounded by the edits.
    fn leak(self) -> &'static KindInfo {
        fn s(v: String) -> &'static str {
            Box::leak(v.into_boxed_str())
        }
        fn list(v: Vec<String>) -> &'static [&'static str] {
            Box::leak(v.into_iter().map(s).collect::<Vec<_>>().into_boxed_slice())
        }
        Box::leak(Box::new(KindInfo {
            kind: s(self.kind),
            group: s(self.group),
            version: s(self.version),
            plural: s(self.plural),
            singular: s(self.singular),
            short_names: list(self.short_names),
            namespaced: self.namespaced,
            has_status: self.has_status,
            categories: list(self.categories),
        }))
    }
}

/// Custom resources' kinds, by `plural.group`, and their names.
#[derive(Default)]
struct CustomKinds {
    by_name: std::collections::HashMap<String, Kind>,
    infos: Vec<Option<&'static KindInfo>>,
    /// `plural.group`, the name of each custom kind's storage.
    names: Vec<&'static str>,
    rules: Vec<Option<std::sync::Arc<dyn crate::custom::CustomRules>>>,
}

impl CustomKinds {
    /// The kind of `plural.group`, numbered now if it is new.
    fn intern(&mut self, key: String) -> Kind {
        if let Some(k) = self.by_name.get(&key) {
            return *k;
        }
        let k = Kind(CUSTOM_BASE + self.infos.len() as u32);
        self.names.push(Box::leak(key.clone().into_boxed_str()));
        self.by_name.insert(key, k);
        self.infos.push(None);
        self.rules.push(None);
        k
    }
}

fn custom_kinds() -> &'static std::sync::RwLock<CustomKinds> {
    static KINDS: std::sync::OnceLock<std::sync::RwLock<CustomKinds>> = std::sync::OnceLock::new();
    KINDS.get_or_init(Default::default)
}

/// What a custom kind's names are; a kind that was never defined (impossible outside this
/// module) reads as an empty one.
fn custom_info(kind: Kind) -> &'static KindInfo {
    static UNDEFINED: KindInfo = KindInfo {
        kind: "",
        group: "",
        version: "",
        plural: "",
        singular: "",
        short_names: &[],
        namespaced: false,
        has_status: false,
        categories: &[],
    };
    let kinds = custom_kinds().read().unwrap_or_else(|e| e.into_inner());
    kind.0
        .checked_sub(CUSTOM_BASE)
        .and_then(|i| kinds.infos.get(i as usize).copied().flatten())
        .unwrap_or(&UNDEFINED)
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.builtin_name() {
            Some(name) => f.write_str(name),
            None => f.write_str(self.info().kind),
        }
    }
}

impl Kind {
    pub fn info(self) -> &'static KindInfo {
        const fn core(
            kind: &'static str,
            plural: &'static str,
            singular: &'static str,
            short_names: &'static [&'static str],
            namespaced: bool,
            has_status: bool,
            categories: &'static [&'static str],
        ) -> KindInfo {
            KindInfo {
                kind,
                group: "",
                version: "v1",
                plural,
                singular,
                short_names,
                namespaced,
                has_status,
                categories,
            }
        }
        const fn apps(
            kind: &'static str,
            plural: &'static str,
            singular: &'static str,
            short_names: &'static [&'static str],
        ) -> KindInfo {
            KindInfo {
                kind,
                group: "apps",
                version: "v1",
                plural,
                singular,
                short_names,
                namespaced: true,
                has_status: true,
                categories: ALL_CATEGORY,
            }
        }
        const fn rbac(
            kind: &'static str,
            plural: &'static str,
            singular: &'static str,
            namespaced: bool,
        ) -> KindInfo {
            KindInfo {
                kind,
                group: crate::rbac::GROUP,
                version: "v1",
                plural,
                singular,
                short_names: &[],
                namespaced,
                has_status: false,
                categories: &[],
            }
        }
        const fn batch(
            kind: &'static str,
            plural: &'static str,
            singular: &'static str,
            short_names: &'static [&'static str],
        ) -> KindInfo {
            KindInfo {
                kind,
                group: "batch",
                version: "v1",
                plural,
                singular,
                short_names,
                namespaced: true,
                has_status: true,
                categories: ALL_CATEGORY,
            }
        }
        static NAMESPACE: KindInfo = core(
            "Namespace",
            "namespaces",
            "namespace",
            &["ns"],
            false,
            true,
            &[],
        );
        static NODE: KindInfo = core("Node", "nodes", "node", &["no"], false, true, &[]);
        static POD: KindInfo = core("Pod", "pods", "pod", &["po"], true, true, ALL_CATEGORY);
        static SERVICE: KindInfo = core(
            "Service",
            "services",
            "service",
            &["svc"],
            true,
            true,
            ALL_CATEGORY,
        );
        static ENDPOINTS: KindInfo = core(
            "Endpoints",
            "endpoints",
            "endpoints",
            &["ep"],
            true,
            false,
            &[],
        );
        static CONFIG_MAP: KindInfo = core(
            "ConfigMap",
            "configmaps",
            "configmap",
            &["cm"],
            true,
            false,
            &[],
        );
        static RESOURCE_QUOTA: KindInfo = core(
            "ResourceQuota",
            "resourcequotas",
            "resourcequota",
            &["quota"],
            true,
            true,
            &[],
        );
        static LIMIT_RANGE: KindInfo = core(
            "LimitRange",
            "limitranges",
            "limitrange",
            &["limits"],
            true,
            false,
            &[],
        );
        static HPA: KindInfo = KindInfo {
            kind: "HorizontalPodAutoscaler",
            group: crate::autoscaling::GROUP,
            version: crate::autoscaling::VERSION,
            plural: "horizontalpodautoscalers",
            singular: "horizontalpodautoscaler",
            short_names: &["hpa"],
            namespaced: true,
            has_status: true,
            categories: ALL_CATEGORY,
        };
        static PRIORITY_CLASS: KindInfo = KindInfo {
            kind: "PriorityClass",
            group: crate::scheduling::GROUP,
            version: "v1",
            plural: "priorityclasses",
            singular: "priorityclass",
            short_names: &["pc"],
            namespaced: false,
            has_status: false,
            categories: &[],
        };
        static LEASE: KindInfo = KindInfo {
            kind: "Lease",
            group: crate::coordination::GROUP,
            version: "v1",
            plural: "leases",
            singular: "lease",
            short_names: &[],
            namespaced: true,
            has_status: false,
            categories: &[],
        };
        static REPLICATION_CONTROLLER: KindInfo = core(
            "ReplicationController",
            "replicationcontrollers",
            "replicationcontroller",
            &["rc"],
            true,
            true,
            ALL_CATEGORY,
        );
        static SECRET: KindInfo = core("Secret", "secrets", "secret", &[], true, false, &[]);
        static SERVICE_ACCOUNT: KindInfo = core(
            "ServiceAccount",
            "serviceaccounts",
            "serviceaccount",
            &["sa"],
            true,
            false,
            &[],
        );
        static PERSISTENT_VOLUME: KindInfo = core(
            "PersistentVolume",
            "persistentvolumes",
            "persistentvolume",
            &["pv"],
            false,
            true,
            &[],
        );
        static PERSISTENT_VOLUME_CLAIM: KindInfo = core(
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            &["pvc"],
            true,
            true,
            &[],
        );
        static STORAGE_CLASS: KindInfo = KindInfo {
            kind: "StorageClass",
            group: crate::storage::GROUP,
            version: "v1",
            plural: "storageclasses",
            singular: "storageclass",
            short_names: &["sc"],
            namespaced: false,
            has_status: false,
            categories: &[],
        };
        static EVENT: KindInfo = core("Event", "events", "event", &["ev"], true, false, &[]);
        static DEPLOYMENT: KindInfo = apps("Deployment", "deployments", "deployment", &["deploy"]);
        static REPLICA_SET: KindInfo = apps("ReplicaSet", "replicasets", "replicaset", &["rs"]);
        static DAEMON_SET: KindInfo = apps("DaemonSet", "daemonsets", "daemonset", &["ds"]);
        static CONTROLLER_REVISION: KindInfo = KindInfo {
            kind: "ControllerRevision",
            group: "apps",
            version: "v1",
            plural: "controllerrevisions",
            singular: "controllerrevision",
            short_names: &[],
            namespaced: true,
            has_status: false,
            categories: &[],
        };
        static STATEFUL_SET: KindInfo =
            apps("StatefulSet", "statefulsets", "statefulset", &["sts"]);
        static INGRESS: KindInfo = KindInfo {
            kind: "Ingress",
            group: "networking.k8s.io",
            version: "v1",
            plural: "ingresses",
            singular: "ingress",
            short_names: &["ing"],
            namespaced: true,
            has_status: true,
            categories: &[],
        };
        static INGRESS_CLASS: KindInfo = KindInfo {
            kind: "IngressClass",
            group: "networking.k8s.io",
            version: "v1",
            plural: "ingressclasses",
            singular: "ingressclass",
            short_names: &[],
            namespaced: false,
            has_status: false,
            categories: &[],
        };
        static ROLE: KindInfo = rbac("Role", "roles", "role", true);
        static CLUSTER_ROLE: KindInfo = rbac("ClusterRole", "clusterroles", "clusterrole", false);
        static ROLE_BINDING: KindInfo = rbac("RoleBinding", "rolebindings", "rolebinding", true);
        static CLUSTER_ROLE_BINDING: KindInfo = rbac(
            "ClusterRoleBinding",
            "clusterrolebindings",
            "clusterrolebinding",
            false,
        );
        static CSR: KindInfo = KindInfo {
            kind: "CertificateSigningRequest",
            group: crate::certificates::GROUP,
            version: "v1",
            plural: "certificatesigningrequests",
            singular: "certificatesigningrequest",
            short_names: &["csr"],
            namespaced: false,
            has_status: true,
            categories: &[],
        };
        static JOB: KindInfo = batch("Job", "jobs", "job", &[]);
        static CRON_JOB: KindInfo = batch("CronJob", "cronjobs", "cronjob", &["cj"]);
        static ENDPOINT_SLICE: KindInfo = KindInfo {
            kind: "EndpointSlice",
            group: crate::discovery::GROUP,
            version: "v1",
            plural: "endpointslices",
            singular: "endpointslice",
            short_names: &[],
            namespaced: true,
            has_status: false,
            categories: &[],
        };
        static RUNTIME_CLASS: KindInfo = KindInfo {
            kind: "RuntimeClass",
            group: crate::node::GROUP,
            version: "v1",
            plural: "runtimeclasses",
            singular: "runtimeclass",
            short_names: &[],
            namespaced: false,
            has_status: false,
            categories: &[],
        };
        static CRD: KindInfo = KindInfo {
            kind: "CustomResourceDefinition",
            group: crate::apiextensions::GROUP,
            version: "v1",
            plural: "customresourcedefinitions",
            singular: "customresourcedefinition",
            short_names: &["crd", "crds"],
            namespaced: false,
            has_status: true,
            categories: &["api-extensions"],
        };
        static MUTATING_WEBHOOKS: KindInfo = KindInfo {
            kind: "MutatingWebhookConfiguration",
            group: crate::admissionregistration::GROUP,
            version: "v1",
            plural: "mutatingwebhookconfigurations",
            singular: "mutatingwebhookconfiguration",
            short_names: &[],
            namespaced: false,
            has_status: false,
            categories: &["api-extensions"],
        };
        static VALIDATING_WEBHOOKS: KindInfo = KindInfo {
            kind: "ValidatingWebhookConfiguration",
            group: crate::admissionregistration::GROUP,
            version: "v1",
            plural: "validatingwebhookconfigurations",
            singular: "validatingwebhookconfiguration",
            short_names: &[],
            namespaced: false,
            has_status: false,
            categories: &["api-extensions"],
        };
        static ADMISSION_POLICY: KindInfo = KindInfo {
            kind: "ValidatingAdmissionPolicy",
            group: crate::admissionregistration::GROUP,
            version: "v1",
            plural: "validatingadmissionpolicies",
            singular: "validatingadmissionpolicy",
            short_names: &[],
            namespaced: false,
            has_status: true,
            categories: &["api-extensions"],
        };
        static ADMISSION_POLICY_BINDING: KindInfo = KindInfo {
            kind: "ValidatingAdmissionPolicyBinding",
            group: crate::admissionregistration::GROUP,
            version: "v1",
            plural: "validatingadmissionpolicybindings",
            singular: "validatingadmissionpolicybinding",
            short_names: &[],
            namespaced: false,
            has_status: false,
            categories: &["api-extensions"],
        };
        static PDB: KindInfo = KindInfo {
            kind: "PodDisruptionBudget",
            group: crate::policy::GROUP,
            version: "v1",
            plural: "poddisruptionbudgets",
            singular: "poddisruptionbudget",
            short_names: &["pdb"],
            namespaced: true,
            has_status: true,
            categories: &[],
        };
        static NETWORK_POLICY: KindInfo = KindInfo {
            kind: "NetworkPolicy",
            group: "networking.k8s.io",
            version: "v1",
            plural: "networkpolicies",
            singular: "networkpolicy",
            short_names: &["netpol"],
            namespaced: true,
            has_status: false,
            categories: &[],
        };
        static API_SERVICE: KindInfo = KindInfo {
            kind: "APIService",
            group: crate::apiregistration::GROUP,
            version: "v1",
            plural: "apiservices",
            singular: "apiservice",
            short_names: &[],
            namespaced: false,
            has_status: true,
            categories: &["api-extensions"],
        };
        static FLOW_SCHEMA: KindInfo = KindInfo {
            kind: "FlowSchema",
            group: crate::flowcontrol::GROUP,
            version: "v1",
            plural: "flowschemas",
            singular: "flowschema",
            short_names: &[],
            namespaced: false,
            has_status: true,
            categories: &[],
        };
        static PRIORITY_LEVEL: KindInfo = KindInfo {
            kind: "PriorityLevelConfiguration",
            group: crate::flowcontrol::GROUP,
            version: "v1",
            plural: "prioritylevelconfigurations",
            singular: "prioritylevelconfiguration",
            short_names: &[],
            namespaced: false,
            has_status: true,
            categories: &[],
        };
        match self {
            Kind::Namespace => &NAMESPACE,
            Kind::Node => &NODE,
            Kind::Pod => &POD,
            Kind::Service => &SERVICE,
            Kind::Endpoints => &ENDPOINTS,
            Kind::ConfigMap => &CONFIG_MAP,
            Kind::Secret => &SECRET,
            Kind::Event => &EVENT,
            Kind::Deployment => &DEPLOYMENT,
            Kind::ReplicaSet => &REPLICA_SET,
            Kind::DaemonSet => &DAEMON_SET,
            Kind::Ingress => &INGRESS,
            Kind::IngressClass => &INGRESS_CLASS,
            Kind::Role => &ROLE,
            Kind::ClusterRole => &CLUSTER_ROLE,
            Kind::RoleBinding => &ROLE_BINDING,
            Kind::ClusterRoleBinding => &CLUSTER_ROLE_BINDING,
            Kind::CertificateSigningRequest => &CSR,
            Kind::Job => &JOB,
            Kind::CronJob => &CRON_JOB,
            Kind::PodDisruptionBudget => &PDB,
            Kind::ServiceAccount => &SERVICE_ACCOUNT,
            Kind::ReplicationController => &REPLICATION_CONTROLLER,
            Kind::PriorityClass => &PRIORITY_CLASS,
            Kind::HorizontalPodAutoscaler => &HPA,
            Kind::ResourceQuota => &RESOURCE_QUOTA,
            Kind::LimitRange => &LIMIT_RANGE,
            Kind::PersistentVolume => &PERSISTENT_VOLUME,
            Kind::PersistentVolumeClaim => &PERSISTENT_VOLUME_CLAIM,
            Kind::StorageClass => &STORAGE_CLASS,
            Kind::StatefulSet => &STATEFUL_SET,
            Kind::ControllerRevision => &CONTROLLER_REVISION,
            Kind::Lease => &LEASE,
            Kind::EndpointSlice => &ENDPOINT_SLICE,
            Kind::RuntimeClass => &RUNTIME_CLASS,
            Kind::CustomResourceDefinition => &CRD,
            Kind::MutatingWebhookConfiguration => &MUTATING_WEBHOOKS,
            Kind::ValidatingWebhookConfiguration => &VALIDATING_WEBHOOKS,
            Kind::ValidatingAdmissionPolicy => &ADMISSION_POLICY,
            Kind::ValidatingAdmissionPolicyBinding => &ADMISSION_POLICY_BINDING,
            Kind::NetworkPolicy => &NETWORK_POLICY,
            Kind::APIService => &API_SERVICE,
            Kind::FlowSchema => &FLOW_SCHEMA,
            Kind::PriorityLevelConfiguration => &PRIORITY_LEVEL,
            _ => custom_info(self),
        }
    }

    /// Whether this is a custom resource's kind.
    pub fn is_custom(self) -> bool {
        self.0 >= CUSTOM_BASE
    }

    /// A custom kind's number among custom kinds (0 for the first defined in the process).
    pub fn custom_ordinal(self) -> Option<usize> {
        (self.is_custom() && self != Kind::ANY_CUSTOM).then(|| (self.0 - CUSTOM_BASE) as usize)
    }

    /// A number for this kind, unique in the process: the built-in kinds' are
    /// `0..Kind::ALL.len()`, custom ones' are larger.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The kind of the custom resource `info` describes, defined (or its names updated) now.
    /// A resource (`plural.group`) keeps its kind for the life of the process, through
    /// redefinitions, so a kind held anywhere never comes to name another resource.
    pub fn define_custom(info: CustomKindInfo) -> Kind {
        let key = format!("{}.{}", info.plural, info.group);
        let mut kinds = custom_kinds().write().unwrap_or_else(|e| e.into_inner());
        let kind = kinds.intern(key);
        let slot = &mut kinds.infos[(kind.0 - CUSTOM_BASE) as usize];
        if slot.is_none_or(|old| !info.describes(old)) {
            *slot = Some(info.leak());
        }
        kind
    }

    /// Stands for every custom resource's kind where a Rust type names the kind
    /// ([`crate::custom::CustomObject`]'s `KIND`); objects carry their own.
    pub const ANY_CUSTOM: Kind = Kind(u32::MAX);

    /// The kind of custom resource `plural` of `group`, numbered now if it is new (its names
    /// come with [`Kind::define_custom`]; objects read back before that still know theirs).
    pub fn custom_named(group: &str, plural: &str) -> Kind {
        if let Some(k) = Kind::custom(group, plural) {
            return k;
        }
        let mut kinds = custom_kinds().write().unwrap_or_else(|e| e.into_inner());
        kinds.intern(format!("{plural}.{group}"))
    }

    /// The custom kind named `kind` in `group` (as an object's `apiVersion` and `kind` say),
    /// when one is defined: a walk of the defined kinds (none: nothing to walk).
    pub fn custom_of_type(group: &str, kind: &str) -> Option<Kind> {
        let kinds = custom_kinds().read().unwrap_or_else(|e| e.into_inner());
        kinds.infos.iter().enumerate().find_map(|(i, info)| {
            info.filter(|info| info.kind == kind && info.group == group)
                .map(|_| Kind(CUSTOM_BASE + i as u32))
        })
    }

    /// Every custom kind this process has defined, of resources served or gone.
    pub fn defined_custom() -> Vec<Kind> {
        let kinds = custom_kinds().read().unwrap_or_else(|e| e.into_inner());
        (0..kinds.infos.len())
            .filter(|i| kinds.infos[*i].is_some())
            .map(|i| Kind(CUSTOM_BASE + i as u32))
            .collect()
    }

    /// Where objects of this kind are stored: the plural of a built-in kind (its redb table
    /// and etcd prefix), `plural.group` for a custom resource.
    pub fn storage_name(self) -> &'static str {
        match self.custom_ordinal() {
            None => self.info().plural,
            Some(i) => {
                let kinds = custom_kinds().read().unwrap_or_else(|e| e.into_inner());
                kinds.names.get(i).copied().unwrap_or("")
            }
        }
    }

    /// The rules of a custom resource's definition (schema), if the server set them.
    pub fn custom_rules(self) -> Option<std::sync::Arc<dyn crate::custom::CustomRules>> {
        let kinds = custom_kinds().read().unwrap_or_else(|e| e.into_inner());
        let i = self.0.checked_sub(CUSTOM_BASE)? as usize;
        kinds.rules.get(i).cloned().flatten()
    }

    /// Sets (or, with None, clears) the rules of a custom resource's kind.
    pub fn set_custom_rules(self, rules: Option<std::sync::Arc<dyn crate::custom::CustomRules>>) {
        let mut kinds = custom_kinds().write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = self
            .0
            .checked_sub(CUSTOM_BASE)
            .and_then(|i| kinds.rules.get_mut(i as usize))
        {
            *slot = rules;
        }
    }

    /// The kind of custom resource `plural` of `group`, if it was ever defined.
    pub fn custom(group: &str, plural: &str) -> Option<Kind> {
        let kinds = custom_kinds().read().unwrap_or_else(|e| e.into_inner());
        kinds.by_name.get(&format!("{plural}.{group}")).copied()
    }

    /// The kind served at `/api(s)/<group>/<version>/<plural>`.
    pub fn from_plural(group: &str, plural: &str) -> Option<Kind> {
        Kind::ALL
            .iter()
            .copied()
            .find(|k| k.info().group == group && k.info().plural == plural)
    }

    /// The kind named by `apiVersion` and `kind` in a manifest (a custom resource's at any of
    /// its versions).
    pub fn from_type(api_version: &str, kind: &str) -> Option<Kind> {
        let builtin = Kind::ALL
            .iter()
            .copied()
            .find(|k| k.info().kind == kind && k.info().api_version() == api_version);
        builtin.or_else(|| {
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            Kind::defined_custom()
                .into_iter()
                .find(|k| k.info().kind == kind && k.info().group == group)
        })
    }

    /// A kind as a user types it on the command line: plural, singular, short name or
    /// kind, any case (`po`, `pods`, `Pod`, `deployments.apps`).
    pub fn from_cli_name(name: &str) -> Option<Kind> {
        let lower = name.to_ascii_lowercase();
        let bare = lower.split('.').next().unwrap_or("");
        Kind::ALL.iter().copied().find(|k| {
            let i = k.info();
            i.plural == bare
                || i.singular == bare
                || i.kind.eq_ignore_ascii_case(bare)
                || i.short_names.contains(&bare)
        })
    }
}

/// The accessor methods every [`Resource`] impl shares; use inside `impl Resource for T`.
#[macro_export]
macro_rules! resource_basics {
    ($variant:ident) => {
        fn meta(&self) -> &$crate::meta::ObjectMeta {
            &self.metadata
        }
        fn meta_mut(&mut self) -> &mut $crate::meta::ObjectMeta {
            &mut self.metadata
        }
        fn into_any(self) -> $crate::object::AnyObject {
            $crate::object::AnyObject::$variant(self)
        }
        fn from_any(o: $crate::object::AnyObject) -> Option<Self> {
            match o {
                $crate::object::AnyObject::$variant(x) => Some(x),
                _ => None,
            }
        }
        fn from_any_ref(o: &$crate::object::AnyObject) -> Option<&Self> {
            match o {
                $crate::object::AnyObject::$variant(x) => Some(x),
                _ => None,
            }
        }
    };
}

/// Postcard bytes of a value, for [`Resource::spec_fingerprint`].
pub fn fingerprint<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).expect("model types always serialize")
}
