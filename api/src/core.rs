//! core/v1 kinds: Namespace, Node, Pod, Service, Endpoints, ConfigMap, Secret, Event, and the
//! pod template shared with the apps kinds.
//!
//! Field names and JSON shapes are Kubernetes' own. Enumerations Kubernetes spells as strings
//! stay `String` here (Kubernetes accepts any string on decode and validation refuses bad
//! ones). Fields skiff keeps but does not act on are [`Opaque`].

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ObjectReference {
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
    pub api_version: Option<String>,
    pub resource_version: Option<String>,
    pub field_path: Option<String>,
}

/// core/v1 LocalObjectReference (`imagePullSecrets`).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LocalObjectReference {
    pub name: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Pod template and pod spec

/// core/v1 PodTemplateSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodTemplateSpec {
    pub metadata: ObjectMeta,
    pub spec: PodSpec,
}

/// core/v1 PodSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodSpec {
    pub volumes: Vec<Volume>,
    pub init_containers: Vec<Container>,
    pub containers: Vec<Container>,
    /// Debug containers added by `kubectl debug`: kept, not run.
    pub ephemeral_containers: Vec<Opaque>,
    pub restart_policy: Option<String>,
    pub termination_grace_period_seconds: Option<i64>,
    pub active_deadline_seconds: Option<i64>,
    pub dns_policy: Option<String>,
    #[serde(with = "omit_empty")]
    pub node_selector: BTreeMap<String, String>,
    pub service_account_name: Option<String>,
    /// Deprecated alias of `serviceAccountName`.
    pub service_account: Option<String>,
    pub automount_service_account_token: Option<bool>,
    pub node_name: Option<String>,
    pub host_network: Option<bool>,
    #[serde(rename = "hostPID")]
    pub host_pid: Option<bool>,
    #[serde(rename = "hostIPC")]
    pub host_ipc: Option<bool>,
    pub share_process_namespace: Option<bool>,
    pub security_context: Option<PodSecurityContext>,
    pub image_pull_secrets: Vec<LocalObjectReference>,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub affinity: Option<Affinity>,
    pub scheduler_name: Option<String>,
    pub tolerations: Vec<Toleration>,
    pub host_aliases: Vec<HostAlias>,
    pub priority_class_name: Option<String>,
    pub priority: Option<i32>,
    pub dns_config: Option<PodDnsConfig>,
    pub readiness_gates: Vec<PodReadinessGate>,
    pub runtime_class_name: Option<String>,
    pub enable_service_links: Option<bool>,
    pub preemption_policy: Option<String>,
    #[serde(with = "omit_empty")]
    pub overhead: BTreeMap<String, Quantity>,
    pub topology_spread_constraints: Vec<Opaque>,
    #[serde(rename = "setHostnameAsFQDN")]
    pub set_hostname_as_fqdn: Option<bool>,
    pub os: Option<PodOs>,
    pub host_users: Option<bool>,
    pub scheduling_gates: Vec<PodSchedulingGate>,
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
        for v in &mut self.volumes {
            v.set_defaults();
        }
    }
}

/// core/v1 PodOS.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodOs {
    pub name: String,
}

/// core/v1 PodSchedulingGate.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodSchedulingGate {
    pub name: String,
}

/// core/v1 PodReadinessGate.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodReadinessGate {
    pub condition_type: String,
}

/// core/v1 HostAlias.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HostAlias {
    pub ip: String,
    pub hostnames: Vec<String>,
}

/// core/v1 PodDNSConfig.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodDnsConfig {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<PodDnsConfigOption>,
}

/// core/v1 PodDNSConfigOption.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodDnsConfigOption {
    pub name: String,
    pub value: Option<String>,
}

/// core/v1 Toleration.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Toleration {
    pub key: Option<String>,
    /// `Exists` or `Equal` (the default).
    pub operator: Option<String>,
    pub value: Option<String>,
    pub effect: Option<String>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodSecurityContext {
    pub se_linux_options: Option<Opaque>,
    pub windows_options: Option<Opaque>,
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
    pub supplemental_groups: Vec<i64>,
    pub supplemental_groups_policy: Option<String>,
    pub fs_group: Option<i64>,
    pub sysctls: Vec<Sysctl>,
    pub fs_group_change_policy: Option<String>,
    pub seccomp_profile: Option<Opaque>,
    pub app_armor_profile: Option<Opaque>,
    pub se_linux_change_policy: Option<String>,
}

