//! `pods/ephemeralcontainers`, as kube-apiserver serves it: listed in discovery, read and
//! written (PUT, strategic-merge, merge and JSON patches) through the subresource only,
//! additions only (an existing ephemeral container may be neither removed nor changed), no
//! ports, probes, lifecycle or resources on one, names unique across every container of the
//! pod, never on create nor through a plain pod update; dry run, field managers and RBAC
//! (the subresource is authorized on its own) as for any subresource; and `kubectl debug`
//! adding one.

mod common;

use common::{kubectl, TestServer};
use serde_json::{json, Value};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn sub(name: &str) -> String {
    format!("{PODS}/{name}/ephemeralcontainers")
}

fn patch(s: &TestServer, path: &str, content_type: &str, body: &Value) -> (u16, Value) {
    s.http(
        "PATCH",
        path,
        Some((content_type, serde_json::to_vec(body).expect("json"))),
    )
}

const SMP: &str = "application/strategic-merge-patch+json";

fn debugger(name: &str) -> Value {
    json!({"name": name, "image": "busybox", "command": ["sh"], "stdin": true,
           "targetContainerName": "app"})
}

/// The one cause of a 422 answer: (reason, field, message), and the Status' message.
fn invalid(code: u16, v: &Value) -> (String, String, String, String) {
    assert_eq!(code, 422, "{v}");
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["reason"], "Invalid", "{v}");
    assert_eq!(v["details"]["kind"], "Pod", "{v}");
    let causes = v["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(causes.len(), 1, "{v}");
    let c = &causes[0];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&c["reason"]),
        s(&c["field"]),
        s(&c["message"]),
        s(&v["message"]),
    )
}

fn make_pod(s: &TestServer, name: &str) -> Value {
    let (code, pod) = s.json(
        "POST",
        PODS,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
                "spec": {"initContainers": [{"name": "setup", "image": "busybox", "command": ["true"]}],
                         "containers": [{"name": "app", "image": "busybox", "command": ["sleep", "1d"]}]}}),
    );
    assert_eq!(code, 201, "{pod}");
    pod
}

