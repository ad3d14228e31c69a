//! Custom resources (docs/design/resources.md §3, §6.2, §9): what a CustomResourceDefinition
//! turns into on every server, and the controllers kube-apiserver's apiextensions runs.
//!
//! * **Installing** (every server, [`start_installer`]): each established definition becomes
//!   a [`Kind`] (its names), [`Rules`] (its compiled schema, printer columns and selectable
//!   fields, which custom objects consult when they are decoded, defaulted and validated) and
//!   an entry of the resource table, so routing, discovery and every stage of the request
//!   pipeline serve it like a built-in kind. The table is swapped whole.
//! * **Establishing** (the leader, [`start`]): a new definition's names are checked against
//!   the other definitions of its group; accepted ones get `NamesAccepted` and `Established`,
//!   their `acceptedNames` and `storedVersions`.
//! * **Cleanup** (the leader): a deleted definition (held by the
//!   `customresourcecleanup.apiextensions.k8s.io` finalizer the registry adds at create) gets
//!   `Terminating`, its objects are deleted through the registry (their finalizers and
//!   watches behave), then the finalizer goes and the store lets the definition go.

pub(crate) mod cel;
pub(crate) mod cel_json;
mod cel_k8s;
mod conversion;
pub mod schema;

pub use conversion::Converter;

use std::sync::Arc;
use std::time::SystemTime;

use api::apiextensions::{CrdNames, CrdVersion, CustomResourceDefinition, CLEANUP_FINALIZER};
use api::custom::{CustomObject, CustomRules};
use api::meta::DeleteOptions;
use api::object::CustomKindInfo;
use api::table::ColumnDefinition;
use api::validation::FieldError;
use api::Kind;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::machinery::Context;
use crate::registry::Part;
use crate::resources::{Entry, Resources, Storage, Subresource, Version};
use schema::Schema;

/// What a definition's storage version says about its objects.
#[derive(Debug)]
pub struct Rules {
    schema: Option<Schema>,
    columns: Vec<api::apiextensions::PrinterColumn>,
    scale: Option<api::apiextensions::CrdScale>,
    selectable: Vec<String>,
    terminating: bool,
}

impl Rules {
    fn of(version: &CrdVersion) -> Result<Rules, Vec<FieldError>> {
        let schema = match version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
        {
            Some(v) => Some(Schema::compile(&v.0, "openAPIV3Schema")?),
            None => None,
        };
        Ok(Rules {
            schema,
            columns: version.additional_printer_columns.clone(),
            scale: version.subresources.as_ref().and_then(|s| s.scale.clone()),
            selectable: version
                .selectable_fields
                .iter()
                .map(|f| f.json_path.trim_start_matches('.').to_string())
                .collect(),
            terminating: false,
        })
    }
}

impl CustomRules for Rules {
    fn normalize(&self, obj: &mut CustomObject) {
        if let Some(s) = &self.schema {
            s.prune_body(&mut obj.body);
            s.default_body(&mut obj.body);
        }
    }

    fn validate(&self, obj: &CustomObject, old: Option<&CustomObject>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if let Some(s) = &self.schema {
            match old {
                None => s.validate_body(&obj.body, &mut errs),
                Some(old) => s.validate_transitions_body(&obj.body, &old.body, &mut errs),
            }
        }
        errs
    }

    fn validate_status(&self, obj: &CustomObject, old: Option<&CustomObject>) -> Vec<FieldError> {
        self.validate(obj, old)
            .into_iter()
            .filter(|e| {
                e.field == "status"
                    || e.field.starts_with("status.")
                    || e.field.starts_with("status[")
            })
            .collect()
    }

    fn unknown_fields(&self, body: &Value) -> Vec<String> {
        self.schema
            .as_ref()
            .map(|s| s.unknown_fields(body))
            .unwrap_or_default()
    }