/// core/v1 Sysctl.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Sysctl {
    pub name: String,
    pub value: String,
}

// ---------------------------------------------------------------------------------------
// Affinity

/// core/v1 Affinity.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Affinity {
    pub node_affinity: Option<NodeAffinity>,
    pub pod_affinity: Option<PodAffinity>,
    pub pod_anti_affinity: Option<PodAffinity>,
}

/// core/v1 NodeAffinity.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeAffinity {
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
    pub preferred_during_scheduling_ignored_during_execution: Vec<PreferredSchedulingTerm>,
}

/// core/v1 NodeSelector: the terms are ORed.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeSelector {
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// core/v1 NodeSelectorTerm: the requirements are ANDed.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<NodeSelectorRequirement>,
    pub match_fields: Vec<NodeSelectorRequirement>,
}

/// core/v1 NodeSelectorRequirement: operator In, NotIn, Exists, DoesNotExist, Gt, Lt.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// core/v1 PreferredSchedulingTerm.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PreferredSchedulingTerm {
    pub weight: i32,
    pub preference: NodeSelectorTerm,
}

/// core/v1 PodAffinity and PodAntiAffinity (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodAffinity {
    pub required_during_scheduling_ignored_during_execution: Vec<PodAffinityTerm>,
    pub preferred_during_scheduling_ignored_during_execution: Vec<WeightedPodAffinityTerm>,
}

/// core/v1 PodAffinityTerm.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodAffinityTerm {
    pub label_selector: Option<LabelSelector>,
    pub namespaces: Vec<String>,
    pub topology_key: String,
    pub namespace_selector: Option<LabelSelector>,
    pub match_label_keys: Vec<String>,
    pub mismatch_label_keys: Vec<String>,
}

/// core/v1 WeightedPodAffinityTerm.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub pod_affinity_term: PodAffinityTerm,
}

// ---------------------------------------------------------------------------------------
// Volumes

/// core/v1 Volume: a name and exactly one source.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Volume {
    pub name: String,
    pub host_path: Option<HostPathVolumeSource>,
    pub empty_dir: Option<EmptyDirVolumeSource>,
    pub secret: Option<SecretVolumeSource>,
    pub config_map: Option<ConfigMapVolumeSource>,
    #[serde(rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiVolumeSource>,
    pub projected: Option<Opaque>,
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    pub nfs: Option<Opaque>,
    pub csi: Option<Opaque>,
    pub ephemeral: Option<Opaque>,
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
    }
}

/// core/v1 HostPathVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HostPathVolumeSource {
    pub path: String,
    #[serde(rename = "type")]
    pub type_: Option<String>,
}

/// core/v1 EmptyDirVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EmptyDirVolumeSource {
    pub medium: Option<String>,
    pub size_limit: Option<Quantity>,
}

/// core/v1 KeyToPath.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
    pub mode: Option<i32>,
}

/// core/v1 SecretVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SecretVolumeSource {
    pub secret_name: Option<String>,
    pub items: Vec<KeyToPath>,
    pub default_mode: Option<i32>,
    pub optional: Option<bool>,
}

/// core/v1 ConfigMapVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ConfigMapVolumeSource {
    pub name: Option<String>,
    pub items: Vec<KeyToPath>,
    pub default_mode: Option<i32>,
    pub optional: Option<bool>,
}

/// core/v1 DownwardAPIVolumeSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DownwardApiVolumeSource {
    pub items: Vec<DownwardApiVolumeFile>,
    pub default_mode: Option<i32>,
}

/// core/v1 DownwardAPIVolumeFile.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DownwardApiVolumeFile {
    pub path: String,
    pub field_ref: Option<ObjectFieldSelector>,
    pub resource_field_ref: Option<ResourceFieldSelector>,
    pub mode: Option<i32>,
}

/// core/v1 PersistentVolumeClaimVolumeSource (kept; skiff has no volume provisioner).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PersistentVolumeClaimVolumeSource {
    pub claim_name: String,
    pub read_only: Option<bool>,
}

// ---------------------------------------------------------------------------------------
// Containers

