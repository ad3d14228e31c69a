//! Server-side tables (`meta.k8s.io/v1` Table): the columns and cells kube-apiserver's
//! printers produce, so `kubectl get` shows what users expect.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::apps::{DaemonSet, Deployment, ReplicaSet};
use crate::batch::{CronJob, Job};
use crate::core::{
    ConfigMap, ContainerStatus, Endpoints, Event, Namespace, Node, Pod, PodTemplateSpec, Secret,
    Service,
};
use crate::meta::{LabelSelector, Time};
use crate::networking::{Ingress, IngressClass};
use crate::object::{AnyObject, Kind};
use crate::selector::Selector;

/// meta/v1 TableColumnDefinition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ColumnDefinition {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub format: String,
    pub description: String,
    /// 0 for the default view, 1 for `-o wide`.
    pub priority: i32,
}

fn col(name: &str, type_: &str, description: &str, priority: i32) -> ColumnDefinition {
    ColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        format: if name == "Name" {
            "name".into()
        } else {
            String::new()
        },
        description: description.into(),
        priority,
    }
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.";

/// The columns of `kind`'s table, in order.
pub fn columns(kind: Kind) -> Vec<ColumnDefinition> {
    let name = || col("Name", "string", NAME_DESC, 0);
    let age = || col("Age", "string", AGE_DESC, 0);
    let workload_extra = || {
        vec![
            col("Containers", "string", "Names of each container in the template.", 1),
            col("Images", "string", "Images referenced by each container in the template.", 1),
            col("Selector", "string", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.", 1),
        ]
    };
    match kind {
        Kind::Pod => vec![
            name(),
            col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
            col("Status", "string", "The aggregate status of the containers in this pod.", 0),
            col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
            age(),
            col("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
            col("Node", "string", "NodeName is a request to schedule this pod onto a specific node. If it is non-empty, the scheduler simply schedules this pod onto that node, assuming that it fits resource requirements.", 1),
            col("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.", 1),
            col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
        ],
        Kind::Node => vec![
            name(),
            col("Status", "string", "The status of the node", 0),
            col("Roles", "string", "The roles of the node", 0),
            age(),
            col("Version", "string", "Kubelet Version reported by the node.", 0),
            col("Internal-IP", "string", "List of addresses reachable to the node. Queried from cloud provider, if available.", 1),
            col("External-IP", "string", "List of addresses reachable to the node. Queried from cloud provider, if available.", 1),
            col("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", 1),
            col("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", 1),
            col("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).", 1),
        ],
        Kind::Namespace => vec![
            name(),
            col("Status", "string", "The status of the namespace", 0),
            age(),
        ],
        Kind::Service => vec![
            name(),
            col("Type", "string", "type determines how the Service is exposed.", 0),
            col("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly.", 0),
            col("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.", 0),
            col("Port(s)", "string", "The list of ports that are exposed by this service.", 0),
            age(),
            col("Selector", "string", "Route service traffic to pods with label keys and values matching this selector.", 1),
        ],
        Kind::Endpoints => vec![
            name(),
            col("Endpoints", "string", "Endpoints of the service", 0),
            age(),
        ],
        Kind::MutatingWebhookConfiguration | Kind::ValidatingWebhookConfiguration => vec![
            name(),
            col("Webhooks", "integer", "Webhooks indicates the number of webhooks registered in this configuration", 0),
            age(),
        ],
        Kind::ValidatingAdmissionPolicy => vec![
            name(),
            col("Validations", "integer", "Validations indicates the number of validation rules defined in this configuration", 0),
            col("ParamKind", "string", "ParamKind specifies the kind of resources used to parameterize this policy", 0),
            age(),
        ],
        Kind::ValidatingAdmissionPolicyBinding => vec![
            name(),
            col("PolicyName", "string", "PolicyName indicates the policy definition which the policy binding binded to", 0),
            col("ParamRef", "string", "ParamRef indicates the param resource which sets the configration param", 0),
            age(),
        ],
        Kind::FlowSchema => vec![
            name(),
            col("PriorityLevel", "string", "`name` is the name of the priority level configuration being referenced Required.", 0),
            col("MatchingPrecedence", "string", "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request. The chosen FlowSchema is among those with the numerically lowest (which we take to be logically highest) MatchingPrecedence.  Each MatchingPrecedence value must be ranged in [1,10000]. Note that if the precedence is not specified, it will be set to 1000 as default.", 0),
            col("DistinguisherMethod", "string", "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema. `nil` specifies that the distinguisher is disabled and thus will always be the empty string.", 0),
            age(),
            col("MissingPL", "string", "references a broken or non-existent PriorityLevelConfiguration", 0),
        ],
        Kind::PriorityLevelConfiguration => vec![
            name(),
            col("Type", "string", "`type` indicates whether this priority level is subject to limitation on request execution.  A value of `\"Exempt\"` means that requests of this priority level are not subject to a limit (and thus are never queued) and do not detract from the capacity made available to other priority levels.  A value of `\"Limited\"` means that (a) requests of this priority level _are_ subject to limits and (b) some of the server's limited capacity is made available exclusively to this priority level. Required.", 0),
            col("NominalConcurrencyShares", "string", "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level. This is the number of execution seats available at this priority level. This is used both for requests dispatched from this priority level as well as requests dispatched from other priority levels borrowing seats from this level. The server's concurrency limit (ServerCL) is divided among the Limited priority levels in proportion to their NCS values:\n\nNominalCL(i)  = ceil( ServerCL * NCS(i) / sum_ncs ) sum_ncs = sum[priority level k] NCS(k)\n\nBigger numbers mean a larger nominal concurrency limit, at the expense of every other priority level.\n\nIf not specified, this field defaults to a value of 30.\n\nSetting this field to zero supports the construction of a \"jail\" for this priority level that is used to hold some request(s)", 0),
            col("Queues", "string", "`queues` is the number of queues for this priority level. The queues exist independently at each apiserver. The value must be positive.  Setting it to 1 effectively precludes shufflesharding and thus makes the distinguisher method of associated flow schemas irrelevant.  This field has a default value of 64.", 0),
            col("HandSize", "string", "`handSize` is a small positive number that configures the shuffle sharding of requests into queues.  When enqueuing a request at this priority level the request's flow identifier (a string pair) is hashed and the hash value is used to shuffle the list of queues and deal a hand of the size specified here.  The request is put into one of the shortest queues in that hand. `handSize` must be no larger than `queues`, and should be significantly smaller (so that a few heavy flows do not saturate most of the queues).  See the user-facing documentation for more extensive guidance on setting this field.  This field has a default value of 8.", 0),
            col("QueueLengthLimit", "string", "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time; excess requests are rejected.  This value must be positive.  If not specified, it will be defaulted to 50.", 0),
            age(),
        ],
        // kube-aggregator's own convertor (registry/apiservice/etcd).
        Kind::APIService => vec![
            name(),
            col("Service", "string", "The reference to the service that hosts this API endpoint.", 0),
            col("Available", "string", "Whether this service is available.", 0),
            age(),
        ],
        Kind::NetworkPolicy => vec![
            name(),
            col("Pod-Selector", "string", "Selects the pods to which this NetworkPolicy object applies. The array of ingress rules is applied to any pods selected by this field. Multiple network policies can select the same set of pods. In this case, the ingress rules for each are combined additively. This field is NOT optional and follows standard label selector semantics. An empty podSelector matches all pods in this namespace.", 0),
            age(),
        ],
        Kind::RuntimeClass => vec![
            name(),
            col("Handler", "string", "handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class. The possible values are specific to the node & CRI configuration.  It is assumed that all handlers are available on every node, and handlers of the same name are equivalent on every node. For example, a handler called \"runc\" might specify that the runc OCI runtime (using native Linux containers) will be used to run the containers in a pod. The Handler must be lowercase, conform to the DNS Label (RFC 1123) requirements, and is immutable.", 0),
            age(),
        ],
        Kind::EndpointSlice => vec![
            name(),
            col("AddressType", "string", "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported:\n* IPv4: Represents an IPv4 Address.\n* IPv6: Represents an IPv6 Address.\n* FQDN: Represents a Fully Qualified Domain Name.", 0),
            col("Ports", "string", "ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates \"all ports\". Each slice may include a maximum of 100 ports.", 0),
            col("Endpoints", "string", "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints.", 0),
            age(),
        ],
        Kind::ConfigMap => vec![
            name(),
            col("Data", "string", "Data contains the configuration data.", 0),
            age(),
        ],
        Kind::HorizontalPodAutoscaler => vec![
            name(),
            col("Reference", "string", "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.", 0),
            col("Targets", "string", "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).", 0),
            col("MinPods", "string", "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down. It defaults to 1 pod.", 0),
            col("MaxPods", "string", "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up. It cannot be less that minReplicas.", 0),
            col("Replicas", "string", "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.", 0),
            age(),
        ],
        Kind::ControllerRevision => vec![
            name(),
            col("Controller", "string", "Controller of the object", 0),
            col("Revision", "string", "Revision indicates the revision of the state represented by Data.", 0),
            age(),
        ],
        Kind::StatefulSet => {
            let mut v = vec![
                name(),
                col("Ready", "string", "Number of the pod with ready state", 0),
                age(),
            ];
            v.extend(workload_extra().into_iter().take(2));
            v
        }
        Kind::PersistentVolume => vec![
            name(),
            col("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity.", 0),
            col("Access Modes", "string", "accessModes contains all ways the volume can be mounted.", 0),
            col("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.", 0),
            col("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim.", 0),
            col("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.", 0),
            col("StorageClass", "string", "StorageClass of the pv", 0),
            col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv", 0),
            col("Reason", "string", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.", 0),
            age(),
            col("VolumeMode", "string", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.", 1),
        ],
        Kind::PersistentVolumeClaim => vec![
            name(),
            col("Status", "string", "phase represents the current phase of PersistentVolumeClaim.", 0),
            col("Volume", "string", "volumeName is the binding reference to the PersistentVolume backing this claim.", 0),
            col("Capacity", "string", "capacity represents the actual resources of the underlying volume.", 0),
            col("Access Modes", "string", "accessModes contains the actual access modes the volume backing the PVC has.", 0),
            col("StorageClass", "string", "StorageClass of the pvc", 0),
            col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc", 0),
            age(),
            col("VolumeMode", "string", "volumeMode defines what type of volume is required by the claim.", 1),
        ],
        Kind::StorageClass => vec![
            name(),
            col("Provisioner", "string", "provisioner indicates the type of the provisioner.", 0),
            col("ReclaimPolicy", "string", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.", 0),
            col("VolumeBindingMode", "string", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used.", 0),
            col("AllowVolumeExpansion", "string", "allowVolumeExpansion shows whether the storage class allow volume expand.", 0),
            age(),
        ],
        Kind::ServiceAccount => vec![
            name(),
            col("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.", 0),
            age(),
        ],
        Kind::Secret => vec![
            name(),
            col("Type", "string", "Used to facilitate programmatic handling of secret data.", 0),
            col("Data", "string", "Data contains the secret data.", 0),
            age(),
        ],
        Kind::Event => vec![
            col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded.", 0),
            col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future.", 0),
            col("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", 0),
            col("Object", "string", "The object that this event is about.", 0),
            col("Subobject", "string", "The subobject that this event is about.", 1),
            col("Source", "string", "The component reporting this event.", 1),
            col("Message", "string", "A human-readable description of the status of this operation.", 0),
            col("First Seen", "string", "The time at which the event was first recorded.", 1),
            col("Count", "string", "The number of times this event has occurred.", 1),
            col("Name", "string", NAME_DESC, 1),
        ],
        Kind::Deployment => {
            let mut v = vec![
                name(),
                col("Ready", "string", "Number of the pod with ready state", 0),
                col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
                col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0),
                age(),
            ];
            v.extend(workload_extra());
            v
        }
        Kind::ReplicaSet | Kind::ReplicationController => {
            let mut v = vec![
                name(),
                col("Desired", "integer", "Replicas is the number of desired replicas.", 0),
                col("Current", "integer", "Replicas is the most recently observed number of replicas.", 0),
                col("Ready", "integer", "The number of ready replicas for this replica set.", 0),
                age(),
            ];
            v.extend(workload_extra());
            v
        }
        Kind::DaemonSet => {
            let mut v = vec![
                name(),
                col("Desired", "integer", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).", 0),
                col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.", 0),
                col("Ready", "integer", "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.", 0),
                col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod", 0),
                col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)", 0),
                col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node.", 0),
                age(),
            ];
            v.extend(workload_extra());
            v
        }
        Kind::Ingress => vec![
            name(),
            col("Class", "string", "The name of the IngressClass resource.", 0),
            col("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule", 0),
            col("Address", "string", "Address is a list containing ingress points for the load-balancer", 0),
            col("Ports", "string", "Ports of TLS configurations that open", 0),
            age(),
        ],
        Kind::IngressClass => vec![
            name(),
            col("Controller", "string", "Controller that is responsible for handling this class", 0),
            col("Parameters", "string", "A reference to a resource with additional parameters", 0),
            age(),
        ],
        Kind::CertificateSigningRequest => vec![
            name(),
            age(),
            col("SignerName", "string", "The signer: kubernetes.io/kube-apiserver-client or kubernetes.io/kube-apiserver-client-kubelet.", 0),
            col("Requestor", "string", "Name of the user who created the request.", 0),
            col("RequestedDuration", "string", "Requested validity of the issued certificate.", 0),
            col("Condition", "string", "Approved, Denied or Pending, then Failed and Issued.", 0),
        ],
        Kind::Lease => vec![
            name(),
            col("Holder", "string", "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.", 0),
            age(),
        ],
        Kind::PriorityClass => vec![
            name(),
            col("Value", "integer", "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.", 0),
            col("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.", 0),
            age(),
            col("PreemptionPolicy", "string", "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.", 0),
        ],
        Kind::PodDisruptionBudget => vec![
            name(),
            col("Min Available", "string", "The minimum number or percentage of available pods this budget requires.", 0),
            col("Max Unavailable", "string", "The maximum number or percentage of unavailable pods this budget requires.", 0),
            col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time.", 0),
            age(),
        ],
        Kind::ResourceQuota => vec![
            name(),
            age(),
            col("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume.", 0),
            col("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.", 0),
        ],
        Kind::Role | Kind::ClusterRole | Kind::LimitRange => vec![
            name(),
            col("Created At", "date", AGE_DESC, 0),
        ],
        Kind::RoleBinding | Kind::ClusterRoleBinding => {
            let role_ref = if kind == Kind::RoleBinding {
                "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This field is immutable."
            } else {
                "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This field is immutable."
            };
            vec![
                name(),
                col("Role", "string", role_ref, 0),
                age(),
                col("Users", "string", "Users in the roleBinding", 1),
                col("Groups", "string", "Groups in the roleBinding", 1),
                col("ServiceAccounts", "string", "ServiceAccounts in the roleBinding", 1),
            ]
        }
        Kind::Job => vec![
            name(),
            col("Status", "string", "Status of the job.", 0),
            col("Completions", "string", "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.", 0),
            col("Duration", "string", "Time required to complete the job.", 0),
            age(),
            col("Containers", "string", "Names of each container in the template.", 1),
            col("Images", "string", "Images referenced by each container in the template.", 1),
            col("Selector", "string", JOB_SELECTOR_DESC, 1),
        ],
        Kind::CronJob => vec![
            name(),
            col("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.", 0),
            col("Timezone", "string", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones", 0),
            col("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.", 0),
            col("Active", "integer", "A list of pointers to currently running jobs.", 0),
            col("Last Schedule", "string", "Information when was the last time the job was successfully scheduled.", 0),
            age(),
            col("Containers", "string", "Names of each container in the template.", 1),
            col("Images", "string", "Images referenced by each container in the template.", 1),
            col("Selector", "string", JOB_SELECTOR_DESC, 1),
        ],
        Kind::CustomResourceDefinition => vec![
            name(),
            col("Created At", "date", AGE_DESC, 0),
        ],
        kind => match kind.custom_rules() {
            Some(rules) => rules.columns(),
            None => vec![name(), age()],
        },
    }
}

const JOB_SELECTOR_DESC: &str = "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

/// kubectl's HumanDuration: `45s`, `5m10s`, `3h4m`, `2d5h`, `3y10d`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 60 * 2 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The time since `t` as kubectl prints it, `<unknown>` when unset.
pub fn age_at(t: Option<Time>, now: SystemTime) -> String {
    since(t, now)
}

/// The Name column every table starts with.
pub fn name_column() -> ColumnDefinition {
    col("Name", "string", NAME_DESC, 0)
}

/// The Age column.
pub fn age_column() -> ColumnDefinition {
    col("Age", "date", AGE_DESC, 0)
}

/// A column as a custom resource's definition describes it (`additionalPrinterColumns`).
pub fn column(
    name: &str,
    type_: &str,
    format: &str,
    description: &str,
    priority: i32,
) -> ColumnDefinition {
    ColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        format: format.into(),
        description: description.into(),
        priority,
    }
}

/// The time since `t` as kubectl prints it, `<unknown>` when unset.
fn since(t: Option<Time>, now: SystemTime) -> String {
    match t {
        None => "<unknown>".into(),
        Some(t) => match now.duration_since(t.to_system()) {
            Ok(d) => human_duration(d),
            // Up to two seconds in the future counts as now (clock skew), as in kubectl.
            Err(e) if e.duration() < Duration::from_secs(2) => "0s".into(),
            Err(_) => "<invalid>".into(),
        },
    }
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.into()
    }
}

fn format_labels(m: &BTreeMap<String, String>) -> String {
    let s: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    or_none(&s.join(","))
}

fn format_selector(sel: Option<&LabelSelector>) -> String {
    match sel.map(Selector::from_label_selector) {
        Some(Ok(s)) => or_none(&s.to_string()),
        Some(Err(_)) => "<error>".into(),
        None => "<none>".into(),
    }
}

fn containers_and_images(t: &PodTemplateSpec) -> (String, String) {
    let names: Vec<&str> = t.spec.containers.iter().map(|c| c.name.as_str()).collect();
    let images: Vec<&str> = t
        .spec
        .containers
        .iter()
        .map(|c| c.image.as_deref().unwrap_or(""))
        .collect();
    (names.join(","), images.join(","))
}

fn persistent_volume_cells(
    v: &crate::storage::PersistentVolume,
    name: String,
    age: String,
) -> Vec<Value> {
    let claim = v
        .spec
        .claim_ref
        .as_ref()
        .map(|r| {
            format!(
                "{}/{}",
                r.namespace.as_deref().unwrap_or(""),
                r.name.as_deref().unwrap_or("")
            )
        })
        .unwrap_or_default();
    let phase = if v.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else {
        v.status.phase.as_deref().unwrap_or("")
    };
    vec![
        json!(name),
        json!(v
            .spec
            .capacity
            .get("storage")
            .map(|q| q.to_string())
            .unwrap_or_else(|| "0".into())),
        json!(crate::storage::access_modes_text(&v.spec.access_modes)),
        json!(v
            .spec
            .persistent_volume_reclaim_policy
            .as_deref()
            .unwrap_or("")),
        json!(phase),
        json!(claim),
        json!(crate::storage::volume_class(v)),
        json!(v
            .spec
            .volume_attributes_class_name
            .as_deref()
            .unwrap_or("<unset>")),
        json!(v.status.reason.as_deref().unwrap_or("")),
        json!(age),
        json!(v.spec.volume_mode.as_deref().unwrap_or("<unset>")),
    ]
}

fn persistent_volume_claim_cells(
    c: &crate::storage::PersistentVolumeClaim,
    name: String,
    age: String,
) -> Vec<Value> {
    let phase = if c.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else {
        c.status.phase.as_deref().unwrap_or("")
    };
    let volume = c.spec.volume_name.as_deref().unwrap_or("");
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            c.status
                .capacity
                .get("storage")
                .map(|q| q.to_string())
                .unwrap_or_else(|| "0".into()),
            crate::storage::access_modes_text(&c.status.access_modes),
        )
    };
    vec![
        json!(name),
        json!(phase),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(crate::storage::claim_class(c)),
        json!(c
            .spec
            .volume_attributes_class_name
            .as_deref()
            .unwrap_or("<unset>")),
        json!(age),
        json!(c.spec.volume_mode.as_deref().unwrap_or("<unset>")),
    ]
}

fn storage_class_cells(c: &crate::storage::StorageClass, name: String, age: String) -> Vec<Value> {
    let name = if crate::storage::is_default_class(c) {
        format!("{name} (default)")
    } else {
        name
    };
    vec![
        json!(name),
        json!(c.provisioner),
        json!(c.reclaim_policy.as_deref().unwrap_or("Delete")),
        json!(c.volume_binding_mode.as_deref().unwrap_or("Immediate")),
        json!(c.allow_volume_expansion.unwrap_or(false).to_string()),
        json!(age),
    ]
}

/// The row cells of `obj`, aligned with [`columns`] of its kind, ages relative to now.
pub fn cells(obj: &AnyObject) -> Vec<Value> {
    cells_at(obj, SystemTime::now())
}

/// [`cells`] with ages relative to `now`.
/// An APIService's SERVICE cell: `Local`, or `namespace/name`.
fn api_service_backend(a: &crate::apiregistration::APIService) -> String {
    match &a.spec.service {
        None => "Local".into(),
        Some(s) => format!("{}/{}", s.namespace, s.name),
    }
}

/// An APIService's AVAILABLE cell: `True`, `False (Reason)`, or `Unknown` without the
/// condition.
fn api_service_available(a: &crate::apiregistration::APIService) -> String {
    match a.condition(crate::apiregistration::AVAILABLE) {
        None => "Unknown".into(),
        Some(c) if c.status == "True" => c.status.clone(),
        Some(c) => match c.reason.as_deref().filter(|r| !r.is_empty()) {
            Some(reason) => format!("{} ({reason})", c.status),
            None => c.status.clone(),
        },
    }
}

pub fn cells_at(obj: &AnyObject, now: SystemTime) -> Vec<Value> {
    let age = since(obj.meta().creation_timestamp, now);
    let name = obj.meta().name.clone();
    match obj {
        AnyObject::CustomResourceDefinition(c) => {
            vec![json!(name), json!(c.metadata.creation_timestamp)]
        }
        AnyObject::Custom(o) => match o.kind.custom_rules() {
            Some(rules) => rules.cells(o, now),
            None => vec![json!(name), json!(age)],
        },
        AnyObject::Pod(p) => pod_cells(p, name, age, now),
        AnyObject::Node(n) => node_cells(n, name, age),
        AnyObject::Namespace(ns) => namespace_cells(ns, name, age),
        AnyObject::Service(s) => service_cells(s, name, age),
        AnyObject::Endpoints(e) => vec![json!(name), json!(format_endpoints(e)), json!(age)],
        AnyObject::RuntimeClass(r) => vec![json!(name), json!(r.handler), json!(age)],
        AnyObject::MutatingWebhookConfiguration(c) => {
            vec![json!(name), json!(c.webhooks.len()), json!(age)]
        }
        AnyObject::ValidatingWebhookConfiguration(c) => {
            vec![json!(name), json!(c.webhooks.len()), json!(age)]
        }
        AnyObject::ValidatingAdmissionPolicy(p) => {
            let param_kind = match &p.spec.param_kind {
                Some(k) => format!("{}/{}", k.api_version, k.kind),
                None => "<unset>".into(),
            };
            vec![
                json!(name),
                json!(p.spec.validations.len()),
                json!(param_kind),
                json!(age),
            ]
        }
        AnyObject::ValidatingAdmissionPolicyBinding(b) => {
            // As kube prints it: a named parameter in any namespace is `*/NAME`.
            let param_ref = match &b.spec.param_ref {
                Some(r) if !r.name.is_empty() && !r.namespace.is_empty() => {
                    format!("{}/{}", r.namespace, r.name)
                }
                Some(r) if !r.name.is_empty() => format!("*/{}", r.name),
                Some(r) if r.selector.is_some() => format_selector(r.selector.as_ref()),
                _ => "<unset>".into(),
            };
            vec![
                json!(name),
                json!(b.spec.policy_name),
                json!(param_ref),
                json!(age),
            ]
        }
        AnyObject::NetworkPolicy(p) => vec![
            json!(name),
            json!(format_selector(Some(&p.spec.pod_selector))),
            json!(age),
        ],
        AnyObject::FlowSchema(f) => vec![
            json!(name),
            json!(f.spec.priority_level_configuration.name),
            json!(f.spec.matching_precedence),
            json!(f.distinguisher().unwrap_or("<none>")),
            json!(age),
            // kube's printer: the Dangling condition's status, `?` without one.
            json!(f
                .condition(crate::flowcontrol::CONDITION_DANGLING)
                .map_or("?", |c| c.status.as_deref().unwrap_or(""))),
        ],
        AnyObject::PriorityLevelConfiguration(p) => {
            let none = || json!("<none>");
            let (shares, queuing) = match &p.spec.limited {
                Some(l) => (
                    json!(l.nominal_concurrency_shares.unwrap_or(0)),
                    l.limit_response.queuing.as_ref(),
                ),
                None => (none(), None),
            };
            vec![
                json!(name),
                json!(p.spec.type_),
                shares,
                queuing.map_or_else(none, |q| json!(q.queues)),
                queuing.map_or_else(none, |q| json!(q.hand_size)),
                queuing.map_or_else(none, |q| json!(q.queue_length_limit)),
                json!(age),
            ]
        }
        AnyObject::APIService(a) => vec![
            json!(name),
            json!(api_service_backend(a)),
            json!(api_service_available(a)),
            json!(age),
        ],
        AnyObject::EndpointSlice(e) => vec![
            json!(name),
            json!(e.address_type),
            json!(format_slice_ports(&e.ports)),
            json!(format_slice_endpoints(&e.endpoints)),
            json!(age),
        ],
        AnyObject::ConfigMap(c) => config_map_cells(c, name, age),
        AnyObject::Secret(s) => secret_cells(s, name, age),
        AnyObject::ServiceAccount(s) => vec![json!(name), json!(s.secrets.len()), json!(age)],
        AnyObject::ControllerRevision(r) => {
            let controller = r
                .metadata
                .controller_ref()
                .map(|o| {
                    let group = o.api_version.split('/').next().unwrap_or("");
                    let kind = o.kind.to_ascii_lowercase();
                    if o.api_version.contains('/') {
                        format!("{kind}.{group}/{}", o.name)
                    } else {
                        format!("{kind}/{}", o.name)
                    }
                })
                .unwrap_or_else(|| "<none>".into());
            vec![
                json!(name),
                json!(controller),
                json!(r.revision),
                json!(age),
            ]
        }
        AnyObject::StatefulSet(s) => {
            let (containers, images) = containers_and_images(&s.spec.template);
            vec![
                json!(name),
                json!(format!(
                    "{}/{}",
                    s.status.ready_replicas,
                    s.spec.replicas.unwrap_or(1)
                )),
                json!(age),
                json!(containers),
                json!(images),
            ]
        }
        AnyObject::PersistentVolume(v) => persistent_volume_cells(v, name, age),
        AnyObject::PersistentVolumeClaim(c) => persistent_volume_claim_cells(c, name, age),
        AnyObject::StorageClass(c) => storage_class_cells(c, name, age),
        AnyObject::Event(e) => event_cells(e, name, now),
        AnyObject::Deployment(d) => deployment_cells(d, name, age),
        AnyObject::ReplicaSet(r) => replica_set_cells(r, name, age),
        AnyObject::HorizontalPodAutoscaler(h) => vec![
            json!(name),
            json!(format!(
                "{}/{}",
                h.spec.scale_target_ref.kind, h.spec.scale_target_ref.name
            )),
            json!(crate::autoscaling::format_metrics(
                &h.spec.metrics,
                &h.status.current_metrics
            )),
            json!(h
                .spec
                .min_replicas
                .map(|m| m.to_string())
                .unwrap_or_else(|| "<unset>".into())),
            json!(h.spec.max_replicas),
            json!(h.status.current_replicas.unwrap_or(0)),
            json!(age),
        ],
        AnyObject::Lease(l) => vec![json!(name), json!(l.holder()), json!(age)],
        AnyObject::PriorityClass(p) => vec![
            json!(name),
            json!(p.value),
            json!(p.is_global_default()),
            json!(age),
            json!(p.preemption_policy.as_deref().unwrap_or("")),
        ],
        AnyObject::ReplicationController(r) => {
            let (containers, images) = r
                .spec
                .template
                .as_ref()
                .map(containers_and_images)
                .unwrap_or_default();
            vec![
                json!(name),
                json!(r.spec.replicas.unwrap_or(1)),
                json!(r.status.replicas),
                json!(r.status.ready_replicas.unwrap_or(0)),
                json!(age),
                json!(containers),
                json!(images),
                json!(format_labels(&r.spec.selector)),
            ]
        }
        AnyObject::DaemonSet(d) => daemon_set_cells(d, name, age),
        AnyObject::Ingress(i) => ingress_cells(i, name, age),
        AnyObject::IngressClass(c) => ingress_class_cells(c, name, age),
        AnyObject::ResourceQuota(q) => {
            let (mut request, mut limit) = (Vec::new(), Vec::new());
            let zero = crate::meta::Quantity("0".into());
            for k in q.spec.hard.keys() {
                let used = q.status.used.get(k).unwrap_or(&zero);
                let hard = q.status.hard.get(k).unwrap_or(&zero);
                let cell = format!("{k}: {}/{}", used.0, hard.0);
                if k.split('.').next() == Some("limits") && k.contains('.') {
                    limit.push(cell);
                } else {
                    request.push(cell);
                }
            }
            vec![
                json!(name),
                json!(age),
                json!(request.join(", ")),
                json!(limit.join(", ")),
            ]
        }
        AnyObject::Role(_) | AnyObject::ClusterRole(_) | AnyObject::LimitRange(_) => {
            let created = obj
                .meta()
                .creation_timestamp
                .map(|t| t.to_string())
                .unwrap_or_default();
            vec![json!(name), json!(created)]
        }
        AnyObject::CertificateSigningRequest(c) => vec![
            json!(name),
            json!(age),
            json!(c.spec.signer_name),
            json!(c.spec.username.clone().unwrap_or_default()),
            json!(c
                .spec
                .expiration_seconds
                .map(|s| human_duration(Duration::from_secs(s.max(0) as u64)))
                .unwrap_or_else(|| "<none>".into())),
            json!(crate::certificates::condition_summary(c)),
        ],
        AnyObject::PodDisruptionBudget(p) => {
            let or_na = |v: &Option<crate::meta::IntOrString>| {
                v.as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "N/A".into())
            };
            vec![
                json!(name),
                json!(or_na(&p.spec.min_available)),
                json!(or_na(&p.spec.max_unavailable)),
                json!(p.status.disruptions_allowed),
                json!(age),
            ]
        }
        AnyObject::RoleBinding(b) => binding_cells(&b.role_ref, &b.subjects, name, age),
        AnyObject::ClusterRoleBinding(b) => binding_cells(&b.role_ref, &b.subjects, name, age),
        AnyObject::Job(j) => job_cells(j, name, age, now),
        AnyObject::CronJob(c) => cron_job_cells(c, name, age, now),
    }
}

