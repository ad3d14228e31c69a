//! Shared by the patch targets. An input is the current object as one line of JSON, a
//! newline, then the PATCH body as a client sends it. A first line that is not a JSON object
//! stands for a Deployment, so the fuzzer can spend its bytes on the patch.

use api::{with_kind, Resource};
use control::registry::PatchType;
use serde_json::Value;

fn default_current() -> Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "web", "image": "nginx",
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "value": "1"}]
                }]}
            }
        }
    })
}

pub fn run(data: &[u8], types: &[PatchType]) {
    let (first, patch) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b""[..], data),
    };
    let current = match serde_json::from_slice::<Value>(first) {
        Ok(v @ Value::Object(_)) => v,
        _ => default_current(),
    };
    for &t in types {
        let Ok(patched) = control::registry::apply_patch(current.clone(), t, patch) else {
            continue;
        };
        // What the server does next: decode the result as the object's kind.
        if let Ok(kind) = api::codec::type_of(&patched) {
            with_kind!(kind, K, {
                if let Ok(mut obj) = control::registry::decode::<K>(patched) {
                    obj.set_defaults();
                    let _ = obj.validate();
                }
            });
        }
    }
}
