//! flowcontrol.apiserver.k8s.io/v1: FlowSchema and PriorityLevelConfiguration, the objects
//! that configure API Priority and Fairness (docs/design/admission.md §3), with kube's
//! defaults and 1.32 validation messages. The mandatory and suggested objects kube-apiserver
//! keeps are in [`bootstrap`].

use std::collections::HashSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::admissionpolicy::{go_quote, go_slice};
use crate::meta::{ObjectMeta, Time};
use crate::object::{Kind, Resource};
use crate::validation::{self, FieldError};

pub mod bootstrap;

/// The API group.
pub const GROUP: &str = "flowcontrol.apiserver.k8s.io";

/// The annotation that says whether the server keeps a bootstrap object's spec up to date.
pub const AUTO_UPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";

/// The names of the mandatory objects.
pub const EXEMPT: &str = "exempt";
pub const CATCH_ALL: &str = "catch-all";

/// The FlowSchema condition the server keeps.
pub const CONDITION_DANGLING: &str = "Dangling";

/// Response headers naming the FlowSchema and priority level a request was classified in.
pub const HEADER_FLOW_SCHEMA_UID: &str = "X-Kubernetes-PF-FlowSchema-UID";
pub const HEADER_PRIORITY_LEVEL_UID: &str = "X-Kubernetes-PF-PriorityLevel-UID";

/// Wildcards of the rules.
pub const ALL: &str = "*";

/// Subject kinds.
pub const SUBJECT_USER: &str = "User";
pub const SUBJECT_GROUP: &str = "Group";
pub const SUBJECT_SERVICE_ACCOUNT: &str = "ServiceAccount";

/// Flow distinguisher methods.
pub const BY_USER: &str = "ByUser";
pub const BY_NAMESPACE: &str = "ByNamespace";

/// Priority level types.
pub const TYPE_EXEMPT: &str = "Exempt";
pub const TYPE_LIMITED: &str = "Limited";

/// Limit responses.
pub const RESPONSE_QUEUE: &str = "Queue";
pub const RESPONSE_REJECT: &str = "Reject";

/// The highest matchingPrecedence.
pub const MAX_MATCHING_PRECEDENCE: i32 = 10_000;
/// The most queues a priority level may have.
const MAX_QUEUES: i32 = 10_000_000;
/// The most hash bits shuffle sharding may use (kube's `shufflesharding.MaxHashBits`).
pub const MAX_HASH_BITS: i32 = 60;

/// FlowSchema defines the schema of a group of flows. Note that a flow is made up of a set of
/// inbound API requests with similar attributes and is identified by a pair of strings: the
/// name of the FlowSchema and a "flow distinguisher".
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.FlowSchema")]
pub struct FlowSchema {
    /// `metadata` is the standard object's metadata.
    pub metadata: ObjectMeta,
    /// `spec` is the specification of the desired behavior of a FlowSchema.
    pub spec: FlowSchemaSpec,
    /// `status` is the current status of a FlowSchema.
    pub status: FlowSchemaStatus,
}

/// FlowSchemaSpec describes how the FlowSchema's specification looks like.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.FlowSchemaSpec")]
pub struct FlowSchemaSpec {
    /// `priorityLevelConfiguration` should reference a PriorityLevelConfiguration in the
    /// cluster. If the reference cannot be resolved, the FlowSchema will be ignored and marked
    /// as invalid in its status. Required.
    pub priority_level_configuration: PriorityLevelConfigurationReference,
    /// `matchingPrecedence` is used to choose among the FlowSchemas that match a given
    /// request. The chosen FlowSchema is among those with the numerically lowest (which we
    /// take to be logically highest) MatchingPrecedence.  Each MatchingPrecedence value must
    /// be ranged in [1,10000]. Note that if the precedence is not specified, it will be set to
    /// 1000 as default.
    pub matching_precedence: i32,
    /// `distinguisherMethod` defines how to compute the flow distinguisher for requests that
    /// match this schema. `nil` specifies that the distinguisher is disabled and thus will
    /// always be the empty string.
    pub distinguisher_method: Option<FlowDistinguisherMethod>,
    /// `rules` describes which requests will match this flow schema. This FlowSchema matches a
    /// request if and only if at least one member of rules matches the request. if it is an
    /// empty slice, there will be no requests matching the FlowSchema.
    pub rules: Vec<PolicyRulesWithSubjects>,
}

/// FlowDistinguisherMethod specifies the method of a flow distinguisher.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.FlowDistinguisherMethod")]
pub struct FlowDistinguisherMethod {
    /// `type` is the type of flow distinguisher method The supported types are "ByUser" and
    /// "ByNamespace". Required.
    #[serde(rename = "type")]
    pub type_: String,
}

/// PriorityLevelConfigurationReference contains information that points to the
/// "request-priority" being used.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationReference")]
pub struct PriorityLevelConfigurationReference {
    /// `name` is the name of the priority level configuration being referenced Required.
    pub name: String,
}

/// PolicyRulesWithSubjects prescribes a test that applies to a request to an apiserver. The
/// test considers the subject making the request, the verb being requested, and the resource
/// to be acted upon. This PolicyRulesWithSubjects matches a request if and only if both (a) at
/// least one member of subjects matches the request and (b) at least one member of
/// resourceRules or nonResourceRules matches the request.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.PolicyRulesWithSubjects")]
pub struct PolicyRulesWithSubjects {
    /// subjects is the list of normal user, serviceaccount, or group that this rule cares
    /// about. There must be at least one member in this slice. A slice that includes both the
    /// system:authenticated and system:unauthenticated user groups matches every request.
    /// Required.
    pub subjects: Vec<Subject>,
    /// `resourceRules` is a slice of ResourcePolicyRules that identify matching requests
    /// according to their verb and the target resource. At least one of `resourceRules` and
    /// `nonResourceRules` has to be non-empty.
    pub resource_rules: Vec<ResourcePolicyRule>,
    /// `nonResourceRules` is a list of NonResourcePolicyRules that identify matching requests
    /// according to their verb and the target non-resource URL.
    pub non_resource_rules: Vec<NonResourcePolicyRule>,
}