/// kube-apiserver's printRoleBinding: the role as `Kind/name`, then (wide) the subjects by
/// kind, service accounts as `namespace/name`.
fn binding_cells(
    role_ref: &crate::rbac::RoleRef,
    subjects: &[crate::rbac::Subject],
    name: String,
    age: String,
) -> Vec<Value> {
    let of = |kind: &str| {
        subjects
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| match (kind, s.namespace.as_deref()) {
                ("ServiceAccount", Some(ns)) => format!("{ns}/{}", s.name),
                _ => s.name.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        json!(name),
        json!(format!("{}/{}", role_ref.kind, role_ref.name)),
        json!(age),
        json!(of("User")),
        json!(of("Group")),
        json!(of("ServiceAccount")),
    ]
}

/// kube-apiserver's printIngress: at most three hosts (`*` for none), the load-balancer
/// addresses (clipped to 16 bytes as outside `-o wide`), `80` or `80, 443` with TLS.
fn ingress_cells(i: &Ingress, name: String, age: String) -> Vec<Value> {
    let class = i
        .spec
        .ingress_class_name
        .clone()
        .unwrap_or_else(|| "<none>".into());
    let hosts: Vec<&str> = i
        .spec
        .rules
        .iter()
        .filter_map(|r| r.host.as_deref())
        .filter(|h| !h.is_empty())
        .collect();
    let hosts = match hosts.len() {
        0 => "*".to_string(),
        // Kubernetes counts the rules (not the hosts) beyond the first three.
        n if n > 3 => format!(
            "{} + {} more...",
            hosts[..3].join(","),
            i.spec.rules.len() - 3
        ),
        _ => hosts.join(","),
    };
    let mut addrs: Vec<&str> = i
        .status
        .load_balancer
        .iter()
        .flat_map(|lb| &lb.ingress)
        .filter_map(|a| a.ip.as_deref().or(a.hostname.as_deref()))
        .filter(|a| !a.is_empty())
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    let mut address = addrs.join(",");
    if address.len() > 16 {
        address = format!("{}...", &address[..13]);
    }
    let ports = if i.spec.tls.is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        json!(name),
        json!(class),
        json!(hosts),
        json!(address),
        json!(ports),
        json!(age),
    ]
}

