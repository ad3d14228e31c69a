//! The admission webhooks in force and their dispatch (docs/design/admission.md §1-2): the
//! stored MutatingWebhookConfigurations and ValidatingWebhookConfigurations compiled into a
//! snapshot (each webhook's client made once), the cheap test a write makes first (does any
//! rule name this kind, subresource and operation?), then for a write that one does: the
//! mutating webhooks in kube's order (configurations by name, webhooks in order) with
//! `reinvocationPolicy: IfNeeded`, and the validating ones in parallel.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use api::admissionpolicy::{
    ParamKind, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use api::admissionregistration::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, Webhook,
};
use api::object::Kind;
use serde_json::{json, Value};

use super::conditions::{self, Activation, Input, MatchConditions};
use super::policy::{ParamSource, PolicyRequest, PolicySet};
use super::review::{self, Failure};
use super::webhooks::{self, Attributes, Operation};
use crate::error::ApiError;
use crate::registry::{Registry, Warnings};
use crate::webhook::Webhook as Client;

/// One webhook of a stored configuration, ready to call.
pub struct Hook {
    /// The configuration's name and the webhook's place among all mutating or all
    /// validating webhooks (for the audit annotations).
    config: String,
    index: usize,
    webhook: Webhook,
    /// Its client, or why none could be made (a call then fails with it).
    client: Result<Client, String>,
    conditions: MatchConditions,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook")
            .field("config", &self.config)
            .field("name", &self.webhook.name)
            .finish()
    }
}

impl Hook {
    /// Calls the webhook with `review` (a client that could not be made is a failure to
    /// call it).
    async fn call(
        &self,
        registry: &Registry,
        review: &review::Request,
        mutating: bool,
    ) -> Result<review::Answer, Failure> {
        match &self.client {
            Ok(client) => review::call(&self.webhook, client, registry, review, mutating).await,
            Err(why) => Err(Failure::Calling(ApiError::internal_error(format!(
                "failed calling webhook \"{}\": {why}",
                self.webhook.name
            )))),
        }
    }

    fn new(config: &str, index: usize, webhook: &Webhook) -> Hook {
        Hook {
            config: config.to_string(),
            index,
            client: Client::new(&webhook.client_config),
            conditions: MatchConditions::compile(&webhook.match_conditions, false),
            webhook: webhook.clone(),
        }
    }
}

#[derive(Debug, Default)]
struct Snapshot {
    mutating: Vec<Arc<Hook>>,
    validating: Vec<Arc<Hook>>,
    policies: Arc<PolicySet>,
}

/// The webhooks in force (shared by every clone of the registry).
#[derive(Debug, Default)]
pub struct Admission {
    snapshot: RwLock<Arc<Snapshot>>,
}

/// The kinds whose writes never go to webhooks or policies (so a broken one cannot lock
/// out its own repair), as kube-apiserver exempts them.
fn exempt(kind: Kind) -> bool {
    let info = kind.info();
    super::policy::exempt(info.group, info.plural)
}

impl Admission {
    /// Puts the stored configurations in force: in the order of their names, each
    /// configuration's webhooks in their order.
    pub fn install(
        &self,
        mut mutating: Vec<MutatingWebhookConfiguration>,
        mut validating: Vec<ValidatingWebhookConfiguration>,
        policies: &[ValidatingAdmissionPolicy],
        bindings: &[ValidatingAdmissionPolicyBinding],
    ) {
        mutating.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        validating.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let hooks = |all: Vec<(&str, &Webhook)>| -> Vec<Arc<Hook>> {
            all.into_iter()
                .enumerate()
                .map(|(i, (config, w))| Arc::new(Hook::new(config, i, w)))
                .collect()
        };
        let snapshot = Snapshot {
            mutating: hooks(
                mutating
                    .iter()
                    .flat_map(|c| c.webhooks.iter().map(|w| (c.metadata.name.as_str(), w)))
                    .collect(),
            ),
            validating: hooks(
                validating
                    .iter()
                    .flat_map(|c| c.webhooks.iter().map(|w| (c.metadata.name.as_str(), w)))
                    .collect(),
            ),
            policies: Arc::new(PolicySet::new(policies, bindings)),
        };
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }

    /// The webhooks whose rules take a write of `kind` (its `subresource`, `""` for the
    /// main resource) by `operation`, before selectors and conditions; `None` when there are
    /// none (the write then takes its one-transaction path).
    pub fn candidates(
        &self,
        kind: Kind,
        subresource: &str,
        operation: Operation,
    ) -> Option<Candidates> {
        if exempt(kind) {
            return None;
        }
        let snapshot = self
            .snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if snapshot.mutating.is_empty()
            && snapshot.validating.is_empty()
            && snapshot.policies.is_empty()
        {
            return None;
        }
        let info = kind.info();
        let attrs = Attributes {
            operation,
            group: info.group,
            version: info.version,
            resource: info.plural,
            subresource,
            namespaced: info.namespaced,
            equivalents: &[],
            namespace_labels: None,
            object_labels: None,
            old_object_labels: None,
        };
        let take = |list: &[Arc<Hook>]| -> Vec<Arc<Hook>> {
            list.iter()
                .filter(|h| webhooks::matching_version(&h.webhook, &attrs).is_some())
                .cloned()
                .collect()
        };
        let candidates = Candidates {
            mutating: take(&snapshot.mutating),
            validating: take(&snapshot.validating),
            policies: snapshot
                .policies
                .may_match(&attrs)
                .then(|| snapshot.policies.clone()),
        };
        (!candidates.mutating.is_empty()
            || !candidates.validating.is_empty()
            || candidates.policies.is_some())
        .then_some(candidates)
    }
}

/// Keeps the stored configurations in force: installed now from the cache, then again on
/// every change.
pub fn start_installer(registry: &Registry, informers: &crate::machinery::informer::Informers) {
    let kinds = [
        Kind::MutatingWebhookConfiguration,
        Kind::ValidatingWebhookConfiguration,
        Kind::ValidatingAdmissionPolicy,
        Kind::ValidatingAdmissionPolicyBinding,
    ];
    let changes = informers.subscribe(&kinds);
    let cache = informers.cache().clone();
    let install = {
        let registry = registry.clone();
        move || {
            let policies: Vec<ValidatingAdmissionPolicy> = cache.list(None);
            let bindings: Vec<ValidatingAdmissionPolicyBinding> = cache.list(None);
            registry
                .admission()
                .install(cache.list(None), cache.list(None), &policies, &bindings)
        }
    };
    install();
    smol::spawn(async move {
        while changes.recv().await.is_ok() {
            while changes.try_recv().is_ok() {}
            install();
        }
    })
    .detach();
}

/// The webhooks a write may go to.
#[derive(Debug, Clone)]
pub struct Candidates {
    mutating: Vec<Arc<Hook>>,
    validating: Vec<Arc<Hook>>,
    policies: Option<Arc<PolicySet>>,
}

/// One write as the webhooks are told of it.
#[derive(Debug, Clone)]
pub struct Request {
    pub kind: Kind,
    pub subresource: String,
    pub operation: Operation,
    pub name: String,
    pub namespace: String,
    /// `{username, uid, groups, extra}`.
    pub user_info: Value,
    pub dry_run: bool,
    /// CreateOptions, UpdateOptions, PatchOptions or DeleteOptions.
    pub options: Value,
    /// The labels of the object's namespace.
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// The object's Namespace (policies' `namespaceObject`).
    pub namespace_object: Option<Value>,
}

fn labels_of(obj: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let labels = obj?.pointer("/metadata/labels")?.as_object()?;
    Some(
        labels
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
    )
}