/// Subject matches the originator of a request, as identified by the request authentication
/// system. There are three ways of matching an originator; by user, group, or service
/// account.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.Subject")]
pub struct Subject {
    /// `kind` indicates which one of the other fields is non-empty. Required
    pub kind: String,
    /// `user` matches based on username.
    pub user: Option<UserSubject>,
    /// `group` matches based on user group name.
    pub group: Option<GroupSubject>,
    /// `serviceAccount` matches ServiceAccounts.
    pub service_account: Option<ServiceAccountSubject>,
}

/// UserSubject holds detailed information for user-kind subject.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.UserSubject")]
pub struct UserSubject {
    /// `name` is the username that matches, or "*" to match all usernames. Required.
    pub name: String,
}

/// GroupSubject holds detailed information for group-kind subject.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.GroupSubject")]
pub struct GroupSubject {
    /// name is the user group that matches, or "*" to match all user groups. See
    /// https://github.com/kubernetes/apiserver/blob/master/pkg/authentication/user/user.go for
    /// some well-known group names. Required.
    pub name: String,
}

/// ServiceAccountSubject holds detailed information for service-account-kind subject.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.ServiceAccountSubject")]
pub struct ServiceAccountSubject {
    /// `namespace` is the namespace of matching ServiceAccount objects. Required.
    pub namespace: String,
    /// `name` is the name of matching ServiceAccount objects, or "*" to match regardless of
    /// name. Required.
    pub name: String,
}

/// ResourcePolicyRule is a predicate that matches some resource requests, testing the
/// request's verb and the target resource. A ResourcePolicyRule matches a resource request if
/// and only if: (a) at least one member of verbs matches the request, (b) at least one member
/// of apiGroups matches the request, (c) at least one member of resources matches the
/// request, and (d) either (d1) the request does not specify a namespace (i.e.,
/// `Namespace==""`) and clusterScope is true or (d2) the request specifies a namespace and
/// least one member of namespaces matches the request's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.ResourcePolicyRule")]
pub struct ResourcePolicyRule {
    /// `verbs` is a list of matching verbs and may not be empty. "*" matches all verbs and,
    /// if present, must be the only entry. Required.
    pub verbs: Vec<String>,
    /// `apiGroups` is a list of matching API groups and may not be empty. "*" matches all API
    /// groups and, if present, must be the only entry. Required.
    pub api_groups: Vec<String>,
    /// `resources` is a list of matching resources (i.e., lowercase and plural) with, if
    /// desired, subresource.  For example, [ "services", "nodes/status" ].  This list may not
    /// be empty. "*" matches all resources and, if present, must be the only entry. Required.
    pub resources: Vec<String>,
    /// `clusterScope` indicates whether to match requests that do not specify a namespace
    /// (which happens either because the resource is not namespaced or the request targets
    /// all namespaces). If this field is omitted or false then the `namespaces` field must
    /// contain a non-empty list.
    pub cluster_scope: Option<bool>,
    /// `namespaces` is a list of target namespaces that restricts matches.  A request that
    /// specifies a target namespace matches only if either (a) this list contains that target
    /// namespace or (b) this list contains "*".  Note that "*" matches any specified namespace
    /// but does not match a request that _does not specify_ a namespace (see the
    /// `clusterScope` field for that). This list may be empty, but only if `clusterScope` is
    /// true.
    pub namespaces: Vec<String>,
}

impl ResourcePolicyRule {
    /// Whether the rule matches requests without a namespace.
    pub fn cluster_scope(&self) -> bool {
        self.cluster_scope.unwrap_or(false)
    }
}