    fn scale_paths(&self) -> Option<(String, String, Option<String>)> {
        self.scale.as_ref().map(|s| {
            (
                s.spec_replicas_path.clone(),
                s.status_replicas_path.clone(),
                s.label_selector_path.clone(),
            )
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn terminating(&self) -> bool {
        self.terminating
    }

    fn selectable_fields(&self) -> Vec<String> {
        self.selectable.clone()
    }

    fn columns(&self) -> Vec<ColumnDefinition> {
        let mut cols = vec![api::table::name_column()];
        if self.columns.is_empty() {
            cols.push(api::table::age_column());
        }
        cols.extend(self.columns.iter().map(|c| {
            api::table::column(
                &c.name,
                &c.type_,
                c.format.as_deref().unwrap_or(""),
                c.description.as_deref().unwrap_or(""),
                c.priority.unwrap_or(0),
            )
        }));
        cols
    }

    fn cells(&self, obj: &CustomObject, now: SystemTime) -> Vec<Value> {
        let mut cells = vec![json!(obj.metadata.name)];
        if self.columns.is_empty() {
            cells.push(json!(api::table::age_at(
                obj.metadata.creation_timestamp,
                now
            )));
        }
        let whole = api::codec::to_json(obj);
        for c in &self.columns {
            let found = json_path(&whole, &c.json_path);
            cells.push(match (c.type_.as_str(), found) {
                (_, None) => Value::Null,
                ("date", Some(Value::String(s))) => match api::meta::Time::parse(s) {
                    Ok(t) => json!(api::table::age_at(Some(t), now)),
                    Err(_) => Value::String(s.clone()),
                },
                (_, Some(v)) => v.clone(),
            });
        }
        cells
    }
}

/// The value a printer column's simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`)
/// names.
fn json_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut at = v;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !name.is_empty() {
            at = at.get(name)?;
        }
        if let Some(i) = index {
            at = at.get(i)?;
        }
    }
    Some(at)
}

/// The compiled rules of the custom kind an object's JSON names (`apiVersion`, `kind`),
/// for the merges and field sets that follow its schema's list and map types.
pub fn rules_of_object(obj: &Value) -> Option<Arc<dyn CustomRules>> {
    let api_version = obj.get("apiVersion")?.as_str()?;
    let (group, _) = api_version.rsplit_once('/')?;
    let kind = Kind::custom_of_type(group, obj.get("kind")?.as_str()?)?;
    kind.custom_rules()
}

impl Rules {
    /// The schema in `rules`, when they are a definition's.
    pub fn schema_in(rules: &dyn CustomRules) -> Option<&Schema> {
        rules.as_any().downcast_ref::<Rules>()?.schema.as_ref()
    }
}

/// A merge patch that sets `value` at a definition's simple path (`.spec.replicas`, or as a
/// JSON pointer `/spec/replicas`).
pub fn path_patch(path: &str, value: Value) -> Value {
    let mut at = value;
    for part in path.split(['.', '/']).filter(|p| !p.is_empty()).rev() {
        at = json!({ part: at });
    }
    at
}

/// Checks a definition's schemas (kube refuses a definition whose schema is not structural).
pub fn validate_schemas(crd: &CustomResourceDefinition) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, v) in crd.spec.versions.iter().enumerate() {
        if let Some(s) = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
        {
            let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
            if let Err(e) = Schema::compile_checked(&s.0, &at) {
                errs.extend(e);
            }
            if s.0.get("type").and_then(Value::as_str) != Some("object") {
                errs.push(FieldError::invalid(
                    format!("{at}.type"),
                    s.0.get("type").and_then(Value::as_str).unwrap_or(""),
                    "must be object at the root",
                ));
            }
        }
    }
    errs
}

/// The kind's names from a definition.
fn kind_info(crd: &CustomResourceDefinition, names: &CrdNames) -> CustomKindInfo {
    let storage = crd.storage_version();
    CustomKindInfo {
        kind: names.kind.clone(),
        group: crd.spec.group.clone(),
        version: storage.map(|v| v.name.clone()).unwrap_or_default(),
        plural: names.plural.clone(),
        singular: names
            .singular
            .clone()
            .unwrap_or_else(|| names.kind.to_ascii_lowercase()),
        short_names: names.short_names.clone(),
        namespaced: crd.spec.scope == "Namespaced",
        has_status: storage
            .and_then(|v| v.subresources.as_ref())
            .is_some_and(|s| s.status.is_some()),
        categories: names.categories.clone(),
    }
}

