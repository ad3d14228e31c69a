//! Custom resources through the real kubectl: a CustomResourceDefinition applied, established
//! (NamesAccepted, Established, acceptedNames, storedVersions), served at once in discovery
//! (`kubectl api-resources`, short names, categories for `kubectl get all`), and its objects
//! created, listed with their printer columns, read as JSON in kube-apiserver's shape
//! (sorted members, empty values kept), patched, updated through `status`, pruned, defaulted
//! and refused by the schema with kube's messages, watched, deleted; a definition whose schema
//! is not structural is refused; deleting the definition deletes its objects first (the
//! cleanup finalizer) and stops serving it; a restarted server serves its stored objects.

mod common;

use common::{eventually, kubectl, TestServer};
use serde_json::{json, Value};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Spec
      type: string
      jsonPath: .spec.cronSpec
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [cronSpec]
            x-kubernetes-validations:
            - rule: "!has(self.image) || self.image.startsWith('my-')"
              message: image must come from the site registry
            - rule: "!has(oldSelf.image) || self.image == oldSelf.image"
              messageExpression: "'image is immutable, was ' + oldSelf.image"
              reason: FieldValueForbidden
              fieldPath: .image
            properties:
              cronSpec:
                type: string
                pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'
              image:
                type: string
              replicas:
                type: integer
                minimum: 1
                maximum: 10
                default: 1
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            properties:
              ready:
                type: boolean
"#;

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

fn apply(s: &TestServer, yaml: &str) -> (bool, String, String) {
    apply_with(s, yaml, &[])
}

fn apply_with(s: &TestServer, yaml: &str, flags: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut args = vec!["apply", "-f", file.to_str().unwrap()];
    args.extend_from_slice(flags);
    kubectl(s, &args)
}

fn established(s: &TestServer) {
    eventually(20, "the definition is established", || {
        let (code, v) = s.http(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.stable.example.com",
            None,
        );
        let conds = v["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let is_true = |t: &str| {
            conds
                .iter()
                .any(|c| c["type"] == t && c["status"] == "True")
        };
        (code == 200 && is_true("Established") && is_true("NamesAccepted")).then_some(())
    });
    eventually(20, "the resource is served", || {
        let (code, _) = s.http("GET", "/apis/stable.example.com/v1/crontabs", None);
        (code == 200).then_some(())
    });
}