/// NonResourcePolicyRule is a predicate that matches non-resource requests according to their
/// verb and the target non-resource URL. A NonResourcePolicyRule matches a request if and only
/// if both (a) at least one member of verbs matches the request and (b) at least one member of
/// nonResourceURLs matches the request.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.NonResourcePolicyRule")]
pub struct NonResourcePolicyRule {
    /// `verbs` is a list of matching verbs and may not be empty. "*" matches all verbs. If it
    /// is present, it must be the only entry. Required.
    pub verbs: Vec<String>,
    /// `nonResourceURLs` is a set of url prefixes that a user should have access to and may
    /// not be empty. For example:
    ///   - "/healthz" is legal
    ///   - "/hea*" is illegal
    ///   - "/hea" is legal but matches nothing
    ///   - "/hea/*" also matches nothing
    ///   - "/healthz/*" matches all per-component health checks.
    ///
    /// "*" matches all non-resource urls. if it is present, it must be the only entry.
    /// Required.
    #[serde(rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// FlowSchemaStatus represents the current state of a FlowSchema.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.FlowSchemaStatus")]
pub struct FlowSchemaStatus {
    /// `conditions` is a list of the current states of FlowSchema.
    pub conditions: Vec<FlowSchemaCondition>,
}

/// FlowSchemaCondition describes conditions for a FlowSchema.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.FlowSchemaCondition")]
pub struct FlowSchemaCondition {
    /// `type` is the type of the condition. Required.
    #[serde(rename = "type")]
    pub type_: String,
    /// `status` is the status of the condition. Can be True, False, Unknown. Required.
    pub status: Option<String>,
    /// `lastTransitionTime` is the last time the condition transitioned from one status to
    /// another.
    pub last_transition_time: Option<Time>,
    /// `reason` is a unique, one-word, CamelCase reason for the condition's last transition.
    pub reason: Option<String>,
    /// `message` is a human-readable message indicating details about last transition.
    pub message: Option<String>,
}

/// PriorityLevelConfiguration represents the configuration of a priority level.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.PriorityLevelConfiguration")]
pub struct PriorityLevelConfiguration {
    /// `metadata` is the standard object's metadata.
    pub metadata: ObjectMeta,
    /// `spec` is the specification of the desired behavior of a "request-priority".
    pub spec: PriorityLevelConfigurationSpec,
    /// `status` is the current status of a "request-priority".
    pub status: PriorityLevelConfigurationStatus,
}

/// PriorityLevelConfigurationSpec specifies the configuration of a priority level.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationSpec")]
pub struct PriorityLevelConfigurationSpec {
    /// `type` indicates whether this priority level is subject to limitation on request
    /// execution.  A value of `"Exempt"` means that requests of this priority level are not
    /// subject to a limit (and thus are never queued) and do not detract from the capacity
    /// made available to other priority levels.  A value of `"Limited"` means that (a)
    /// requests of this priority level _are_ subject to limits and (b) some of the server's
    /// limited capacity is made available exclusively to this priority level. Required.
    #[serde(rename = "type")]
    pub type_: String,
    /// `limited` specifies how requests are handled for a Limited priority level. This field
    /// must be non-empty if and only if `type` is `"Limited"`.
    pub limited: Option<LimitedPriorityLevelConfiguration>,
    /// `exempt` specifies how requests are handled for an exempt priority level. This field
    /// MUST be empty if `type` is `"Limited"`. This field MAY be non-empty if `type` is
    /// `"Exempt"`. If empty and `type` is `"Exempt"` then the default values for
    /// `ExemptPriorityLevelConfiguration` apply.
    pub exempt: Option<ExemptPriorityLevelConfiguration>,
}

/// LimitedPriorityLevelConfiguration specifies how to handle requests that are subject to
/// limits. It addresses two issues:
///   - How are requests for this priority level limited?
///   - What should be done with requests that exceed the limit?
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.LimitedPriorityLevelConfiguration")]
pub struct LimitedPriorityLevelConfiguration {
    /// `nominalConcurrencyShares` (NCS) contributes to the computation of the
    /// NominalConcurrencyLimit (NominalCL) of this level. This is the number of execution
    /// seats available at this priority level. This is used both for requests dispatched
    /// from this priority level as well as requests dispatched from other priority levels
    /// borrowing seats from this level. The server's concurrency limit (ServerCL) is divided
    /// among the Limited priority levels in proportion to their NCS values:
    ///
    /// NominalCL(i)  = ceil( ServerCL * NCS(i) / sum_ncs ) sum_ncs = sum[priority level k]
    /// NCS(k)
    ///
    /// Bigger numbers mean a larger nominal concurrency limit, at the expense of every other
    /// priority level.
    ///
    /// If not specified, this field defaults to a value of 30.
    ///
    /// Setting this field to zero supports the construction of a "jail" for this priority
    /// level that is used to hold some request(s)
    pub nominal_concurrency_shares: Option<i32>,
    /// `limitResponse` indicates what to do with requests that can not be executed right now
    pub limit_response: LimitResponse,
    /// `lendablePercent` prescribes the fraction of the level's NominalCL that can be
    /// borrowed by other priority levels. The value of this field must be between 0 and 100,
    /// inclusive, and it defaults to 0. The number of seats that other levels can borrow from
    /// this level, known as this level's LendableConcurrencyLimit (LendableCL), is defined as
    /// follows.
    ///
    /// LendableCL(i) = round( NominalCL(i) * lendablePercent(i)/100.0 )
    pub lendable_percent: Option<i32>,
    /// `borrowingLimitPercent`, if present, configures a limit on how many seats this
    /// priority level can borrow from other priority levels. The limit is known as this
    /// level's BorrowingConcurrencyLimit (BorrowingCL) and is a limit on the total number of
    /// seats that this level may borrow at any one time. This field holds the ratio of that
    /// limit to the level's nominal concurrency limit. When this field is non-nil, it must
    /// hold a non-negative integer and the limit is calculated as follows.
    ///
    /// BorrowingCL(i) = round( NominalCL(i) * borrowingLimitPercent(i)/100.0 )
    ///
    /// The value of this field can be more than 100, implying that this priority level can
    /// borrow a number of seats that is greater than its own nominal concurrency limit
    /// (NominalCL). When this field is left `nil`, the limit is effectively infinite.
    pub borrowing_limit_percent: Option<i32>,
}

/// ExemptPriorityLevelConfiguration describes the configurable aspects of the handling of
/// exempt requests. In the mandatory exempt configuration object the values in the fields
/// here can be modified by authorized users, unlike the rest of the `spec`.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.ExemptPriorityLevelConfiguration")]
pub struct ExemptPriorityLevelConfiguration {
    /// `nominalConcurrencyShares` (NCS) contributes to the computation of the
    /// NominalConcurrencyLimit (NominalCL) of this level. This is the number of execution
    /// seats nominally reserved for this priority level. This DOES NOT limit the dispatching
    /// from this priority level but affects the other priority levels through the borrowing
    /// mechanism. The server's concurrency limit (ServerCL) is divided among all the priority
    /// levels in proportion to their NCS values:
    ///
    /// NominalCL(i)  = ceil( ServerCL * NCS(i) / sum_ncs ) sum_ncs = sum[priority level k]
    /// NCS(k)
    ///
    /// Bigger numbers mean a larger nominal concurrency limit, at the expense of every other
    /// priority level. This field has a default value of zero.
    pub nominal_concurrency_shares: Option<i32>,
    /// `lendablePercent` prescribes the fraction of the level's NominalCL that can be
    /// borrowed by other priority levels.  This value of this field must be between 0 and
    /// 100, inclusive, and it defaults to 0. The number of seats that other levels can borrow
    /// from this level, known as this level's LendableConcurrencyLimit (LendableCL), is
    /// defined as follows.
    ///
    /// LendableCL(i) = round( NominalCL(i) * lendablePercent(i)/100.0 )
    pub lendable_percent: Option<i32>,
}

/// LimitResponse defines how to handle requests that can not be executed right now.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.LimitResponse")]
pub struct LimitResponse {
    /// `type` is "Queue" or "Reject". "Queue" means that requests that can not be executed
    /// upon arrival are held in a queue until they can be executed or a queuing limit is
    /// reached. "Reject" means that requests that can not be executed upon arrival are
    /// rejected. Required.
    #[serde(rename = "type")]
    pub type_: String,
    /// `queuing` holds the configuration parameters for queuing. This field may be non-empty
    /// only if `type` is `"Queue"`.
    pub queuing: Option<QueuingConfiguration>,
}

/// QueuingConfiguration holds the configuration parameters for queuing
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.QueuingConfiguration")]
pub struct QueuingConfiguration {
    /// `queues` is the number of queues for this priority level. The queues exist
    /// independently at each apiserver. The value must be positive.  Setting it to 1
    /// effectively precludes shufflesharding and thus makes the distinguisher method of
    /// associated flow schemas irrelevant.  This field has a default value of 64.
    pub queues: i32,
    /// `handSize` is a small positive number that configures the shuffle sharding of requests
    /// into queues.  When enqueuing a request at this priority level the request's flow
    /// identifier (a string pair) is hashed and the hash value is used to shuffle the list of
    /// queues and deal a hand of the size specified here.  The request is put into one of the
    /// shortest queues in that hand. `handSize` must be no larger than `queues`, and should be
    /// significantly smaller (so that a few heavy flows do not saturate most of the queues).
    /// See the user-facing documentation for more extensive guidance on setting this field.
    /// This field has a default value of 8.
    pub hand_size: i32,
    /// `queueLengthLimit` is the maximum number of requests allowed to be waiting in a given
    /// queue of this priority level at a time; excess requests are rejected.  This value must
    /// be positive.  If not specified, it will be defaulted to 50.
    pub queue_length_limit: i32,
}

/// PriorityLevelConfigurationStatus represents the current state of a "request-priority".
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationStatus")]
pub struct PriorityLevelConfigurationStatus {
    /// `conditions` is the current state of "request-priority".
    pub conditions: Vec<PriorityLevelConfigurationCondition>,
}

/// PriorityLevelConfigurationCondition defines the condition of priority level.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.api.flowcontrol.v1.PriorityLevelConfigurationCondition")]
pub struct PriorityLevelConfigurationCondition {
    /// `type` is the type of the condition. Required.
    #[serde(rename = "type")]
    pub type_: String,
    /// `status` is the status of the condition. Can be True, False, Unknown. Required.
    pub status: Option<String>,
    /// `lastTransitionTime` is the last time the condition transitioned from one status to
    /// another.
    pub last_transition_time: Option<Time>,
    /// `reason` is a unique, one-word, CamelCase reason for the condition's last transition.
    pub reason: Option<String>,
    /// `message` is a human-readable message indicating details about last transition.
    pub message: Option<String>,
}

impl FlowSchema {
    /// The condition of `type_`, if there is one.
    pub fn condition(&self, type_: &str) -> Option<&FlowSchemaCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// The flow distinguisher method's type, if any.
    pub fn distinguisher(&self) -> Option<&str> {
        self.spec
            .distinguisher_method
            .as_ref()
            .map(|m| m.type_.as_str())
    }
}

impl PriorityLevelConfiguration {
    pub fn is_exempt(&self) -> bool {
        self.spec.type_ == TYPE_EXEMPT
    }

