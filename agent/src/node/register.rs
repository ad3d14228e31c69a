//! The Node object: built from the facts and settings by a pure function, created or updated
//! at start, and kept alive by heartbeats on `nodes/<name>/status`.

use std::collections::BTreeMap;

use api::client::{resource_path, Client, ClientError};
use api::core::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use api::meta::{ObjectMeta, Quantity, Time};
use api::object::Kind;

use super::facts::NodeFacts;

/// What the container runtime calls itself in `nodeInfo`.
pub const RUNTIME_VERSION: &str = "libcontainer://0.7";
/// The kubelet version the agent reports.
pub const KUBELET_VERSION: &str = "v1.32.0-skiff";

/// How the node registers (from the command line).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSettings {
    pub name: String,
    pub internal_ip: String,
    pub labels: BTreeMap<String, String>,
    /// Annotations the agent keeps on its Node (the local-path volume directory).
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub max_pods: u32,
    /// The port of the agent's log endpoint (`status.daemonEndpoints.kubeletEndpoint.Port`).
    pub kubelet_port: u16,
}

/// A bad `--node-label` or `--register-with-taints` value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingError {
    #[error("bad node label {0:?}: expected key=value")]
    Label(String),
    #[error("node label {0:?} is one a node may not set on itself (Kubernetes' NodeRestriction): use a key outside the kubernetes.io and k8s.io namespaces, or set it with kubectl label node")]
    ForbiddenLabel(String),
    #[error("bad taint {0:?}: expected key[=value]:NoSchedule|PreferNoSchedule|NoExecute")]
    Taint(String),
}

/// Parses `key=value`.
pub fn parse_label(s: &str) -> Result<(String, String), SettingError> {
    match s.split_once('=') {
        Some((k, _)) if api::core::node_label_forbidden_to_nodes(k) => {
            Err(SettingError::ForbiddenLabel(k.to_string()))
        }
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(SettingError::Label(s.to_string())),
    }
}

/// Parses `key[=value]:Effect`.
pub fn parse_taint(s: &str) -> Result<Taint, SettingError> {
    let bad = || SettingError::Taint(s.to_string());
    let (kv, effect) = s.rsplit_once(':').ok_or_else(bad)?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(bad());
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    if key.is_empty() {
        return Err(bad());
    }
    Ok(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

fn ready_condition(now: Time) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        last_heartbeat_time: Some(now),
        last_transition_time: Some(now),
        reason: Some("KubeletReady".into()),
        message: Some("skiff-agent is posting ready status".into()),
    }
}

/// The Node this agent registers.
pub fn build_node(facts: &NodeFacts, settings: &NodeSettings, now: Time) -> Node {
    let mut labels = BTreeMap::new();
    labels.insert("kubernetes.io/arch".to_string(), facts.arch.clone());
    labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
    labels.insert("kubernetes.io/hostname".to_string(), settings.name.clone());
    labels.extend(settings.labels.clone());

    let mut capacity = BTreeMap::new();
    capacity.insert(
        "cpu".to_string(),
        Quantity::from_milli(i64::from(facts.cpus) * 1000),
    );
    capacity.insert(
        "memory".to_string(),
        Quantity(format!("{}Ki", facts.memory_kib)),
    );
    capacity.insert("pods".to_string(), Quantity(settings.max_pods.to_string()));
    capacity.insert(
        "ephemeral-storage".to_string(),
        Quantity(facts.ephemeral_storage_bytes.to_string()),
    );

    let mut addresses = Vec::new();
    if !settings.internal_ip.is_empty() {
        addresses.push(NodeAddress {
            type_: "InternalIP".into(),
            address: settings.internal_ip.clone(),
        });
    }
    addresses.push(NodeAddress {
        type_: "Hostname".into(),
        address: settings.name.clone(),
    });

    Node {
        metadata: ObjectMeta {
            name: settings.name.clone(),
            labels,
            annotations: settings.annotations.clone(),
            ..Default::default()
        },
        spec: NodeSpec {
            taints: settings.taints.clone(),
            ..Default::default()
        },
        status: NodeStatus {
            allocatable: capacity.clone(),
            capacity,
            conditions: vec![ready_condition(now)],
            addresses,
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: i32::from(settings.kubelet_port),
                }),
            }),
            node_info: Some(NodeSystemInfo {
                machine_id: facts.machine_id.clone(),
                system_uuid: facts.machine_id.clone(),
                boot_id: facts.boot_id.clone(),
                kernel_version: facts.kernel_version.clone(),
                os_image: facts.os_image.clone(),
                container_runtime_version: RUNTIME_VERSION.into(),
                kubelet_version: KUBELET_VERSION.into(),
                kube_proxy_version: String::new(),
                operating_system: "linux".into(),
                architecture: facts.arch.clone(),
                swap: None,
            }),
            ..Default::default()
        },
    }
}