/// The labels of a request's object, its old object, and its namespace.
struct Labels {
    new: Option<BTreeMap<String, String>>,
    old: Option<BTreeMap<String, String>>,
    empty: BTreeMap<String, String>,
}

impl Request {
    fn labels(&self, object: Option<&Value>, old: Option<&Value>) -> Labels {
        // An object without labels is matched as one with none.
        let of = |o: Option<&Value>| o.map(|o| labels_of(Some(o)).unwrap_or_default());
        Labels {
            new: of(object),
            old: of(old),
            empty: BTreeMap::new(),
        }
    }

    /// The request as matchers see it.
    fn attributes<'a>(&'a self, labels: &'a Labels) -> Attributes<'a> {
        let info = self.kind.info();
        // A Namespace is matched by namespace selectors with its own labels.
        let namespace_labels = if self.kind == Kind::Namespace {
            labels
                .new
                .as_ref()
                .or(labels.old.as_ref())
                .or(Some(&labels.empty))
        } else {
            self.namespace_labels.as_ref()
        };
        Attributes {
            operation: self.operation,
            group: info.group,
            version: info.version,
            resource: info.plural,
            subresource: &self.subresource,
            namespaced: info.namespaced,
            equivalents: &[],
            namespace_labels,
            object_labels: labels.new.as_ref(),
            old_object_labels: labels.old.as_ref(),
        }
    }

    /// Whether `hook` takes this request with `object` (and `old`), selectors included.
    fn matches(&self, hook: &Webhook, object: Option<&Value>, old: Option<&Value>) -> bool {
        let labels = self.labels(object, old);
        webhooks::matches(hook, &self.attributes(&labels)).is_some()
    }

    /// The review's request for `object` and `old`.
    fn review(&self, object: Option<&Value>, old: Option<&Value>) -> review::Request {
        let info = self.kind.info();
        let kind = json!({"group": info.group, "version": info.version, "kind": info.kind});
        let resource =
            json!({"group": info.group, "version": info.version, "resource": info.plural});
        review::Request {
            kind: kind.clone(),
            resource: resource.clone(),
            sub_resource: self.subresource.clone(),
            request_kind: kind,
            request_resource: resource,
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            operation: self.operation.as_str(),
            user_info: self.user_info.clone(),
            object: object.cloned(),
            old_object: old.cloned(),
            dry_run: self.dry_run,
            options: Some(self.options.clone()),
        }
    }
}

/// What a matched webhook may still refuse before it is called: dry runs need
/// `sideEffects: None` or `NoneOnDryRun` (kube's 400, whatever the failure policy).
fn check_dry_run(hook: &Webhook, request: &Request) -> Result<(), ApiError> {
    let safe = matches!(
        hook.side_effects.as_deref(),
        Some("None") | Some("NoneOnDryRun")
    );
    if request.dry_run && !safe {
        return Err(ApiError::bad_request(format!(
            "admission webhook \"{}\" does not support dry run",
            hook.name
        )));
    }
    Ok(())
}