    /// The nominal concurrency shares (an exempt level's, 0 unless set).
    pub fn shares(&self) -> i32 {
        match (&self.spec.limited, &self.spec.exempt) {
            (Some(l), _) => l.nominal_concurrency_shares.unwrap_or(0),
            (None, Some(e)) => e.nominal_concurrency_shares.unwrap_or(0),
            (None, None) => 0,
        }
    }

    /// The queuing of a Limited level that queues.
    pub fn queuing(&self) -> Option<&QueuingConfiguration> {
        self.spec
            .limited
            .as_ref()
            .and_then(|l| l.limit_response.queuing.as_ref())
    }
}

/// The value of an object's auto-update annotation, as Go's `strconv.ParseBool` reads it
/// (None when absent or not a boolean).
pub fn auto_update(meta: &ObjectMeta) -> Option<bool> {
    meta.annotations
        .get(AUTO_UPDATE_ANNOTATION)
        .and_then(|v| parse_bool(v))
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// kube's `shufflesharding.RequiredEntropyBits`.
pub fn required_entropy_bits(deck: i32, hand: i32) -> i32 {
    ((deck as f64).log2() * hand as f64).ceil() as i32
}

impl Resource for FlowSchema {
    const KIND: Kind = Kind::FlowSchema;
    crate::resource_basics!(FlowSchema);

    /// kube's SetDefaults_FlowSchemaSpec; `clusterScope: false` is left out as kube's
    /// `omitempty` writes it.
    fn set_defaults(&mut self) {
        if self.spec.matching_precedence == 0 {
            self.spec.matching_precedence = 1000;
        }
        for rule in &mut self.spec.rules {
            for r in &mut rule.resource_rules {
                if r.cluster_scope == Some(false) {
                    r.cluster_scope = None;
                }
            }
        }
    }

    /// kube's ValidateFlowSchema.
    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validation::validate_meta(&self.metadata, Kind::FlowSchema);
        errs.extend(validate_flow_schema_spec(&self.metadata.name, &self.spec));
        if let Some(mandatory) = bootstrap::mandatory_flow_schemas()
            .into_iter()
            .find(|m| m.metadata.name == self.metadata.name)
        {
            if mandatory.spec != self.spec {
                errs.push(FieldError::invalid_raw(
                    "spec",
                    go_flow_schema_spec(&self.spec),
                    format!(
                        "spec of '{}' must equal the fixed value",
                        self.metadata.name
                    ),
                ));
            }
        }
        errs.extend(self.validate_status());
        errs
    }

    fn validate_status(&self) -> Vec<FieldError> {
        validate_conditions(self.status.conditions.iter().map(|c| c.type_.as_str()))
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }

    fn clear_status(&mut self) {
        self.status = FlowSchemaStatus::default();
    }
}

impl Resource for PriorityLevelConfiguration {
    const KIND: Kind = Kind::PriorityLevelConfiguration;
    crate::resource_basics!(PriorityLevelConfiguration);