/// core/v1 Container.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Container {
    pub name: String,
    pub image: Option<String>,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub working_dir: Option<String>,
    pub ports: Vec<ContainerPort>,
    pub env_from: Vec<EnvFromSource>,
    pub env: Vec<EnvVar>,
    pub resources: Option<ResourceRequirements>,
    pub resize_policy: Vec<Opaque>,
    /// Only `Always`, only on init containers: a sidecar.
    pub restart_policy: Option<String>,
    pub volume_mounts: Vec<VolumeMount>,
    pub volume_devices: Vec<Opaque>,
    pub liveness_probe: Option<Probe>,
    pub readiness_probe: Option<Probe>,
    pub startup_probe: Option<Probe>,
    pub lifecycle: Option<Opaque>,
    pub termination_message_path: Option<String>,
    pub termination_message_policy: Option<String>,
    pub image_pull_policy: Option<String>,
    pub security_context: Option<SecurityContext>,
    pub stdin: Option<bool>,
    pub stdin_once: Option<bool>,
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

/// core/v1 ContainerPort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub host_port: Option<i32>,
    pub container_port: i32,
    pub protocol: Option<String>,
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
}

/// core/v1 EnvVar.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub value: Option<String>,
    pub value_from: Option<EnvVarSource>,
}

/// core/v1 EnvVarSource: exactly one of the references.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EnvVarSource {
    pub field_ref: Option<ObjectFieldSelector>,
    pub resource_field_ref: Option<ResourceFieldSelector>,
    pub config_map_key_ref: Option<KeySelector>,
    pub secret_key_ref: Option<KeySelector>,
}

/// core/v1 ObjectFieldSelector (`metadata.name`, `status.podIP`, ...).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ObjectFieldSelector {
    pub api_version: Option<String>,
    pub field_path: String,
}

/// core/v1 ResourceFieldSelector (`limits.cpu`, ...).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ResourceFieldSelector {
    pub container_name: Option<String>,
    pub resource: String,
    pub divisor: Option<Quantity>,
}

/// core/v1 ConfigMapKeySelector and SecretKeySelector (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct KeySelector {
    pub name: Option<String>,
    pub key: String,
    pub optional: Option<bool>,
}

/// core/v1 EnvFromSource.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EnvFromSource {
    pub prefix: Option<String>,
    pub config_map_ref: Option<EnvFromReference>,
    pub secret_ref: Option<EnvFromReference>,
}

/// core/v1 ConfigMapEnvSource and SecretEnvSource (same shape).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EnvFromReference {
    pub name: Option<String>,
    pub optional: Option<bool>,
}

/// core/v1 ResourceRequirements.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ResourceRequirements {
    #[serde(with = "omit_empty")]
    pub limits: BTreeMap<String, Quantity>,
    #[serde(with = "omit_empty")]
    pub requests: BTreeMap<String, Quantity>,
    pub claims: Vec<Opaque>,
}

/// core/v1 VolumeMount.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct VolumeMount {
    pub name: String,
    pub read_only: Option<bool>,
    pub recursive_read_only: Option<String>,
    pub mount_path: String,
    pub sub_path: Option<String>,
    pub mount_propagation: Option<String>,
    pub sub_path_expr: Option<String>,
}

/// core/v1 Probe: exactly one handler plus timing.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Probe {
    pub exec: Option<ExecAction>,
    pub http_get: Option<HttpGetAction>,
    pub tcp_socket: Option<TcpSocketAction>,
    pub grpc: Option<GrpcAction>,
    pub initial_delay_seconds: Option<i32>,
    pub timeout_seconds: Option<i32>,
    pub period_seconds: Option<i32>,
    pub success_threshold: Option<i32>,
    pub failure_threshold: Option<i32>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ExecAction {
    pub command: Vec<String>,
}

/// core/v1 HTTPGetAction.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HttpGetAction {
    pub path: Option<String>,
    pub port: IntOrString,
    pub host: Option<String>,
    pub scheme: Option<String>,
    pub http_headers: Vec<HttpHeader>,
}

/// core/v1 HTTPHeader.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

/// core/v1 TCPSocketAction.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct TcpSocketAction {
    pub port: IntOrString,
    pub host: Option<String>,
}

/// core/v1 GRPCAction.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct GrpcAction {
    pub port: i32,
    pub service: Option<String>,
}

/// core/v1 SecurityContext (container level).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SecurityContext {
    pub capabilities: Option<Capabilities>,
    pub privileged: Option<bool>,
    pub se_linux_options: Option<Opaque>,
    pub windows_options: Option<Opaque>,
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
    pub read_only_root_filesystem: Option<bool>,
    pub allow_privilege_escalation: Option<bool>,
    pub proc_mount: Option<String>,
    pub seccomp_profile: Option<Opaque>,
    pub app_armor_profile: Option<Opaque>,
}