fn ingress_class_cells(c: &IngressClass, name: String, age: String) -> Vec<Value> {
    let parameters = match &c.spec.parameters {
        None => "<none>".to_string(),
        Some(p) => match &p.api_group {
            Some(g) => format!("{}.{g}/{}", p.kind, p.name),
            None => format!("{}/{}", p.kind, p.name),
        },
    };
    vec![
        json!(name),
        json!(c.spec.controller.clone().unwrap_or_default()),
        json!(parameters),
        json!(age),
    ]
}

/// What a Table row carries besides its cells (the `includeObject` query parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    /// A PartialObjectMetadata (kubectl's default).
    #[default]
    Metadata,
    Object,
}

/// A complete `meta.k8s.io/v1` Table for `objects` of `kind`.
pub fn table(
    kind: Kind,
    objects: &[AnyObject],
    resource_version: &str,
    include: IncludeObject,
) -> Value {
    let now = SystemTime::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({ "cells": cells_at(o, now) });
            let object = match include {
                IncludeObject::None => None,
                IncludeObject::Metadata => {
                    let full = o.to_json();
                    Some(json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": full.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    }))
                }
                IncludeObject::Object => Some(o.to_json()),
            };
            if let (Some(obj), Some(m)) = (object, row.as_object_mut()) {
                m.insert("object".into(), obj);
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version },
        "columnDefinitions": columns(kind),
        "rows": rows,
    })
}

