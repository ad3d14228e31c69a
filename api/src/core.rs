//! core/v1 kinds: Namespace, Node, Pod, Service, Endpoints, ConfigMap, Secret, Event, and the
//! pod template shared with the apps kinds.
//!
//! Field names and JSON shapes are Kubernetes' own. Enumerations Kubernetes spells as strings
//! stay `String` here (Kubernetes accepts any string on decode and validation refuses bad
//! ones). Fields skiff keeps but does not act on are [`Opaque`].

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use schemars::JsonSchema;
use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::meta::{IntOrString, LabelSelector, ObjectMeta, Opaque, Quantity, Time};
use crate::object::{fingerprint, Kind, Resource};
use crate::validation::{self, FieldError};

/// The `Resource` methods of kinds with `spec` and `status`.
macro_rules! spec_and_status {
    () => {
        fn spec_fingerprint(&self) -> Vec<u8> {
            $crate::object::fingerprint(&self.spec)
        }
        fn copy_status_from(&mut self, other: &Self) {
            self.status = other.status.clone();
        }
        fn clear_status(&mut self) {
            self.status = Default::default();
        }
    };
}
pub(crate) use spec_and_status;

/// Bytes that are base64 in JSON (Secret `data`, ConfigMap `binaryData`) and raw in postcard.
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct ByteString(pub Vec<u8>);

impl fmt::Debug for ByteString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(s) => write!(f, "ByteString({s:?})"),
            Err(_) => write!(f, "ByteString({:?})", self.0),
        }
    }
}

impl From<&str> for ByteString {
    fn from(s: &str) -> ByteString {
        ByteString(s.as_bytes().to_vec())
    }
}

impl Serialize for ByteString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for ByteString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteString, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            return base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map(ByteString)
                .map_err(|e| de::Error::custom(format!("illegal base64 data: {e}")));
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ByteString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ByteString, E> {
                Ok(ByteString(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<ByteString, E> {
                Ok(ByteString(v))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<ByteString, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(ByteString(out))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// Maps Kubernetes marks `omitempty`: absent from JSON when empty (a null the JSON edge strips;
/// a null read back is an empty map), always present in postcard so its layout never varies.
pub(crate) mod omit_empty {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S, K, V>(m: &BTreeMap<K, V>, s: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
        K: Serialize,
        V: Serialize,
    {
        if s.is_human_readable() && m.is_empty() {
            s.serialize_none()
        } else {
            m.serialize(s)
        }
    }

    pub fn deserialize<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
    {
        if d.is_human_readable() {
            Ok(Option::<BTreeMap<K, V>>::deserialize(d)?.unwrap_or_default())
        } else {
            BTreeMap::deserialize(d)
        }
    }
}

// ---------------------------------------------------------------------------------------
// References

/// core/v1 ObjectReference.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ObjectReference")]
#[schemars(description = "A reference to an object.")]
pub struct ObjectReference {
    /// Kind of the object.
    pub kind: Option<String>,
    /// Namespace of the object.
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: Option<String>,
    /// UID of the object.
    pub uid: Option<String>,
    /// API version of the object.
    pub api_version: Option<String>,
    /// Resource version of the object the reference was made from.
    pub resource_version: Option<String>,
    /// Part of the object meant, such as spec.containers{name}.
    pub field_path: Option<String>,
}

/// core/v1 LocalObjectReference (`imagePullSecrets`).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.LocalObjectReference")]
#[schemars(description = "A reference to an object in the same namespace.")]
pub struct LocalObjectReference {
    /// Name of the object.
    pub name: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Pod template and pod spec

/// core/v1 PodTemplateSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodTemplateSpec")]
#[schemars(description = "PodTemplateSpec describes the pods a workload controller creates.")]
pub struct PodTemplateSpec {
    /// Metadata of the pods created from this template (labels must match the selector).
    pub metadata: ObjectMeta,
    /// Specification of the pods created from this template.
    pub spec: PodSpec,
}

/// core/v1 PodSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodSpec")]
#[schemars(
    description = "PodSpec is the description of a pod: its containers, volumes and scheduling constraints."
)]
pub struct PodSpec {
    /// Volumes the containers of the pod can mount.
    pub volumes: Vec<Volume>,
    /// Containers run one after another, each to completion, before the app containers start.
    pub init_containers: Vec<Container>,
    /// The pod's app containers. At least one is required; containers cannot be added or
    /// removed once the pod exists.
    pub containers: Vec<Container>,
    /// Debug containers added through the `pods/ephemeralcontainers` subresource (`kubectl
    /// debug`); they cannot be set on create nor changed by a pod update.
    #[serde(with = "opaque_in_postcard")]
    #[schemars(with = "Vec<EphemeralContainer>")]
    pub ephemeral_containers: Vec<EphemeralContainer>,
    /// Restart policy of the containers: Always, OnFailure or Never. Default: Always.
    pub restart_policy: Option<String>,
    /// Seconds the pod has to stop gracefully after it is asked to, before its processes are
    /// killed. Default: 30.
    pub termination_grace_period_seconds: Option<i64>,
    /// Seconds a pod may be active, counted from its start, before the node marks it failed.
    pub active_deadline_seconds: Option<i64>,
    /// How the pod's DNS is set up: ClusterFirst, ClusterFirstWithHostNet, Default or None.
    /// Default: ClusterFirst.
    pub dns_policy: Option<String>,
    /// Labels a node must have for the pod to be scheduled on it.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub node_selector: BTreeMap<String, String>,
    /// Name of the ServiceAccount the pod runs as.
    pub service_account_name: Option<String>,
    /// Deprecated alias of `serviceAccountName`.
    pub service_account: Option<String>,
    /// Whether the service account token is mounted into the pod.
    pub automount_service_account_token: Option<bool>,
    /// Node the pod is bound to. Set by the scheduler; a pod created with it set skips
    /// scheduling.
    pub node_name: Option<String>,
    /// Use the node's network namespace instead of a pod network. Default: false.
    pub host_network: Option<bool>,
    /// Use the node's PID namespace. Default: false.
    #[serde(rename = "hostPID")]
    pub host_pid: Option<bool>,
    /// Use the node's IPC namespace. Default: false.
    #[serde(rename = "hostIPC")]
    pub host_ipc: Option<bool>,
    /// Share one PID namespace among the containers of the pod.
    pub share_process_namespace: Option<bool>,
    /// Pod-level security attributes and common container settings.
    pub security_context: Option<PodSecurityContext>,
    /// Secrets in the pod's namespace holding registry credentials for pulling the images.
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Hostname of the pod. Default: the pod's name.
    pub hostname: Option<String>,
    /// Subdomain of the pod: its DNS name becomes
    /// <hostname>.<subdomain>.<namespace>.svc.<cluster domain>.
    pub subdomain: Option<String>,
    /// Scheduling constraints relating the pod to nodes and to other pods.
    pub affinity: Option<Affinity>,
    /// Scheduler that places the pod. Default: default-scheduler.
    pub scheduler_name: Option<String>,
    /// Taints of nodes the pod tolerates.
    pub tolerations: Vec<Toleration>,
    /// Entries added to the pod's /etc/hosts.
    pub host_aliases: Vec<HostAlias>,
    /// Name of the PriorityClass of the pod.
    pub priority_class_name: Option<String>,
    /// Priority value of the pod.
    pub priority: Option<i32>,
    /// DNS parameters merged into the configuration from dnsPolicy.
    pub dns_config: Option<PodDnsConfig>,
    /// Extra conditions that must be true for the pod to be ready.
    pub readiness_gates: Vec<PodReadinessGate>,
    /// RuntimeClass to run the pod with.
    pub runtime_class_name: Option<String>,
    /// Whether environment variables describing the namespace's services are injected. Default:
    /// true.
    pub enable_service_links: Option<bool>,
    /// Whether the pod may preempt lower-priority pods: PreemptLowerPriority or Never.
    pub preemption_policy: Option<String>,
    /// Resources the pod's sandbox uses on top of its containers' requests.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub overhead: BTreeMap<String, Quantity>,
    /// How the pods of a group spread across topology domains. Kept, not acted on by skiff's
    /// scheduler.
    pub topology_spread_constraints: Vec<Opaque>,
    /// Set the pod's hostname to its fully qualified domain name.
    #[serde(rename = "setHostnameAsFQDN")]
    pub set_hostname_as_fqdn: Option<bool>,
    /// Operating system the pod's containers need.
    pub os: Option<PodOs>,
    /// Whether the pod uses the host's user namespace. Default: true.
    pub host_users: Option<bool>,
    /// Gates that keep the pod from being scheduled while any remains.
    pub scheduling_gates: Vec<PodSchedulingGate>,
    /// Dynamic resource claims of the pod. Kept, not acted on.
    pub resource_claims: Vec<Opaque>,
    /// Pod-level resources (newer Kubernetes).
    pub resources: Option<ResourceRequirements>,
}

impl PodSpec {
    /// Init containers then containers.
    pub fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.init_containers.iter().chain(self.containers.iter())
    }

    /// Kubernetes' SetDefaults for a pod spec (also applied to pod templates). What Kubernetes
    /// defaults on pods only (not templates) is in [`Pod`]'s `set_defaults`.
    pub fn set_defaults(&mut self) {
        self.restart_policy.get_or_insert_with(|| "Always".into());
        self.termination_grace_period_seconds.get_or_insert(30);
        self.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
        self.scheduler_name
            .get_or_insert_with(|| "default-scheduler".into());
        self.security_context.get_or_insert_with(Default::default);
        if self.service_account_name.is_none() {
            self.service_account_name = self.service_account.clone();
        }
        for c in self
            .init_containers
            .iter_mut()
            .chain(self.containers.iter_mut())
        {
            c.set_defaults();
        }
        for c in &mut self.ephemeral_containers {
            c.set_defaults();
        }
        for v in &mut self.volumes {
            v.set_defaults();
        }
    }
}

/// core/v1 PodOS.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodOS")]
pub struct PodOs {
    pub name: String,
}

/// core/v1 PodSchedulingGate.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodSchedulingGate")]
pub struct PodSchedulingGate {
    pub name: String,
}

/// core/v1 PodReadinessGate.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodReadinessGate")]
pub struct PodReadinessGate {
    pub condition_type: String,
}

/// core/v1 HostAlias.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.HostAlias")]
#[schemars(description = "An entry of a pod's /etc/hosts.")]
pub struct HostAlias {
    /// IP address of the entry.
    pub ip: String,
    /// Hostnames for the address.
    pub hostnames: Vec<String>,
}

/// core/v1 PodDNSConfig.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodDNSConfig")]
pub struct PodDnsConfig {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<PodDnsConfigOption>,
}

/// core/v1 PodDNSConfigOption.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodDNSConfigOption")]
pub struct PodDnsConfigOption {
    pub name: String,
    pub value: Option<String>,
}

/// core/v1 Toleration.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Toleration")]
#[schemars(
    description = "A toleration lets a pod be scheduled on (or stay on) a node with a matching taint."
)]
pub struct Toleration {
    /// Taint key the toleration applies to; empty with operator Exists matches every key.
    pub key: Option<String>,
    /// `Exists` or `Equal` (the default).
    pub operator: Option<String>,
    /// Taint value to match with operator Equal.
    pub value: Option<String>,
    /// Taint effect to match: NoSchedule, PreferNoSchedule or NoExecute; empty matches all.
    pub effect: Option<String>,
    /// For NoExecute taints: seconds the pod stays on the node once the taint is added.
    /// Default: forever.
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes' ToleratesTaint).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        let effect = self.effect.as_deref().unwrap_or("");
        if !effect.is_empty() && effect != taint.effect {
            return false;
        }
        let key = self.key.as_deref().unwrap_or("");
        if !key.is_empty() && key != taint.key {
            return false;
        }
        match self.operator.as_deref().unwrap_or("Equal") {
            "Exists" => true,
            "Equal" | "" => {
                self.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
            _ => false,
        }
    }
}

/// core/v1 PodSecurityContext.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodSecurityContext")]
#[schemars(description = "Security options of a pod and defaults for its containers.")]
pub struct PodSecurityContext {
    pub se_linux_options: Option<Opaque>,
    pub windows_options: Option<Opaque>,
    /// UID the containers' processes run as, unless a container sets its own.
    pub run_as_user: Option<i64>,
    /// GID the containers' processes run as, unless a container sets its own.
    pub run_as_group: Option<i64>,
    /// Refuse to start containers that would run as UID 0.
    pub run_as_non_root: Option<bool>,
    /// Groups added to each container's first process.
    pub supplemental_groups: Vec<i64>,
    pub supplemental_groups_policy: Option<String>,
    /// Group that owns the pod's volumes and is added to each container's process.
    pub fs_group: Option<i64>,
    /// Namespaced sysctls set for the pod.
    pub sysctls: Vec<Sysctl>,
    /// When volume ownership is changed to fsGroup: OnRootMismatch or Always.
    pub fs_group_change_policy: Option<String>,
    pub seccomp_profile: Option<Opaque>,
    pub app_armor_profile: Option<Opaque>,
    pub se_linux_change_policy: Option<String>,
}

/// core/v1 Sysctl.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Sysctl")]
#[schemars(description = "A kernel parameter set for a pod.")]
pub struct Sysctl {
    /// Name of the parameter.
    pub name: String,
    /// Value of the parameter.
    pub value: String,
}

// ---------------------------------------------------------------------------------------
// Affinity

/// core/v1 Affinity.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Affinity")]
#[schemars(description = "Scheduling constraints relating a pod to nodes and to other pods.")]
pub struct Affinity {
    /// Rules on the labels of nodes the pod may or prefers to run on.
    pub node_affinity: Option<NodeAffinity>,
    /// Rules to place the pod near pods with given labels.
    pub pod_affinity: Option<PodAffinity>,
    /// Rules to keep the pod away from pods with given labels.
    pub pod_anti_affinity: Option<PodAffinity>,
}

/// core/v1 NodeAffinity.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeAffinity")]
pub struct NodeAffinity {
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
    pub preferred_during_scheduling_ignored_during_execution: Vec<PreferredSchedulingTerm>,
}

/// core/v1 NodeSelector: the terms are ORed.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeSelector")]
pub struct NodeSelector {
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// core/v1 NodeSelectorTerm: the requirements are ANDed.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeSelectorTerm")]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<NodeSelectorRequirement>,
    pub match_fields: Vec<NodeSelectorRequirement>,
}

/// core/v1 NodeSelectorRequirement: operator In, NotIn, Exists, DoesNotExist, Gt, Lt.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeSelectorRequirement")]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// core/v1 PreferredSchedulingTerm.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PreferredSchedulingTerm")]
pub struct PreferredSchedulingTerm {
    pub weight: i32,
    pub preference: NodeSelectorTerm,
}

/// core/v1 PodAffinity and PodAntiAffinity (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodAffinity")]
pub struct PodAffinity {
    pub required_during_scheduling_ignored_during_execution: Vec<PodAffinityTerm>,
    pub preferred_during_scheduling_ignored_during_execution: Vec<WeightedPodAffinityTerm>,
}

/// core/v1 PodAffinityTerm.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodAffinityTerm")]
pub struct PodAffinityTerm {
    pub label_selector: Option<LabelSelector>,
    pub namespaces: Vec<String>,
    pub topology_key: String,
    pub namespace_selector: Option<LabelSelector>,
    pub match_label_keys: Vec<String>,
    pub mismatch_label_keys: Vec<String>,
}

/// core/v1 WeightedPodAffinityTerm.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.WeightedPodAffinityTerm")]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub pod_affinity_term: PodAffinityTerm,
}