/// The table entry of an established definition, with its kind defined and its rules set.
pub fn install_one(crd: &CustomResourceDefinition) -> Option<Entry> {
    let names = crd.served_names();
    let storage = crd.storage_version()?;
    let info = kind_info(crd, &names);
    let kind = Kind::define_custom(info.clone());
    match Rules::of(storage) {
        Ok(mut rules) => {
            rules.terminating = crd.metadata.deletion_timestamp.is_some();
            kind.set_custom_rules(Some(Arc::new(rules)))
        }
        Err(e) => {
            tracing::warn!(crd = %crd.metadata.name, errors = ?e, "a stored definition's schema does not compile");
            kind.set_custom_rules(None);
        }
    }
    let mut versions: Vec<Version> = vec![Version {
        name: storage.name.as_str().into(),
        storage: true,
    }];
    versions.extend(
        crd.spec
            .versions
            .iter()
            .filter(|v| v.served && !v.storage)
            .map(|v| Version {
                name: v.name.as_str().into(),
                storage: false,
            }),
    );
    if !storage.served {
        // Not served at its storage version: the entry lists only what is served.
        versions.remove(0);
        if let Some(first) = versions.first_mut() {
            first.storage = true;
        }
    }
    let mut subresources = Vec::new();
    if let Some(s) = &storage.subresources {
        if s.status.is_some() {
            subresources.push(Subresource {
                name: "status".into(),
                kind: names.kind.as_str().into(),
                group_version: None,
                verbs: &["get", "patch", "update"],
            });
        }
        if s.scale.is_some() {
            subresources.push(Subresource {
                name: "scale".into(),
                kind: "Scale".into(),
                group_version: Some(("autoscaling".into(), "v1".into())),
                verbs: &["get", "patch", "update"],
            });
        }
    }
    Some(Entry {
        id: kind.into(),
        group: crd.spec.group.as_str().into(),
        versions,
        kind: names.kind.as_str().into(),
        plural: names.plural.as_str().into(),
        singular: info.singular.as_str().into(),
        short_names: names
            .short_names
            .iter()
            .map(|s| s.as_str().into())
            .collect(),
        categories: names.categories.iter().map(|s| s.as_str().into()).collect(),
        namespaced: info.namespaced,
        verbs: crate::resources::STORED_VERBS,
        subresources,
        storage: Storage::Builtin(kind),
        conversion: Converter::of(crd).map(Arc::new),
    })
}

/// Installs every established definition of `crds` in `resources` (replacing the custom
/// entries there). Their storage needs no making: a table is made by its first write and
/// reads of one not made yet find nothing.
pub fn install(resources: &Resources, crds: &[CustomResourceDefinition]) {
    let entries: Vec<Entry> = crds
        .iter()
        .filter(|c| c.condition("Established"))
        .filter_map(install_one)
        .collect();
    resources.set_custom(entries);
}

/// Keeps this server's resource table in step with the stored definitions.
pub async fn start_installer(
    resources: Arc<Resources>,
    informers: &crate::machinery::informer::Informers,
) {
    let changes = informers.subscribe(&[Kind::CustomResourceDefinition]);
    let crds: Vec<CustomResourceDefinition> = informers.cache().list(None);
    install(&resources, &crds);
    let cache = informers.cache().clone();
    smol::spawn(async move {
        while changes.recv().await.is_ok() {
            while changes.try_recv().is_ok() {}
            let crds: Vec<CustomResourceDefinition> = cache.list(None);
            install(&resources, &crds);
        }
    })
    .detach();
}

/// The establishing and cleanup controllers.
pub fn start(ctx: &Context) {
    smol::spawn(run(ctx.clone())).detach();
}

async fn run(ctx: Context) {
    let changes = ctx.informers.subscribe(&[Kind::CustomResourceDefinition]);
    loop {
        let crds: Vec<CustomResourceDefinition> = ctx.informers.cache().list(None);
        let mut again = false;
        for crd in &crds {
            let result = if crd.metadata.deletion_timestamp.is_some() {
                cleanup(&ctx, crd).await.map(|done| again |= !done)
            } else {
                establish(&ctx, crd, &crds).await
            };
            if let Err(e) = result {
                if e.code() != 404 && e.code() != 409 {
                    tracing::warn!(crd = %crd.metadata.name, error = %e, "custom resource definition");
                }
                again = true;
            }
        }
        let wait = async {
            let _ = changes.recv().await;
            while changes.try_recv().is_ok() {}
        };
        if again {
            // Objects still going (finalizers), or a conflict: look again soon.
            let _ = futures_lite::future::or(wait, async {
                smol::Timer::after(std::time::Duration::from_millis(500)).await;
            })
            .await;
        } else {
            wait.await;
        }
    }
}