/// Restart count and the time of the latest restart, for the pod Restarts column.
#[derive(Clone, Copy, Default)]
struct Restarts {
    count: i64,
    last: Option<Time>,
}

impl Restarts {
    fn add(&mut self, cs: &ContainerStatus) {
        self.count += i64::from(cs.restart_count);
        let finished = cs
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.finished_at);
        if let Some(t) = finished {
            if self.last.is_none_or(|l| t > l) {
                self.last = Some(t);
            }
        }
    }
}

fn pod_cells(pod: &Pod, name: String, age: String, now: SystemTime) -> Vec<Value> {
    let spec = &pod.spec;
    let status = &pod.status;
    let total = spec.containers.len()
        + spec
            .init_containers
            .iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .count();
    let mut ready = 0usize;
    let mut reason = status
        .reason
        .clone()
        .filter(|r| !r.is_empty())
        .or_else(|| status.phase.clone())
        .unwrap_or_default();

    let mut restarts = Restarts::default();
    let mut sidecar_restarts = Restarts::default();
    let mut initializing = false;
    for (i, cs) in status.init_container_statuses.iter().enumerate() {
        restarts.add(cs);
        let sidecar = spec
            .init_containers
            .iter()
            .find(|c| c.name == cs.name)
            .is_some_and(|c| c.restart_policy.as_deref() == Some("Always"));
        if sidecar {
            sidecar_restarts.add(cs);
        }
        let state = cs.state.clone().unwrap_or_default();
        if sidecar && cs.started == Some(true) {
            if cs.ready {
                ready += 1;
            }
            continue;
        }
        match (&state.terminated, &state.waiting) {
            (Some(t), _) if t.exit_code == 0 => continue,
            (Some(t), _) => {
                reason = match (&t.reason, t.signal) {
                    (Some(r), _) if !r.is_empty() => format!("Init:{r}"),
                    (_, Some(sig)) if sig != 0 => format!("Init:Signal:{sig}"),
                    _ => format!("Init:ExitCode:{}", t.exit_code),
                };
            }
            (None, Some(w))
                if w.reason
                    .as_deref()
                    .is_some_and(|r| !r.is_empty() && r != "PodInitializing") =>
            {
                reason = format!("Init:{}", w.reason.as_deref().unwrap_or_default());
            }
            _ => {
                reason = format!("Init:{i}/{}", spec.init_containers.len());
            }
        }
        initializing = true;
        break;
    }

    let initialized = status
        .condition("Initialized")
        .is_some_and(|c| c.status == "True");
    if !initializing || initialized {
        // Past initialization only the sidecars' restarts count among the init containers'.
        restarts = sidecar_restarts;
        let mut has_running = false;
        for cs in status.container_statuses.iter().rev() {
            restarts.add(cs);
            let state = cs.state.clone().unwrap_or_default();
            if let Some(r) = state
                .waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .filter(|r| !r.is_empty())
            {
                reason = r;
            } else if let Some(t) = &state.terminated {
                reason = match (&t.reason, t.signal) {
                    (Some(r), _) if !r.is_empty() => r.clone(),
                    (_, Some(sig)) if sig != 0 => format!("Signal:{sig}"),
                    _ => format!("ExitCode:{}", t.exit_code),
                };
            } else if cs.ready && state.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if status
                .condition("Ready")
                .is_some_and(|c| c.status == "True")
            {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }

    let terminal = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
    if pod.metadata.deletion_timestamp.is_some() && status.reason.as_deref() == Some("NodeLost") {
        reason = "Unknown".into();
    } else if pod.metadata.deletion_timestamp.is_some() && !terminal {
        reason = "Terminating".into();
    }

    let restarts_cell = match restarts.last {
        Some(t) if restarts.count != 0 => {
            format!("{} ({} ago)", restarts.count, since(Some(t), now))
        }
        _ => restarts.count.to_string(),
    };
    let gates = if spec.readiness_gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_count = spec
            .readiness_gates
            .iter()
            .filter(|g| {
                status
                    .condition(&g.condition_type)
                    .is_some_and(|c| c.status == "True")
            })
            .count();
        format!("{true_count}/{}", spec.readiness_gates.len())
    };
    vec![
        json!(name),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age),
        json!(or_none(
            status
                .pod_ips
                .first()
                .map(|ip| ip.ip.as_str())
                .or(status.pod_ip.as_deref())
                .unwrap_or("")
        )),
        json!(or_none(spec.node_name.as_deref().unwrap_or(""))),
        json!(or_none(status.nominated_node_name.as_deref().unwrap_or(""))),
        json!(gates),
    ]
}