    /// kube's SetObjectDefaults_PriorityLevelConfiguration.
    fn set_defaults(&mut self) {
        if let Some(l) = self.spec.limited.as_mut() {
            l.nominal_concurrency_shares.get_or_insert(30);
            l.lendable_percent.get_or_insert(0);
            if let Some(q) = l.limit_response.queuing.as_mut() {
                if q.hand_size == 0 {
                    q.hand_size = 8;
                }
                if q.queues == 0 {
                    q.queues = 64;
                }
                if q.queue_length_limit == 0 {
                    q.queue_length_limit = 50;
                }
            }
        }
        if let Some(e) = self.spec.exempt.as_mut() {
            e.nominal_concurrency_shares.get_or_insert(0);
            e.lendable_percent.get_or_insert(0);
        }
    }

    /// kube's ValidatePriorityLevelConfiguration (a v1 request: zero shares allowed).
    fn validate(&self) -> Vec<FieldError> {
        let name = &self.metadata.name;
        let mut errs = validation::validate_meta(&self.metadata, Kind::PriorityLevelConfiguration);
        errs.extend(validate_priority_level_spec(name, &self.spec));
        if let Some(mandatory) = bootstrap::mandatory_priority_levels()
            .into_iter()
            .find(|m| &m.metadata.name == name)
        {
            if name == EXEMPT {
                // Admins may change the exempt level's `exempt` section, nothing else.
                let mut have = self.spec.clone();
                have.exempt = mandatory.spec.exempt.clone();
                if have != mandatory.spec {
                    errs.push(FieldError::invalid_raw(
                        "spec",
                        go_priority_level_spec(&self.spec),
                        format!(
                            "spec of '{name}' except the 'spec.exempt' field must equal the fixed value"
                        ),
                    ));
                }
            } else if self.spec != mandatory.spec {
                errs.push(FieldError::invalid_raw(
                    "spec",
                    go_priority_level_spec(&self.spec),
                    format!("spec of '{name}' must equal the fixed value"),
                ));
            }
        }
        errs.extend(self.validate_status());
        errs
    }

    fn validate_status(&self) -> Vec<FieldError> {
        validate_conditions(self.status.conditions.iter().map(|c| c.type_.as_str()))
    }

    fn spec_fingerprint(&self) -> Vec<u8> {
        crate::object::fingerprint(&self.spec)
    }

    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }

    fn clear_status(&mut self) {
        self.status = PriorityLevelConfigurationStatus::default();
    }
}

/// A status's conditions: types present and not repeated.
fn validate_conditions<'a>(types: impl Iterator<Item = &'a str>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, t) in types.enumerate() {
        let at = format!("status.conditions[{i}].type");
        if !seen.insert(t) {
            errs.push(FieldError::duplicate(&at, t));
        }
        if t.is_empty() {
            errs.push(FieldError::required_msg(&at, "must not be empty"));
        }
    }
    errs
}

/// The verbs rules may name.
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
];

/// `Unsupported value: V: supported values: ...` with V as Go's `%#v` prints it.
fn not_supported_raw(field: impl Into<String>, value: String, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
    FieldError {
        reason: "FieldValueNotSupported".into(),
        field: field.into(),
        message: format!(
            "Unsupported value: {value}: supported values: {}",
            list.join(", ")
        ),
    }
}

fn has_wildcard(v: &[String]) -> bool {
    v.iter().any(|s| s == ALL)
}

fn validate_verbs(verbs: &[String], at: &str, errs: &mut Vec<FieldError>) {
    if verbs.is_empty() {
        errs.push(FieldError::required_msg(
            at,
            "verbs must contain at least one value",
        ));
    } else if has_wildcard(verbs) {
        if verbs.len() > 1 {
            errs.push(FieldError::invalid_raw(
                at,
                go_slice("string", verbs),
                "if '*' is present, must not specify other verbs",
            ));
        }
    } else if !verbs.iter().all(|v| VERBS.contains(&v.as_str())) {
        errs.push(not_supported_raw(at, go_slice("string", verbs), VERBS));
    }
}