/// The reason a definition's names cannot be accepted, if another definition of its group
/// (accepted before it) uses one of them.
fn name_conflict(
    crd: &CustomResourceDefinition,
    all: &[CustomResourceDefinition],
) -> Option<String> {
    let mine = &crd.spec.names;
    for other in all {
        if other.metadata.name == crd.metadata.name || other.spec.group != crd.spec.group {
            continue;
        }
        let Some(theirs) = other
            .status
            .as_ref()
            .and_then(|s| s.accepted_names.as_ref())
            .filter(|n| !n.plural.is_empty())
        else {
            continue;
        };
        let their_names: Vec<&str> = std::iter::once(theirs.plural.as_str())
            .chain(theirs.singular.as_deref())
            .chain(theirs.short_names.iter().map(String::as_str))
            .collect();
        if their_names.contains(&mine.plural.as_str()) {
            return Some(format!("{:?} is already in use", mine.plural));
        }
        if let Some(s) = mine.singular.as_deref().filter(|s| their_names.contains(s)) {
            return Some(format!("{s:?} is already in use"));
        }
        if let Some(s) = mine
            .short_names
            .iter()
            .find(|s| their_names.contains(&s.as_str()))
        {
            return Some(format!("{s:?} is already in use"));
        }
        if theirs.kind == mine.kind {
            return Some(format!("{:?} is already in use", mine.kind));
        }
        if theirs.list_kind.is_some() && theirs.list_kind == mine.list_kind {
            return Some(format!(
                "{:?} is already in use",
                mine.list_kind.as_deref().unwrap_or("")
            ));
        }
    }
    None
}

async fn establish(
    ctx: &Context,
    crd: &CustomResourceDefinition,
    all: &[CustomResourceDefinition],
) -> Result<(), ApiError> {
    let conflict = name_conflict(crd, all);
    let mut want = crd.clone();
    match &conflict {
        Some(why) => {
            want.set_condition("NamesAccepted", false, "MultipleNamesNotAllowed", why);
            if !crd.condition("Established") {
                want.set_condition(
                    "Established",
                    false,
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
        }
        None => {
            want.set_condition("NamesAccepted", true, "NoConflicts", "no conflicts found");
            want.status
                .get_or_insert_with(Default::default)
                .accepted_names = Some(crd.spec.names.clone());
            if !crd.condition("Established") {
                want.set_condition(
                    "Established",
                    true,
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                );
            }
            if let Some(storage) = crd.storage_version() {
                let stored = &mut want
                    .status
                    .get_or_insert_with(Default::default)
                    .stored_versions;
                if !stored.contains(&storage.name) {
                    stored.push(storage.name.clone());
                }
            }
        }
    }
    if same_status(&want, crd) {
        return Ok(());
    }
    write_status(ctx, &want).await
}

/// Writes `want`'s status through the status subresource.
async fn write_status(ctx: &Context, want: &CustomResourceDefinition) -> Result<(), ApiError> {
    let status = want.status.clone();
    ctx.registry
        .mutate::<CustomResourceDefinition>("", &want.metadata.name, Part::Status, move |c| {
            c.status = status.clone();
            Ok(())
        })
        .await
        .map(|_| ())
}

/// Whether two definitions' statuses agree but for condition times.
fn same_status(a: &CustomResourceDefinition, b: &CustomResourceDefinition) -> bool {
    let strip = |c: &CustomResourceDefinition| {
        let mut s = c.status.clone().unwrap_or_default();
        for cond in &mut s.conditions {
            cond.last_transition_time = None;
        }
        s
    };
    strip(a) == strip(b)
}

/// One pass of a deleted definition's cleanup; true once the definition is released.
async fn cleanup(ctx: &Context, crd: &CustomResourceDefinition) -> Result<bool, ApiError> {
    if !crd
        .metadata
        .finalizers
        .iter()
        .any(|f| f == CLEANUP_FINALIZER)
    {
        return Ok(true);
    }
    if !crd.condition("Terminating") {
        let mut want = crd.clone();
        want.set_condition(
            "Terminating",
            true,
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
        write_status(ctx, &want).await?;
    }
    let names = crd.served_names();
    let remaining = match Kind::custom(&crd.spec.group, &names.plural) {
        None => 0,
        Some(kind) => {
            let (objects, _) = ctx.registry.store.list(kind, None).await?;
            let registry = ctx.registry.for_kind(kind);
            for o in &objects {
                if o.meta().deletion_timestamp.is_some() {
                    continue;
                }
                match registry
                    .delete::<CustomObject>(
                        o.meta().namespace(),
                        &o.meta().name,
                        DeleteOptions::default(),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.code() == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            ctx.registry.store.list(kind, None).await?.0.len()
        }
    };
    if remaining > 0 {
        return Ok(false);
    }
    ctx.registry
        .mutate::<CustomResourceDefinition>("", &crd.metadata.name, Part::Main, |c| {
            c.metadata.finalizers.retain(|f| f != CLEANUP_FINALIZER);
            Ok(())
        })
        .await?;
    Ok(true)
}