/// Whether `hook` is to be called: its rules and selectors matched, its match conditions
/// hold. A condition that cannot be evaluated is the hook's failure.
fn wanted(
    hook: &Hook,
    request: &Request,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, Failure> {
    if !request.matches(&hook.webhook, object, old) {
        return Ok(false);
    }
    if hook.conditions.is_empty() {
        return Ok(true);
    }
    // kube: an error the failure policy does not ignore refuses the request as Forbidden.
    let review = request.review(object, old);
    let req = conditions::request_json(&review);
    let input = Input {
        object,
        old_object: old,
        request: Some(&req),
        ..Default::default()
    };
    hook.conditions
        .evaluate(&Activation::new(&input, &[]))
        .under(hook.webhook.ignores_failures())
        .map_err(|why| {
            Failure::Rejected(ApiError::forbidden_object(
                request.kind,
                &request.name,
                &why,
            ))
        })
}

/// Records what a call said beside its verdict.
fn note(notes: &Warnings, answer: &review::Answer) {
    let mut n = notes.lock().unwrap_or_else(|e| e.into_inner());
    n.warnings.extend(answer.warnings.iter().cloned());
    n.audit_annotations.extend(
        answer
            .audit_annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
}

fn annotate(notes: &Warnings, key: String, value: String) {
    notes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .audit_annotations
        .push((key, value));
}

/// A failed call: an error, unless the hook ignores failures (then noted, as kube notes a
/// failed-open webhook in the audit event).
fn failed(
    hook: &Hook,
    failure: Failure,
    notes: &Warnings,
    kind: &str,
    round: usize,
) -> Result<(), ApiError> {
    match failure {
        Failure::Rejected(e) => Err(e),
        Failure::Calling(e) if hook.webhook.ignores_failures() => {
            tracing::warn!(webhook = %hook.webhook.name, error = %e, "admission webhook failed open");
            annotate(
                notes,
                format!(
                    "failed-open.{kind}.webhook.admission.k8s.io/round_{round}_index_{}",
                    hook.index
                ),
                hook.webhook.name.clone(),
            );
            Ok(())
        }
        Failure::Calling(e) => Err(e),
    }
}

impl Candidates {
    /// Whether a write needs its Namespace read for these (a webhook's or policy's
    /// namespaceSelector, a policy's `namespaceObject`).
    pub fn needs_namespace(&self) -> bool {
        self.mutating
            .iter()
            .chain(&self.validating)
            .any(|h| webhooks::selects_namespaces(&h.webhook))
            || self.policies.as_ref().is_some_and(|p| p.needs_namespace())
    }

    /// Whether there are mutating webhooks to call.
    pub fn mutates(&self) -> bool {
        !self.mutating.is_empty()
    }

    /// Runs the mutating webhooks on `object` (changed in place by their patches), in
    /// order; those with `reinvocationPolicy: IfNeeded` are called once more when a later
    /// webhook changed the object after them.
    pub async fn mutate(
        &self,
        registry: &Registry,
        request: &Request,
        notes: &Warnings,
        object: &mut Option<Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        // Per hook of the first round: called, and whether the object changed since.
        let mut called: Vec<Option<bool>> = vec![None; self.mutating.len()];
        for round in 0..2 {
            for (index, hook) in self.mutating.iter().enumerate() {
                if round == 1 {
                    let again = called[index] == Some(true)
                        && hook.webhook.reinvocation_policy.as_deref() == Some("IfNeeded");
                    if !again {
                        continue;
                    }
                }
                match wanted(hook, request, object.as_ref(), old) {
                    Ok(false) => continue,
                    Ok(true) => {}
                    Err(f) => {
                        failed(hook, f, notes, "mutation", round)?;
                        continue;
                    }
                }
                check_dry_run(&hook.webhook, request)?;
                let review = request.review(object.as_ref(), old);
                let changed = match hook.call(registry, &review, true).await {
                    Ok(answer) => {
                        note(notes, &answer);
                        let mutated = answer
                            .patched
                            .as_ref()
                            .is_some_and(|p| Some(p) != object.as_ref());
                        annotate(
                            notes,
                            format!(
                                "mutation.webhook.admission.k8s.io/round_{round}_index_{}",
                                hook.index
                            ),
                            json!({"configuration": hook.config, "webhook": hook.webhook.name, "mutated": mutated})
                                .to_string(),
                        );
                        if mutated {
                            *object = answer.patched;
                        }
                        mutated
                    }
                    Err(f) => {
                        failed(hook, f, notes, "mutation", round)?;
                        false
                    }
                };
                if round == 0 {
                    if changed {
                        // Every hook called before this one saw an older object.
                        for c in called.iter_mut().take(index).flatten() {
                            *c = true;
                        }
                    }
                    called[index] = Some(false);
                }
            }
            if !called.contains(&Some(true)) {
                break;
            }
        }
        Ok(())
    }

    /// Runs the validating webhooks that take the request, all at once; the first denial
    /// (in the webhooks' order) or failure that is not ignored is the answer.
    pub async fn validate(
        &self,
        registry: &Registry,
        request: &Request,
        notes: &Warnings,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if let Some(policies) = &self.policies {
            self.apply_policies(policies, registry, request, notes, object, old)
                .await?;
        }
        let mut calls = Vec::new();
        for hook in &self.validating {
            match wanted(hook, request, object, old) {
                Ok(false) => continue,
                Ok(true) => {}
                Err(f) => {
                    failed(hook, f, notes, "validating", 0)?;
                    continue;
                }
            }
            check_dry_run(&hook.webhook, request)?;
            let review = request.review(object, old);
            let (hook, registry) = (hook.clone(), registry.clone());
            calls.push(smol::spawn(async move {
                let answer = hook.call(&registry, &review, false).await;
                (hook, answer)
            }));
        }
        let mut first_error = None;
        for call in calls {
            let (hook, answer) = call.await;
            let verdict = match answer {
                Ok(answer) => {
                    note(notes, &answer);
                    Ok(())
                }
                Err(f) => failed(&hook, f, notes, "validating", 0),
            };
            if let Err(e) = verdict {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Candidates {
    /// The ValidatingAdmissionPolicies that take the request, with their parameters read
    /// from the store first.
    async fn apply_policies(
        &self,
        policies: &Arc<PolicySet>,
        registry: &Registry,
        request: &Request,
        notes: &Warnings,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        match prepare(policies, registry, request, object, old).await {
            Some(p) => p.run(notes, object, old),
            None => Ok(()),
        }
    }

    /// Whether the write goes to policies only (no webhook): their checks can then run on
    /// the object a write is about to store, inside its one commit
    /// ([`PreparedPolicies::run`]), instead of a dry run first.
    pub fn policies_only(&self) -> bool {
        self.mutating.is_empty() && self.validating.is_empty() && self.policies.is_some()
    }

    /// The policies of a write that goes to policies only, their params read, ready to run
    /// on the object it stores; `None` when no policy takes `object` (as sent).
    pub async fn prepare_policies(
        &self,
        registry: &Registry,
        request: &Request,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Option<Arc<PreparedPolicies>> {
        let policies = self.policies.as_ref()?;
        prepare(policies, registry, request, object, old)
            .await
            .map(Arc::new)
    }
}

/// The policies a write goes to, with their params read (what evaluating them needs from
/// the store), or `None` when none takes `object`.
async fn prepare(
    policies: &Arc<PolicySet>,
    registry: &Registry,
    request: &Request,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Option<PreparedPolicies> {
    let kinds = when_matched(policies, request, object, old, false, |preq| {
        policies.param_kinds(preq)
    })?;
    let mut params = Params::default();
    for kind in kinds {
        let objects = match Kind::from_type(&kind.api_version, &kind.kind) {
            Some(k) => Some((
                k.info().namespaced,
                registry
                    .store
                    .list(k, None)
                    .await
                    .map(|(items, _)| items.iter().map(|o| o.to_json()).collect())
                    .unwrap_or_default(),
            )),
            None => None,
        };
        params.kinds.push((kind, objects));
    }
    Some(PreparedPolicies {
        policies: policies.clone(),
        request: request.clone(),
        params,
    })
}

/// Runs `f` on the request of a write as `policies` see it, if some policy's constraints
/// take it: matched on its attributes alone (no CEL), and only then, when `variables`,
/// given the review's request the expressions read (built only for a write that needs it).
fn when_matched<T>(
    policies: &PolicySet,
    request: &Request,
    object: Option<&Value>,
    old: Option<&Value>,
    variables: bool,
    f: impl FnOnce(&PolicyRequest<'_>) -> T,
) -> Option<T> {
    let labels = request.labels(object, old);
    let mut preq = PolicyRequest {
        attrs: request.attributes(&labels),
        name: &request.name,
        namespace: &request.namespace,
        input: Input {
            object,
            old_object: old,
            request: None,
            namespace: request.namespace_object.as_ref(),
            params: None,
        },
    };
    if !policies.matches(&preq) {
        return None;
    }
    if !variables || !policies.reads_request() {
        return Some(f(&preq));
    }
    let req = conditions::request_json(&request.review(object, old));
    preq.input.request = Some(&req);
    Some(f(&preq))
}

/// The policies of one write with their params, to be run on the object it stores.
pub struct PreparedPolicies {
    policies: Arc<PolicySet>,
    request: Request,
    params: Params,
}

impl PreparedPolicies {
    /// Evaluates the policies on `object` (synchronous: CEL only), their warnings and
    /// audit annotations noted; the denial of the first policy that denies.
    pub fn run(
        &self,
        notes: &Warnings,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let outcome = when_matched(&self.policies, &self.request, object, old, true, |preq| {
            self.policies.validate(preq, &self.params)
        });
        let Some(outcome) = outcome else {
            return Ok(());
        };
        {
            let mut n = notes.lock().unwrap_or_else(|e| e.into_inner());
            n.warnings.extend(outcome.warnings);
            n.audit_annotations.extend(outcome.audit_annotations);
        }
        outcome.denied.map_or(Ok(()), Err)
    }

    /// Whether the policies allow the create of `object`: its warnings and audit
    /// annotations noted if so; nothing noted if not (the caller runs them again where the
    /// denial is answered).
    pub fn allow(&self, notes: &Warnings, object: &Value) -> bool {
        let noted = {
            let n = notes.lock().unwrap_or_else(|e| e.into_inner());
            (n.warnings.len(), n.audit_annotations.len())
        };
        if self.run(notes, Some(object), None).is_ok() {
            return true;
        }
        let mut n = notes.lock().unwrap_or_else(|e| e.into_inner());
        n.warnings.truncate(noted.0);
        n.audit_annotations.truncate(noted.1);
        false
    }
}

/// A param kind's objects: whether the kind is namespaced, and its objects as JSON.
type ParamObjects = (bool, Vec<Value>);

/// The parameter objects of the policies a request goes to, read for it.
#[derive(Default)]
struct Params {
    /// Per paramKind (`None`: no such kind).
    kinds: Vec<(ParamKind, Option<ParamObjects>)>,
}

impl Params {
    fn of(&self, kind: &ParamKind) -> Option<&ParamObjects> {
        self.kinds.iter().find(|(k, _)| k == kind)?.1.as_ref()
    }
}

impl ParamSource for Params {
    fn namespaced(&self, kind: &ParamKind) -> Option<bool> {
        self.of(kind).map(|(namespaced, _)| *namespaced)
    }

    fn list(&self, kind: &ParamKind, namespace: Option<&str>, name: Option<&str>) -> Vec<Value> {
        let Some((_, objects)) = self.of(kind) else {
            return Vec::new();
        };
        objects
            .iter()
            .filter(|o| {
                let m = &o["metadata"];
                namespace.is_none_or(|ns| m["namespace"].as_str().unwrap_or("") == ns)
                    && name.is_none_or(|n| m["name"] == n)
            })
            .cloned()
            .collect()
    }
}

/// `userInfo` of a review: the request's user, or the server's controllers for their own
/// writes.
pub fn user_info(user: Option<&crate::auth::User>) -> Value {
    let Some(user) = user else {
        return json!({
            "username": "system:kube-controller-manager",
            "groups": ["system:authenticated"],
        });
    };
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

/// The options object of a write (`CreateOptions`, ...), as kube sends it.
pub fn options(kind: &str, manager: &str, dry_run: bool) -> Value {
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    if !manager.is_empty() && kind != "DeleteOptions" {
        o["fieldManager"] = json!(manager);
    }
    o
}