/// core/v1 Capabilities.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Capabilities {
    pub add: Vec<String>,
    pub drop: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// Pod

/// core/v1 Pod.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: PodSpec,
    pub status: PodStatus,
}

/// core/v1 PodStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodStatus {
    pub observed_generation: Option<i64>,
    /// Pending, Running, Succeeded, Failed, Unknown.
    pub phase: Option<String>,
    pub conditions: Vec<PodCondition>,
    pub message: Option<String>,
    pub reason: Option<String>,
    pub nominated_node_name: Option<String>,
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
    #[serde(rename = "hostIPs")]
    pub host_ips: Vec<HostIp>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(rename = "podIPs")]
    pub pod_ips: Vec<HostIp>,
    pub start_time: Option<Time>,
    pub init_container_statuses: Vec<ContainerStatus>,
    pub container_statuses: Vec<ContainerStatus>,
    pub qos_class: Option<String>,
    pub ephemeral_container_statuses: Vec<Opaque>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HostIp {
    pub ip: String,
}

/// core/v1 PodCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub observed_generation: Option<i64>,
    pub status: String,
    pub last_probe_time: Option<Time>,
    pub last_transition_time: Option<Time>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// core/v1 ContainerStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ContainerStatus {
    pub name: String,
    pub state: Option<ContainerState>,
    pub last_state: Option<ContainerState>,
    pub ready: bool,
    pub restart_count: i32,
    pub image: String,
    #[serde(rename = "imageID")]
    pub image_id: String,
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
    pub started: Option<bool>,
    #[serde(with = "omit_empty")]
    pub allocated_resources: BTreeMap<String, Quantity>,
    pub resources: Option<ResourceRequirements>,
    pub volume_mounts: Vec<Opaque>,
    pub user: Option<Opaque>,
    pub allocated_resources_status: Vec<Opaque>,
    pub stop_signal: Option<String>,
}

/// core/v1 ContainerState: at most one of the three.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ContainerState {
    pub waiting: Option<ContainerStateWaiting>,
    pub running: Option<ContainerStateRunning>,
    pub terminated: Option<ContainerStateTerminated>,
}

/// core/v1 ContainerStateWaiting.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ContainerStateWaiting {
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// core/v1 ContainerStateRunning.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ContainerStateRunning {
    pub started_at: Option<Time>,
}

/// core/v1 ContainerStateTerminated.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ContainerStateTerminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub started_at: Option<Time>,
    pub finished_at: Option<Time>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Namespace {
    pub metadata: ObjectMeta,
    pub spec: NamespaceSpec,
    pub status: NamespaceStatus,
}

/// core/v1 NamespaceSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NamespaceSpec {
    pub finalizers: Vec<String>,
}

/// core/v1 NamespaceStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NamespaceStatus {
    /// Active or Terminating.
    pub phase: Option<String>,
    pub conditions: Vec<NamespaceCondition>,
}

/// core/v1 NamespaceCondition.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Node {
    pub metadata: ObjectMeta,
    pub spec: NodeSpec,
    pub status: NodeStatus,
}

/// core/v1 NodeSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeSpec {
    #[serde(rename = "podCIDR")]
    pub pod_cidr: Option<String>,
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Vec<String>,
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    pub unschedulable: Option<bool>,
    pub taints: Vec<Taint>,
    pub config_source: Option<Opaque>,
    #[serde(rename = "externalID")]
    pub external_id: Option<String>,
}

/// core/v1 Taint.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
    pub time_added: Option<Time>,
}

/// core/v1 NodeStatus.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeStatus {
    #[serde(with = "omit_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    #[serde(with = "omit_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    pub phase: Option<String>,
    pub conditions: Vec<NodeCondition>,
    pub addresses: Vec<NodeAddress>,
    pub daemon_endpoints: Option<NodeDaemonEndpoints>,
    pub node_info: Option<NodeSystemInfo>,
    pub images: Vec<ContainerImage>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub last_heartbeat_time: Option<Time>,
    pub last_transition_time: Option<Time>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// core/v1 NodeAddress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeAddress {
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

/// core/v1 NodeDaemonEndpoints.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeDaemonEndpoints {
    pub kubelet_endpoint: Option<DaemonEndpoint>,
}