// ---------------------------------------------------------------------------------------
// Volumes

/// core/v1 Volume: a name and exactly one source.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Volume")]
#[schemars(
    description = "A named volume of a pod that its containers can mount: exactly one of the sources."
)]
pub struct Volume {
    /// Name of the volume, unique within the pod (a DNS label).
    pub name: String,
    /// A file or directory of the node.
    pub host_path: Option<HostPathVolumeSource>,
    /// An empty directory that lives as long as the pod.
    pub empty_dir: Option<EmptyDirVolumeSource>,
    /// The keys of a Secret as files.
    pub secret: Option<SecretVolumeSource>,
    /// The keys of a ConfigMap as files.
    pub config_map: Option<ConfigMapVolumeSource>,
    /// Fields of the pod as files.
    #[serde(rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiVolumeSource>,
    /// Several sources (ServiceAccount token, ConfigMaps, Secrets, pod fields) in one
    /// directory.
    pub projected: Option<ProjectedVolumeSource>,
    /// A PersistentVolumeClaim in the pod's namespace. Kept, not acted on.
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// An NFS share. Kept, not acted on.
    pub nfs: Option<Opaque>,
    /// A CSI volume. Kept, not acted on.
    pub csi: Option<Opaque>,
    /// A generic ephemeral volume. Kept, not acted on.
    pub ephemeral: Option<Opaque>,
    /// An OCI image as a volume. Kept, not acted on.
    pub image: Option<Opaque>,
}

impl Volume {
    /// The names of the sources set, in field order (validation wants exactly one).
    pub fn source_names(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let flags = [
            (self.host_path.is_some(), "hostPath"),
            (self.empty_dir.is_some(), "emptyDir"),
            (self.secret.is_some(), "secret"),
            (self.config_map.is_some(), "configMap"),
            (self.downward_api.is_some(), "downwardAPI"),
            (self.projected.is_some(), "projected"),
            (
                self.persistent_volume_claim.is_some(),
                "persistentVolumeClaim",
            ),
            (self.nfs.is_some(), "nfs"),
            (self.csi.is_some(), "csi"),
            (self.ephemeral.is_some(), "ephemeral"),
            (self.image.is_some(), "image"),
        ];
        for (set, name) in flags {
            if set {
                out.push(name);
            }
        }
        out
    }

    fn set_defaults(&mut self) {
        const DEFAULT_MODE: i32 = 0o644;
        if let Some(s) = &mut self.secret {
            s.default_mode.get_or_insert(DEFAULT_MODE);
        }
        if let Some(c) = &mut self.config_map {
            c.default_mode.get_or_insert(DEFAULT_MODE);
        }
        if let Some(d) = &mut self.downward_api {
            d.default_mode.get_or_insert(DEFAULT_MODE);
            for item in &mut d.items {
                if let Some(f) = &mut item.field_ref {
                    f.api_version.get_or_insert_with(|| "v1".into());
                }
            }
        }
        if let Some(h) = &mut self.host_path {
            h.type_.get_or_insert_with(String::new);
        }
        if let Some(p) = &mut self.projected {
            p.default_mode.get_or_insert(DEFAULT_MODE);
            for s in &mut p.sources {
                if let Some(t) = &mut s.service_account_token {
                    t.expiration_seconds.get_or_insert(3600);
                }
                if let Some(d) = &mut s.downward_api {
                    for item in &mut d.items {
                        if let Some(f) = &mut item.field_ref {
                            f.api_version.get_or_insert_with(|| "v1".into());
                        }
                    }
                }
            }
        }
    }
}

/// core/v1 ProjectedVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ProjectedVolumeSource")]
#[schemars(description = "Several sources projected into one directory.")]
pub struct ProjectedVolumeSource {
    /// The sources, each written into the volume.
    pub sources: Vec<VolumeProjection>,
    /// Mode bits of the files (0000 to 0777). Default: 0644.
    pub default_mode: Option<i32>,
}

/// core/v1 VolumeProjection: exactly one source.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.VolumeProjection")]
pub struct VolumeProjection {
    pub secret: Option<SecretProjection>,
    pub config_map: Option<ConfigMapProjection>,
    #[serde(rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiProjection>,
    pub service_account_token: Option<ServiceAccountTokenProjection>,
    /// A ClusterTrustBundle (alpha). Kept, not acted on.
    pub cluster_trust_bundle: Option<Opaque>,
}

/// core/v1 SecretProjection.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.SecretProjection")]
pub struct SecretProjection {
    pub name: Option<String>,
    pub items: Vec<KeyToPath>,
    pub optional: Option<bool>,
}

/// core/v1 ConfigMapProjection.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ConfigMapProjection")]
pub struct ConfigMapProjection {
    pub name: Option<String>,
    pub items: Vec<KeyToPath>,
    pub optional: Option<bool>,
}

/// core/v1 DownwardAPIProjection.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.DownwardAPIProjection")]
pub struct DownwardApiProjection {
    pub items: Vec<DownwardApiVolumeFile>,
}

/// core/v1 ServiceAccountTokenProjection: a token of the pod's ServiceAccount, bound to
/// the pod, renewed by the node before it expires.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ServiceAccountTokenProjection")]
pub struct ServiceAccountTokenProjection {
    /// The audience the token is for; empty means the API server's own.
    pub audience: Option<String>,
    /// Requested lifetime. Default: 3600.
    pub expiration_seconds: Option<i64>,
    /// Relative path of the file.
    pub path: String,
}