fn node_cells(node: &Node, name: String, age: String) -> Vec<Value> {
    let status = &node.status;
    let mut states: Vec<&str> = Vec::new();
    // Kubernetes' printNode: Ready, NotReady for False and Unknown alike, Unknown only
    // when the node has no Ready condition.
    match status.condition("Ready").map(|c| c.status.as_str()) {
        Some("True") => states.push("Ready"),
        Some(_) => states.push("NotReady"),
        None => states.push("Unknown"),
    }
    if node.spec.unschedulable == Some(true) {
        states.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    for (k, v) in &node.metadata.labels {
        if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.push(role.to_string());
            }
        } else if k == "kubernetes.io/role" && !v.is_empty() {
            roles.push(v.clone());
        }
    }
    roles.sort();
    roles.dedup();
    let info = status.node_info.clone().unwrap_or_default();
    let unknown = |s: &str| {
        if s.is_empty() {
            "<unknown>".to_string()
        } else {
            s.to_string()
        }
    };
    vec![
        json!(name),
        json!(states.join(",")),
        json!(or_none(&roles.join(","))),
        json!(age),
        json!(info.kubelet_version),
        json!(or_none(status.address("InternalIP").unwrap_or(""))),
        json!(or_none(status.address("ExternalIP").unwrap_or(""))),
        json!(unknown(&info.os_image)),
        json!(unknown(&info.kernel_version)),
        json!(unknown(&info.container_runtime_version)),
    ]
}

fn namespace_cells(ns: &Namespace, name: String, age: String) -> Vec<Value> {
    vec![
        json!(name),
        json!(ns.status.phase.clone().unwrap_or_default()),
        json!(age),
    ]
}

