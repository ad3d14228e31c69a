//! A small operator written with kube-rs: the `Greeting` custom resource
//! (`greetings.demo.skiff.dev`) and a `kube::runtime::Controller` that, for each Greeting,
//! keeps a ConfigMap `<name>-greeting` holding its message.
//!
//! It does what operators built on kube-rs do on Kubernetes, so that running it against skiff
//! (`tests/skiff.rs`) checks that skiff answers each of those requests as kube-apiserver would:
//!
//! - the CustomResourceDefinition comes from `#[derive(CustomResource)]` (its schema from
//!   schemars, a status subresource, a printer column), applied with server-side apply and
//!   awaited until Established;
//! - the controller watches Greetings (a watcher with bookmarks) and the ConfigMaps it owns
//!   through a metadata-only watch (`PartialObjectMetadata`);
//! - each Greeting gets a finalizer (`kube::runtime::finalizer`: JSON patches with `test`);
//! - the ConfigMap is applied with server-side apply, with a controller ownerReference;
//! - the Greeting's status is applied through the status subresource;
//! - an events.k8s.io/v1 Event is published through `kube::runtime::events::Recorder`;
//! - on deletion the cleanup lists the ConfigMaps' metadata only (`Api::list_metadata`),
//!   publishes an Event saying what it leaves to the garbage collector, and the finalizer is
//!   removed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, ObjectMeta, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The field manager of every write, and the Events' reporting controller.
pub const MANAGER: &str = "skiff-kube-rs-operator";
/// The finalizer each Greeting carries while the operator has work to do on its deletion.
pub const FINALIZER: &str = "demo.skiff.dev/cleanup";
/// The label on every ConfigMap the operator makes (the owned watch selects on it).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The label naming the Greeting a ConfigMap belongs to.
pub const GREETING_LABEL: &str = "demo.skiff.dev/greeting";

/// A greeting: its message is kept in a ConfigMap.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "demo.skiff.dev",
    version = "v1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus",
    shortname = "gr",
    // Columns as JSON: clippy takes two `printcolumn(type_ = ...)` lists for a duplicated
    // attribute.
    printcolumn = r#"{"name": "Message", "type": "string", "jsonPath": ".spec.message"}"#,
    printcolumn = r#"{"name": "ConfigMap", "type": "string", "jsonPath": ".status.configMap"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GreetingSpec {
    /// What the ConfigMap's `message` key holds.
    pub message: String,
}

/// What the operator observed and did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    /// The ConfigMap that holds the message.
    pub config_map: String,
    /// The generation of the spec that the ConfigMap holds.
    pub observed_generation: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("{0}")]
    Other(String),
}

/// The name of a Greeting's ConfigMap.
pub fn config_map_name(greeting: &str) -> String {
    format!("{greeting}-greeting")
}

/// Applies the Greeting definition with server-side apply and waits until it is Established.
pub async fn install_crd(client: &Client) -> Result<(), Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Greeting::crd();
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let established = await_condition(crds, &name, conditions::is_crd_established());
    match tokio::time::timeout(Duration::from_secs(30), established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Other(format!("waiting for {name}: {e}"))),
        Err(_) => Err(Error::Other(format!("{name} was not established in 30 s"))),
    }
}

struct Context {
    client: Client,
    recorder: Recorder,
}

/// Runs the controller for the Greetings of `namespace` (all namespaces if None) until
/// `shutdown` resolves. Each reconciliation's outcome is printed on stderr.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // `Api<PartialObjectMeta<_>>` asks for metadata-only answers
    // (`as=PartialObjectMetadata`, `as=PartialObjectMetadataList`).
    let (greetings, config_maps): (Api<Greeting>, Api<PartialObjectMeta<ConfigMap>>) =
        match &namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: Some(format!("{MANAGER}-{}", std::process::id())),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client, reporter),
    });
    // Bookmarks are on by default in watcher::Config; they are said here to be sure.
    let greetings_config = watcher::Config {
        bookmarks: true,
        ..watcher::Config::default()
    };
    // The owned ConfigMaps through a metadata-only watch: the controller needs only their
    // ownerReferences to know which Greeting to reconcile.
    let owned = watcher(
        config_maps,
        watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGER}")),
    )
    .touched_objects();
    Controller::new(greetings, greetings_config)
        .owns_stream(owned)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|outcome| async move {
            match outcome {
                Ok((obj, _)) => eprintln!(
                    "reconciled {}/{}",
                    obj.namespace.unwrap_or_default(),
                    obj.name
                ),
                // A change of an owned ConfigMap after its Greeting went (the garbage
                // collector deleting it) asks for the Greeting, no longer there.
                Err(controller::Error::ObjectNotFound(obj)) => eprintln!("{obj} is gone"),
                Err(e) => eprintln!("reconcile failed: {e}"),
            }
        })
        .await;
}