/// core/v1 HostPathVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.HostPathVolumeSource")]
#[schemars(description = "A file or directory of the node mapped into the pod.")]
pub struct HostPathVolumeSource {
    /// Path on the node.
    pub path: String,
    /// What must exist at the path: "", DirectoryOrCreate, Directory, FileOrCreate, File,
    /// Socket, CharDevice or BlockDevice. Default: "" (no check).
    #[serde(rename = "type")]
    pub type_: Option<String>,
}

/// core/v1 EmptyDirVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EmptyDirVolumeSource")]
#[schemars(description = "An empty directory that lives as long as the pod.")]
pub struct EmptyDirVolumeSource {
    /// Storage medium: "" (the node's disk) or Memory (tmpfs).
    pub medium: Option<String>,
    /// Most storage the volume may use.
    pub size_limit: Option<Quantity>,
}

/// core/v1 KeyToPath.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.KeyToPath")]
#[schemars(description = "A key of a ConfigMap or Secret and the file it becomes.")]
pub struct KeyToPath {
    /// The key to project.
    pub key: String,
    /// Relative path of the file; must not contain "..".
    pub path: String,
    /// Mode bits of the file. Default: the volume's defaultMode.
    pub mode: Option<i32>,
}

/// core/v1 SecretVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.SecretVolumeSource")]
#[schemars(description = "The keys of a Secret as files.")]
pub struct SecretVolumeSource {
    /// Name of the Secret in the pod's namespace.
    pub secret_name: Option<String>,
    /// Keys to project and the paths of their files; by default every key becomes a file named
    /// after it.
    pub items: Vec<KeyToPath>,
    /// Mode bits of the files (0000 to 0777). Default: 0644.
    pub default_mode: Option<i32>,
    /// Whether the Secret or its keys may be missing.
    pub optional: Option<bool>,
}

/// core/v1 ConfigMapVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ConfigMapVolumeSource")]
#[schemars(description = "The keys of a ConfigMap as files.")]
pub struct ConfigMapVolumeSource {
    /// Name of the ConfigMap in the pod's namespace.
    pub name: Option<String>,
    /// Keys to project and the paths of their files; by default every key becomes a file named
    /// after it.
    pub items: Vec<KeyToPath>,
    /// Mode bits of the files (0000 to 0777). Default: 0644.
    pub default_mode: Option<i32>,
    /// Whether the ConfigMap or its keys may be missing.
    pub optional: Option<bool>,
}

/// core/v1 DownwardAPIVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.DownwardAPIVolumeSource")]
pub struct DownwardApiVolumeSource {
    pub items: Vec<DownwardApiVolumeFile>,
    pub default_mode: Option<i32>,
}

/// core/v1 DownwardAPIVolumeFile.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.DownwardAPIVolumeFile")]
pub struct DownwardApiVolumeFile {
    pub path: String,
    pub field_ref: Option<ObjectFieldSelector>,
    pub resource_field_ref: Option<ResourceFieldSelector>,
    pub mode: Option<i32>,
}

/// core/v1 PersistentVolumeClaimVolumeSource (kept; skiff has no volume provisioner).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PersistentVolumeClaimVolumeSource")]
pub struct PersistentVolumeClaimVolumeSource {
    pub claim_name: String,
    pub read_only: Option<bool>,
}

// ---------------------------------------------------------------------------------------
// Containers

/// core/v1 Container.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Container")]
#[schemars(description = "A single application container of a pod.")]
pub struct Container {
    /// Name of the container, unique within the pod (a DNS label). Cannot be updated.
    pub name: String,
    /// Container image name, such as busybox:1.36 or registry.example/app@sha256:....
    pub image: Option<String>,
    /// Entrypoint array, not run in a shell. Replaces the image's ENTRYPOINT; $(VAR) references
    /// to the container's environment are expanded.
    pub command: Vec<String>,
    /// Arguments to the entrypoint. Replace the image's CMD; $(VAR) references are expanded.
    pub args: Vec<String>,
    /// Working directory of the container. Default: the image's.
    pub working_dir: Option<String>,
    /// Ports the container exposes. Informational, except for hostPort, which maps a node port
    /// to the container.
    pub ports: Vec<ContainerPort>,
    /// Sources (ConfigMaps, Secrets) whose keys all become environment variables.
    pub env_from: Vec<EnvFromSource>,
    /// Environment variables set in the container.
    pub env: Vec<EnvVar>,
    /// Compute resources (cpu, memory) the container requests and may use at most.
    pub resources: Option<ResourceRequirements>,
    /// How the container reacts to a change of its resources. Kept, not acted on.
    pub resize_policy: Vec<Opaque>,
    /// Only `Always`, only on init containers: a sidecar.
    pub restart_policy: Option<String>,
    /// Volumes of the pod mounted into the container's filesystem.
    pub volume_mounts: Vec<VolumeMount>,
    /// Block devices the container uses. Kept, not acted on.
    pub volume_devices: Vec<Opaque>,
    /// Periodic check of the container's health; the container is restarted when it fails.
    pub liveness_probe: Option<Probe>,
    /// Periodic check of whether the container can serve; a pod that is not ready is removed
    /// from service endpoints.
    pub readiness_probe: Option<Probe>,
    /// Check that must succeed once before the other probes begin.
    pub startup_probe: Option<Probe>,
    /// Actions run after the container starts and before it stops. Kept, not acted on.
    pub lifecycle: Option<Opaque>,
    /// File whose contents are reported as the container's termination message. Default:
    /// /dev/termination-log.
    pub termination_message_path: Option<String>,
    /// Where the termination message comes from: File or FallbackToLogsOnError. Default: File.
    pub termination_message_policy: Option<String>,
    /// When to pull the image: Always, Never or IfNotPresent. Default: Always for :latest
    /// images, IfNotPresent otherwise.
    pub image_pull_policy: Option<String>,
    /// Security options of the container, overriding those of the pod.
    pub security_context: Option<SecurityContext>,
    /// Keep a stdin buffer open for the container.
    pub stdin: Option<bool>,
    /// Close stdin after the first attach session ends.
    pub stdin_once: Option<bool>,
    /// Allocate a TTY for the container (needs stdin).
    pub tty: Option<bool>,
}

impl Container {
    /// `Always` for an untagged or `:latest` image, `IfNotPresent` otherwise (a digest
    /// counts as a tag).
    pub fn default_pull_policy(image: &str) -> &'static str {
        if image.contains('@') {
            return "IfNotPresent";
        }
        // The tag follows the last ':' after the last '/' (a registry port is not a tag).
        let last = image.rsplit('/').next().unwrap_or(image);
        match last.rsplit_once(':') {
            Some((_, "latest")) | None => "Always",
            Some(_) => "IfNotPresent",
        }
    }

    fn set_defaults(&mut self) {
        if self.image_pull_policy.is_none() {
            let image = self.image.as_deref().unwrap_or("");
            self.image_pull_policy = Some(Container::default_pull_policy(image).into());
        }
        self.termination_message_path
            .get_or_insert_with(|| "/dev/termination-log".into());
        self.termination_message_policy
            .get_or_insert_with(|| "File".into());
        for p in &mut self.ports {
            p.protocol.get_or_insert_with(|| "TCP".into());
        }
        for p in [
            &mut self.liveness_probe,
            &mut self.readiness_probe,
            &mut self.startup_probe,
        ]
        .into_iter()
        .flatten()
        {
            p.set_defaults();
        }
        for e in &mut self.env {
            if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
                f.api_version.get_or_insert_with(|| "v1".into());
            }
        }
        // Kubernetes: a limit without a request requests the limit.
        if let Some(r) = &mut self.resources {
            for (name, q) in &r.limits {
                r.requests.entry(name.clone()).or_insert_with(|| q.clone());
            }
        }
    }
}

/// core/v1 EphemeralContainer: a container added to a running pod through the
/// `pods/ephemeralcontainers` subresource (`kubectl debug`), run once and never restarted.
/// The fields of [`Container`] (ports, probes, lifecycle and resources are refused on it),
/// then `targetContainerName`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EphemeralContainer")]
#[schemars(
    description = "A container added to a running pod for debugging; run once, never restarted."
)]
pub struct EphemeralContainer {
    /// Name of the container, unique within the pod (a DNS label). Cannot be updated.
    pub name: String,
    /// Container image name, such as busybox:1.36 or registry.example/app@sha256:....
    pub image: Option<String>,
    /// Entrypoint array, not run in a shell. Replaces the image's ENTRYPOINT; $(VAR) references
    /// to the container's environment are expanded.
    pub command: Vec<String>,
    /// Arguments to the entrypoint. Replace the image's CMD; $(VAR) references are expanded.
    pub args: Vec<String>,
    /// Working directory of the container. Default: the image's.
    pub working_dir: Option<String>,
    /// Ports the container exposes. Informational, except for hostPort, which maps a node port
    /// to the container.
    pub ports: Vec<ContainerPort>,
    /// Sources (ConfigMaps, Secrets) whose keys all become environment variables.
    pub env_from: Vec<EnvFromSource>,
    /// Environment variables set in the container.
    pub env: Vec<EnvVar>,
    /// Compute resources (cpu, memory) the container requests and may use at most.
    pub resources: Option<ResourceRequirements>,
    /// How the container reacts to a change of its resources. Kept, not acted on.
    pub resize_policy: Vec<Opaque>,
    /// Only `Always`, only on init containers: a sidecar.
    pub restart_policy: Option<String>,
    /// Volumes of the pod mounted into the container's filesystem.
    pub volume_mounts: Vec<VolumeMount>,
    /// Block devices the container uses. Kept, not acted on.
    pub volume_devices: Vec<Opaque>,
    /// Periodic check of the container's health; the container is restarted when it fails.
    pub liveness_probe: Option<Probe>,
    /// Periodic check of whether the container can serve; a pod that is not ready is removed
    /// from service endpoints.
    pub readiness_probe: Option<Probe>,
    /// Check that must succeed once before the other probes begin.
    pub startup_probe: Option<Probe>,
    /// Actions run after the container starts and before it stops. Kept, not acted on.
    pub lifecycle: Option<Opaque>,
    /// File whose contents are reported as the container's termination message. Default:
    /// /dev/termination-log.
    pub termination_message_path: Option<String>,
    /// Where the termination message comes from: File or FallbackToLogsOnError. Default: File.
    pub termination_message_policy: Option<String>,
    /// When to pull the image: Always, Never or IfNotPresent. Default: Always for :latest
    /// images, IfNotPresent otherwise.
    pub image_pull_policy: Option<String>,
    /// Security options of the container, overriding those of the pod.
    pub security_context: Option<SecurityContext>,
    /// Keep a stdin buffer open for the container.
    pub stdin: Option<bool>,
    /// Close stdin after the first attach session ends.
    pub stdin_once: Option<bool>,
    /// Allocate a TTY for the container (needs stdin).
    pub tty: Option<bool>,
    /// Name of a container of the pod whose namespaces (the PID namespace) the ephemeral
    /// container joins. Default: only the pod's namespaces.
    pub target_container_name: Option<String>,
}