/// Creates the Node, or updates the existing one (our labels and the status replaced; other
/// labels and the whole spec kept). Taints are set only when the Node is created, as the
/// kubelet's `--register-with-taints`: afterwards they are the admin's (and a node may not
/// change them, NodeRestriction).
pub async fn register(client: &Client, desired: &Node) -> Result<Node, ClientError> {
    let name = desired.metadata.name.clone();
    for _ in 0..5 {
        match client.get::<Node>("", &name).await {
            Err(e) if e.is_not_found() => match client.create(desired).await {
                // The node IPAM controller may assign the podCIDR in between: try again.
                Ok(n) => match client.replace_status(&with_status(n, desired)).await {
                    Err(e) if e.is_conflict() => continue,
                    other => return other,
                },
                Err(e) if e.is_conflict() || e.code() == Some(409) => continue,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
            Ok(mut existing) => {
                existing
                    .metadata
                    .labels
                    .extend(desired.metadata.labels.clone());
                existing
                    .metadata
                    .annotations
                    .extend(desired.metadata.annotations.clone());
                let updated = match client.replace(&existing).await {
                    Ok(n) => n,
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e),
                };
                match client.replace_status(&with_status(updated, desired)).await {
                    Ok(n) => return Ok(n),
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Err(ClientError::Protocol(format!(
        "node {name} kept changing while registering"
    )))
}

fn with_status(mut node: Node, desired: &Node) -> Node {
    node.status = desired.status.clone();
    node
}

/// One heartbeat: the Ready condition with a fresh `lastHeartbeatTime` (the server keeps
/// heartbeat-only writes in memory). Answers `Ok(false)` if the Node is gone (re-register).
pub async fn heartbeat(
    client: &Client,
    name: &str,
    ready_since: Time,
) -> Result<bool, ClientError> {
    let mut cond = ready_condition(Time::now());
    cond.last_transition_time = Some(ready_since);
    let patch = serde_json::json!({
        "status": { "conditions": [serde_json::to_value(&cond).unwrap_or_default()] }
    });
    // Recorded as the kubelet's in managedFields, as Kubernetes names it.
    let path = format!(
        "{}/status?fieldManager=kubelet",
        resource_path(Kind::Node, None, Some(name))
    );
    let body = serde_json::to_vec(&patch).map_err(|e| ClientError::Decode(e.to_string()))?;
    let resp = client
        .request(
            "PATCH",
            &path,
            Some(("application/merge-patch+json", body)),
            "application/json",
        )
        .await?;
    if resp.status == 404 {
        return Ok(false);
    }
    resp.error_for_status()?;
    Ok(true)
}

/// Whether the stored `node` shows what the agent reports: Ready and True. When it does not
/// (the node lifecycle controller marked it Unknown while the node's heartbeats did not
/// arrive), the agent posts its status at once instead of at the next report.
pub fn shows_ready(node: &Node) -> bool {
    node.status
        .condition("Ready")
        .is_some_and(|c| c.status == "True")
}

/// Watches the Nodes a label or field selector picks (resuming whenever the watch ends) and
/// calls `stale` with the name of each whose stored status no longer shows it Ready, or that
/// was deleted, until `stale` returns false. The agent watches its own Node, `--simulate`
/// all of its nodes.
pub async fn follow_stale_statuses(
    client: Client,
    label_selector: Option<&str>,
    field_selector: Option<&str>,
    mut stale: impl FnMut(String) -> bool,
) {
    use api::client::WatchEvent;
    use futures_lite::StreamExt;
    loop {
        match client
            .watch::<Node>(None, "", label_selector, field_selector, None)
            .await
        {
            Ok(mut events) => {
                while let Some(event) = events.next().await {
                    let name = match event {
                        Ok(WatchEvent::Added(n)) | Ok(WatchEvent::Modified(n)) => {
                            (!shows_ready(&n)).then_some(n.metadata.name)
                        }
                        Ok(WatchEvent::Deleted(n)) => Some(n.metadata.name),
                        Ok(WatchEvent::Bookmark { .. }) => None,
                        Err(e) => {
                            tracing::debug!("watching node statuses: {e}");
                            break;
                        }
                    };
                    if name.is_some_and(|n| !stale(n)) {
                        return;
                    }
                }
            }
            Err(e) => tracing::debug!("cannot watch node statuses: {e}"),
        }
        smol::Timer::after(std::time::Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_a_node_may_not_set_are_refused() {
        for bad in [
            "node-role.kubernetes.io/edge=",
            "node-restriction.kubernetes.io/pool=a",
            "example.k8s.io/x=y",
        ] {
            assert!(
                matches!(parse_label(bad), Err(SettingError::ForbiddenLabel(_))),
                "{bad}"
            );
        }
        for good in [
            "zone=shed",
            "topology.kubernetes.io/zone=a",
            "node.kubernetes.io/pool=b",
            "example.com/x=y",
        ] {
            assert!(parse_label(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn parses_labels_and_taints() {
        assert_eq!(parse_label("a=b").unwrap(), ("a".into(), "b".into()));
        assert!(parse_label("=b").is_err());
        assert!(parse_label("ab").is_err());
        let t = parse_taint("dedicated=edge:NoSchedule").unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_deref(), t.effect.as_str()),
            ("dedicated", Some("edge"), "NoSchedule")
        );
        let t = parse_taint("gpu:NoExecute").unwrap();
        assert_eq!((t.key.as_str(), t.value), ("gpu", None));
        assert!(parse_taint("gpu:Sometimes").is_err());
        assert!(parse_taint("gpu").is_err());
    }

    #[test]
    fn node_shape() {
        let facts = NodeFacts {
            cpus: 4,
            memory_kib: 1000,
            ephemeral_storage_bytes: 5000,
            arch: "arm64".into(),
            kernel_version: "6.1".into(),
            os_image: "Debian".into(),
            ..Default::default()
        };
        let settings = NodeSettings {
            annotations: Default::default(),
            name: "pi-1".into(),
            internal_ip: "10.0.0.5".into(),
            labels: [("zone".to_string(), "a".to_string())].into(),
            taints: vec![],
            max_pods: 110,
            kubelet_port: 10250,
        };
        let n = build_node(&facts, &settings, Time::now());
        assert_eq!(n.metadata.labels["kubernetes.io/arch"], "arm64");
        assert_eq!(n.metadata.labels["kubernetes.io/hostname"], "pi-1");
        assert_eq!(n.metadata.labels["zone"], "a");
        assert_eq!(n.status.capacity["cpu"].0, "4");
        assert_eq!(n.status.capacity["memory"].0, "1000Ki");
        assert_eq!(n.status.allocatable["pods"].0, "110");
        assert_eq!(n.status.addresses[0].address, "10.0.0.5");
        assert_eq!(n.status.conditions[0].status, "True");
        let endpoint = n.status.daemon_endpoints.and_then(|d| d.kubelet_endpoint);
        assert_eq!(endpoint.map(|e| e.port), Some(10250));
        let info = n.status.node_info.unwrap();
        assert_eq!(info.kubelet_version, KUBELET_VERSION);
        assert_eq!(info.architecture, "arm64");
    }
}