/// core/v1 DaemonEndpoint (its one field is spelled `Port` in Kubernetes).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonEndpoint {
    #[serde(rename = "Port")]
    pub port: i32,
}

/// core/v1 NodeSystemInfo.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NodeSystemInfo {
    #[serde(rename = "machineID")]
    pub machine_id: String,
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    #[serde(rename = "bootID")]
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    pub container_runtime_version: String,
    pub kubelet_version: String,
    pub kube_proxy_version: String,
    pub operating_system: String,
    pub architecture: String,
    pub swap: Option<Opaque>,
}

/// core/v1 ContainerImage.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ContainerImage {
    pub names: Vec<String>,
    pub size_bytes: Option<i64>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Service {
    pub metadata: ObjectMeta,
    pub spec: ServiceSpec,
    pub status: ServiceStatus,
}

/// core/v1 ServiceSpec.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ServiceSpec {
    pub ports: Vec<ServicePort>,
    #[serde(with = "omit_empty")]
    pub selector: BTreeMap<String, String>,
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    #[serde(rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    /// ClusterIP, NodePort, LoadBalancer, ExternalName.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    #[serde(rename = "externalIPs")]
    pub external_ips: Vec<String>,
    pub session_affinity: Option<String>,
    #[serde(rename = "loadBalancerIP")]
    pub load_balancer_ip: Option<String>,
    pub load_balancer_source_ranges: Vec<String>,
    pub external_name: Option<String>,
    pub external_traffic_policy: Option<String>,
    pub health_check_node_port: Option<i32>,
    pub publish_not_ready_addresses: Option<bool>,
    pub session_affinity_config: Option<SessionAffinityConfig>,
    pub ip_families: Vec<String>,
    pub ip_family_policy: Option<String>,
    pub allocate_load_balancer_node_ports: Option<bool>,
    pub load_balancer_class: Option<String>,
    pub internal_traffic_policy: Option<String>,
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
}

/// core/v1 ServicePort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ServicePort {
    pub name: Option<String>,
    pub protocol: Option<String>,
    pub app_protocol: Option<String>,
    pub port: i32,
    pub target_port: Option<IntOrString>,
    pub node_port: Option<i32>,
}

/// core/v1 SessionAffinityConfig.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SessionAffinityConfig {
    #[serde(rename = "clientIP")]
    pub client_ip: Option<ClientIpConfig>,
}

/// core/v1 ClientIPConfig.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ClientIpConfig {
    pub timeout_seconds: Option<i32>,
}

/// core/v1 ServiceStatus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ServiceStatus {
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LoadBalancerStatus {
    pub ingress: Vec<LoadBalancerIngress>,
}

/// core/v1 LoadBalancerIngress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Endpoints {
    pub metadata: ObjectMeta,
    pub subsets: Vec<EndpointSubset>,
}

/// core/v1 EndpointSubset.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EndpointSubset {
    pub addresses: Vec<EndpointAddress>,
    pub not_ready_addresses: Vec<EndpointAddress>,
    pub ports: Vec<EndpointPort>,
}

/// core/v1 EndpointAddress.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EndpointAddress {
    pub ip: String,
    pub hostname: Option<String>,
    pub node_name: Option<String>,
    pub target_ref: Option<ObjectReference>,
}

/// core/v1 EndpointPort.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EndpointPort {
    pub name: Option<String>,
    pub port: i32,
    pub protocol: Option<String>,
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
// ConfigMap and Secret

/// core/v1 ConfigMap.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ConfigMap {
    pub metadata: ObjectMeta,
    #[serde(with = "omit_empty")]
    pub data: BTreeMap<String, String>,
    #[serde(with = "omit_empty")]
    pub binary_data: BTreeMap<String, ByteString>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Secret {
    pub metadata: ObjectMeta,
    #[serde(with = "omit_empty")]
    pub data: BTreeMap<String, ByteString>,
    #[serde(with = "omit_empty")]
    pub string_data: BTreeMap<String, String>,
    #[serde(rename = "type")]
    pub type_: Option<String>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Event {
    pub metadata: ObjectMeta,
    pub involved_object: ObjectReference,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub source: Option<EventSource>,
    pub first_timestamp: Option<Time>,
    pub last_timestamp: Option<Time>,
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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EventSource {
    pub component: Option<String>,
    pub host: Option<String>,
}

/// core/v1 EventSeries.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
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