impl EphemeralContainer {
    /// The container the node runs: every field but `targetContainerName`.
    pub fn to_container(&self) -> Container {
        Container {
            name: self.name.clone(),
            image: self.image.clone(),
            command: self.command.clone(),
            args: self.args.clone(),
            working_dir: self.working_dir.clone(),
            ports: self.ports.clone(),
            env_from: self.env_from.clone(),
            env: self.env.clone(),
            resources: self.resources.clone(),
            resize_policy: self.resize_policy.clone(),
            restart_policy: self.restart_policy.clone(),
            volume_mounts: self.volume_mounts.clone(),
            volume_devices: self.volume_devices.clone(),
            liveness_probe: self.liveness_probe.clone(),
            readiness_probe: self.readiness_probe.clone(),
            startup_probe: self.startup_probe.clone(),
            lifecycle: self.lifecycle.clone(),
            termination_message_path: self.termination_message_path.clone(),
            termination_message_policy: self.termination_message_policy.clone(),
            image_pull_policy: self.image_pull_policy.clone(),
            security_context: self.security_context.clone(),
            stdin: self.stdin,
            stdin_once: self.stdin_once,
            tty: self.tty,
        }
    }

    /// Kubernetes' defaults, as for a container.
    pub fn set_defaults(&mut self) {
        let mut c = self.to_container();
        c.set_defaults();
        self.image_pull_policy = c.image_pull_policy;
        self.termination_message_path = c.termination_message_path;
        self.termination_message_policy = c.termination_message_policy;
        self.ports = c.ports;
        self.liveness_probe = c.liveness_probe;
        self.readiness_probe = c.readiness_probe;
        self.startup_probe = c.startup_probe;
        self.env = c.env;
        self.resources = c.resources;
    }
}

/// A list kept in postcard as [`Opaque`] trees (JSON) instead of its typed encoding: the
/// store held `spec.ephemeralContainers` and `status.ephemeralContainerStatuses` as `Opaque`
/// before they were typed, so stored pods keep decoding. In JSON it is the typed list.
pub(crate) mod opaque_in_postcard {
    use serde::de::{DeserializeOwned, Error as _};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::meta::Opaque;

    pub fn serialize<S, T>(v: &[T], s: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
        T: Serialize,
    {
        if s.is_human_readable() {
            return v.serialize(s);
        }
        let trees = v
            .iter()
            .map(|x| serde_json::to_value(x).map(|j| Opaque::from(&j)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(S::Error::custom)?;
        trees.serialize(s)
    }

    pub fn deserialize<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: DeserializeOwned,
    {
        if d.is_human_readable() {
            return Vec::<T>::deserialize(d);
        }
        Vec::<Opaque>::deserialize(d)?
            .iter()
            .map(|o| serde_json::from_value(serde_json::Value::from(o)).map_err(D::Error::custom))
            .collect()
    }
}

/// core/v1 ContainerPort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ContainerPort")]
#[schemars(description = "A network port of a container.")]
pub struct ContainerPort {
    /// Name of the port (an IANA_SVC_NAME), unique within the pod; services may refer to it.
    pub name: Option<String>,
    /// Port on the node forwarded to containerPort.
    pub host_port: Option<i32>,
    /// Port number the container listens on (1-65535).
    pub container_port: i32,
    /// Protocol: TCP, UDP or SCTP. Default: TCP.
    pub protocol: Option<String>,
    /// Node address the host port binds to.
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
}

/// core/v1 EnvVar.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EnvVar")]
#[schemars(description = "An environment variable of a container.")]
pub struct EnvVar {
    /// Name of the variable.
    pub name: String,
    /// Value of the variable; $(VAR) references to earlier variables are expanded. Default: "".
    pub value: Option<String>,
    /// Source of the value, when value is not given.
    pub value_from: Option<EnvVarSource>,
}

/// core/v1 EnvVarSource: exactly one of the references.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EnvVarSource")]
#[schemars(
    description = "Where the value of an environment variable comes from: one of the fields."
)]
pub struct EnvVarSource {
    /// A field of the pod (metadata.name, metadata.namespace, spec.nodeName, status.podIP,
    /// ...).
    pub field_ref: Option<ObjectFieldSelector>,
    /// A resource limit or request of a container.
    pub resource_field_ref: Option<ResourceFieldSelector>,
    /// A key of a ConfigMap.
    pub config_map_key_ref: Option<KeySelector>,
    /// A key of a Secret.
    pub secret_key_ref: Option<KeySelector>,
}

/// core/v1 ObjectFieldSelector (`metadata.name`, `status.podIP`, ...).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ObjectFieldSelector")]
#[schemars(description = "Selects a field of the pod.")]
pub struct ObjectFieldSelector {
    /// Version of the schema the path is in. Default: v1.
    pub api_version: Option<String>,
    /// Path of the field, such as metadata.name or status.podIP.
    pub field_path: String,
}

/// core/v1 ResourceFieldSelector (`limits.cpu`, ...).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ResourceFieldSelector")]
#[schemars(description = "Selects a resource limit or request of a container.")]
pub struct ResourceFieldSelector {
    /// Container whose resources are read (for volumes; env uses its own container).
    pub container_name: Option<String>,
    /// Resource to read, such as limits.cpu or requests.memory.
    pub resource: String,
    /// Unit the value is expressed in. Default: 1.
    pub divisor: Option<Quantity>,
}

/// core/v1 ConfigMapKeySelector and SecretKeySelector (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ConfigMapKeySelector")]
#[schemars(description = "Selects a key of a ConfigMap or Secret.")]
pub struct KeySelector {
    /// Name of the ConfigMap or Secret in the pod's namespace.
    pub name: Option<String>,
    /// The key to select.
    pub key: String,
    /// Whether the object or its key may be missing.
    pub optional: Option<bool>,
}

/// core/v1 EnvFromSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EnvFromSource")]
#[schemars(description = "A ConfigMap or Secret whose keys all become environment variables.")]
pub struct EnvFromSource {
    /// Prefix added to each key to make the variable's name.
    pub prefix: Option<String>,
    /// The ConfigMap to read.
    pub config_map_ref: Option<EnvFromReference>,
    /// The Secret to read.
    pub secret_ref: Option<EnvFromReference>,
}

/// core/v1 ConfigMapEnvSource and SecretEnvSource (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ConfigMapEnvSource")]
pub struct EnvFromReference {
    /// Name of the ConfigMap or Secret in the pod's namespace.
    pub name: Option<String>,
    /// Whether the object may be missing.
    pub optional: Option<bool>,
}

/// core/v1 ResourceRequirements.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ResourceRequirements")]
#[schemars(description = "Compute resources a container requests and its limits.")]
pub struct ResourceRequirements {
    /// Most of each resource the container may use, such as cpu: 500m, memory: 128Mi.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub limits: BTreeMap<String, Quantity>,
    /// Resources the container needs; the scheduler places the pod on a node with room for
    /// them. Default: the limits.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub requests: BTreeMap<String, Quantity>,
    /// Dynamic resource claims used by the container. Kept, not acted on.
    pub claims: Vec<Opaque>,
}

/// core/v1 VolumeMount.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.VolumeMount")]
#[schemars(description = "A mount of a pod volume into a container.")]
pub struct VolumeMount {
    /// Name of the volume (one of the pod's volumes).
    pub name: String,
    /// Mount read-only. Default: false.
    pub read_only: Option<bool>,
    /// Whether a read-only mount is read-only recursively.
    pub recursive_read_only: Option<String>,
    /// Path in the container where the volume is mounted; must not contain ":".
    pub mount_path: String,
    /// Path within the volume to mount instead of its root.
    pub sub_path: Option<String>,
    /// How mounts propagate between host and container: None, HostToContainer or Bidirectional.
    pub mount_propagation: Option<String>,
    /// Like subPath, with $(VAR) references to the container's environment expanded.
    pub sub_path_expr: Option<String>,
}

/// core/v1 Probe: exactly one handler plus timing.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Probe")]
#[schemars(
    description = "A check of a container, run periodically: exactly one of exec, httpGet, tcpSocket or grpc."
)]
pub struct Probe {
    /// Run a command in the container; exit status 0 is success.
    pub exec: Option<ExecAction>,
    /// Send an HTTP GET; a status from 200 to 399 is success.
    pub http_get: Option<HttpGetAction>,
    /// Open a TCP connection; success if it connects.
    pub tcp_socket: Option<TcpSocketAction>,
    /// Call the gRPC health service.
    pub grpc: Option<GrpcAction>,
    /// Seconds after the container starts before the first probe.
    pub initial_delay_seconds: Option<i32>,
    /// Seconds after which a probe times out. Default: 1.
    pub timeout_seconds: Option<i32>,
    /// Seconds between probes. Default: 10.
    pub period_seconds: Option<i32>,
    /// Consecutive successes needed after a failure to count as success. Default: 1.
    pub success_threshold: Option<i32>,
    /// Consecutive failures needed to count as failure. Default: 3.
    pub failure_threshold: Option<i32>,
    /// Grace period for stopping the container when the probe fails.
    pub termination_grace_period_seconds: Option<i64>,
}

impl Probe {
    /// The names of the handlers set (validation wants exactly one).
    pub fn handler_names(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.exec.is_some() {
            out.push("exec");
        }
        if self.http_get.is_some() {
            out.push("httpGet");
        }
        if self.tcp_socket.is_some() {
            out.push("tcpSocket");
        }
        if self.grpc.is_some() {
            out.push("grpc");
        }
        out
    }

    fn set_defaults(&mut self) {
        self.timeout_seconds.get_or_insert(1);
        self.period_seconds.get_or_insert(10);
        self.success_threshold.get_or_insert(1);
        self.failure_threshold.get_or_insert(3);
        if let Some(h) = &mut self.http_get {
            h.scheme.get_or_insert_with(|| "HTTP".into());
            h.path.get_or_insert_with(|| "/".into());
        }
        if let Some(g) = &mut self.grpc {
            g.service.get_or_insert_with(String::new);
        }
    }
}

