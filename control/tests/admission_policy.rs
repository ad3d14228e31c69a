//! ValidatingAdmissionPolicy as the Kubernetes documentation sets one up, with the real
//! kubectl: the documentation's replica limit (a binding by namespace label), the same
//! limit from a parameter ConfigMap with a message expression, Warn and Audit actions
//! (kubectl's warning, the audit log's annotation), match conditions, a policy that does
//! not compile refused with kube's message, and the policies' own objects exempt.

mod common;

use common::{eventually, kubectl, TestServer};
use serde_json::{json, Value};

fn apply(s: &TestServer, yaml: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, yaml).unwrap();
    kubectl(s, &["apply", "-f", file.to_str().unwrap()])
}

fn deployment(s: &TestServer, ns: &str, name: &str, replicas: i64, labels: Value) -> (u16, Value) {
    s.json(
        "POST",
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
    )
}

#[test]
fn validating_admission_policies_deny_warn_and_audit() {
    let s = TestServer::start();
    let (ok, out, err) = kubectl(&s, &["create", "namespace", "test"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl(&s, &["label", "namespace", "test", "environment=test"]);
    assert!(ok, "{out}{err}");

    // The documentation's first example.
    let (ok, out, err) = apply(
        &s,
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: "demo-policy.example.com"
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups:   ["apps"]
      apiVersions: ["v1"]
      operations:  ["CREATE", "UPDATE"]
      resources:   ["deployments"]
  matchConditions:
  - name: not-exempt
    expression: "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"
  validations:
    - expression: "object.spec.replicas <= 5"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: "demo-binding-test.example.com"
spec:
  policyName: "demo-policy.example.com"
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        environment: test
"#,
    );
    assert!(ok, "{out}{err}");
    let (ok, out, _) = kubectl(&s, &["get", "validatingadmissionpolicies"]);
    assert!(
        ok && out.contains("VALIDATIONS") && out.contains("<unset>"),
        "{out}"
    );

    let (code, v) = eventually(10, "the policy in force", || {
        let (code, v) = deployment(&s, "test", "big", 6, json!({}));
        (code != 201).then_some((code, v))
    });
    assert_eq!(code, 422, "{v}");
    assert_eq!(
        v["message"],
        "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
    );
    assert_eq!(v["reason"], "Invalid");
    // Within the limit, in a namespace the binding does not select, or excluded by the
    // match condition: allowed.
    assert_eq!(deployment(&s, "test", "small", 5, json!({})).0, 201);
    assert_eq!(deployment(&s, "default", "big", 6, json!({})).0, 201);
    assert_eq!(
        deployment(&s, "test", "exempt", 9, json!({"exempt": "yes"})).0,
        201
    );
    // An update past the limit is denied too (kubectl scale is an update of the scale
    // subresource, which the rule does not name; kubectl patch is one of the deployment).
    let (ok, _, err) = kubectl(
        &s,
        &[
            "-n",
            "test",
            "patch",
            "deployment",
            "small",
            "-p",
            r#"{"spec":{"replicas":7}}"#,
        ],
    );
    assert!(!ok, "denied");
    assert!(
        err.contains("denied request: failed expression: object.spec.replicas <= 5"),
        "{err}"
    );

    // Parameters from a ConfigMap, a message expression, Warn and Audit.
    let (ok, out, err) = apply(
        &s,
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: replica-limit, namespace: default}
data: {maxReplicas: "3"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: "replicalimit-policy.example.com"
spec:
  failurePolicy: Fail
  paramKind:
    apiVersion: v1
    kind: ConfigMap
  matchConstraints:
    resourceRules:
    - apiGroups:   ["apps"]
      apiVersions: ["v1"]
      operations:  ["CREATE", "UPDATE"]
      resources:   ["deployments"]
  validations:
    - expression: "object.spec.replicas <= int(params.data.maxReplicas)"
      messageExpression: "'object.spec.replicas must be no greater than ' + params.data.maxReplicas"
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: "replicalimit-binding-warn.example.com"
spec:
  policyName: "replicalimit-policy.example.com"
  validationActions: [Warn, Audit]
  paramRef:
    name: replica-limit
    namespace: default
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [default]}
"#,
    );
    assert!(ok, "{out}{err}");
    let (ok, out, _) = kubectl(&s, &["get", "validatingadmissionpolicybindings"]);
    assert!(
        ok && out.contains("replicalimit-policy.example.com")
            && out.contains("default/replica-limit"),
        "{out}"
    );
    let warning = "Warning: Validation failed for ValidatingAdmissionPolicy 'replicalimit-policy.example.com' with binding 'replicalimit-binding-warn.example.com': object.spec.replicas must be no greater than 3";
    let err = eventually(10, "the warning", || {
        let name = format!("warned{}", std::process::id() % 1000);
        let (ok, out, err) = kubectl(
            &s,
            &[
                "create",
                "deployment",
                &name,
                "--image=busybox",
                "--replicas=4",
            ],
        );
        assert!(ok, "warned, not denied: {out}{err}");
        if err.contains(warning) {
            return Some(err);
        }
        kubectl(&s, &["delete", "deployment", &name]);
        None
    });
    assert!(err.contains(warning), "{err}");
    let events: Vec<Value> = eventually(10, "audited", || {
        let events: Vec<Value> = std::fs::read_to_string(s.data_dir().join("audit/audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|e: &Value| {
                e["annotations"]
                    .get("validation.policy.admission.k8s.io/validation_failure")
                    .is_some()
            })
            .collect();
        (!events.is_empty()).then_some(events)
    });
    let failure: Value = serde_json::from_str(
        events[0]["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        failure,
        json!([{"message": "object.spec.replicas must be no greater than 3",
                "policy": "replicalimit-policy.example.com",
                "binding": "replicalimit-binding-warn.example.com",
                "expressionIndex": 0,
                "validationActions": ["Warn", "Audit"]}])
    );

    // The parameter gone: parameterNotFoundAction Deny (a denial without a reason is
    // Invalid, as kube answers it).
    let (ok, out, err) = kubectl(&s, &["delete", "configmap", "replica-limit"]);
    assert!(ok, "{out}{err}");
    let (code, v) = deployment(&s, "default", "unparameterised", 1, json!({}));
    assert_eq!(code, 422, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("ValidatingAdmissionPolicy 'replicalimit-policy.example.com' with binding 'replicalimit-binding-warn.example.com' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{v}"
    );

    // A policy whose expression does not compile is refused with kube's message.
    let (ok, _, err) = apply(
        &s,
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: broken.example.com}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "object.spec.replicas <= nope"
"#,
    );
    assert!(!ok);
    assert!(
        err.contains("spec.validations[0].expression: Invalid value: \"object.spec.replicas <= nope\": compilation failed: ERROR: <input>:1:25: undeclared reference to 'nope'"),
        "{err}"
    );

    // The policies' own kinds are never given to policies: a policy on everything still
    // lets its binding be deleted.
    let (ok, out, err) = apply(
        &s,
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: nothing.example.com}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*"]}
  validations:
  - expression: "false"
    message: nothing today
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: nothing-binding.example.com}
spec:
  policyName: nothing.example.com
  validationActions: [Deny]
"#,
    );
    assert!(ok, "{out}{err}");
    let err = eventually(10, "nothing allowed", || {
        let (ok, _, err) = kubectl(&s, &["create", "configmap", "later"]);
        (!ok).then_some(err)
    });
    assert!(err.contains("nothing today"), "{err}");
    let (ok, out, err) = kubectl(
        &s,
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "nothing-binding.example.com",
        ],
    );
    assert!(ok, "{out}{err}");
    eventually(10, "allowed again", || {
        kubectl(&s, &["create", "configmap", "later"])
            .0
            .then_some(())
    });
}