#[test]
fn custom_resources_end_to_end() {
    let mut s = TestServer::start();
    let (applied, out, err) = apply(&s, CRD);
    assert!(applied, "{out}{err}");
    established(&s);

    // The definition as stored: defaults, finalizer, status.
    let (_, crd) = s.http(
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.stable.example.com",
        None,
    );
    assert_eq!(crd["spec"]["names"]["listKind"], "CronTabList");
    assert_eq!(crd["spec"]["conversion"]["strategy"], "None");
    assert_eq!(
        crd["metadata"]["finalizers"],
        json!(["customresourcecleanup.apiextensions.k8s.io"])
    );
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "CronTab");

    // Discovery: kubectl finds it by plural, short name and category.
    let resources = ok(&s, &["api-resources", "--api-group=stable.example.com"]);
    assert!(
        resources.contains("crontabs") && resources.contains("ct") && resources.contains("CronTab"),
        "{resources}"
    );

    // Unknown fields: refused under kubectl's strict field validation, pruned without it.
    let cron = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: my-cron\nspec:\n  cronSpec: '* * * * */5'\n  image: my-image\n  unknown: dropped\n  extra: {kept: {deep: [1, 2]}, empty: []}\n";
    let (created, _, err) = apply(&s, cron);
    assert!(!created);
    assert!(
        err.contains(r#"CronTab in version "v1" cannot be handled as a CronTab: strict decoding error: unknown field "spec.unknown""#),
        "{err}"
    );
    let (created, out, err) = apply_with(&s, cron, &["--validate=false"]);
    assert!(created, "{out}{err}");
    let (code, obj) = s.http(
        "GET",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/my-cron",
        None,
    );
    assert_eq!(code, 200, "{obj}");
    assert_eq!(obj["spec"]["replicas"], 1, "defaulted: {obj}");
    assert!(obj["spec"].get("unknown").is_none(), "pruned: {obj}");
    assert_eq!(
        obj["spec"]["extra"],
        json!({"kept": {"deep": [1, 2]}, "empty": []})
    );
    assert_eq!(obj["metadata"]["generation"], 1);
    // kube-apiserver's JSON of a custom object: members sorted at every level.
    let (_, raw) = raw_get(
        &s,
        "/apis/stable.example.com/v1/namespaces/default/crontabs/my-cron",
    );
    let top: Vec<&str> = ["\"apiVersion\"", "\"kind\"", "\"metadata\"", "\"spec\""]
        .into_iter()
        .collect();
    let mut at = 0;
    for key in top {
        let found = raw[at..]
            .find(key)
            .unwrap_or_else(|| panic!("{key} in order in {raw}"));
        at += found;
    }
    assert!(raw.contains(r#""spec":{"cronSpec":"* * * * */5","extra":{"empty":[],"kept":{"deep":[1,2]}},"image":"my-image","replicas":1}"#), "{raw}");

    // OpenAPI v3 for the custom kind: kubectl explain reads its schema.
    let explained = ok(&s, &["explain", "crontab.spec"]);
    assert!(
        explained.contains("KIND:       CronTab")
            && explained.contains("cronSpec\t<string> -required-")
            && explained.contains("replicas\t<integer>"),
        "{explained}"
    );

    // And in the swagger 2.0 document, beside the built-in kinds.
    let (code, v2) = s.http("GET", "/openapi/v2", None);
    assert_eq!(code, 200);
    let def = &v2["definitions"]["com.example.stable.v1.CronTab"];
    assert_eq!(
        def["properties"]["spec"]["properties"]["replicas"]["type"], "integer",
        "{def}"
    );
    assert_eq!(
        def["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(v2["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
    let item = &v2["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"];
    assert_eq!(
        item["get"]["responses"]["200"]["schema"]["$ref"],
        "#/definitions/com.example.stable.v1.CronTab",
        "{item}"
    );

    // Tables: the printer columns, by plural, short name and category.
    let table = ok(&s, &["get", "ct"]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("SPEC")
            && table.contains("REPLICAS")
            && table.contains("my-cron")
            && table.contains("* * * * */5"),
        "{table}"
    );
    let all = ok(&s, &["get", "all"]);
    assert!(all.contains("crontab.stable.example.com/my-cron"), "{all}");

    // Validation with kube's messages; nothing stored.
    let (refused, _, err) = apply(
        &s,
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: bad\nspec:\n  cronSpec: '* * * *'\n  replicas: 15\n",
    );
    assert!(!refused);
    assert!(
        err.contains(r#"The CronTab "bad" is invalid"#)
            && err.contains(r#"spec.replicas: Invalid value: 15: spec.replicas in body should be less than or equal to 10"#)
            && err.contains(r#"spec.cronSpec: Invalid value: "* * * *": spec.cronSpec in body should match"#),
        "{err}"
    );
    let (code, _) = s.http(
        "GET",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/bad",
        None,
    );
    assert_eq!(code, 404);

    // Patch: generation moves with the spec; merge patches validate too.
    ok(
        &s,
        &[
            "patch",
            "crontab",
            "my-cron",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
    );
    let (_, obj) = s.http(
        "GET",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/my-cron",
        None,
    );
    assert_eq!(obj["spec"]["replicas"], 3);
    assert_eq!(obj["metadata"]["generation"], 2);
    let (patched, _, err) = kubectl(
        &s,
        &[
            "patch",
            "ct",
            "my-cron",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":"x"}}"#,
        ],
    );
    assert!(
        !patched && err.contains("spec.replicas in body must be of type integer"),
        "{err}"
    );
    // CEL rules (x-kubernetes-validations), a transition rule among them.
    let (patched, _, err) = kubectl(
        &s,
        &[
            "patch",
            "ct",
            "my-cron",
            "--type=merge",
            "-p",
            r#"{"spec":{"image":"other"}}"#,
        ],
    );
    assert!(!patched);
    assert!(
        err.contains(r#"spec: Invalid value: "object": image must come from the site registry"#),
        "{err}"
    );
    let (patched, _, err) = kubectl(
        &s,
        &[
            "patch",
            "ct",
            "my-cron",
            "--type=merge",
            "-p",
            r#"{"spec":{"image":"my-other"}}"#,
        ],
    );
    assert!(!patched);
    assert!(
        err.contains("spec.image: Forbidden: image is immutable, was my-image"),
        "{err}"
    );

    // The status subresource: main writes keep the status, status writes keep the rest.
    let out = ok(
        &s,
        &[
            "patch",
            "ct",
            "my-cron",
            "--subresource=status",
            "--type=merge",
            "-o",
            "json",
            "-p",
            r#"{"status":{"ready":true},"spec":{"replicas":9}}"#,
        ],
    );
    let st: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(st["status"]["ready"], true);
    assert_eq!(st["spec"]["replicas"], 3, "a status write keeps the spec");
    assert_eq!(st["metadata"]["generation"], 2);
    ok(
        &s,
        &[
            "patch",
            "ct",
            "my-cron",
            "--type=merge",
            "-p",
            r#"{"status":{"ready":false}}"#,
        ],
    );
    let (_, obj) = s.http(
        "GET",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/my-cron",
        None,
    );
    assert_eq!(
        obj["status"]["ready"], true,
        "a main write keeps the status: {obj}"
    );

    // Server-side apply and labels selection.
    ok(&s, &["label", "ct", "my-cron", "team=a"]);
    let listed = ok(&s, &["get", "crontabs", "-l", "team=a", "-o", "name"]);
    assert_eq!(listed.trim(), "crontab.stable.example.com/my-cron");

    // A schema that is not structural is refused, and nothing is stored.
    let (refused, _, err) = apply(
        &s,
        &CRD.replace("crontabs.stable.example.com", "widgets.stable.example.com")
            .replace("plural: crontabs", "plural: widgets")
            .replace("singular: crontab", "singular: widget")
            .replace("kind: CronTab", "kind: Widget")
            .replace("shortNames: [ct]", "shortNames: [wd]")
            .replace(
                "              image:\n                type: string\n",
                "              image:\n                description: no type\n",
            ),
    );
    assert!(!refused);
    assert!(
        err.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[image].type: Required value"),
        "{err}"
    );

    // A restarted server serves what it stored.
    s.kill_and_restart();
    established(&s);
    let (code, obj) = s.http(
        "GET",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/my-cron",
        None,
    );
    assert_eq!(code, 200, "{obj}");
    assert_eq!(obj["spec"]["replicas"], 3);

    // Deleting the definition deletes its objects, then the definition, then the routes.
    // An object held by a finalizer holds the definition, which meanwhile takes no new
    // objects (405, as kube-apiserver answers).
    let (held, out, err) = apply(
        &s,
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\nspec:\n  cronSpec: '* * * * *'\n",
    );
    assert!(held, "{out}{err}");
    ok(
        &s,
        &[
            "delete",
            "crd",
            "crontabs.stable.example.com",
            "--wait=false",
        ],
    );
    eventually(
        20,
        "creates are refused while the definition terminates",
        || {
            let (code, v) = s.json(
                "POST",
                "/apis/stable.example.com/v1/namespaces/default/crontabs",
                &json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                    "metadata": {"name": "late"}, "spec": {"cronSpec": "* * * * *"}}),
            );
            (code == 405).then_some(v)
        },
    );
    ok(
        &s,
        &[
            "patch",
            "ct",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    ok(
        &s,
        &[
            "wait",
            "--for=delete",
            "crd/crontabs.stable.example.com",
            "--timeout=30s",
        ],
    );
    eventually(20, "the resource is no longer served", || {
        let (code, _) = s.http("GET", "/apis/stable.example.com/v1/crontabs", None);
        (code == 404).then_some(())
    });
    let (code, _) = s.http(
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.stable.example.com",
        None,
    );
    assert_eq!(code, 404);
    // A definition made again starts empty.
    let (applied, out, err) = apply(&s, CRD);
    assert!(applied, "{out}{err}");
    established(&s);
    let listed = ok(&s, &["get", "crontabs", "-A", "-o", "name"]);
    assert_eq!(listed.trim(), "", "{listed}");
}

/// The body of a GET as the server wrote it.
fn raw_get(s: &TestServer, path: &str) -> (u16, String) {
    let (code, v) = s.http("GET", path, None);
    let _: &Value = &v;
    let out = std::process::Command::new("kubectl")
        .args(["get", "--raw", path])
        .env("KUBECONFIG", s.kubeconfig())
        .output()
        .expect("kubectl");
    (code, String::from_utf8_lossy(&out.stdout).into_owned())
}

const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.toys.example.com
spec:
  group: toys.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1beta1
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.size, labelSelectorPath: .status.selector}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {size: {type: integer}, selector: {type: string}}}
    selectableFields:
    - jsonPath: .spec.size
"#;

/// A second version served with conversion None, the scale subresource (`kubectl scale`),
/// garbage collection through ownerReferences and namespace deletion of custom objects.
#[test]
fn versions_scale_owners_and_namespaces() {
    let s = TestServer::start();
    let (applied, out, err) = apply(&s, WIDGETS);
    assert!(applied, "{out}{err}");
    eventually(20, "widgets are served", || {
        let (code, _) = s.http("GET", "/apis/toys.example.com/v1beta1/widgets", None);
        (code == 200).then_some(())
    });
    ok(&s, &["create", "namespace", "toys"]);
    // Made at v1beta1, stored at v1, read at either.
    let (created, out, err) = apply(
        &s,
        "apiVersion: toys.example.com/v1beta1\nkind: Widget\nmetadata:\n  name: w\n  namespace: toys\nspec:\n  size: 2\n",
    );
    assert!(created, "{out}{err}");
    let (_, v1) = s.http(
        "GET",
        "/apis/toys.example.com/v1/namespaces/toys/widgets/w",
        None,
    );
    assert_eq!(v1["apiVersion"], "toys.example.com/v1", "{v1}");
    let (_, beta) = s.http(
        "GET",
        "/apis/toys.example.com/v1beta1/namespaces/toys/widgets/w",
        None,
    );
    assert_eq!(beta["apiVersion"], "toys.example.com/v1beta1", "{beta}");
    let (_, list) = s.http(
        "GET",
        "/apis/toys.example.com/v1beta1/namespaces/toys/widgets",
        None,
    );
    assert_eq!(list["apiVersion"], "toys.example.com/v1beta1", "{list}");
    assert_eq!(
        list["items"][0]["apiVersion"], "toys.example.com/v1beta1",
        "{list}"
    );

    // Watches see custom objects (and only those of their resource).
    let (code, events) = s.http(
        "GET",
        "/apis/toys.example.com/v1/namespaces/toys/widgets?watch=1&resourceVersion=0&timeoutSeconds=1",
        None,
    );
    assert_eq!(code, 200, "{events}");
    let (_, raw) = raw_get(&s, "/apis/toys.example.com/v1beta1/namespaces/toys/widgets?watch=1&resourceVersion=0&timeoutSeconds=1");
    let first: Value = serde_json::from_str(raw.lines().next().unwrap_or("{}")).unwrap();
    assert_eq!(first["type"], "ADDED", "{raw}");
    assert_eq!(first["object"]["metadata"]["name"], "w", "{raw}");
    assert_eq!(
        first["object"]["apiVersion"], "toys.example.com/v1beta1",
        "{raw}"
    );

    // kubectl scale through the scale subresource, at the definition's paths.
    ok(&s, &["scale", "-n", "toys", "widget/w", "--replicas=5"]);
    let (_, obj) = s.http(
        "GET",
        "/apis/toys.example.com/v1/namespaces/toys/widgets/w",
        None,
    );
    assert_eq!(obj["spec"]["size"], 5, "{obj}");
    // selectableFields are field selectors.
    let (made, out, err) = apply(
        &s,
        "apiVersion: toys.example.com/v1\nkind: Widget\nmetadata:\n  name: small\n  namespace: toys\nspec:\n  size: 1\n",
    );
    assert!(made, "{out}{err}");
    let picked = ok(
        &s,
        &[
            "get",
            "widgets",
            "-n",
            "toys",
            "--field-selector",
            "spec.size=5",
            "-o",
            "name",
        ],
    );
    assert_eq!(picked.trim(), "widget.toys.example.com/w");
    let (refused, _, err) = kubectl(
        &s,
        &[
            "get",
            "widgets",
            "-n",
            "toys",
            "--field-selector",
            "spec.other=1",
        ],
    );
    assert!(
        !refused && err.contains("field label not supported: spec.other"),
        "{err}"
    );
    let (code, scale) = s.http(
        "GET",
        "/apis/toys.example.com/v1/namespaces/toys/widgets/w/scale",
        None,
    );
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 5);

    // Owned by a ConfigMap: deleted with it.
    ok(&s, &["create", "configmap", "-n", "toys", "owner"]);
    let (_, cm) = s.http("GET", "/api/v1/namespaces/toys/configmaps/owner", None);
    let uid = cm["metadata"]["uid"].as_str().unwrap().to_string();
    let owned = format!(
        "apiVersion: toys.example.com/v1\nkind: Widget\nmetadata:\n  name: owned\n  namespace: toys\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}\nspec:\n  size: 1\n"
    );
    let (created, out, err) = apply(&s, &owned);
    assert!(created, "{out}{err}");
    // And a ConfigMap owned by a widget: deleted with the widget.
    let (_, w) = s.http(
        "GET",
        "/apis/toys.example.com/v1/namespaces/toys/widgets/w",
        None,
    );
    let wuid = w["metadata"]["uid"].as_str().unwrap().to_string();
    let (code, made) = s.json(
        "POST",
        "/api/v1/namespaces/toys/configmaps",
        &json!({"metadata": {"name": "child", "ownerReferences": [
            {"apiVersion": "toys.example.com/v1", "kind": "Widget", "name": "w", "uid": wuid}]}}),
    );
    assert_eq!(code, 201, "{made}");
    ok(&s, &["delete", "configmap", "-n", "toys", "owner"]);
    eventually(20, "the owned widget is collected", || {
        let (code, _) = s.http(
            "GET",
            "/apis/toys.example.com/v1/namespaces/toys/widgets/owned",
            None,
        );
        (code == 404).then_some(())
    });
    ok(&s, &["delete", "widget", "-n", "toys", "w"]);
    eventually(20, "the widget's ConfigMap is collected", || {
        let (code, _) = s.http("GET", "/api/v1/namespaces/toys/configmaps/child", None);
        (code == 404).then_some(())
    });

    // A namespace's deletion takes its custom objects with it.
    let (created, out, err) = apply(
        &s,
        "apiVersion: toys.example.com/v1\nkind: Widget\nmetadata:\n  name: last\n  namespace: toys\n",
    );
    assert!(created, "{out}{err}");
    ok(
        &s,
        &[
            "delete",
            "namespace",
            "toys",
            "--wait=true",
            "--timeout=60s",
        ],
    );
    let (code, _) = s.http(
        "GET",
        "/apis/toys.example.com/v1/namespaces/toys/widgets/last",
        None,
    );
    assert_eq!(code, 404);
}

/// Server-side apply by two managers follows the schema's list and map types, as kube's
/// structured merge does: a `map` list merges element by element (two keys here), a `set`
/// by value, an untyped list and a `x-kubernetes-map-type: atomic` map are owned whole
/// (a second manager's change is a conflict); managedFields name the keyed elements.
#[test]
fn server_side_apply_follows_the_schema_list_types() {
    let s = TestServer::start();
    let crd = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gates.net.example.com}
spec:
  group: net.example.com
  scope: Namespaced
  names: {plural: gates, singular: gate, kind: Gate}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              listeners:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name, protocol]
                items:
                  type: object
                  required: [name, protocol]
                  properties:
                    name: {type: string}
                    protocol: {type: string}
                    port: {type: integer}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              hosts:
                type: array
                items: {type: string}
              selector:
                type: object
                x-kubernetes-map-type: atomic
                additionalProperties: {type: string}
"#;
    let (ok_, out, err) = apply(&s, crd);
    assert!(ok_, "{out}{err}");
    eventually(20, "gates are served", || {
        (s.http("GET", "/apis/net.example.com/v1/gates", None).0 == 200).then_some(())
    });
    let path = "/apis/net.example.com/v1/namespaces/default/gates/g";
    let apply_as = |manager: &str, spec: Value| {
        let body = json!({"apiVersion": "net.example.com/v1", "kind": "Gate",
                          "metadata": {"name": "g"}, "spec": spec});
        s.http(
            "PATCH",
            &format!("{path}?fieldManager={manager}"),
            Some((
                "application/apply-patch+yaml",
                serde_json::to_vec(&body).unwrap(),
            )),
        )
    };
    let (code, v) = apply_as(
        "a",
        json!({"listeners": [{"name": "web", "protocol": "TCP", "port": 80}],
               "tags": ["x"], "hosts": ["a.example"], "selector": {"app": "a"}}),
    );
    assert_eq!(code, 201, "{v}");
    let (code, v) = apply_as(
        "b",
        json!({"listeners": [{"name": "web", "protocol": "UDP", "port": 53}], "tags": ["y"]}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["spec"]["listeners"],
        json!([{"name": "web", "port": 80, "protocol": "TCP"},
               {"name": "web", "port": 53, "protocol": "UDP"}]),
        "merged by both keys: {v}"
    );
    assert_eq!(v["spec"]["tags"], json!(["x", "y"]));
    let managed = v["metadata"]["managedFields"].as_array().unwrap();
    let b = managed.iter().find(|m| m["manager"] == "b").unwrap();
    let listeners = &b["fieldsV1"]["f:spec"]["f:listeners"];
    assert!(
        listeners[r#"k:{"name":"web","protocol":"UDP"}"#].is_object(),
        "{b}"
    );
    assert!(
        listeners
            .get(r#"k:{"name":"web","protocol":"TCP"}"#)
            .is_none(),
        "{b}"
    );

    // An untyped list and an atomic map are owned whole by their manager.
    for (spec, field) in [
        (json!({"hosts": ["b.example"]}), ".spec.hosts"),
        (json!({"selector": {"tier": "b"}}), ".spec.selector"),
    ] {
        let (code, v) = apply_as("b", spec);
        assert_eq!(code, 409, "{v}");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.contains("conflict with \"a\"") && message.contains(field),
            "{message}"
        );
    }
    // Changing a keyed element another manager owns conflicts on its field only.
    let (code, v) = apply_as(
        "b",
        json!({"listeners": [{"name": "web", "protocol": "UDP", "port": 53},
                             {"name": "web", "protocol": "TCP", "port": 8080}]}),
    );
    assert_eq!(code, 409, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains(r#".spec.listeners[name="web",protocol="TCP"].port"#),
        "{v}"
    );
    // A manager that stops applying an element gives it up; the other's stays.
    let (code, v) = apply_as(
        "a",
        json!({"tags": ["x"], "hosts": ["a.example"], "selector": {"app": "a"}}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["spec"]["listeners"],
        json!([{"name": "web", "port": 53, "protocol": "UDP"}]),
        "{v}"
    );
    assert_eq!(v["spec"]["tags"], json!(["x", "y"]));

    // No strategic merge patch for custom resources, as kube-apiserver.
    let (code, v) = s.http(
        "PATCH",
        path,
        Some((
            "application/strategic-merge-patch+json",
            br#"{"spec":{"tags":["z"]}}"#.to_vec(),
        )),
    );
    assert_eq!(code, 415, "{v}");
    assert_eq!(v["message"], "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml");
}