/// core/v1 ExecAction.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ExecAction")]
#[schemars(description = "A command a probe runs in the container.")]
pub struct ExecAction {
    /// Command line, run directly (not in a shell); exit status 0 is success.
    pub command: Vec<String>,
}

/// core/v1 HTTPGetAction.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.HTTPGetAction")]
#[schemars(description = "An HTTP GET request a probe sends.")]
pub struct HttpGetAction {
    /// Path of the request.
    pub path: Option<String>,
    /// Port (number or container port name) to connect to.
    pub port: IntOrString,
    /// Host to connect to. Default: the pod's IP.
    pub host: Option<String>,
    /// HTTP or HTTPS. Default: HTTP.
    pub scheme: Option<String>,
    /// Headers of the request.
    pub http_headers: Vec<HttpHeader>,
}

/// core/v1 HTTPHeader.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.HTTPHeader")]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

/// core/v1 TCPSocketAction.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.TCPSocketAction")]
#[schemars(description = "A TCP connection a probe opens.")]
pub struct TcpSocketAction {
    /// Port (number or container port name) to connect to.
    pub port: IntOrString,
    /// Host to connect to. Default: the pod's IP.
    pub host: Option<String>,
}

/// core/v1 GRPCAction.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.GRPCAction")]
pub struct GrpcAction {
    pub port: i32,
    pub service: Option<String>,
}

/// core/v1 SecurityContext (container level).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.SecurityContext")]
#[schemars(
    description = "Security options of a container; where they overlap with the pod's, the container's win."
)]
pub struct SecurityContext {
    /// Capabilities to add to or drop from the container's default set.
    pub capabilities: Option<Capabilities>,
    /// Run the container privileged: like root on the host. Default: false.
    pub privileged: Option<bool>,
    /// SELinux context of the container. Kept, not acted on.
    pub se_linux_options: Option<Opaque>,
    /// Windows-specific options. Kept, not acted on.
    pub windows_options: Option<Opaque>,
    /// UID the container's process runs as. Default: the image's.
    pub run_as_user: Option<i64>,
    /// GID the container's process runs as. Default: the runtime's.
    pub run_as_group: Option<i64>,
    /// Refuse to start the container if it would run as UID 0.
    pub run_as_non_root: Option<bool>,
    /// Mount the container's root filesystem read-only. Default: false.
    pub read_only_root_filesystem: Option<bool>,
    /// Whether a process may gain more privileges than its parent (no_new_privs). Default:
    /// true.
    pub allow_privilege_escalation: Option<bool>,
    /// Type of /proc mount: Default or Unmasked.
    pub proc_mount: Option<String>,
    /// Seccomp profile of the container. Kept, not acted on.
    pub seccomp_profile: Option<Opaque>,
    /// AppArmor profile of the container. Kept, not acted on.
    pub app_armor_profile: Option<Opaque>,
}

/// core/v1 Capabilities.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Capabilities")]
#[schemars(description = "Linux capabilities to add to or drop from a container.")]
pub struct Capabilities {
    /// Capabilities to add, such as NET_ADMIN.
    pub add: Vec<String>,
    /// Capabilities to remove, such as ALL.
    pub drop: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// Pod

/// core/v1 Pod.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Pod")]
#[schemars(
    description = "Pod is a group of containers that run together on one node and share its network namespace and volumes."
)]
pub struct Pod {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired behaviour of the pod.
    pub spec: PodSpec,
    /// Most recently observed state of the pod, written by the node that runs it. Read-only.
    pub status: PodStatus,
}

/// core/v1 PodStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodStatus")]
#[schemars(
    description = "The most recently observed state of a pod, reported by the node that runs it."
)]
pub struct PodStatus {
    /// The pod generation the status was written for.
    pub observed_generation: Option<i64>,
    /// Pending, Running, Succeeded, Failed, Unknown.
    pub phase: Option<String>,
    /// Current service state of the pod (PodScheduled, Initialized, ContainersReady, Ready).
    pub conditions: Vec<PodCondition>,
    /// Human-readable message on why the pod is in this condition.
    pub message: Option<String>,
    /// Brief CamelCase reason for the pod's state, such as Evicted.
    pub reason: Option<String>,
    /// Node the pod may run on once preemption makes room.
    pub nominated_node_name: Option<String>,
    /// Address of the node the pod runs on.
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
    /// Addresses of the node the pod runs on.
    #[serde(rename = "hostIPs")]
    pub host_ips: Vec<HostIp>,
    /// Address allocated to the pod, routable at least within the cluster.
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    /// Addresses allocated to the pod (one per IP family).
    #[serde(rename = "podIPs")]
    pub pod_ips: Vec<HostIp>,
    /// When the node acknowledged the pod, before its images were pulled.
    pub start_time: Option<Time>,
    /// Status of each init container.
    pub init_container_statuses: Vec<ContainerStatus>,
    /// Status of each app container.
    pub container_statuses: Vec<ContainerStatus>,
    /// Quality of service class from the containers' requests and limits: Guaranteed, Burstable
    /// or BestEffort.
    pub qos_class: Option<String>,
    /// Status of each ephemeral container.
    #[serde(with = "opaque_in_postcard")]
    #[schemars(with = "Vec<ContainerStatus>")]
    pub ephemeral_container_statuses: Vec<ContainerStatus>,
    pub resize: Option<String>,
    pub resource_claim_statuses: Vec<Opaque>,
}