#[test]
fn the_subresource_adds_ephemeral_containers_and_refuses_what_kube_refuses() {
    let s = TestServer::start();

    // Listed in discovery with kube's verbs.
    let (code, v1) = s.http("GET", "/api/v1", None);
    assert_eq!(code, 200);
    let entry = v1["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "pods/ephemeralcontainers"))
        .cloned()
        .unwrap_or_else(|| panic!("pods/ephemeralcontainers in discovery: {v1}"));
    assert_eq!(entry["kind"], "Pod", "{entry}");
    assert_eq!(entry["verbs"], json!(["get", "patch", "update"]), "{entry}");

    // Never on create.
    let (code, v) = s.json(
        "POST",
        PODS,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "early"},
                "spec": {"containers": [{"name": "app", "image": "busybox"}],
                         "ephemeralContainers": [debugger("debugger")]}}),
    );
    let (reason, field, message, whole) = invalid(code, &v);
    assert_eq!(
        (reason.as_str(), field.as_str(), message.as_str()),
        (
            "FieldValueForbidden",
            "spec.ephemeralContainers",
            "Forbidden: cannot be set on create"
        )
    );
    assert_eq!(
        whole,
        "Pod \"early\" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create"
    );

    make_pod(&s, "web");
    let (code, got) = s.http("GET", &sub("web"), None);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["kind"], "Pod");
    assert_eq!(got["metadata"]["name"], "web");

    // kubectl debug's strategic-merge patch adds one; defaults as on any container; a label
    // sent along is not taken (only ephemeral containers change through the subresource).
    let (code, v) = patch(
        &s,
        &format!("{}?fieldManager=kubectl-debug", sub("web")),
        SMP,
        &json!({"metadata": {"labels": {"sneaky": "yes"}},
                "spec": {"ephemeralContainers": [debugger("debugger")]}}),
    );
    assert_eq!(code, 200, "{v}");
    let ec = &v["spec"]["ephemeralContainers"];
    assert_eq!(ec.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(ec[0]["name"], "debugger");
    assert_eq!(ec[0]["targetContainerName"], "app");
    assert_eq!(ec[0]["stdin"], true);
    assert_eq!(ec[0]["terminationMessagePolicy"], "File");
    assert_eq!(ec[0]["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(ec[0]["imagePullPolicy"], "Always");
    assert!(v["metadata"]["labels"].get("sneaky").is_none(), "{v}");
    let managers = v["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let debug = managers
        .iter()
        .find(|m| m["manager"] == "kubectl-debug")
        .unwrap_or_else(|| panic!("kubectl-debug manages fields: {v}"));
    assert_eq!(debug["subresource"], "ephemeralcontainers", "{debug}");
    assert_eq!(debug["operation"], "Update", "{debug}");

    // A dry run answers the change and keeps nothing.
    let (code, v) = patch(
        &s,
        &format!("{}?dryRun=All", sub("web")),
        SMP,
        &json!({"spec": {"ephemeralContainers": [debugger("dry")]}}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["spec"]["ephemeralContainers"].as_array().map(Vec::len),
        Some(2)
    );
    let (_, now) = s.http("GET", &format!("{PODS}/web"), None);
    assert_eq!(
        now["spec"]["ephemeralContainers"].as_array().map(Vec::len),
        Some(1),
        "{now}"
    );

    // Removing one (a PUT without it) is refused, with kube's message (and its newline).
    let mut without = now.clone();
    without["spec"]["ephemeralContainers"] = json!([]);
    let (code, v) = s.json("PUT", &sub("web"), &without);
    let (reason, field, message, whole) = invalid(code, &v);
    assert_eq!(reason, "FieldValueForbidden");
    assert_eq!(field, "spec.ephemeralContainers");
    assert_eq!(
        message,
        "Forbidden: existing ephemeral containers \"debugger\" may not be removed\n"
    );
    assert_eq!(
        whole,
        "Pod \"web\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed\n"
    );

    // Changing one (a JSON patch of its image) is refused.
    let (code, v) = patch(
        &s,
        &sub("web"),
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/spec/ephemeralContainers/0/image", "value": "alpine"}]),
    );
    let (reason, field, message, _) = invalid(code, &v);
    assert_eq!(
        (reason.as_str(), field.as_str()),
        ("FieldValueForbidden", "spec.ephemeralContainers")
    );
    assert!(
        message.starts_with(
            "Forbidden: existing ephemeral containers \"debugger\" may not be changed\n"
        ),
        "{message}"
    );
    assert!(
        message.contains("alpine"),
        "the difference is shown: {message}"
    );

    // What an ephemeral container may not have.
    let refused = [
        ("ports", json!([{"containerPort": 80}])),
        ("resources", json!({"limits": {"cpu": "1"}})),
        ("livenessProbe", json!({"exec": {"command": ["true"]}})),
        ("readinessProbe", json!({"exec": {"command": ["true"]}})),
        ("startupProbe", json!({"exec": {"command": ["true"]}})),
        (
            "lifecycle",
            json!({"preStop": {"exec": {"command": ["true"]}}}),
        ),
    ];
    for (field_name, value) in refused {
        let mut c = debugger("extra");
        c[field_name] = value;
        let (code, v) = patch(
            &s,
            &sub("web"),
            SMP,
            &json!({"spec": {"ephemeralContainers": [c]}}),
        );
        let (reason, field, message, whole) = invalid(code, &v);
        assert_eq!(reason, "FieldValueForbidden", "{field_name}");
        assert_eq!(field, format!("spec.ephemeralContainers[1].{field_name}"));
        assert_eq!(
            message,
            "Forbidden: cannot be set for an Ephemeral Container"
        );
        assert_eq!(
            whole,
            format!("Pod \"web\" is invalid: spec.ephemeralContainers[1].{field_name}: Forbidden: cannot be set for an Ephemeral Container")
        );
    }

    // Names are unique across containers, init containers and ephemeral containers.
    for taken in ["app", "setup", "debugger"] {
        let (code, v) = s.json("PUT", &sub("web"), &{
            let mut p = now.clone();
            p["spec"]["ephemeralContainers"]
                .as_array_mut()
                .expect("list")
                .push(json!({"name": taken, "image": "busybox"}));
            p
        });
        let (reason, field, message, _) = invalid(code, &v);
        assert_eq!(reason, "FieldValueDuplicate", "{taken}: {v}");
        assert_eq!(field, "spec.ephemeralContainers[1].name");
        assert_eq!(message, format!("Duplicate value: \"{taken}\""));
    }

    // The target must be an app or init container of the pod.
    let mut lost = debugger("lost");
    lost["targetContainerName"] = json!("nothere");
    let (code, v) = patch(
        &s,
        &sub("web"),
        SMP,
        &json!({"spec": {"ephemeralContainers": [lost]}}),
    );
    let (reason, field, message, _) = invalid(code, &v);
    assert_eq!(
        (reason.as_str(), field.as_str(), message.as_str()),
        (
            "FieldValueNotFound",
            "spec.ephemeralContainers[1].targetContainerName",
            "Not found: \"nothere\""
        )
    );

    // A plain pod update may not touch them, either way.
    let (code, v) = patch(
        &s,
        &format!("{PODS}/web"),
        SMP,
        &json!({"spec": {"ephemeralContainers": [debugger("viaupdate")]}}),
    );
    let (reason, field, message, _) = invalid(code, &v);
    assert_eq!(
        (reason.as_str(), field.as_str()),
        ("FieldValueForbidden", "spec")
    );
    assert!(
        message.starts_with("Forbidden: pod updates may not change fields other than"),
        "{message}"
    );
    let (code, v) = s.json("PUT", &format!("{PODS}/web"), &without);
    assert_eq!(code, 422, "{v}");

    // A second one is added beside the first (a merge patch sends the whole list).
    let mut list = now["spec"]["ephemeralContainers"].clone();
    list.as_array_mut().expect("list").push(debugger("second"));
    let (code, v) = patch(
        &s,
        &sub("web"),
        "application/merge-patch+json",
        &json!({"spec": {"ephemeralContainers": list}}),
    );
    assert_eq!(code, 200, "{v}");
    let names: Vec<&str> = v["spec"]["ephemeralContainers"]
        .as_array()
        .map(|l| l.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["debugger", "second"]);
}

#[test]
fn kubectl_debug_adds_one_and_rbac_authorizes_the_subresource() {
    let s = TestServer::start();
    make_pod(&s, "web");
    let ok = |args: &[&str]| {
        let (ok, out, err) = kubectl(&s, args);
        assert!(ok, "kubectl {args:?}: {out}{err}");
        out
    };
    ok(&[
        "create",
        "role",
        "pod-editor",
        "--verb=get,list,watch,patch,update",
        "--resource=pods",
    ]);
    ok(&[
        "create",
        "rolebinding",
        "dev",
        "--role=pod-editor",
        "--user=dev",
    ]);

    // Patching pods does not grant the subresource.
    let (done, out, err) = kubectl(
        &s,
        &[
            "--as=dev",
            "debug",
            "web",
            "--image=busybox",
            "--target=app",
            "--",
            "ps",
        ],
    );
    assert!(!done, "{out}{err}");
    assert!(
        err.contains("cannot patch resource \"pods/ephemeralcontainers\""),
        "{err}"
    );
    let can_i = || {
        let (_, can, _) = kubectl(
            &s,
            &[
                "auth",
                "can-i",
                "--as=dev",
                "patch",
                "pods",
                "--subresource=ephemeralcontainers",
            ],
        );
        can.trim().to_string()
    };
    assert_eq!(can_i(), "no");

    ok(&[
        "create",
        "role",
        "debugger",
        "--verb=patch",
        "--resource=pods/ephemeralcontainers",
    ]);
    ok(&[
        "create",
        "rolebinding",
        "dev-debug",
        "--role=debugger",
        "--user=dev",
    ]);
    assert_eq!(can_i(), "yes");
    let (done, out, err) = kubectl(
        &s,
        &[
            "--as=dev",
            "debug",
            "web",
            "--image=busybox",
            "--target=app",
            "--container=dbg",
            "--",
            "ps",
        ],
    );
    assert!(done, "{out}{err}");
    let ec = ok(&[
        "get", "pod", "web", "-o",
        "jsonpath={.spec.ephemeralContainers[0].name} {.spec.ephemeralContainers[0].targetContainerName} {.spec.ephemeralContainers[0].command}",
    ]);
    assert_eq!(ec, "dbg app [\"ps\"]");

    // kubectl debug refuses a name already taken, with the server's message.
    let (done, out, err) = kubectl(&s, &["debug", "web", "--image=busybox", "--container=app"]);
    assert!(!done, "{out}{err}");
    assert!(
        err.contains("spec.ephemeralContainers[1].name: Duplicate value: \"app\""),
        "{err}"
    );
}