/// kube's ValidateFlowSchemaSpec.
fn validate_flow_schema_spec(name: &str, spec: &FlowSchemaSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let p = spec.matching_precedence;
    if p <= 0 {
        errs.push(FieldError::invalid_raw(
            "spec.matchingPrecedence",
            p,
            "must be a positive value",
        ));
    }
    if p > MAX_MATCHING_PRECEDENCE {
        errs.push(FieldError::invalid_raw(
            "spec.matchingPrecedence",
            p,
            format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
        ));
    }
    if p == 1 && name != EXEMPT {
        errs.push(FieldError::invalid_raw(
            "spec.matchingPrecedence",
            p,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        ));
    }
    if let Some(m) = &spec.distinguisher_method {
        if m.type_ != BY_NAMESPACE && m.type_ != BY_USER {
            errs.push(not_supported_raw(
                "spec.distinguisherMethod.type",
                format!(
                    "flowcontrol.FlowDistinguisherMethod{{Type:{}}}",
                    go_quote(&m.type_)
                ),
                &[BY_NAMESPACE, BY_USER],
            ));
        }
    }
    let pl = &spec.priority_level_configuration.name;
    if pl.is_empty() {
        errs.push(FieldError::required_msg(
            "spec.priorityLevelConfiguration.name",
            "must reference a priority level",
        ));
    } else if let Err(why) = validation::dns1123_subdomain(pl) {
        errs.push(FieldError::invalid(
            "spec.priorityLevelConfiguration.name",
            pl,
            why,
        ));
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if rule.subjects.is_empty() {
            errs.push(FieldError::required_msg(
                format!("{at}.subjects"),
                "subjects must contain at least one value",
            ));
        }
        for (j, s) in rule.subjects.iter().enumerate() {
            validate_subject(s, &format!("{at}.subjects[{j}]"), &mut errs);
        }
        if rule.resource_rules.is_empty() && rule.non_resource_rules.is_empty() {
            errs.push(FieldError::required_msg(
                &at,
                "at least one of resourceRules and nonResourceRules has to be non-empty",
            ));
        }
        for (j, r) in rule.resource_rules.iter().enumerate() {
            validate_resource_rule(r, &format!("{at}.resourceRules[{j}]"), &mut errs);
        }
        for (j, r) in rule.non_resource_rules.iter().enumerate() {
            let at = format!("{at}.nonResourceRules[{j}]");
            validate_verbs(&r.verbs, &format!("{at}.verbs"), &mut errs);
            let urls = &r.non_resource_urls;
            let field = format!("{at}.nonResourceURLs");
            if urls.is_empty() {
                errs.push(FieldError::required_msg(
                    &field,
                    "nonResourceURLs must contain at least one value",
                ));
            } else if has_wildcard(urls) {
                if urls.len() > 1 {
                    errs.push(FieldError::invalid_raw(
                        &field,
                        go_slice("string", urls),
                        "if '*' is present, must not specify other non-resource URLs",
                    ));
                }
            } else {
                for (k, u) in urls.iter().enumerate() {
                    if let Err(why) = non_resource_url(u) {
                        errs.push(FieldError::invalid(format!("{field}[{k}]"), u, why));
                    }
                }
            }
        }
    }
    errs
}

/// kube's ValidateNonResourceURLPath.
fn non_resource_url(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("must not be empty");
    }
    if path == "/" {
        return Ok(());
    }
    if !path.starts_with('/') {
        return Err("must start with slash");
    }
    if path.contains(' ') {
        return Err("must not contain white-space");
    }
    if path.contains("//") {
        return Err("must not contain double slash");
    }
    let wildcards = path.matches('*').count();
    if wildcards > 1 || (wildcards == 1 && !path.ends_with("/*")) {
        return Err("wildcard can only do suffix matching");
    }
    Ok(())
}

fn validate_subject(s: &Subject, at: &str, errs: &mut Vec<FieldError>) {
    let forbid_user = |errs: &mut Vec<FieldError>| {
        if s.user.is_some() {
            errs.push(FieldError::forbidden(
                format!("{at}.user"),
                "user is forbidden when subject kind is not 'User'",
            ));
        }
    };
    let forbid_group = |errs: &mut Vec<FieldError>| {
        if s.group.is_some() {
            errs.push(FieldError::forbidden(
                format!("{at}.group"),
                "group is forbidden when subject kind is not 'Group'",
            ));
        }
    };
    let forbid_sa = |errs: &mut Vec<FieldError>| {
        if s.service_account.is_some() {
            errs.push(FieldError::forbidden(
                format!("{at}.serviceAccount"),
                "serviceAccount is forbidden when subject kind is not 'ServiceAccount'",
            ));
        }
    };
    match s.kind.as_str() {
        SUBJECT_SERVICE_ACCOUNT => {
            let field = format!("{at}.serviceAccount");
            match &s.service_account {
                None => errs.push(FieldError::required_msg(
                    &field,
                    "serviceAccount is required when subject kind is 'ServiceAccount'",
                )),
                Some(sa) => {
                    if sa.name.is_empty() {
                        errs.push(FieldError::required(format!("{field}.name")));
                    } else if sa.name != ALL {
                        if let Err(why) = validation::dns1123_subdomain(&sa.name) {
                            errs.push(FieldError::invalid(format!("{field}.name"), &sa.name, why));
                        }
                    }
                    if sa.namespace.is_empty() {
                        errs.push(FieldError::required_msg(
                            format!("{field}.namespace"),
                            "must specify namespace for service account",
                        ));
                    } else if let Err(why) = validation::dns1123_label(&sa.namespace) {
                        errs.push(FieldError::invalid(
                            format!("{field}.namespace"),
                            &sa.namespace,
                            why,
                        ));
                    }
                }
            }
            forbid_user(errs);
            forbid_group(errs);
        }
        SUBJECT_USER => {
            match &s.user {
                None => errs.push(FieldError::required_msg(
                    format!("{at}.user"),
                    "user is required when subject kind is 'User'",
                )),
                Some(u) if u.name.is_empty() => {
                    errs.push(FieldError::required(format!("{at}.user.name")))
                }
                Some(_) => {}
            }
            forbid_sa(errs);
            forbid_group(errs);
        }
        SUBJECT_GROUP => {
            match &s.group {
                None => errs.push(FieldError::required_msg(
                    format!("{at}.group"),
                    "group is required when subject kind is 'Group'",
                )),
                Some(g) if g.name.is_empty() => {
                    errs.push(FieldError::required(format!("{at}.group.name")))
                }
                Some(_) => {}
            }
            forbid_sa(errs);
            forbid_user(errs);
        }
        other => errs.push(FieldError::not_supported(
            format!("{at}.kind"),
            other,
            &[SUBJECT_GROUP, SUBJECT_SERVICE_ACCOUNT, SUBJECT_USER],
        )),
    }
}