impl PodStatus {
    /// The condition of `type_`, if reported.
    pub fn condition(&self, type_: &str) -> Option<&PodCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// core/v1 HostIP and PodIP (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.HostIP")]
pub struct HostIp {
    pub ip: String,
}

/// core/v1 PodCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.PodCondition")]
#[schemars(description = "One aspect of a pod's state.")]
pub struct PodCondition {
    /// Type of the condition: PodScheduled, Initialized, ContainersReady or Ready.
    #[serde(rename = "type")]
    pub type_: String,
    pub observed_generation: Option<i64>,
    /// True, False or Unknown.
    pub status: String,
    /// When the condition was last probed.
    pub last_probe_time: Option<Time>,
    /// When the condition last changed status.
    pub last_transition_time: Option<Time>,
    /// Brief CamelCase reason for the last transition.
    pub reason: Option<String>,
    /// Human-readable details of the last transition.
    pub message: Option<String>,
}

/// core/v1 ContainerStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ContainerStatus")]
#[schemars(description = "The state of one container of a pod.")]
pub struct ContainerStatus {
    /// Name of the container.
    pub name: String,
    /// Current state of the container.
    pub state: Option<ContainerState>,
    /// State of the container's last termination, if any.
    pub last_state: Option<ContainerState>,
    /// Whether the container passes its readiness probe.
    pub ready: bool,
    /// Number of times the container has been restarted.
    pub restart_count: i32,
    /// Image the container runs.
    pub image: String,
    /// ID (digest) of the image the container runs.
    #[serde(rename = "imageID")]
    pub image_id: String,
    /// ID of the container, as <runtime>://<id>.
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
    /// Whether the container has passed its startup probe.
    pub started: Option<bool>,
    /// Resources the node allocated to the container.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    /// Resources the container is configured with.
    pub resources: Option<ResourceRequirements>,
    pub volume_mounts: Vec<Opaque>,
    pub user: Option<Opaque>,
    pub allocated_resources_status: Vec<Opaque>,
    pub stop_signal: Option<String>,
}

/// core/v1 ContainerState: at most one of the three.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ContainerState")]
#[schemars(description = "State of a container: exactly one of waiting, running or terminated.")]
pub struct ContainerState {
    /// The container is not running yet.
    pub waiting: Option<ContainerStateWaiting>,
    /// The container is running.
    pub running: Option<ContainerStateRunning>,
    /// The container has stopped.
    pub terminated: Option<ContainerStateTerminated>,
}

/// core/v1 ContainerStateWaiting.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ContainerStateWaiting")]
pub struct ContainerStateWaiting {
    /// Brief reason the container is not running yet, such as ContainerCreating or
    /// CrashLoopBackOff.
    pub reason: Option<String>,
    /// Details on why the container is not running yet.
    pub message: Option<String>,
}

/// core/v1 ContainerStateRunning.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ContainerStateRunning")]
pub struct ContainerStateRunning {
    /// When the container last (re)started.
    pub started_at: Option<Time>,
}

/// core/v1 ContainerStateTerminated.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ContainerStateTerminated")]
pub struct ContainerStateTerminated {
    /// Exit status of the container's last run.
    pub exit_code: i32,
    /// Signal that ended the container, if any.
    pub signal: Option<i32>,
    /// Brief reason the container stopped, such as Completed or Error.
    pub reason: Option<String>,
    /// Details on why the container stopped.
    pub message: Option<String>,
    /// When the container's last run started.
    pub started_at: Option<Time>,
    /// When the container's last run ended.
    pub finished_at: Option<Time>,
    /// ID of the container, as <runtime>://<id>.
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
}

fn opt(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

impl Resource for Pod {
    const KIND: Kind = Kind::Pod;
    crate::resource_basics!(Pod);
    spec_and_status!();

    fn set_defaults(&mut self) {
        self.spec.set_defaults();
        // Kubernetes defaults these on pods only, so that they do not show in (and change)
        // the pod templates of Deployments and other workloads.
        self.spec.enable_service_links.get_or_insert(true);
        let spec = &mut self.spec;
        for c in spec
            .init_containers
            .iter_mut()
            .chain(spec.containers.iter_mut())
        {
            // A limit without a request requests the limit.
            if let Some(r) = &mut c.resources {
                for (name, limit) in &r.limits {
                    r.requests
                        .entry(name.clone())
                        .or_insert_with(|| limit.clone());
                }
            }
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Pod);
        errs.extend(validation::validate_pod_spec(&self.spec, "spec"));
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        Some(match path {
            "spec.nodeName" => opt(&self.spec.node_name),
            "spec.restartPolicy" => opt(&self.spec.restart_policy),
            "spec.schedulerName" => opt(&self.spec.scheduler_name),
            "spec.serviceAccountName" => opt(&self.spec.service_account_name),
            "spec.hostNetwork" => self.spec.host_network.unwrap_or(false).to_string(),
            "status.phase" => opt(&self.status.phase),
            "status.podIP" => opt(&self.status.pod_ip),
            "status.nominatedNodeName" => opt(&self.status.nominated_node_name),
            _ => return None,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Namespace

/// core/v1 Namespace.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Namespace")]
#[schemars(description = "Namespace scopes the names of the objects it contains.")]
pub struct Namespace {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Behaviour of the namespace.
    pub spec: NamespaceSpec,
    /// Most recently observed state of the namespace. Read-only.
    pub status: NamespaceStatus,
}

/// core/v1 NamespaceSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NamespaceSpec")]
#[schemars(description = "Behaviour of a namespace.")]
pub struct NamespaceSpec {
    /// Cleanups that must finish before the namespace is removed.
    pub finalizers: Vec<String>,
}

/// core/v1 NamespaceStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NamespaceStatus")]
#[schemars(description = "The most recently observed state of a namespace.")]
pub struct NamespaceStatus {
    /// Active or Terminating.
    pub phase: Option<String>,
    /// Observations of the namespace's state.
    pub conditions: Vec<NamespaceCondition>,
}

/// core/v1 NamespaceCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NamespaceCondition")]
pub struct NamespaceCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub last_transition_time: Option<Time>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// The label Kubernetes puts on every namespace, set to the namespace's name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

impl Resource for Namespace {
    const KIND: Kind = Kind::Namespace;
    crate::resource_basics!(Namespace);
    spec_and_status!();

    fn set_defaults(&mut self) {
        // Kubernetes labels every named namespace with its own name (so that namespace
        // selectors can pick namespaces by name); the label cannot be removed or changed.
        if !self.metadata.name.is_empty() {
            self.metadata
                .labels
                .insert(NAMESPACE_NAME_LABEL.into(), self.metadata.name.clone());
        }
        if self.spec.finalizers.is_empty() {
            self.spec.finalizers.push("kubernetes".into());
        }
        self.status.phase.get_or_insert_with(|| "Active".into());
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Namespace);
        for (i, f) in self.spec.finalizers.iter().enumerate() {
            if let Err(why) = validation::qualified_name(f) {
                errs.push(FieldError::invalid(format!("spec.finalizers[{i}]"), f, why));
            }
        }
        errs.extend(self.validate_status());
        errs
    }

    fn validate_status(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(p) = &self.status.phase {
            if !["Active", "Terminating"].contains(&p.as_str()) {
                errs.push(FieldError::not_supported(
                    "status.phase",
                    p,
                    &["Active", "Terminating"],
                ));
            }
        }
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        match path {
            "status.phase" => Some(opt(&self.status.phase)),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Node

/// core/v1 Node.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Node")]
#[schemars(description = "Node is a machine that runs pods; its agent registers and reports it.")]
pub struct Node {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Behaviour of the node.
    pub spec: NodeSpec,
    /// Most recently observed state of the node, reported by its agent. Read-only.
    pub status: NodeStatus,
}

/// core/v1 NodeSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeSpec")]
#[schemars(description = "NodeSpec is the behaviour of a node.")]
pub struct NodeSpec {
    /// Pod address range of the node.
    #[serde(rename = "podCIDR")]
    pub pod_cidr: Option<String>,
    /// Pod address ranges of the node (one per IP family).
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Vec<String>,
    /// ID of the node from its cloud provider.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    /// If true, no new pods are scheduled on the node (kubectl cordon).
    pub unschedulable: Option<bool>,
    /// Taints of the node: pods that do not tolerate them are not scheduled there (or are
    /// evicted).
    pub taints: Vec<Taint>,
    pub config_source: Option<Opaque>,
    #[serde(rename = "externalID")]
    pub external_id: Option<String>,
}

/// core/v1 Taint.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Taint")]
#[schemars(description = "A taint repels pods that do not tolerate it.")]
pub struct Taint {
    /// Key of the taint.
    pub key: String,
    /// Value of the taint.
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
    /// When a NoExecute taint was added.
    pub time_added: Option<Time>,
}

/// core/v1 NodeStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeStatus")]
#[schemars(description = "The most recently observed state of a node, reported by its agent.")]
pub struct NodeStatus {
    /// Total resources of the node (cpu, memory, pods, ...).
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Resources of the node available to pods: capacity less what the system reserves.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, Quantity>")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Lifecycle phase of the node (deprecated).
    pub phase: Option<String>,
    /// Current state of the node (Ready, MemoryPressure, DiskPressure, PIDPressure,
    /// NetworkUnavailable).
    pub conditions: Vec<NodeCondition>,
    /// Addresses of the node (InternalIP, Hostname, ...).
    pub addresses: Vec<NodeAddress>,
    /// Ports of the daemons running on the node.
    pub daemon_endpoints: Option<NodeDaemonEndpoints>,
    /// Identity and versions of the node's operating system and software.
    pub node_info: Option<NodeSystemInfo>,
    /// Container images present on the node.
    pub images: Vec<ContainerImage>,
    /// Volumes attached and mounted on the node.
    pub volumes_in_use: Vec<String>,
    pub volumes_attached: Vec<Opaque>,
    pub config: Option<Opaque>,
    pub runtime_handlers: Vec<Opaque>,
    pub features: Option<Opaque>,
    pub declared_features: Vec<String>,
}

impl NodeStatus {
    /// The condition of `type_`, if reported.
    pub fn condition(&self, type_: &str) -> Option<&NodeCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// The first address of `type_` (`InternalIP`, `ExternalIP`, `Hostname`).
    pub fn address(&self, type_: &str) -> Option<&str> {
        self.addresses
            .iter()
            .find(|a| a.type_ == type_)
            .map(|a| a.address.as_str())
    }
}

/// core/v1 NodeCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeCondition")]
#[schemars(description = "One aspect of a node's state.")]
pub struct NodeCondition {
    /// Type of the condition, such as Ready.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// When the node last reported the condition.
    pub last_heartbeat_time: Option<Time>,
    /// When the condition last changed status.
    pub last_transition_time: Option<Time>,
    /// Brief CamelCase reason for the last transition.
    pub reason: Option<String>,
    /// Human-readable details of the last transition.
    pub message: Option<String>,
}

/// core/v1 NodeAddress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeAddress")]
#[schemars(description = "An address of a node.")]
pub struct NodeAddress {
    /// Type of the address: Hostname, InternalIP, ExternalIP, InternalDNS or ExternalDNS.
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// core/v1 NodeDaemonEndpoints.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeDaemonEndpoints")]
pub struct NodeDaemonEndpoints {
    pub kubelet_endpoint: Option<DaemonEndpoint>,
}

/// core/v1 DaemonEndpoint (its one field is spelled `Port` in Kubernetes).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.DaemonEndpoint")]
pub struct DaemonEndpoint {
    #[serde(rename = "Port")]
    pub port: i32,
}

/// core/v1 NodeSystemInfo.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.NodeSystemInfo")]
#[schemars(description = "Identity and versions of a node's operating system and software.")]
pub struct NodeSystemInfo {
    /// Machine ID of the node.
    #[serde(rename = "machineID")]
    pub machine_id: String,
    /// System UUID of the node.
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    /// ID of the node's current boot.
    #[serde(rename = "bootID")]
    pub boot_id: String,
    /// Kernel release (uname -r).
    pub kernel_version: String,
    /// Operating system image (from /etc/os-release).
    pub os_image: String,
    /// Container runtime, as <runtime>://<version>.
    pub container_runtime_version: String,
    /// Version of the node agent.
    pub kubelet_version: String,
    /// Version of the service proxy (deprecated).
    pub kube_proxy_version: String,
    /// Operating system of the node (linux).
    pub operating_system: String,
    /// CPU architecture of the node (amd64, arm64, arm).
    pub architecture: String,
    pub swap: Option<Opaque>,
}

/// core/v1 ContainerImage.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ContainerImage")]
pub struct ContainerImage {
    pub names: Vec<String>,
    pub size_bytes: Option<i64>,
}

/// Whether a node may not set label `key` on its own Node (Kubernetes' NodeRestriction):
/// labels under `node-restriction.kubernetes.io/`, and any other label of the kubernetes.io or
/// k8s.io namespaces but the ones the kubelet sets (hostname, os, arch, instance type, zone
/// and region, and the `kubelet.kubernetes.io/` and `node.kubernetes.io/` namespaces).
pub fn node_label_forbidden_to_nodes(key: &str) -> bool {
    const KUBELET_LABELS: &[&str] = &[
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    ];
    let Some((ns, _)) = key.split_once('/') else {
        return false;
    };
    let within = |ns: &str, domain: &str| ns == domain || ns.ends_with(&format!(".{domain}"));
    if within(ns, "node-restriction.kubernetes.io") {
        return true;
    }
    let kubernetes = within(ns, "kubernetes.io") || within(ns, "k8s.io");
    let kubelet = KUBELET_LABELS.contains(&key)
        || within(ns, "kubelet.kubernetes.io")
        || within(ns, "node.kubernetes.io");
    kubernetes && !kubelet
}

impl Resource for Node {
    const KIND: Kind = Kind::Node;
    crate::resource_basics!(Node);
    spec_and_status!();

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Node);
        errs.extend(validation::validate_node_spec(&self.spec));
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        match path {
            "spec.unschedulable" => Some(self.spec.unschedulable.unwrap_or(false).to_string()),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Service

/// core/v1 Service.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Service")]
#[schemars(
    description = "Service gives a set of pods, chosen by a label selector, one stable virtual address and DNS name, and balances connections across them."
)]
pub struct Service {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Desired behaviour of the Service.
    pub spec: ServiceSpec,
    /// Most recently observed state of the Service. Read-only.
    pub status: ServiceStatus,
}

/// core/v1 ServiceSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ServiceSpec")]
#[schemars(description = "ServiceSpec is the desired behaviour of a Service.")]
pub struct ServiceSpec {
    /// Ports the Service exposes.
    pub ports: Vec<ServicePort>,
    /// Labels of the pods traffic goes to. Without a selector, the Endpoints are managed by
    /// hand.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub selector: BTreeMap<String, String>,
    /// Virtual IP of the Service, allocated by the server unless given; "None" makes a headless
    /// service. Cannot be changed.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// Virtual IPs of the Service (one per IP family); the first equals clusterIP.
    #[serde(rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    /// ClusterIP, NodePort, LoadBalancer, ExternalName.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// Addresses on which nodes also accept traffic for the Service.
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<String>,
    /// ClientIP sends a client's connections to the same pod; None balances each connection.
    /// Default: None.
    pub session_affinity: Option<String>,
    /// Requested address of a LoadBalancer service. Kept, not acted on.
    #[serde(rename = "loadBalancerIP")]
    pub load_balancer_ip: Option<String>,
    /// Client ranges a load balancer admits. Kept, not acted on.
    pub load_balancer_source_ranges: Vec<String>,
    /// DNS name an ExternalName service aliases.
    pub external_name: Option<String>,
    /// Whether external traffic goes to node-local endpoints only (Local) or to all (Cluster).
    /// Default: Cluster.
    pub external_traffic_policy: Option<String>,
    /// Node port of the health check for LoadBalancer services with the Local policy.
    pub health_check_node_port: Option<i32>,
    /// Whether endpoints of pods that are not ready are published.
    pub publish_not_ready_addresses: Option<bool>,
    /// Parameters of session affinity.
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// IP families of the Service (IPv4, IPv6).
    pub ip_families: Vec<String>,
    /// SingleStack, PreferDualStack or RequireDualStack.
    pub ip_family_policy: Option<String>,
    /// Whether LoadBalancer services get node ports. Default: true.
    pub allocate_load_balancer_node_ports: Option<bool>,
    /// Class of the load balancer implementation.
    pub load_balancer_class: Option<String>,
    /// Whether in-cluster traffic goes to node-local endpoints only (Local) or to all
    /// (Cluster). Default: Cluster.
    pub internal_traffic_policy: Option<String>,
    /// Preference of how traffic is spread across endpoints. Kept, not acted on.
    pub traffic_distribution: Option<String>,
}

impl ServiceSpec {
    /// The type, `ClusterIP` when unset.
    pub fn type_or_default(&self) -> &str {
        self.type_.as_deref().unwrap_or("ClusterIP")
    }

    /// `clusterIP: None`.
    pub fn is_headless(&self) -> bool {
        self.cluster_ip.as_deref() == Some("None")
    }

    /// Whether skiff's service load balancer serves this Service: type LoadBalancer with
    /// no `loadBalancerClass` or skiff's own; other classes belong to other implementations.
    pub fn is_skiff_load_balancer(&self) -> bool {
        self.type_or_default() == "LoadBalancer"
            && self
                .load_balancer_class
                .as_deref()
                .is_none_or(|c| c == SERVICE_LB_CLASS)
    }

    /// The `PROTOCOL/port` pairs a load balancer serves (SCTP is not proxied), sorted.
    pub fn load_balancer_ports(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .ports
            .iter()
            .map(|p| (p.protocol.as_deref().unwrap_or("TCP"), p.port))
            .filter(|(proto, _)| *proto != "SCTP")
            .map(|(proto, port)| format!("{proto}/{port}"))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// The `loadBalancerClass` of skiff's service load balancer (a Service without a class is
/// served too).
pub const SERVICE_LB_CLASS: &str = "skiff.io/servicelb";
/// k3s' node label: when some node has it set to `true`, only such nodes serve
/// LoadBalancer Services; otherwise every node does.
pub const SERVICE_LB_NODE_LABEL: &str = "svccontroller.k3s.cattle.io/enablelb";
/// The annotation a node's service proxy keeps on its Node: the LoadBalancer ports
/// (`TCP/80,UDP/53`) that a host process already holds on the node's address. Its presence
/// says the proxy runs and serves LoadBalancer Services.
pub const SERVICE_LB_PORTS_IN_USE: &str = "servicelb.skiff.io/ports-in-use";

/// core/v1 ServicePort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ServicePort")]
#[schemars(description = "A port a Service exposes and where it sends the traffic.")]
pub struct ServicePort {
    /// Name of the port, required when the Service has several; endpoints ports carry it.
    pub name: Option<String>,
    /// Protocol: TCP, UDP or SCTP. Default: TCP.
    pub protocol: Option<String>,
    /// Application protocol of the port, as a hint.
    pub app_protocol: Option<String>,
    /// Port of the Service's virtual IP.
    pub port: i32,
    /// Port (number or container port name) on the pods. Default: the value of port.
    pub target_port: Option<IntOrString>,
    /// Port on every node for NodePort and LoadBalancer services, allocated unless given
    /// (30000-32767).
    pub node_port: Option<i32>,
}

/// core/v1 SessionAffinityConfig.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.SessionAffinityConfig")]
pub struct SessionAffinityConfig {
    #[serde(rename = "clientIP")]
    pub client_ip: Option<ClientIpConfig>,
}

/// core/v1 ClientIPConfig.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ClientIPConfig")]
pub struct ClientIpConfig {
    pub timeout_seconds: Option<i32>,
}

/// core/v1 ServiceStatus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ServiceStatus")]
#[schemars(description = "The most recently observed state of a Service.")]
pub struct ServiceStatus {
    /// State of the Service's load balancer, if any.
    pub load_balancer: Option<LoadBalancerStatus>,
    pub conditions: Vec<Opaque>,
}

/// Kubernetes holds a Service's load balancer status by value, so even a new or cleared
/// status shows `loadBalancer: {}`.
impl Default for ServiceStatus {
    fn default() -> Self {
        ServiceStatus {
            load_balancer: Some(LoadBalancerStatus::default()),
            conditions: Vec::new(),
        }
    }
}

/// core/v1 LoadBalancerStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.LoadBalancerStatus")]
pub struct LoadBalancerStatus {
    pub ingress: Vec<LoadBalancerIngress>,
}

/// core/v1 LoadBalancerIngress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.LoadBalancerIngress")]
pub struct LoadBalancerIngress {
    pub ip: Option<String>,
    pub hostname: Option<String>,
    pub ip_mode: Option<String>,
    pub ports: Vec<Opaque>,
}

impl Resource for Service {
    const KIND: Kind = Kind::Service;
    crate::resource_basics!(Service);
    spec_and_status!();

    fn set_defaults(&mut self) {
        let s = &mut self.spec;
        s.type_.get_or_insert_with(|| "ClusterIP".into());
        s.session_affinity.get_or_insert_with(|| "None".into());
        if s.type_.as_deref() != Some("ExternalName") {
            s.internal_traffic_policy
                .get_or_insert_with(|| "Cluster".into());
        }
        if matches!(s.type_.as_deref(), Some("NodePort" | "LoadBalancer")) {
            s.external_traffic_policy
                .get_or_insert_with(|| "Cluster".into());
        }
        if s.type_.as_deref() == Some("LoadBalancer") {
            s.allocate_load_balancer_node_ports.get_or_insert(true);
        }
        if s.session_affinity.as_deref() == Some("ClientIP") {
            let cfg = s
                .session_affinity_config
                .get_or_insert_with(Default::default);
            let ip = cfg.client_ip.get_or_insert_with(Default::default);
            ip.timeout_seconds.get_or_insert(10800);
        }
        for p in &mut s.ports {
            p.protocol.get_or_insert_with(|| "TCP".into());
            if p.target_port.is_none() {
                p.target_port = Some(IntOrString::Int(p.port));
            }
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Service);
        errs.extend(validation::validate_service_spec(&self.spec));
        errs
    }
}

// ---------------------------------------------------------------------------------------
// Endpoints

/// core/v1 Endpoints.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Endpoints")]
#[schemars(description = "Endpoints lists the addresses and ports behind a Service.")]
pub struct Endpoints {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Groups of addresses that share a set of ports.
    pub subsets: Vec<EndpointSubset>,
}

/// core/v1 EndpointSubset.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EndpointSubset")]
#[schemars(description = "A group of addresses that share a set of ports.")]
pub struct EndpointSubset {
    /// Addresses of ready endpoints.
    pub addresses: Vec<EndpointAddress>,
    /// Addresses of endpoints that are not ready yet.
    pub not_ready_addresses: Vec<EndpointAddress>,
    /// Ports of the endpoints.
    pub ports: Vec<EndpointPort>,
}

/// core/v1 EndpointAddress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EndpointAddress")]
#[schemars(description = "The address of one endpoint, usually a pod.")]
pub struct EndpointAddress {
    /// IP address of the endpoint.
    pub ip: String,
    /// Hostname of the endpoint.
    pub hostname: Option<String>,
    /// Node the endpoint runs on.
    pub node_name: Option<String>,
    /// The object behind the endpoint, usually a pod.
    pub target_ref: Option<ObjectReference>,
}

/// core/v1 EndpointPort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EndpointPort")]
#[schemars(description = "A port of the endpoints.")]
pub struct EndpointPort {
    /// Name of the port; matches the Service port's name.
    pub name: Option<String>,
    /// Port number.
    pub port: i32,
    /// TCP, UDP or SCTP. Default: TCP.
    pub protocol: Option<String>,
    /// Application protocol of the port.
    pub app_protocol: Option<String>,
}

impl Resource for Endpoints {
    const KIND: Kind = Kind::Endpoints;
    crate::resource_basics!(Endpoints);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&self.subsets)
    }

    fn set_defaults(&mut self) {
        for s in &mut self.subsets {
            for p in &mut s.ports {
                p.protocol.get_or_insert_with(|| "TCP".into());
            }
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Endpoints);
        errs.extend(validation::validate_endpoint_subsets(&self.subsets));
        errs
    }
}

// ---------------------------------------------------------------------------------------
// ServiceAccount

/// core/v1 ServiceAccount: an identity for processes in pods. Its tokens are bound JWTs
/// issued through the `token` subresource (TokenRequest), not stored Secrets.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ServiceAccount")]
#[schemars(
    description = "ServiceAccount binds together: * a name, understood by users, and perhaps by peripheral systems, for an identity * a principal that can be authenticated and authorized * a set of secrets"
)]
pub struct ServiceAccount {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Secrets pods running as this ServiceAccount may use (legacy; tokens are requested).
    pub secrets: Vec<ObjectReference>,
    /// Secrets for pulling images, added to every pod running as this ServiceAccount.
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Whether pods running as this ServiceAccount get an API token mounted; a pod's own
    /// setting wins.
    pub automount_service_account_token: Option<bool>,
}

impl Resource for ServiceAccount {
    const KIND: Kind = Kind::ServiceAccount;
    crate::resource_basics!(ServiceAccount);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&(
            &self.secrets,
            &self.image_pull_secrets,
            &self.automount_service_account_token,
        ))
    }

    fn validate(&self) -> Vec<FieldError> {
        validation::validate_meta(&self.metadata, Kind::ServiceAccount)
    }
}

// ---------------------------------------------------------------------------------------
// ConfigMap and Secret

/// core/v1 ConfigMap.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.ConfigMap")]
#[schemars(
    description = "ConfigMap holds configuration data, as key-value pairs, for pods to consume as environment variables or files."
)]
pub struct ConfigMap {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Configuration data as UTF-8 strings. Keys consist of alphanumerics, -, _ or .
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub data: BTreeMap<String, String>,
    /// Binary configuration data, base64 encoded. Keys must not repeat those of data.
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, ByteString>")]
    pub binary_data: BTreeMap<String, ByteString>,
    /// If true, data and binaryData cannot change (only metadata can).
    pub immutable: Option<bool>,
}

impl Resource for ConfigMap {
    const KIND: Kind = Kind::ConfigMap;
    crate::resource_basics!(ConfigMap);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&(&self.data, &self.binary_data, &self.immutable))
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::ConfigMap);
        let mut size = 0usize;
        for (k, v) in &self.data {
            size += k.len() + v.len();
            validation::check_config_key(&mut errs, "data", k);
        }
        for (k, v) in &self.binary_data {
            size += k.len() + v.0.len();
            validation::check_config_key(&mut errs, "binaryData", k);
            if self.data.contains_key(k) {
                errs.push(FieldError::duplicate(format!("data[{k}]"), k));
            }
        }
        if size > validation::MAX_DATA_BYTES {
            errs.push(FieldError::too_long("data", validation::MAX_DATA_BYTES));
        }
        errs
    }
}