fn service_cells(svc: &Service, name: String, age: String) -> Vec<Value> {
    let spec = &svc.spec;
    let ty = spec.type_or_default();
    let cluster_ip = or_none(spec.cluster_ip.as_deref().unwrap_or(""));
    // kubectl's loadBalancerStatusStringer: a sorted set of the IPs (or hostnames).
    let mut lb_ips: Vec<String> = svc
        .status
        .load_balancer
        .as_ref()
        .map(|lb| {
            lb.ingress
                .iter()
                .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                .collect()
        })
        .unwrap_or_default();
    lb_ips.sort();
    lb_ips.dedup();
    let external = match ty {
        "ClusterIP" | "NodePort" => or_none(&spec.external_ips.join(",")),
        "LoadBalancer" => {
            let mut all = lb_ips;
            all.extend(spec.external_ips.iter().cloned());
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => spec.external_name.clone().unwrap_or_default(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = spec
        .ports
        .iter()
        .map(|p| {
            let proto = p.protocol.as_deref().unwrap_or("TCP");
            match p.node_port {
                Some(np) if np != 0 => format!("{}:{np}/{proto}", p.port),
                _ => format!("{}/{proto}", p.port),
            }
        })
        .collect();
    vec![
        json!(name),
        json!(ty),
        json!(cluster_ip),
        json!(external),
        json!(or_none(&ports.join(","))),
        json!(age),
        json!(format_labels(&spec.selector)),
    ]
}

/// The printers' listWithMoreString: at most three items, then ` + N more...`; `<unset>`
/// for none.
fn list_with_more<'a>(items: impl Iterator<Item = &'a str>) -> String {
    const MAX: usize = 3;
    let all: Vec<&str> = items.collect();
    let shown = all[..all.len().min(MAX)].join(",");
    if all.len() > MAX {
        format!("{shown} + {} more...", all.len() - MAX)
    } else if shown.is_empty() {
        "<unset>".into()
    } else {
        shown
    }
}

/// The printers' formatDiscoveryPorts: each port's number, else its name, else `*`.
fn format_slice_ports(ports: &[crate::discovery::EndpointPort]) -> String {
    let texts: Vec<String> = ports
        .iter()
        .map(|p| match (p.port, &p.name) {
            (Some(n), _) => n.to_string(),
            (None, Some(name)) => name.clone(),
            (None, None) => "*".into(),
        })
        .collect();
    list_with_more(texts.iter().map(String::as_str))
}

/// The printers' formatDiscoveryEndpoints: every address of every endpoint.
fn format_slice_endpoints(endpoints: &[crate::discovery::Endpoint]) -> String {
    list_with_more(
        endpoints
            .iter()
            .flat_map(|e| e.addresses.iter().map(String::as_str)),
    )
}

/// kubectl's formatEndpoints: at most three `ip:port`, then ` + N more...`.
fn format_endpoints(e: &Endpoints) -> String {
    if e.subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in &e.subsets {
        if ss.ports.is_empty() {
            count += ss.addresses.len();
            for a in &ss.addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(a.ip.clone());
            }
        } else {
            for p in &ss.ports {
                count += ss.addresses.len();
                for a in &ss.addresses {
                    if list.len() == MAX {
                        more = true;
                        break;
                    }
                    let host = if a.ip.contains(':') {
                        format!("[{}]", a.ip)
                    } else {
                        a.ip.clone()
                    };
                    list.push(format!("{host}:{}", p.port));
                }
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

fn config_map_cells(c: &ConfigMap, name: String, age: String) -> Vec<Value> {
    vec![
        json!(name),
        json!(c.data.len() + c.binary_data.len()),
        json!(age),
    ]
}

fn secret_cells(s: &Secret, name: String, age: String) -> Vec<Value> {
    vec![
        json!(name),
        json!(s.type_.clone().unwrap_or_default()),
        json!(s.data.len()),
        json!(age),
    ]
}

fn event_cells(e: &Event, name: String, now: SystemTime) -> Vec<Value> {
    let first = if e.first_timestamp.is_some() {
        since(e.first_timestamp, now)
    } else {
        since(e.event_time, now)
    };
    let mut last = if e.last_timestamp.is_some() {
        since(e.last_timestamp, now)
    } else {
        first.clone()
    };
    let mut count = e.count.unwrap_or(0);
    if let Some(series) = &e.series {
        last = since(series.last_observed_time, now);
        count = series.count.unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let io = &e.involved_object;
    let kind = io.kind.as_deref().unwrap_or("").to_ascii_lowercase();
    let target = match io.name.as_deref() {
        Some(n) if !n.is_empty() => format!("{kind}/{n}"),
        _ => kind,
    };
    let source = {
        let component = e
            .source
            .as_ref()
            .and_then(|s| s.component.clone())
            .unwrap_or_default();
        let host = e
            .source
            .as_ref()
            .and_then(|s| s.host.clone())
            .unwrap_or_default();
        let (component, host) = if component.is_empty() {
            (
                e.reporting_component.clone().unwrap_or_default(),
                e.reporting_instance.clone().unwrap_or_default(),
            )
        } else {
            (component, host)
        };
        if host.is_empty() {
            component
        } else {
            format!("{component}, {host}")
        }
    };
    vec![
        json!(last),
        json!(e.type_.clone().unwrap_or_default()),
        json!(e.reason.clone().unwrap_or_default()),
        json!(target),
        json!(io.field_path.clone().unwrap_or_default()),
        json!(source),
        json!(e.message.as_deref().unwrap_or("").trim()),
        json!(first),
        json!(count),
        json!(name),
    ]
}

fn deployment_cells(d: &Deployment, name: String, age: String) -> Vec<Value> {
    let desired = d.spec.replicas.unwrap_or(1);
    let st = &d.status;
    let (containers, images) = containers_and_images(&d.spec.template);
    vec![
        json!(name),
        json!(format!("{}/{desired}", st.ready_replicas.unwrap_or(0))),
        json!(st.updated_replicas.unwrap_or(0)),
        json!(st.available_replicas.unwrap_or(0)),
        json!(age),
        json!(containers),
        json!(images),
        json!(format_selector(d.spec.selector.as_ref())),
    ]
}

fn replica_set_cells(r: &ReplicaSet, name: String, age: String) -> Vec<Value> {
    let (containers, images) = containers_and_images(&r.spec.template);
    vec![
        json!(name),
        json!(r.spec.replicas.unwrap_or(1)),
        json!(r.status.replicas),
        json!(r.status.ready_replicas.unwrap_or(0)),
        json!(age),
        json!(containers),
        json!(images),
        json!(format_selector(r.spec.selector.as_ref())),
    ]
}

fn daemon_set_cells(d: &DaemonSet, name: String, age: String) -> Vec<Value> {
    let st = &d.status;
    let (containers, images) = containers_and_images(&d.spec.template);
    vec![
        json!(name),
        json!(st.desired_number_scheduled),
        json!(st.current_number_scheduled),
        json!(st.number_ready),
        json!(st.updated_number_scheduled.unwrap_or(0)),
        json!(st.number_available.unwrap_or(0)),
        json!(format_labels(&d.spec.template.spec.node_selector)),
        json!(age),
        json!(containers),
        json!(images),
        json!(format_selector(d.spec.selector.as_ref())),
    ]
}

fn job_cells(j: &Job, name: String, age: String, now: SystemTime) -> Vec<Value> {
    let st = &j.status;
    let succeeded = st.succeeded.unwrap_or(0);
    let completions = match (j.spec.completions, j.spec.parallelism.unwrap_or(0)) {
        (Some(c), _) => format!("{succeeded}/{c}"),
        (None, p) if p > 1 => format!("{succeeded}/1 of {p}"),
        (None, _) => format!("{succeeded}/1"),
    };
    let duration = match (st.start_time, st.completion_time) {
        (None, _) => String::new(),
        (Some(s), None) => since(Some(s), now),
        (Some(s), Some(c)) => human_duration(Duration::from_secs((c.0 - s.0).max(0) as u64)),
    };
    // The first that holds, in kube-apiserver's order.
    let status = if st.is_true("Complete") {
        "Complete"
    } else if st.is_true("Failed") {
        "Failed"
    } else if j.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else if st.is_true("Suspended") {
        "Suspended"
    } else if st.is_true("FailureTarget") {
        "FailureTarget"
    } else if st.is_true("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let (containers, images) = containers_and_images(&j.spec.template);
    vec![
        json!(name),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age),
        json!(containers),
        json!(images),
        json!(format_selector(j.spec.selector.as_ref())),
    ]
}

fn cron_job_cells(c: &CronJob, name: String, age: String, now: SystemTime) -> Vec<Value> {
    let last = match c.status.last_schedule_time {
        None => "<none>".into(),
        t => since(t, now),
    };
    let suspend = match c.spec.suspend {
        None => "<unset>",
        Some(true) => "True",
        Some(false) => "False",
    };
    let (containers, images) = containers_and_images(&c.spec.job_template.spec.template);
    vec![
        json!(name),
        json!(c.spec.schedule),
        json!(c.spec.time_zone.as_deref().unwrap_or("<none>")),
        json!(suspend),
        json!(c.status.active.len()),
        json!(last),
        json!(age),
        json!(containers),
        json!(images),
        json!(format_selector(c.spec.job_template.spec.selector.as_ref())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, ContainerStatus, EndpointAddress, EndpointPort, EndpointSubset,
        NodeAddress, NodeCondition, NodeSystemInfo, PodCondition, ServicePort,
    };
    use crate::meta::{IntOrString, Time};
    use crate::Resource;

    const NOW: i64 = 1_800_000_000;

    fn now() -> SystemTime {
        Time(NOW).to_system()
    }

    fn strs(v: &[Value]) -> Vec<String> {
        v.iter()
            .map(|c| match c {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect()
    }

    #[test]
    fn endpoint_slice_cells_as_kubectl_prints_them() {
        use crate::discovery::{Endpoint, EndpointPort, EndpointSlice};
        let mut e = EndpointSlice {
            address_type: "IPv4".into(),
            ..Default::default()
        };
        let cells = |e: &EndpointSlice| strs(&cells(&e.clone().into_any()));
        assert_eq!(cells(&e)[1..4], ["IPv4", "<unset>", "<unset>"]);
        for (i, ip) in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
            .iter()
            .enumerate()
        {
            e.endpoints.push(Endpoint {
                addresses: vec![ip.to_string()],
                ..Default::default()
            });
            e.ports.push(EndpointPort {
                name: Some(format!("p{i}")),
                port: (i != 1).then_some(8080 + i as i32),
                ..Default::default()
            });
        }
        assert_eq!(
            cells(&e)[2..4],
            [
                "8080,p1,8082 + 1 more...",
                "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more..."
            ]
        );
    }

    #[test]
    fn human_durations() {
        let cases = [
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (120, "2m"),
            (310, "5m10s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600 + 4 * 60, "3h4m"),
            (5 * 3600, "5h"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400 + 5 * 3600, "2d5h"),
            (3 * 86400, "3d"),
            (30 * 86400, "30d"),
            (800 * 86400, "2y70d"),
            (730 * 86400, "2y"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), want, "{secs}s");
        }
        assert_eq!(since(None, now()), "<unknown>");
        assert_eq!(since(Some(Time(NOW + 1)), now()), "0s");
        assert_eq!(since(Some(Time(NOW + 100)), now()), "<invalid>");
    }

    #[test]
    fn every_kind_has_as_many_cells_as_columns() {
        let objs = [
            Pod::default().into_any(),
            Node::default().into_any(),
            Namespace::default().into_any(),
            Service::default().into_any(),
            Endpoints::default().into_any(),
            crate::discovery::EndpointSlice::default().into_any(),
            crate::node::RuntimeClass::default().into_any(),
            crate::networking::NetworkPolicy::default().into_any(),
            crate::admissionregistration::MutatingWebhookConfiguration::default().into_any(),
            crate::admissionregistration::ValidatingWebhookConfiguration::default().into_any(),
            crate::admissionpolicy::ValidatingAdmissionPolicy::default().into_any(),
            crate::admissionpolicy::ValidatingAdmissionPolicyBinding::default().into_any(),
            crate::apiregistration::APIService::default().into_any(),
            crate::flowcontrol::FlowSchema::default().into_any(),
            crate::flowcontrol::PriorityLevelConfiguration::default().into_any(),
            ConfigMap::default().into_any(),
            Secret::default().into_any(),
            Event::default().into_any(),
            Deployment::default().into_any(),
            ReplicaSet::default().into_any(),
            DaemonSet::default().into_any(),
            Ingress::default().into_any(),
            IngressClass::default().into_any(),
            Job::default().into_any(),
            CronJob::default().into_any(),
            crate::replication::ReplicationController::default().into_any(),
            crate::scheduling::PriorityClass::default().into_any(),
            crate::quota::ResourceQuota::default().into_any(),
            crate::quota::LimitRange::default().into_any(),
            crate::storage::PersistentVolume::default().into_any(),
            crate::storage::PersistentVolumeClaim::default().into_any(),
            crate::storage::StorageClass::default().into_any(),
            crate::apps::StatefulSet::default().into_any(),
            crate::apps::ControllerRevision::default().into_any(),
            crate::coordination::Lease::default().into_any(),
        ];
        for o in &objs {
            assert_eq!(cells(o).len(), columns(o.kind()).len(), "{:?}", o.kind());
            let cols = serde_json::to_value(columns(o.kind())).unwrap();
            assert!(cols[0].get("type").is_some());
        }
    }

    fn running_pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "web-1".into();
        p.metadata.creation_timestamp = Some(Time(NOW - 310));
        p.spec.containers = vec![
            Container {
                name: "app".into(),
                ..Default::default()
            },
            Container {
                name: "side".into(),
                ..Default::default()
            },
        ];
        p.spec.node_name = Some("n1".into());
        p.status.phase = Some("Running".into());
        p.status.pod_ip = Some("10.42.0.5".into());
        p.status.container_statuses = vec![
            ContainerStatus {
                name: "app".into(),
                ready: true,
                restart_count: 2,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                last_state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 1,
                        finished_at: Some(Time(NOW - 65)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ContainerStatus {
                name: "side".into(),
                ready: false,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        p
    }

    #[test]
    fn pod_row() {
        let p = running_pod();
        assert_eq!(
            strs(&cells_at(&p.clone().into_any(), now())),
            vec![
                "web-1",
                "1/2",
                "Running",
                "2 (65s ago)",
                "5m10s",
                "10.42.0.5",
                "n1",
                "<none>",
                "<none>"
            ]
        );
    }

    #[test]
    fn pod_status_column() {
        // Waiting reason wins.
        let mut p = running_pod();
        p.status.container_statuses[1].state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: None,
            }),
            ..Default::default()
        });
        assert_eq!(
            cells_at(&p.clone().into_any(), now())[2],
            "CrashLoopBackOff"
        );

        // Terminating.
        let mut t = running_pod();
        t.metadata.deletion_timestamp = Some(Time(NOW));
        assert_eq!(cells_at(&t.into_any(), now())[2], "Terminating");

        // Completed.
        let mut c = running_pod();
        c.status.phase = Some("Succeeded".into());
        for cs in &mut c.status.container_statuses {
            cs.ready = false;
            cs.state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        let row = cells_at(&c.into_any(), now());
        assert_eq!(row[1], "0/2");
        assert_eq!(row[2], "Completed");

        // Exit code without a reason.
        let mut e = running_pod();
        e.status.container_statuses[0].state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(cells_at(&e.into_any(), now())[2], "ExitCode:137");

        // Pending pod with no statuses, readiness gates.
        let mut pending = Pod::default();
        pending.spec.containers = vec![Container::default()];
        pending.status.phase = Some("Pending".into());
        pending.spec.readiness_gates = vec![crate::core::PodReadinessGate {
            condition_type: "example.com/ready".into(),
        }];
        pending.status.conditions = vec![PodCondition {
            type_: "example.com/ready".into(),
            status: "True".into(),
            ..Default::default()
        }];
        assert_eq!(
            strs(&cells_at(&pending.into_any(), now())),
            vec![
                "",
                "0/1",
                "Pending",
                "0",
                "<unknown>",
                "<none>",
                "<none>",
                "<none>",
                "1/1"
            ]
        );
    }

    #[test]
    fn pod_init_status() {
        let mut p = Pod::default();
        p.spec.init_containers = vec![
            Container {
                name: "a".into(),
                ..Default::default()
            },
            Container {
                name: "b".into(),
                ..Default::default()
            },
        ];
        p.spec.containers = vec![Container {
            name: "main".into(),
            ..Default::default()
        }];
        p.status.phase = Some("Pending".into());
        p.status.init_container_statuses = vec![
            ContainerStatus {
                name: "a".into(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        reason: Some("Completed".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ContainerStatus {
                name: "b".into(),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        assert_eq!(cells_at(&p.clone().into_any(), now())[2], "Init:1/2");
        p.status.init_container_statuses[1].state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 3,
                reason: Some("Error".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(cells_at(&p.clone().into_any(), now())[2], "Init:Error");
        p.status.init_container_statuses[1].state = Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ImagePullBackOff".into()),
                message: None,
            }),
            ..Default::default()
        });
        assert_eq!(cells_at(&p.into_any(), now())[2], "Init:ImagePullBackOff");
    }

    #[test]
    fn pod_with_sidecar() {
        let mut p = running_pod();
        p.spec.containers.truncate(1);
        p.status.container_statuses.truncate(1);
        p.spec.init_containers = vec![
            Container {
                name: "setup".into(),
                ..Default::default()
            },
            Container {
                name: "proxy".into(),
                restart_policy: Some("Always".into()),
                ..Default::default()
            },
        ];
        let done = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        p.status.init_container_statuses = vec![
            ContainerStatus {
                name: "setup".into(),
                restart_count: 3,
                state: Some(done),
                ..Default::default()
            },
            ContainerStatus {
                name: "proxy".into(),
                restart_count: 1,
                started: Some(true),
                ready: true,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        let row = strs(&cells_at(&p.into_any(), now()));
        assert_eq!(row[1], "2/2");
        assert_eq!(row[2], "Running");
        // The app's 2 and the sidecar's 1; the finished init container's 3 no longer count.
        assert_eq!(row[3], "3 (65s ago)");
    }

    #[test]
    fn node_row() {
        let mut n = Node::default();
        n.metadata.name = "pi-1".into();
        n.metadata.creation_timestamp = Some(Time(NOW - (2 * 86400 + 5 * 3600)));
        n.metadata
            .labels
            .insert("node-role.kubernetes.io/control-plane".into(), "".into());
        n.spec.unschedulable = Some(true);
        n.status.conditions = vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }];
        n.status.addresses = vec![NodeAddress {
            type_: "InternalIP".into(),
            address: "192.168.1.10".into(),
        }];
        n.status.node_info = Some(NodeSystemInfo {
            kubelet_version: "v1.30.0-skiff".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            kernel_version: "6.1.0-rpi7".into(),
            container_runtime_version: "skiff://0.1.0".into(),
            ..Default::default()
        });
        assert_eq!(
            strs(&cells_at(&n.into_any(), now())),
            vec![
                "pi-1",
                "Ready,SchedulingDisabled",
                "control-plane",
                "2d5h",
                "v1.30.0-skiff",
                "192.168.1.10",
                "<none>",
                "Debian GNU/Linux 12 (bookworm)",
                "6.1.0-rpi7",
                "skiff://0.1.0"
            ]
        );
        let bare = Node::default().into_any();
        assert_eq!(cells_at(&bare, now())[1], "Unknown");
        assert_eq!(cells_at(&bare, now())[2], "<none>");
    }

    #[test]
    fn service_rows() {
        let mut s = Service::default();
        s.metadata.name = "web".into();
        s.metadata.creation_timestamp = Some(Time(NOW - 45));
        s.spec.type_ = Some("NodePort".into());
        s.spec.cluster_ip = Some("10.43.0.10".into());
        s.spec.ports = vec![
            ServicePort {
                port: 80,
                node_port: Some(30080),
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::Int(8080)),
                ..Default::default()
            },
            ServicePort {
                port: 53,
                protocol: Some("UDP".into()),
                ..Default::default()
            },
        ];
        s.spec.selector.insert("app".into(), "web".into());
        assert_eq!(
            strs(&cells_at(&s.clone().into_any(), now())),
            vec![
                "web",
                "NodePort",
                "10.43.0.10",
                "<none>",
                "80:30080/TCP,53/UDP",
                "45s",
                "app=web"
            ]
        );
        s.spec.type_ = Some("LoadBalancer".into());
        assert_eq!(cells_at(&s.clone().into_any(), now())[3], "<pending>");
        s.spec.type_ = Some("ExternalName".into());
        s.spec.external_name = Some("db.example.com".into());
        assert_eq!(cells_at(&s.into_any(), now())[3], "db.example.com");
    }

    #[test]
    fn endpoints_row() {
        let mut e = Endpoints::default();
        e.metadata.name = "web".into();
        assert_eq!(cells_at(&e.clone().into_any(), now())[1], "<none>");
        e.subsets = vec![EndpointSubset {
            addresses: ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
                .iter()
                .map(|ip| EndpointAddress {
                    ip: ip.to_string(),
                    ..Default::default()
                })
                .collect(),
            ports: vec![EndpointPort {
                port: 8080,
                ..Default::default()
            }],
            ..Default::default()
        }];
        assert_eq!(
            cells_at(&e.clone().into_any(), now())[1],
            "10.0.0.1:8080,10.0.0.2:8080,10.0.0.3:8080 + 1 more..."
        );
        e.subsets[0].addresses.truncate(2);
        assert_eq!(
            cells_at(&e.into_any(), now())[1],
            "10.0.0.1:8080,10.0.0.2:8080"
        );
    }

    #[test]
    fn config_and_secret_rows() {
        let mut c = ConfigMap::default();
        c.metadata.name = "game-demo".into();
        c.data.insert("a".into(), "1".into());
        c.binary_data.insert("b".into(), "x".into());
        assert_eq!(cells_at(&c.into_any(), now())[1], json!(2));
        let mut s = Secret::default();
        s.metadata.name = "s".into();
        s.type_ = Some("Opaque".into());
        s.data.insert("k".into(), "v".into());
        let row = cells_at(&s.into_any(), now());
        assert_eq!(row[1], "Opaque");
        assert_eq!(row[2], json!(1));
    }

    #[test]
    fn event_row() {
        let mut e = Event::default();
        e.metadata.name = "web-1.17a".into();
        e.involved_object.kind = Some("Pod".into());
        e.involved_object.name = Some("web-1".into());
        e.involved_object.field_path = Some("spec.containers{app}".into());
        e.type_ = Some("Normal".into());
        e.reason = Some("Pulled".into());
        e.message = Some("Container image \"nginx\" already present on machine ".into());
        e.first_timestamp = Some(Time(NOW - 600));
        e.last_timestamp = Some(Time(NOW - 30));
        e.count = Some(4);
        e.source = Some(crate::core::EventSource {
            component: Some("kubelet".into()),
            host: Some("pi-1".into()),
        });
        assert_eq!(
            strs(&cells_at(&e.into_any(), now())),
            vec![
                "30s",
                "Normal",
                "Pulled",
                "pod/web-1",
                "spec.containers{app}",
                "kubelet, pi-1",
                "Container image \"nginx\" already present on machine",
                "10m",
                "4",
                "web-1.17a"
            ]
        );
    }

    #[test]
    fn workload_rows() {
        let mut d = Deployment::default();
        d.metadata.name = "nginx-deployment".into();
        d.metadata.creation_timestamp = Some(Time(NOW - 3 * 3600 - 240));
        d.spec.replicas = Some(3);
        d.spec.selector = Some(LabelSelector {
            match_labels: [("app".to_string(), "nginx".to_string())].into(),
            ..Default::default()
        });
        d.spec.template.spec.containers = vec![Container {
            name: "nginx".into(),
            image: Some("nginx:1.14.2".into()),
            ..Default::default()
        }];
        d.status.ready_replicas = Some(2);
        d.status.updated_replicas = Some(3);
        d.status.available_replicas = Some(2);
        assert_eq!(
            cells_at(&d.clone().into_any(), now()),
            vec![
                json!("nginx-deployment"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("3h4m"),
                json!("nginx"),
                json!("nginx:1.14.2"),
                json!("app=nginx")
            ]
        );

        let mut rs = ReplicaSet::default();
        rs.metadata.name = "frontend".into();
        rs.spec.replicas = Some(3);
        rs.spec.selector = d.spec.selector.clone();
        rs.spec.template = d.spec.template.clone();
        rs.status.replicas = 3;
        rs.status.ready_replicas = Some(1);
        assert_eq!(
            strs(&cells_at(&rs.into_any(), now())),
            vec![
                "frontend",
                "3",
                "3",
                "1",
                "<unknown>",
                "nginx",
                "nginx:1.14.2",
                "app=nginx"
            ]
        );

        let mut ds = DaemonSet::default();
        ds.metadata.name = "fluentd".into();
        ds.spec.selector = d.spec.selector.clone();
        ds.spec.template = d.spec.template.clone();
        ds.status.desired_number_scheduled = 2;
        ds.status.current_number_scheduled = 2;
        ds.status.number_ready = 1;
        ds.status.updated_number_scheduled = Some(2);
        ds.status.number_available = Some(1);
        assert_eq!(
            strs(&cells_at(&ds.clone().into_any(), now())),
            vec![
                "fluentd",
                "2",
                "2",
                "1",
                "2",
                "1",
                "<none>",
                "<unknown>",
                "nginx",
                "nginx:1.14.2",
                "app=nginx"
            ]
        );
        ds.spec
            .template
            .spec
            .node_selector
            .insert("kubernetes.io/os".into(), "linux".into());
        assert_eq!(cells_at(&ds.into_any(), now())[6], "kubernetes.io/os=linux");
    }

    #[test]
    fn table_shape() {
        let mut p = running_pod();
        p.metadata.namespace = Some("default".into());
        let t = table(Kind::Pod, &[p.into_any()], "42", IncludeObject::Metadata);
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(t["metadata"]["resourceVersion"], "42");
        assert_eq!(t["columnDefinitions"][0]["name"], "Name");
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
        assert_eq!(t["columnDefinitions"][5]["priority"], 1);
        assert_eq!(t["rows"][0]["cells"][0], "web-1");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "web-1");
        let bare = table(Kind::Pod, &[], "1", IncludeObject::None);
        assert_eq!(bare["rows"], json!([]));
    }
}