fn validate_resource_rule(r: &ResourcePolicyRule, at: &str, errs: &mut Vec<FieldError>) {
    validate_verbs(&r.verbs, &format!("{at}.verbs"), errs);
    if r.api_groups.is_empty() {
        errs.push(FieldError::required_msg(
            format!("{at}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    } else if r.api_groups.len() > 1 && has_wildcard(&r.api_groups) {
        errs.push(FieldError::invalid_raw(
            format!("{at}.apiGroups"),
            go_slice("string", &r.api_groups),
            "if '*' is present, must not specify other api groups",
        ));
    }
    if r.resources.is_empty() {
        errs.push(FieldError::required_msg(
            format!("{at}.resources"),
            "resource rules must supply at least one resource",
        ));
    } else if r.resources.len() > 1 && has_wildcard(&r.resources) {
        errs.push(FieldError::invalid_raw(
            format!("{at}.resources"),
            go_slice("string", &r.resources),
            "if '*' is present, must not specify other resources",
        ));
    }
    if r.namespaces.is_empty() && !r.cluster_scope() {
        errs.push(FieldError::required_msg(
            format!("{at}.namespaces"),
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    } else if has_wildcard(&r.namespaces) {
        if r.namespaces.len() > 1 {
            errs.push(FieldError::invalid_raw(
                format!("{at}.namespaces"),
                go_slice("string", &r.namespaces),
                "if '*' is present, must not specify other namespaces",
            ));
        }
    } else {
        for (i, ns) in r.namespaces.iter().enumerate() {
            if let Err(why) = validation::dns1123_label(ns) {
                errs.push(FieldError::invalid(
                    format!("{at}.namespaces[{i}]"),
                    ns,
                    format!("each member of this list must be '*' or a DNS-1123 label; {why}"),
                ));
            }
        }
    }
}

/// kube's ValidatePriorityLevelConfigurationSpec.
fn validate_priority_level_spec(
    name: &str,
    spec: &PriorityLevelConfigurationSpec,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if (name == EXEMPT) != (spec.type_ == TYPE_EXEMPT) {
        errs.push(FieldError::invalid(
            "spec.type",
            &spec.type_,
            "type must be 'Exempt' if and only if name is 'exempt'",
        ));
    }
    let percent = |v: Option<i32>, at: &str, errs: &mut Vec<FieldError>| {
        if let Some(p) = v.filter(|p| !(0..=100).contains(p)) {
            errs.push(FieldError::invalid_raw(
                at,
                p,
                "must be between 0 and 100, inclusive",
            ));
        }
    };
    match spec.type_.as_str() {
        TYPE_EXEMPT => {
            if spec.limited.is_some() {
                errs.push(FieldError::forbidden(
                    "spec.limited",
                    "must be nil if the type is not Limited",
                ));
            }
            if let Some(e) = &spec.exempt {
                if let Some(n) = e.nominal_concurrency_shares.filter(|n| *n < 0) {
                    errs.push(FieldError::invalid_raw(
                        "spec.exempt.nominalConcurrencyShares",
                        n,
                        "must be a non-negative integer",
                    ));
                }
                percent(e.lendable_percent, "spec.exempt.lendablePercent", &mut errs);
            }
        }
        TYPE_LIMITED => {
            if spec.exempt.is_some() {
                errs.push(FieldError::forbidden(
                    "spec.exempt",
                    "must be nil if the type is Limited",
                ));
            }
            match &spec.limited {
                None => errs.push(FieldError::required_msg(
                    "spec.limited",
                    "must not be empty when type is Limited",
                )),
                Some(l) => {
                    let n = l.nominal_concurrency_shares.unwrap_or(0);
                    if n < 0 {
                        errs.push(FieldError::invalid_raw(
                            "spec.limited.nominalConcurrencyShares",
                            n,
                            "must be a non-negative integer",
                        ));
                    }
                    validate_limit_response(&l.limit_response, &mut errs);
                    percent(
                        l.lendable_percent,
                        "spec.limited.lendablePercent",
                        &mut errs,
                    );
                    if let Some(b) = l.borrowing_limit_percent.filter(|b| *b < 0) {
                        errs.push(FieldError::invalid_raw(
                            "spec.limited.borrowingLimitPercent",
                            b,
                            "if specified, must be a non-negative integer",
                        ));
                    }
                }
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.type",
            other,
            &[TYPE_EXEMPT, TYPE_LIMITED],
        )),
    }
    errs
}

fn validate_limit_response(r: &LimitResponse, errs: &mut Vec<FieldError>) {
    const AT: &str = "spec.limited.limitResponse";
    match r.type_.as_str() {
        RESPONSE_REJECT => {
            if r.queuing.is_some() {
                errs.push(FieldError::forbidden(
                    format!("{AT}.queuing"),
                    "must be nil if limited.limitResponse.type is not Limited",
                ));
            }
        }
        RESPONSE_QUEUE => match &r.queuing {
            None => errs.push(FieldError::required_msg(
                format!("{AT}.queuing"),
                "must not be empty if limited.limitResponse.type is Limited",
            )),
            Some(q) => {
                let at = format!("{AT}.queuing");
                if q.queue_length_limit <= 0 {
                    errs.push(FieldError::invalid_raw(
                        format!("{at}.queueLengthLimit"),
                        q.queue_length_limit,
                        "must be positive",
                    ));
                }
                if q.queues <= 0 {
                    errs.push(FieldError::invalid_raw(
                        format!("{at}.queues"),
                        q.queues,
                        "must be positive",
                    ));
                } else if q.queues > MAX_QUEUES {
                    errs.push(FieldError::invalid_raw(
                        format!("{at}.queues"),
                        q.queues,
                        format!("must not be greater than {MAX_QUEUES}"),
                    ));
                }
                if q.hand_size <= 0 {
                    errs.push(FieldError::invalid_raw(
                        format!("{at}.handSize"),
                        q.hand_size,
                        "must be positive",
                    ));
                } else if q.hand_size > q.queues {
                    errs.push(FieldError::invalid_raw(
                        format!("{at}.handSize"),
                        q.hand_size,
                        format!("should not be greater than queues ({})", q.queues),
                    ));
                } else if required_entropy_bits(q.queues, q.hand_size) > MAX_HASH_BITS {
                    errs.push(FieldError::invalid_raw(
                        format!("{at}.handSize"),
                        q.hand_size,
                        format!(
                            "required entropy bits of deckSize {} and handSize {} should not be greater than {MAX_HASH_BITS}",
                            q.queues, q.hand_size
                        ),
                    ));
                }
            }
        },
        other => errs.push(FieldError::not_supported(
            format!("{AT}.type"),
            other,
            &[RESPONSE_QUEUE, RESPONSE_REJECT],
        )),
    }
}

/// The address Go prints for a non-nil pointer inside a `%#v` (kube's message shows the
/// address of the internal object, which has no stable value to match).
const GO_POINTER: &str = "0xc000000000";

/// Go's `%#v` of a pointer field: `(*T)(nil)` or `(*T)(0x...)`.
fn go_pointer<T>(type_name: &str, v: &Option<T>) -> String {
    match v {
        None => format!("(*flowcontrol.{type_name})(nil)"),
        Some(_) => format!("(*flowcontrol.{type_name})({GO_POINTER})"),
    }
}

/// Go's `%#v` of a `[]string`, `[]string(nil)` when empty (kube's internal objects keep
/// empty lists as nil).
fn go_strings(v: &[String]) -> String {
    if v.is_empty() {
        "[]string(nil)".into()
    } else {
        go_slice("string", v)
    }
}

/// Go's `%#v` of kube's internal FlowSchemaSpec, as its "must equal the fixed value" message
/// prints it.
pub fn go_flow_schema_spec(spec: &FlowSchemaSpec) -> String {
    let list = |items: Vec<String>, t: &str| {
        if items.is_empty() {
            format!("[]flowcontrol.{t}(nil)")
        } else {
            format!("[]flowcontrol.{t}{{{}}}", items.join(", "))
        }
    };
    let rules: Vec<String> = spec
        .rules
        .iter()
        .map(|r| {
            let subjects: Vec<String> = r
                .subjects
                .iter()
                .map(|s| {
                    format!(
                        "flowcontrol.Subject{{Kind:{}, User:{}, Group:{}, ServiceAccount:{}}}",
                        go_quote(&s.kind),
                        go_pointer("UserSubject", &s.user),
                        go_pointer("GroupSubject", &s.group),
                        go_pointer("ServiceAccountSubject", &s.service_account)
                    )
                })
                .collect();
            let resource_rules: Vec<String> = r
                .resource_rules
                .iter()
                .map(|rr| {
                    format!(
                        "flowcontrol.ResourcePolicyRule{{Verbs:{}, APIGroups:{}, Resources:{}, ClusterScope:{}, Namespaces:{}}}",
                        go_strings(&rr.verbs),
                        go_strings(&rr.api_groups),
                        go_strings(&rr.resources),
                        rr.cluster_scope(),
                        go_strings(&rr.namespaces)
                    )
                })
                .collect();
            let non_resource_rules: Vec<String> = r
                .non_resource_rules
                .iter()
                .map(|nr| {
                    format!(
                        "flowcontrol.NonResourcePolicyRule{{Verbs:{}, NonResourceURLs:{}}}",
                        go_strings(&nr.verbs),
                        go_strings(&nr.non_resource_urls)
                    )
                })
                .collect();
            format!(
                "flowcontrol.PolicyRulesWithSubjects{{Subjects:{}, ResourceRules:{}, NonResourceRules:{}}}",
                list(subjects, "Subject"),
                list(resource_rules, "ResourcePolicyRule"),
                list(non_resource_rules, "NonResourcePolicyRule")
            )
        })
        .collect();
    format!(
        "flowcontrol.FlowSchemaSpec{{PriorityLevelConfiguration:flowcontrol.PriorityLevelConfigurationReference{{Name:{}}}, MatchingPrecedence:{}, DistinguisherMethod:{}, Rules:{}}}",
        go_quote(&spec.priority_level_configuration.name),
        spec.matching_precedence,
        go_pointer("FlowDistinguisherMethod", &spec.distinguisher_method),
        list(rules, "PolicyRulesWithSubjects")
    )
}

/// Go's `%#v` of kube's internal PriorityLevelConfigurationSpec.
pub fn go_priority_level_spec(spec: &PriorityLevelConfigurationSpec) -> String {
    format!(
        "flowcontrol.PriorityLevelConfigurationSpec{{Type:{}, Limited:{}, Exempt:{}}}",
        go_quote(&spec.type_),
        go_pointer("LimitedPriorityLevelConfiguration", &spec.limited),
        go_pointer("ExemptPriorityLevelConfiguration", &spec.exempt)
    )
}

#[cfg(test)]
mod tests;