/// core/v1 Secret. `stringData` is write-only: defaulting merges it into `data`.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Secret")]
#[schemars(
    description = "Secret holds a small amount of sensitive data, such as a password, a token or a key."
)]
pub struct Secret {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Secret data, each value base64 encoded. Keys consist of alphanumerics, -, _ or .
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, ByteString>")]
    pub data: BTreeMap<String, ByteString>,
    /// Write-only convenience: plain-text values merged into data on write (they win over
    /// data).
    #[serde(with = "omit_empty")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub string_data: BTreeMap<String, String>,
    /// Type of the secret, for programmatic handling (Opaque, kubernetes.io/tls,
    /// kubernetes.io/dockerconfigjson, ...). Default: Opaque.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// If true, data cannot change (only metadata can).
    pub immutable: Option<bool>,
}

impl Resource for Secret {
    const KIND: Kind = Kind::Secret;
    crate::resource_basics!(Secret);

    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&(&self.data, &self.string_data, &self.type_, &self.immutable))
    }

    fn set_defaults(&mut self) {
        self.type_.get_or_insert_with(|| "Opaque".into());
        for (k, v) in std::mem::take(&mut self.string_data) {
            self.data.insert(k, ByteString(v.into_bytes()));
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Secret);
        let mut size = 0usize;
        for (k, v) in &self.data {
            size += k.len() + v.0.len();
            validation::check_config_key(&mut errs, "data", k);
        }
        for (k, v) in &self.string_data {
            size += k.len() + v.len();
            validation::check_config_key(&mut errs, "stringData", k);
        }
        if size > validation::MAX_DATA_BYTES {
            errs.push(FieldError::too_long("data", validation::MAX_DATA_BYTES));
        }
        match self.type_.as_deref() {
            Some("") => errs.push(FieldError::required("type")),
            Some("kubernetes.io/tls") => {
                for key in ["tls.crt", "tls.key"] {
                    if !self.data.contains_key(key) && !self.string_data.contains_key(key) {
                        errs.push(FieldError::required(format!("data[{key}]")));
                    }
                }
            }
            Some("kubernetes.io/dockerconfigjson") => {
                let key = ".dockerconfigjson";
                if !self.data.contains_key(key) && !self.string_data.contains_key(key) {
                    errs.push(FieldError::required(format!("data[{key}]")));
                }
            }
            _ => {}
        }
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        match path {
            "type" => Some(opt(&self.type_)),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Event

/// core/v1 Event.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.Event")]
#[schemars(
    description = "Event reports something that happened to an object, such as a pod being scheduled or an image being pulled."
)]
pub struct Event {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The object the event is about.
    pub involved_object: ObjectReference,
    /// Short machine-readable reason in UpperCamelCase.
    pub reason: Option<String>,
    /// Human-readable description.
    pub message: Option<String>,
    /// Component reporting the event.
    pub source: Option<EventSource>,
    /// When the event was first recorded.
    pub first_timestamp: Option<Time>,
    /// When the event last recurred.
    pub last_timestamp: Option<Time>,
    /// How often the event occurred.
    pub count: Option<i32>,
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// A MicroTime in Kubernetes; kept to the second here.
    pub event_time: Option<Time>,
    pub series: Option<EventSeries>,
    pub action: Option<String>,
    pub related: Option<ObjectReference>,
    pub reporting_component: Option<String>,
    pub reporting_instance: Option<String>,
}