fn error_policy(_obj: Arc<Greeting>, error: &Error, _ctx: Arc<Context>) -> Action {
    eprintln!("error: {error}");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(greeting: Arc<Greeting>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = greeting
        .namespace()
        .ok_or_else(|| Error::Other("a Greeting is namespaced".into()))?;
    let greetings: Api<Greeting> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&greetings, FINALIZER, greeting, |event| async {
        match event {
            Finalizer::Apply(g) => apply(&g, &ctx).await,
            Finalizer::Cleanup(g) => cleanup(&g, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// Makes the Greeting's ConfigMap hold its message, then records that in its status.
async fn apply(greeting: &Greeting, ctx: &Context) -> Result<Action, Error> {
    let ns = greeting.namespace().unwrap_or_default();
    let name = greeting.name_any();
    let cm_name = config_map_name(&name);
    let owner = greeting
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Other("the Greeting has no uid yet".into()))?;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.to_string(), MANAGER.to_string()),
                (GREETING_LABEL.to_string(), name.clone()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "message".to_string(),
            greeting.spec.message.clone(),
        )])),
        ..ConfigMap::default()
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let before = config_maps.get_opt(&cm_name).await?;
    let after = config_maps
        .patch(
            &cm_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&cm),
        )
        .await?;

    let status = GreetingStatus {
        config_map: cm_name.clone(),
        observed_generation: greeting.metadata.generation.unwrap_or_default(),
    };
    if greeting.status.as_ref() != Some(&status) {
        let greetings: Api<Greeting> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = json!({
            "apiVersion": Greeting::api_version(&()),
            "kind": Greeting::kind(&()),
            "status": status,
        });
        greetings
            .patch_status(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
    }

    // An Event when the ConfigMap was made or changed, not on every pass. The Recorder
    // makes an Event the first time, and counts repeats of the same reason for the same
    // object in its `series` (a merge patch).
    let changed = match &before {
        None => Some(("Greeted", format!("made ConfigMap {cm_name}"))),
        Some(b) if b.metadata.resource_version != after.metadata.resource_version => {
            Some(("Updated", format!("updated ConfigMap {cm_name}")))
        }
        Some(_) => None,
    };
    if let Some((reason, note)) = changed {
        ctx.recorder
            .publish(
                &Event {
                    type_: EventType::Normal,
                    reason: reason.into(),
                    note: Some(note),
                    action: "Reconcile".into(),
                    secondary: None,
                },
                &greeting.object_ref(&()),
            )
            .await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Lets the Greeting go: its ConfigMaps are left to the garbage collector (their controller
/// ownerReference), and an Event says how many there are.
async fn cleanup(greeting: &Greeting, ctx: &Context) -> Result<Action, Error> {
    let ns = greeting.namespace().unwrap_or_default();
    let uid = greeting.uid().unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let owned = config_maps
        .list_metadata(&ListParams::default().labels(&format!("{MANAGED_BY}={MANAGER}")))
        .await?
        .items
        .into_iter()
        .filter(|cm| cm.owner_references().iter().any(|o| o.uid == uid))
        .map(|cm| cm.name_any())
        .collect::<Vec<_>>();
    ctx.recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "CleanedUp".into(),
                note: Some(format!(
                    "left ConfigMap(s) {} to the garbage collector",
                    owned.join(",")
                )),
                action: "Finalize".into(),
                secondary: None,
            },
            &greeting.object_ref(&()),
        )
        .await?;
    Ok(Action::await_change())
}
