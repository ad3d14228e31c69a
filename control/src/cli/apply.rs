//! `skiff apply -f FILE|DIR|-`: create what is missing, update what differs.
//!
//! Like kubectl's client-side apply, the applied manifest is recorded in the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation. An object is `unchanged`
//! when the manifest equals the recorded one and every field it sets already has that value;
//! otherwise it is replaced (PUT at the current resourceVersion, retried on conflict) while
//! keeping what other writers own: labels and annotations the previous manifest did not set,
//! finalizers and owner references, and a Service's allocated cluster IPs.

use serde_json::{Map, Value};

use super::manifest::{self, ManifestObject};
use super::{kind_label, AlreadyReported, Session};

pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const CONFLICT_RETRIES: usize = 5;

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Manifest file, directory of manifests, or `-` for stdin (repeatable).
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<String>,
}

/// What apply did to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Configured,
    Unchanged,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Configured => "configured",
            Outcome::Unchanged => "unchanged",
        }
    }
}

pub async fn run(session: &Session, args: &ApplyArgs) -> anyhow::Result<()> {
    let objects = manifest::read_all(&args.files, &session.namespace)?;
    let mut failed = 0;
    for obj in &objects {
        match apply_one(session, obj).await {
            Ok(outcome) => println!("{}/{} {}", kind_label(obj.kind), obj.name, outcome.word()),
            Err(e) => {
                failed += 1;
                eprintln!(
                    "error: applying {}/{} from {}: {}",
                    kind_label(obj.kind),
                    obj.name,
                    obj.source,
                    super::error_line(&e)
                );
            }
        }
    }
    if failed > 0 {
        return Err(AlreadyReported(failed).into());
    }
    Ok(())
}

pub async fn apply_one(session: &Session, obj: &ManifestObject) -> anyhow::Result<Outcome> {
    let client = &session.client;
    let ns = obj.namespace.as_deref();
    let last_applied = serde_json::to_string(&obj.object)?;
    let mut desired = obj.object.clone();
    set_annotation(&mut desired, LAST_APPLIED, &last_applied);

    let mut attempt = 0;
    loop {
        attempt += 1;
        let live = match client.get_value(obj.kind, ns, &obj.name).await {
            Ok(live) => live,
            Err(e) if e.is_not_found() => {
                match client.create_value(obj.kind, ns, &desired).await {
                    Ok(_) => return Ok(Outcome::Created),
                    // Created by someone else meanwhile: update it instead.
                    Err(e) if e.is_conflict() && attempt < CONFLICT_RETRIES => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        let previous = annotation(&live, LAST_APPLIED);
        if previous.as_deref() == Some(last_applied.as_str()) && is_subset(&desired, &live) {
            return Ok(Outcome::Unchanged);
        }
        let body = update_body(&desired, &live, previous.as_deref());
        match client.replace_value(obj.kind, ns, &obj.name, &body).await {
            Ok(_) => return Ok(Outcome::Configured),
            Err(e) if e.is_conflict() && attempt < CONFLICT_RETRIES => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

fn annotation(v: &Value, key: &str) -> Option<String> {
    v.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn set_annotation(v: &mut Value, key: &str, value: &str) {
    let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(key.into(), Value::String(value.into()));
    }
}

/// The PUT body: the manifest at the live resourceVersion, plus what others own.
pub fn update_body(desired: &Value, live: &Value, previous_manifest: Option<&str>) -> Value {
    let mut body = desired.clone();
    let previous: Value = previous_manifest
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(Value::Null);
    let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) else {
        return body;
    };
    if let Some(rv) = live.pointer("/metadata/resourceVersion") {
        meta.insert("resourceVersion".into(), rv.clone());
    }
    for field in ["labels", "annotations"] {
        let Some(Value::Object(live_map)) = live.pointer(&format!("/metadata/{field}")) else {
            continue;
        };
        let previously_set = previous
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let target = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(target) = target.as_object_mut() else {
            continue;
        };
        for (k, v) in live_map {
            let ours_before = previously_set.is_some_and(|p| p.contains_key(k));
            if !ours_before && !target.contains_key(k) {
                target.insert(k.clone(), v.clone());
            }
        }
    }
    for field in ["finalizers", "ownerReferences"] {
        if !meta.contains_key(field) {
            if let Some(v) = live.pointer(&format!("/metadata/{field}")) {
                meta.insert(field.into(), v.clone());
            }
        }
    }
    if live.get("kind").and_then(Value::as_str) == Some("Service") {
        if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
            for field in ["clusterIP", "clusterIPs"] {
                if !spec.contains_key(field) {
                    if let Some(v) = live.pointer(&format!("/spec/{field}")) {
                        spec.insert(field.into(), v.clone());
                    }
                }
            }
        }
    }
    body
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// True when every field `want` sets has the same value in `have` (defaults the server
/// added to `have` do not count as differences).
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        // A null in a manifest means "unset": nothing to compare.
        (Value::Null, _) => true,
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, wv)| match h.get(k) {
            Some(hv) => is_subset(wv, hv),
            None => is_empty(wv),
        }),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (w, h) => w == h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_ignores_server_defaults_but_not_changes() {
        let want = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}, "status": null});
        let have = json!({"spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"},
            "template": {"spec": {"containers": [{"name": "a", "image": "x", "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"replicas": 2}});
        assert!(is_subset(&want, &have));
        let changed = json!({"spec": {"replicas": 3}});
        assert!(!is_subset(&changed, &have));
        let more =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}});
        assert!(!is_subset(&more, &have));
        assert!(is_subset(&json!({"a": 1.0}), &json!({"a": 1})));
    }

    #[test]
    fn updates_keep_what_others_own() {
        let previous =
            json!({"metadata": {"name": "web", "labels": {"app": "web", "old": "x"}}}).to_string();
        let desired = json!({"kind": "Service", "metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {"ports": [{"port": 80}]}});
        let live = json!({"kind": "Service",
            "metadata": {"name": "web", "resourceVersion": "17",
                "labels": {"app": "web", "old": "x", "team": "ops"},
                "annotations": {"deployment.kubernetes.io/revision": "3"},
                "finalizers": ["f"]},
            "spec": {"clusterIP": "10.43.0.10", "ports": [{"port": 80}]}});
        let body = update_body(&desired, &live, Some(&previous));
        assert_eq!(body["metadata"]["resourceVersion"], "17");
        // `old` was ours and is gone from the manifest: removed. `team` is someone else's.
        assert_eq!(
            body["metadata"]["labels"],
            json!({"app": "web", "team": "ops"})
        );
        assert_eq!(
            body["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
            "3"
        );
        assert_eq!(body["metadata"]["finalizers"], json!(["f"]));
        assert_eq!(body["spec"]["clusterIP"], "10.43.0.10");
    }

    #[test]
    fn the_manifest_is_recorded_in_an_annotation() {
        let mut v = json!({"metadata": {"name": "a"}});
        set_annotation(&mut v, LAST_APPLIED, "{}");
        assert_eq!(annotation(&v, LAST_APPLIED).as_deref(), Some("{}"));
    }
}