/// core/v1 EventSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EventSource")]
pub struct EventSource {
    pub component: Option<String>,
    pub host: Option<String>,
}

/// core/v1 EventSeries.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.core.v1.EventSeries")]
pub struct EventSeries {
    pub count: Option<i32>,
    pub last_observed_time: Option<Time>,
}

impl Resource for Event {
    const KIND: Kind = Kind::Event;
    crate::resource_basics!(Event);

    fn spec_fingerprint(&self) -> Vec<u8> {
        let mut c = self.clone();
        c.metadata = ObjectMeta::default();
        fingerprint(&c)
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::Event);
        if let Some(t) = &self.type_ {
            if !t.is_empty() && t != "Normal" && t != "Warning" {
                errs.push(FieldError::not_supported("type", t, &["Normal", "Warning"]));
            }
        }
        errs
    }

    fn field(&self, path: &str) -> Option<String> {
        let io = &self.involved_object;
        Some(match path {
            "involvedObject.kind" => opt(&io.kind),
            "involvedObject.namespace" => opt(&io.namespace),
            "involvedObject.name" => opt(&io.name),
            "involvedObject.uid" => opt(&io.uid),
            "involvedObject.apiVersion" => opt(&io.api_version),
            "involvedObject.resourceVersion" => opt(&io.resource_version),
            "involvedObject.fieldPath" => opt(&io.field_path),
            "reason" => opt(&self.reason),
            "type" => opt(&self.type_),
            "source" => self
                .source
                .as_ref()
                .and_then(|s| s.component.clone())
                .unwrap_or_default(),
            "reportingComponent" => opt(&self.reporting_component),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_string_is_base64_in_json_and_raw_in_postcard() {
        let b = ByteString(vec![0, 159, 146, 150, b'a']);
        assert_eq!(serde_json::to_value(&b).unwrap(), "AJ+SlmE=");
        let back: ByteString = serde_json::from_value(serde_json::json!("AJ+SlmE=")).unwrap();
        assert_eq!(back, b);
        let bytes = postcard::to_allocvec(&b).unwrap();
        // A length byte, then the bytes themselves.
        assert_eq!(bytes, vec![5, 0, 159, 146, 150, b'a']);
        assert_eq!(postcard::from_bytes::<ByteString>(&bytes).unwrap(), b);
        assert!(serde_json::from_value::<ByteString>(serde_json::json!("%%%")).is_err());
    }

    #[test]
    fn empty_maps_are_omitted_from_json_only() {
        let pod = Pod::default();
        let json = serde_json::to_value(&pod).unwrap();
        assert!(json["spec"]["nodeSelector"].is_null());
        let back: Pod = serde_json::from_value(json).unwrap();
        assert_eq!(back, pod);
        let mut full = Pod::default();
        full.spec
            .node_selector
            .insert("disktype".into(), "ssd".into());
        let bytes = postcard::to_allocvec(&full).unwrap();
        assert_eq!(postcard::from_bytes::<Pod>(&bytes).unwrap(), full);
        let bytes = postcard::to_allocvec(&pod).unwrap();
        assert_eq!(postcard::from_bytes::<Pod>(&bytes).unwrap(), pod);
    }

    #[test]
    fn load_balancer_defaults_class_and_ports() {
        let mut s = Service::default();
        s.metadata.name = "web".into();
        s.spec.type_ = Some("LoadBalancer".into());
        s.spec.ports = vec![
            ServicePort {
                name: Some("dns".into()),
                port: 53,
                protocol: Some("UDP".into()),
                ..Default::default()
            },
            ServicePort {
                name: Some("http".into()),
                port: 80,
                ..Default::default()
            },
        ];
        s.set_defaults();
        assert_eq!(s.spec.allocate_load_balancer_node_ports, Some(true));
        assert!(s.spec.is_skiff_load_balancer());
        assert_eq!(s.spec.load_balancer_ports(), ["TCP/80", "UDP/53"]);
        assert!(s.validate().is_empty(), "{:?}", s.validate());
        s.spec.load_balancer_class = Some("example.com/other".into());
        assert!(!s.spec.is_skiff_load_balancer());
        s.spec.type_ = Some("ClusterIP".into());
        let errs = s.validate();
        assert!(
            errs.iter().any(|e| e.field == "spec.loadBalancerClass"),
            "{errs:?}"
        );
    }

    #[test]
    fn tolerations_match_taints() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("edge".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let tol =
            |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| {
                Toleration {
                    key: key.map(Into::into),
                    operator: op.map(Into::into),
                    value: value.map(Into::into),
                    effect: effect.map(Into::into),
                    toleration_seconds: None,
                }
            };
        assert!(tol(Some("dedicated"), None, Some("edge"), Some("NoSchedule")).tolerates(&taint));
        assert!(tol(Some("dedicated"), Some("Equal"), Some("edge"), None).tolerates(&taint));
        assert!(tol(Some("dedicated"), Some("Exists"), None, None).tolerates(&taint));
        assert!(tol(None, Some("Exists"), None, None).tolerates(&taint));
        assert!(!tol(Some("dedicated"), None, Some("core"), None).tolerates(&taint));
        assert!(!tol(Some("dedicated"), Some("Exists"), None, Some("NoExecute")).tolerates(&taint));
        assert!(!tol(Some("other"), Some("Exists"), None, None).tolerates(&taint));
    }

    #[test]
    fn pod_fields_for_selectors() {
        let mut p = Pod::default();
        assert_eq!(p.field("spec.nodeName").as_deref(), Some(""));
        p.spec.node_name = Some("n1".into());
        p.status.phase = Some("Running".into());
        assert_eq!(p.field("spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(p.field("status.phase").as_deref(), Some("Running"));
        assert_eq!(p.field("spec.hostNetwork").as_deref(), Some("false"));
        assert_eq!(p.field("spec.containers"), None);
    }
}
