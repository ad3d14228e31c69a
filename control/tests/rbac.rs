//! Users and RBAC with the machine's real `kubectl`: a user made by `skiff user create`, a
//! token-file user and a node certificate, against the default roles and bindings.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{kubectl, skiff_bin, TestServer};
use serde_json::json;

/// Runs kubectl with `kubeconfig`; (success, stdout, stderr).
fn kubectl_as(s: &TestServer, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", s.data_dir())
        .output()
        .expect("kubectl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(success, "kubectl {args:?} failed:\n{out}\n{err}");
    out
}

/// `skiff user create NAME --group ...`: the kubeconfig path.
fn create_user(s: &TestServer, name: &str, groups: &[&str]) -> PathBuf {
    let path = s.data_dir().join(format!("{name}.kubeconfig"));
    let mut cmd = Command::new(skiff_bin());
    cmd.args(["user", "create", name, "-o"])
        .arg(&path)
        .env("KUBECONFIG", s.kubeconfig());
    for g in groups {
        cmd.args(["--group", g]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    path
}

/// `kubectl auth can-i` as `kc`, waiting up to 5 s for `want` (bindings reach the
/// authorizer through its watch, a moment after they are stored).
fn can_i(s: &TestServer, kc: &Path, args: &[&str], want: &str) {
    let mut full = vec!["auth", "can-i"];
    full.extend_from_slice(args);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, out, _) = kubectl_as(s, kc, &full);
        if out.trim() == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "can-i {args:?}: want {want}, got {out}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_new_user_is_denied_until_bound_then_sees_only_what_the_binding_grants() {
    let s = TestServer::start();
    ok(&s, &["create", "namespace", "team"]);
    let alice = create_user(&s, "alice", &["devs"]);

    let (success, out, _) = kubectl_as(&s, &alice, &["auth", "whoami", "-o", "json"]);
    assert!(success, "{out}");
    let who: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(who["kind"], "SelfSubjectReview");
    assert_eq!(who["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        json!(["devs", "system:authenticated"])
    );

    let (success, _, err) = kubectl_as(&s, &alice, &["get", "pods", "-n", "team"]);
    assert!(!success);
    assert!(
        err.contains("Error from server (Forbidden): pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\""),
        "{err}"
    );
    can_i(&s, &alice, &["list", "pods", "-n", "team"], "no");

    let out = ok(
        &s,
        &[
            "create",
            "rolebinding",
            "alice-view",
            "--clusterrole=view",
            "--user=alice",
            "-n",
            "team",
        ],
    );
    assert!(
        out.contains("rolebinding.rbac.authorization.k8s.io/alice-view created"),
        "{out}"
    );
    can_i(&s, &alice, &["list", "pods", "-n", "team"], "yes");
    can_i(&s, &alice, &["watch", "pods", "-n", "team"], "yes");
    can_i(
        &s,
        &alice,
        &["get", "pods", "--subresource=log", "-n", "team"],
        "yes",
    );
    can_i(&s, &alice, &["list", "pods", "-n", "default"], "no");
    can_i(&s, &alice, &["delete", "pods", "-n", "team"], "no");
    can_i(&s, &alice, &["list", "secrets", "-n", "team"], "no");
    can_i(
        &s,
        &alice,
        &["create", "pods", "--subresource=exec", "-n", "team"],
        "no",
    );

    let (success, out, err) = kubectl_as(&s, &alice, &["get", "pods", "-n", "team"]);
    assert!(success, "{out}{err}");
    let (success, _, err) = kubectl_as(&s, &alice, &["get", "pods", "-n", "default"]);
    assert!(
        !success && err.contains("in the namespace \"default\""),
        "{err}"
    );
    let (success, _, err) = kubectl_as(&s, &alice, &["get", "nodes"]);
    assert!(
        !success && err.contains("nodes is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"),
        "{err}"
    );
    let (success, _, err) = kubectl_as(&s, &alice, &["delete", "pod", "web", "-n", "team"]);
    assert!(
        !success && err.contains("pods \"web\" is forbidden: User \"alice\" cannot delete resource \"pods\" in API group \"\" in the namespace \"team\""),
        "{err}"
    );

    let (success, out, err) = kubectl_as(&s, &alice, &["auth", "can-i", "--list", "-n", "team"]);
    assert!(success, "{err}");
    let pods = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("pods"))
        .unwrap_or_else(|| panic!("no pods rule in\n{out}"));
    assert!(pods.contains("[get list watch]"), "{pods}");
    assert!(
        out.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{out}"
    );
    let (_, out, _) = kubectl_as(&s, &alice, &["auth", "can-i", "--list", "-n", "default"]);
    assert!(
        !out.lines()
            .any(|l| l.split_whitespace().next() == Some("pods")),
        "{out}"
    );

    // A binding to the user's group works the same way, cluster-wide.
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "devs-view",
            "--clusterrole=view",
            "--group=devs",
        ],
    );
    can_i(&s, &alice, &["list", "pods", "-n", "default"], "yes");
    can_i(&s, &alice, &["list", "pods", "--all-namespaces"], "yes");
    ok(&s, &["delete", "clusterrolebinding", "devs-view"]);
    can_i(&s, &alice, &["list", "pods", "-n", "default"], "no");
}

#[test]
fn generators_tables_escalation_and_aggregation() {
    let s = TestServer::start();
    ok(&s, &["create", "namespace", "team"]);
    for (args, created) in [
        (
            vec![
                "create",
                "role",
                "pod-reader",
                "--verb=get,list",
                "--resource=pods",
                "-n",
                "team",
            ],
            "role.rbac.authorization.k8s.io/pod-reader created",
        ),
        (
            vec![
                "create",
                "rolebinding",
                "rb",
                "--role=pod-reader",
                "--user=bob",
                "--serviceaccount=team:robot",
                "-n",
                "team",
            ],
            "rolebinding.rbac.authorization.k8s.io/rb created",
        ),
        (
            vec![
                "create",
                "clusterrole",
                "deploy-reader",
                "--verb=get",
                "--resource=deployments.apps",
            ],
            "clusterrole.rbac.authorization.k8s.io/deploy-reader created",
        ),
        (
            vec![
                "create",
                "clusterrolebinding",
                "crb",
                "--clusterrole=deploy-reader",
                "--group=devs",
            ],
            "clusterrolebinding.rbac.authorization.k8s.io/crb created",
        ),
    ] {
        let out = ok(&s, &args);
        assert!(out.contains(created), "{out}");
    }
    let table = ok(
        &s,
        &["get", "rolebinding", "rb", "-n", "team", "-o", "wide"],
    );
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
        "{table}"
    );
    assert!(
        table.contains("Role/pod-reader") && table.contains("team/robot"),
        "{table}"
    );
    let table = ok(&s, &["get", "clusterroles"]);
    assert!(
        table.starts_with("NAME") && table.contains("CREATED AT"),
        "{table}"
    );
    for name in ["cluster-admin", "admin", "edit", "view", "system:discovery"] {
        assert!(table.contains(name), "{table}");
    }
    // A ClusterRole labelled for aggregation into view shows up in view (and so in edit
    // and admin).
    let widget = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "widget-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}],
    });
    let (code, body) = s.json(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &widget,
    );
    assert_eq!(code, 201, "{body}");
    let deadline = Instant::now() + Duration::from_secs(5);
    for role in ["view", "edit", "admin"] {
        loop {
            let out = ok(&s, &["get", "clusterrole", role, "-o", "json"]);
            if out.contains("widgets") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{role} did not aggregate widgets:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // Escalation: carol administers `team` (admin, through a RoleBinding) and may hand out
    // what she holds there, not more.
    let carol = create_user(&s, "carol", &[]);
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "carol-admin",
            "--clusterrole=admin",
            "--user=carol",
            "-n",
            "team",
        ],
    );
    can_i(&s, &carol, &["create", "rolebindings", "-n", "team"], "yes");
    let (success, out, err) = kubectl_as(
        &s,
        &carol,
        &[
            "create",
            "rolebinding",
            "dave-view",
            "--clusterrole=view",
            "--user=dave",
            "-n",
            "team",
        ],
    );
    assert!(success, "{out}{err}");
    let (success, out, err) = kubectl_as(
        &s,
        &carol,
        &[
            "create",
            "role",
            "pods-rw",
            "--verb=get,delete",
            "--resource=pods",
            "-n",
            "team",
        ],
    );
    assert!(success, "{out}{err}");
    let (success, _, err) = kubectl_as(
        &s,
        &carol,
        &[
            "create",
            "role",
            "nodes",
            "--verb=get",
            "--resource=nodes",
            "-n",
            "team",
        ],
    );
    assert!(
        !success && err.contains("is attempting to grant RBAC permissions not currently held"),
        "{err}"
    );
    let (success, _, err) = kubectl_as(
        &s,
        &carol,
        &[
            "create",
            "rolebinding",
            "dave-admin",
            "--clusterrole=cluster-admin",
            "--user=dave",
            "-n",
            "team",
        ],
    );
    assert!(
        !success && err.contains("is attempting to grant RBAC permissions not currently held"),
        "{err}"
    );
    let (success, _, err) = kubectl_as(
        &s,
        &carol,
        &[
            "create",
            "clusterrolebinding",
            "x",
            "--clusterrole=view",
            "--user=dave",
        ],
    );
    assert!(
        !success && err.contains("cannot create resource \"clusterrolebindings\""),
        "{err}"
    );

    // A user who may create ClusterRoles still cannot grant more than they hold, nor gather
    // other roles' rules by aggregation.
    ok(
        &s,
        &[
            "create",
            "clusterrole",
            "role-maker",
            "--verb=create,get",
            "--resource=clusterroles.rbac.authorization.k8s.io,pods",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "frank-maker",
            "--clusterrole=role-maker",
            "--user=frank",
        ],
    );
    let frank = create_user(&s, "frank", &[]);
    can_i(&s, &frank, &["create", "clusterroles"], "yes");
    let (success, out, err) = kubectl_as(
        &s,
        &frank,
        &[
            "create",
            "clusterrole",
            "pod-get",
            "--verb=get",
            "--resource=pods",
        ],
    );
    assert!(success, "{out}{err}");
    let (success, _, err) = kubectl_as(
        &s,
        &frank,
        &[
            "create",
            "clusterrole",
            "node-del",
            "--verb=delete",
            "--resource=nodes",
        ],
    );
    assert!(
        !success && err.contains("clusterroles.rbac.authorization.k8s.io \"node-del\" is forbidden: user \"frank\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"delete\"]}"),
        "{err}"
    );
    let (success, _, err) = kubectl_as(
        &s,
        &frank,
        &[
            "create",
            "clusterrole",
            "gather",
            "--aggregation-rule=rbac.authorization.k8s.io/aggregate-to-admin=true",
        ],
    );
    assert!(
        !success && err.contains("must have cluster-admin privileges to use the aggregationRule"),
        "{err}"
    );

    // Validation: roleRef cannot change, rules need verbs.
    let (code, body) = s.json(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles",
        &json!({"metadata": {"name": "empty"}, "rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("rules[0].verbs"),
        "{body}"
    );
    let mut rb: serde_json::Value = serde_json::from_str(&ok(
        &s,
        &["get", "rolebinding", "rb", "-n", "team", "-o", "json"],
    ))
    .unwrap();
    rb["roleRef"]["name"] = json!("other");
    let (code, body) = s.json(
        "PUT",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/rb",
        &rb,
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cannot change roleRef"),
        "{body}"
    );
}

#[test]
fn reviews_token_file_users_and_node_identities() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "s3cr3t-token-of-bob,bob,1001,\"ops,devs\"\n").unwrap();
    let s = TestServer::start_with(&["--token-auth-file", tokens.to_str().unwrap()]);

    // SubjectAccessReview (admin asks about someone else) and TokenReview.
    let (code, body) = s.json(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": "bob", "groups": ["ops"], "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "default"}}}),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["allowed"], false, "{body}");
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "ops-view",
            "--clusterrole=view",
            "--group=ops",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, body) = s.json(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &json!({"spec": {"user": "bob", "groups": ["ops"], "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "default"}}}),
        );
        if body["status"]["allowed"] == true {
            assert_eq!(
                body["status"]["reason"],
                "RBAC: allowed by ClusterRoleBinding \"ops-view\" of ClusterRole \"view\" to Group \"ops\""
            );
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, body) = s.json(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"spec": {"token": "s3cr3t-token-of-bob"}}),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["authenticated"], true);
    assert_eq!(body["status"]["user"]["username"], "bob");
    assert_eq!(body["status"]["user"]["uid"], "1001");
    let (_, body) = s.json(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"spec": {"token": "nope"}}),
    );
    assert_eq!(body["status"]["authenticated"], false, "{body}");

    // The token-file user with kubectl.
    let bob = dir.path().join("bob.kubeconfig");
    let admin = std::fs::read_to_string(s.kubeconfig()).unwrap();
    let mut kc = api::kubeconfig::Kubeconfig::parse(&admin).unwrap();
    kc.users[0].user.token = Some("s3cr3t-token-of-bob".into());
    std::fs::write(&bob, kc.to_yaml()).unwrap();
    let (success, out, err) = kubectl_as(&s, &bob, &["auth", "whoami"]);
    assert!(
        success && out.contains("bob") && out.contains("[ops devs system:authenticated]"),
        "{out}{err}"
    );
    let (success, out, err) = kubectl_as(&s, &bob, &["get", "pods", "-A"]);
    assert!(success, "{out}{err}");
    let (success, _, err) = kubectl_as(&s, &bob, &["create", "configmap", "x"]);
    assert!(
        !success && err.contains("User \"bob\" cannot create resource \"configmaps\""),
        "{err}"
    );

    // A node's certificate: its own Node only, and no RBAC objects.
    // The server's own CA, loaded from its data dir (with its URL, so the admin kubeconfig
    // it rewrites stays the same).
    let server = format!("https://{}", s.addr);
    let pki = skiff_control::pki::Pki::load_or_create(s.data_dir(), &[], &server).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    let cert = pki
        .sign_node_csr(&csr, "pi-1", Duration::from_secs(3600))
        .unwrap();
    let node_kc = dir.path().join("node.kubeconfig");
    let kc = api::kubeconfig::Kubeconfig::with_client_cert(
        "skiff",
        &server,
        pki.ca_pem(),
        "system:node:pi-1",
        &cert,
        &key.serialize_pem(),
    );
    std::fs::write(&node_kc, kc.to_yaml()).unwrap();
    let (success, out, err) = kubectl_as(&s, &node_kc, &["auth", "whoami"]);
    assert!(
        success && out.contains("system:node:pi-1") && out.contains("system:nodes"),
        "{out}{err}"
    );
    for name in ["pi-1", "pi-2"] {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        let (code, body) = s.json("POST", "/api/v1/nodes", &node);
        assert_eq!(code, 201, "{body}");
    }
    let (success, out, err) = kubectl_as(&s, &node_kc, &["label", "node", "pi-1", "mine=yes"]);
    assert!(success, "{out}{err}");
    let (success, _, err) = kubectl_as(&s, &node_kc, &["label", "node", "pi-2", "mine=yes"]);
    assert!(
        !success && err.contains("User \"system:node:pi-1\" cannot modify node \"pi-2\""),
        "{err}"
    );
    let (success, _, err) = kubectl_as(&s, &node_kc, &["get", "clusterroles"]);
    assert!(!success && err.contains("forbidden"), "{err}");
}

#[test]
fn certificate_signing_requests_are_approved_or_denied_with_kubectl() {
    use base64::Engine as _;
    let s = TestServer::start();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let request = |cn: &str| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "qa");
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        (key, csr)
    };
    let manifest = |name: &str, csr: &str| {
        let path = s.data_dir().join(format!("{name}.csr.json"));
        let doc = json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": b64(csr.as_bytes()), "signerName": "kubernetes.io/kube-apiserver-client",
                     "expirationSeconds": 86400, "usages": ["client auth"],
                     "username": "someone-else", "groups": ["system:masters"]},
        });
        std::fs::write(&path, doc.to_string()).unwrap();
        path
    };
    let (eve_key, eve_csr) = request("eve");
    ok(
        &s,
        &["create", "-f", manifest("eve", &eve_csr).to_str().unwrap()],
    );
    let (_, mallory_csr) = request("mallory");
    ok(
        &s,
        &[
            "create",
            "-f",
            manifest("mallory", &mallory_csr).to_str().unwrap(),
        ],
    );
    let table = ok(&s, &["get", "csr"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ],
        "{table}"
    );
    // The requestor is who sent it, not what the body claimed.
    assert!(
        table.contains("system:admin") && !table.contains("someone-else"),
        "{table}"
    );
    assert!(table.contains("Pending"), "{table}");

    let out = ok(&s, &["certificate", "approve", "eve"]);
    assert!(out.contains("approved"), "{out}");
    let out = ok(&s, &["certificate", "deny", "mallory"]);
    assert!(out.contains("denied"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let cert = loop {
        let out = ok(
            &s,
            &["get", "csr", "eve", "-o", "jsonpath={.status.certificate}"],
        );
        if !out.is_empty() {
            break base64::engine::general_purpose::STANDARD
                .decode(out.trim())
                .unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "eve's certificate was not issued"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let table = ok(&s, &["get", "csr"]);
    assert!(
        table.contains("Approved,Issued") && table.contains("Denied"),
        "{table}"
    );
    let denied = ok(
        &s,
        &[
            "get",
            "csr",
            "mallory",
            "-o",
            "jsonpath={.status.certificate}",
        ],
    );
    assert!(denied.is_empty(), "{denied}");

    // The issued certificate is eve's identity.
    let admin = std::fs::read_to_string(s.kubeconfig()).unwrap();
    let admin = api::kubeconfig::Kubeconfig::parse(&admin).unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(
            admin.clusters[0]
                .cluster
                .certificate_authority_data
                .as_ref()
                .unwrap(),
        )
        .unwrap();
    let kc = api::kubeconfig::Kubeconfig::with_client_cert(
        "skiff",
        &admin.clusters[0].cluster.server,
        std::str::from_utf8(&ca).unwrap(),
        "eve",
        std::str::from_utf8(&cert).unwrap(),
        &eve_key.serialize_pem(),
    );
    let eve = s.data_dir().join("eve.kubeconfig");
    std::fs::write(&eve, kc.to_yaml()).unwrap();
    let (success, out, err) = kubectl_as(&s, &eve, &["auth", "whoami"]);
    assert!(
        success && out.contains("eve") && out.contains("[qa system:authenticated]"),
        "{out}{err}"
    );
    // eve may not approve requests.
    let (success, _, err) = kubectl_as(&s, &eve, &["certificate", "approve", "mallory"]);
    assert!(!success && err.contains("forbidden"), "{err}");
}

/// Writes `doc` to a file in the server's data dir for `kubectl apply -f`.
fn manifest_file(s: &TestServer, name: &str, doc: &serde_json::Value) -> String {
    let path = s.data_dir().join(format!("{name}.json"));
    std::fs::write(&path, doc.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

/// A PEM certificate request for CN `cn` in the groups `orgs`.
fn csr_pem(cn: &str, orgs: &[&str]) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    for o in orgs {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *o);
    }
    params.serialize_request(&key).unwrap().pem().unwrap()
}

/// An outside probe's escalation: a user allowed to approve only for a custom signer approved
/// its own kube-apiserver-client request for system:masters. Kubernetes refuses the request
/// (CertificateSubjectRestriction) and the approval (CertificateApproval), and lets only a
/// signer write certificates (CertificateSigning).
#[test]
fn approving_and_signing_need_the_signer_and_masters_cannot_be_asked_for() {
    use base64::Engine as _;
    let s = TestServer::start();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "custom-approver"},
        "rules": [
            {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
             "verbs": ["create", "get", "list", "watch"]},
            {"apiGroups": ["certificates.k8s.io"],
             "resources": ["certificatesigningrequests/approval", "certificatesigningrequests/status"],
             "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
             "resourceNames": ["example.com/custom"], "verbs": ["approve"]}
        ]
    });
    ok(&s, &["apply", "-f", &manifest_file(&s, "role", &role)]);
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "custom-approver",
            "--clusterrole=custom-approver",
            "--user=mallory",
        ],
    );
    let mallory = create_user(&s, "mallory", &[]);
    let csr = |name: &str, signer: &str, orgs: &[&str]| {
        json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": b64(csr_pem("mallory", orgs).as_bytes()), "signerName": signer,
                     "usages": ["client auth"]}
        })
    };
    // Asking for system:masters from the API server's client signer: 403 at create.
    let (success, _, err) = kubectl_as(
        &s,
        &mallory,
        &[
            "create",
            "-f",
            &manifest_file(
                &s,
                "masters",
                &csr(
                    "masters",
                    "kubernetes.io/kube-apiserver-client",
                    &["system:masters"],
                ),
            ),
        ],
    );
    assert!(!success, "{err}");
    assert!(
        err.contains("certificatesigningrequests.certificates.k8s.io \"masters\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"),
        "{err}"
    );
    // Another group is stored, but mallory may not approve for that signer.
    let plain = csr("plain", "kubernetes.io/kube-apiserver-client", &["qa"]);
    let (success, _, err) = kubectl_as(
        &s,
        &mallory,
        &["create", "-f", &manifest_file(&s, "plain", &plain)],
    );
    assert!(success, "{err}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let err = loop {
        let (success, _, err) = kubectl_as(&s, &mallory, &["certificate", "approve", "plain"]);
        assert!(!success, "mallory approved a request of another signer");
        // The binding reaches the authorizer a moment after it is stored.
        if err.contains("signerName") || Instant::now() > deadline {
            break err;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        err.contains("certificatesigningrequests.certificates.k8s.io \"plain\" is forbidden: user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""),
        "{err}"
    );
    let conditions = ok(
        &s,
        &["get", "csr", "plain", "-o", "jsonpath={.status.conditions}"],
    );
    assert!(conditions.is_empty(), "{conditions}");
    // Its own signer: approved.
    let custom = csr("custom", "example.com/custom", &["qa"]);
    let (success, _, err) = kubectl_as(
        &s,
        &mallory,
        &["create", "-f", &manifest_file(&s, "custom", &custom)],
    );
    assert!(success, "{err}");
    let (success, out, err) = kubectl_as(&s, &mallory, &["certificate", "approve", "custom"]);
    assert!(success && out.contains("approved"), "{out}{err}");
    // Writing a certificate is signing: refused without `sign` for the signer.
    let patch = json!({"status": {"certificate": b64(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}});
    let args = [
        "patch",
        "csr",
        "custom",
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ];
    let (success, _, err) = kubectl_as(&s, &mallory, &args);
    assert!(!success, "{err}");
    assert!(
        err.contains("user not permitted to sign requests with signerName \"example.com/custom\""),
        "{err}"
    );
    // Nor can the approval subresource carry a certificate.
    let (success, _, _) = kubectl_as(
        &s,
        &mallory,
        &[
            "patch",
            "csr",
            "custom",
            "--subresource=approval",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
    );
    let cert = ok(
        &s,
        &[
            "get",
            "csr",
            "custom",
            "-o",
            "jsonpath={.status.certificate}",
        ],
    );
    assert!(
        cert.is_empty(),
        "approval wrote a certificate (patch ok: {success})"
    );
    // With `sign` for the signer's domain, the certificate is written.
    let signer = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "custom-signer"},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                   "resourceNames": ["example.com/*"], "verbs": ["sign"]}]
    });
    ok(&s, &["apply", "-f", &manifest_file(&s, "signer", &signer)]);
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "custom-signer",
            "--clusterrole=custom-signer",
            "--user=mallory",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (success, _, err) = kubectl_as(&s, &mallory, &args);
        if success {
            break;
        }
        assert!(Instant::now() < deadline, "{err}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cert = ok(
        &s,
        &[
            "get",
            "csr",
            "custom",
            "-o",
            "jsonpath={.status.certificate}",
        ],
    );
    assert!(!cert.is_empty());
}

/// `kubectl --as` and `--as-group`: impersonation as kube-apiserver serves it.
#[test]
fn impersonation_needs_the_impersonate_verb_and_acts_as_the_user() {
    let s = TestServer::start();
    // The admin acting as nobody has nobody's rights.
    let (_, out, _) = kubectl(
        &s,
        &["auth", "can-i", "delete", "namespaces", "--as=nobody"],
    );
    assert_eq!(out.trim(), "no");
    let (_, out, _) = kubectl(&s, &["auth", "can-i", "delete", "namespaces"]);
    assert_eq!(out.trim(), "yes");
    let (success, _, err) = kubectl(&s, &["get", "pods", "--as=nobody"]);
    assert!(!success, "{err}");
    assert!(
        err.contains("pods is forbidden: User \"nobody\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    let out = ok(
        &s,
        &[
            "auth",
            "whoami",
            "--as=bob",
            "--as-group=devs",
            "-o",
            "json",
        ],
    );
    let who: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "bob");
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    let out = ok(
        &s,
        &[
            "auth",
            "whoami",
            "--as=system:serviceaccount:default:default",
            "-o",
            "json",
        ],
    );
    let who: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    // A user without the verb may not.
    let alice = create_user(&s, "alice", &[]);
    let (success, _, err) = kubectl_as(&s, &alice, &["get", "namespaces", "--as=system:admin"]);
    assert!(!success);
    assert!(
        err.contains("users \"system:admin\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"),
        "{err}"
    );
    // Granted for one user and one group only.
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "impersonate-bob"},
        "rules": [
            {"apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"], "verbs": ["impersonate"]},
            {"apiGroups": [""], "resources": ["groups"], "resourceNames": ["devs"], "verbs": ["impersonate"]}
        ]
    });
    ok(
        &s,
        &["apply", "-f", &manifest_file(&s, "impersonate", &role)],
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "alice-as-bob",
            "--clusterrole=impersonate-bob",
            "--user=alice",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let out = loop {
        let (success, out, err) = kubectl_as(
            &s,
            &alice,
            &["auth", "whoami", "--as=bob", "--as-group=devs"],
        );
        if success {
            break out;
        }
        assert!(Instant::now() < deadline, "{err}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        out.contains("bob") && out.contains("[devs system:authenticated]"),
        "{out}"
    );
    let (success, _, err) = kubectl_as(
        &s,
        &alice,
        &["get", "pods", "--as=bob", "--as-group=system:masters"],
    );
    assert!(!success);
    assert!(
        err.contains("groups \"system:masters\" is forbidden: User \"alice\" cannot impersonate resource \"groups\""),
        "{err}"
    );
    // bob has no rights of his own.
    let (success, _, err) = kubectl_as(
        &s,
        &alice,
        &["get", "secrets", "-n", "kube-system", "--as=bob"],
    );
    assert!(
        !success && err.contains("User \"bob\" cannot list resource \"secrets\""),
        "{err}"
    );
    // The audit event names both users.
    common::eventually(10, "an audit event of the impersonation", || {
        let log = std::fs::read_to_string(s.data_dir().join("audit/audit.log")).ok()?;
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| {
                e["user"]["username"] == "alice" && e["impersonatedUser"]["username"] == "bob"
            })
            .map(|e| {
                assert_eq!(
                    e["impersonatedUser"]["groups"],
                    json!(["devs", "system:authenticated"])
                )
            })
    });
}

/// A kubeconfig of node `name`'s identity (a certificate from the server's own CA).
fn node_kubeconfig(s: &TestServer, name: &str) -> PathBuf {
    let server = format!("https://{}", s.addr);
    let pki = skiff_control::pki::Pki::load_or_create(s.data_dir(), &[], &server).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    let cert = pki
        .sign_node_csr(&csr, name, Duration::from_secs(3600))
        .unwrap();
    let path = s.data_dir().join(format!("node-{name}.kubeconfig"));
    let kc = api::kubeconfig::Kubeconfig::with_client_cert(
        "skiff",
        &server,
        pki.ca_pem(),
        &format!("system:node:{name}"),
        &cert,
        &key.serialize_pem(),
    );
    std::fs::write(&path, kc.to_yaml()).unwrap();
    path
}

/// The Node authorizer and NodeRestriction: a stolen board's certificate reads only the
/// Secrets and ConfigMaps of its own pods (and the TLS Secrets of skiff's Ingresses), and
/// cannot change its own taints or restricted labels to attract other pods.
#[test]
fn nodes_read_only_what_their_pods_use_and_keep_their_restrictions() {
    let s = TestServer::start();
    let pi = node_kubeconfig(&s, "pi-1");
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pi-1"},
        "spec": {"taints": [{"key": "dedicated", "value": "edge", "effect": "NoSchedule"}]}});
    assert_eq!(s.json("POST", "/api/v1/nodes", &node).0, 201);
    for name in ["used", "other", "env-from", "site-tls"] {
        ok(
            &s,
            &["create", "secret", "generic", name, "--from-literal=k=v"],
        );
    }
    for name in ["cm-used", "cm-other"] {
        ok(&s, &["create", "configmap", name, "--from-literal=k=v"]);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"},
        "spec": {"nodeName": "pi-1", "volumes": [{"name": "s", "secret": {"secretName": "used"}}],
            "containers": [{"name": "c", "image": "busybox",
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm-used", "key": "k"}}}],
                "envFrom": [{"secretRef": {"name": "env-from"}}]}]}});
    assert_eq!(
        s.json("POST", "/api/v1/namespaces/default/pods", &pod).0,
        201
    );
    let get = |what: &str| kubectl_as(&s, &pi, &["get", what, "-o", "name"]);
    for what in ["secret/used", "secret/env-from", "configmap/cm-used"] {
        let (success, out, err) = get(what);
        assert!(success, "{what}: {out}{err}");
    }
    for (what, plural, name) in [
        ("secret/other", "secrets", "other"),
        ("secret/site-tls", "secrets", "site-tls"),
        ("configmap/cm-other", "configmaps", "cm-other"),
    ] {
        let (success, _, err) = get(what);
        assert!(!success);
        assert!(
            err.contains(&format!("{plural} \"{name}\" is forbidden: User \"system:node:pi-1\" cannot get resource \"{plural}\" in API group \"\" in the namespace \"default\": no relationship found between node 'pi-1' and this object")),
            "{err}"
        );
    }
    // Lists show what it may read, and nothing else.
    let names = |kind: &str| {
        let (success, out, err) = kubectl_as(&s, &pi, &["get", kind, "-A", "-o", "name"]);
        assert!(success, "{err}");
        let mut v: Vec<String> = out.lines().map(String::from).collect();
        v.sort();
        v
    };
    assert_eq!(names("secrets"), ["secret/env-from", "secret/used"]);
    assert!(names("configmaps")
        .iter()
        .all(|n| n != "configmap/cm-other"));
    // An Ingress of skiff's class that names a TLS Secret opens it to every node (each runs
    // the ingress proxy); another class's does not.
    let ingress = |name: &str, class: &str, secret: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name},
            "spec": {"ingressClassName": class, "tls": [{"hosts": ["a.example.com"], "secretName": secret}],
                "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}})
    };
    let path = "/apis/networking.k8s.io/v1/namespaces/default/ingresses";
    assert_eq!(
        s.json("POST", path, &ingress("other-class", "nginx", "other"))
            .0,
        201
    );
    assert_eq!(
        s.json("POST", path, &ingress("site", "skiff", "site-tls"))
            .0,
        201
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !get("secret/site-tls").0 {
        assert!(
            Instant::now() < deadline,
            "the Ingress's Secret stayed closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !get("secret/other").0,
        "another class's Ingress opened its Secret"
    );
    // A watch shows changes of what it may read only.
    let c = api::client::Client::new(
        api::client::ClientConfig::from_kubeconfig(
            &api::kubeconfig::Kubeconfig::load(&pi).unwrap(),
            None,
        )
        .unwrap(),
    )
    .unwrap();
    let (_, list) = s.http("GET", "/api/v1/namespaces/default/secrets", None);
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let seen: Vec<String> = smol::block_on(async {
        use futures_lite::StreamExt;
        let mut w = c
            .stream_lines(
                &format!("/api/v1/secrets?watch=true&resourceVersion={rv}"),
                "application/json",
            )
            .await
            .unwrap();
        for name in ["other", "used"] {
            ok(&s, &["label", "secret", name, "touched=yes"]);
        }
        let mut seen = Vec::new();
        while let Some(Ok(e)) = futures_lite::future::or(w.next(), async {
            smol::Timer::after(Duration::from_secs(3)).await;
            None
        })
        .await
        {
            seen.push(
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
        }
        seen
    });
    assert_eq!(seen, ["used"]);

    // NodeRestriction: its own labels of Kubernetes' namespaces, its taints and its Node's
    // deletion are not the node's to change.
    let (success, _, err) = kubectl_as(&s, &pi, &["taint", "node", "pi-1", "dedicated-"]);
    assert!(!success);
    assert!(
        err.contains("nodes \"pi-1\" is forbidden: node \"pi-1\" is not allowed to modify taints"),
        "{err}"
    );
    let (success, _, err) = kubectl_as(
        &s,
        &pi,
        &[
            "label",
            "node",
            "pi-1",
            "node-role.kubernetes.io/control-plane=",
        ],
    );
    assert!(!success);
    assert!(
        err.contains(
            "node \"pi-1\" is not allowed to modify labels: node-role.kubernetes.io/control-plane"
        ),
        "{err}"
    );
    let (success, out, err) = kubectl_as(
        &s,
        &pi,
        &[
            "label",
            "node",
            "pi-1",
            "topology.kubernetes.io/zone=shed",
            "rack=3",
        ],
    );
    assert!(success, "{out}{err}");
    let (success, _, err) = kubectl_as(&s, &pi, &["delete", "node", "pi-1"]);
    assert!(!success);
    assert!(
        err.contains("User \"system:node:pi-1\" cannot delete resource \"nodes\""),
        "{err}"
    );
    let taints = ok(
        &s,
        &[
            "get",
            "node",
            "pi-1",
            "-o",
            "jsonpath={.spec.taints[*].key}",
        ],
    );
    assert_eq!(taints, "dedicated");
    // A new node registering itself with a restricted label is refused.
    let pi2 = node_kubeconfig(&s, "pi-2");
    let node2 = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "pi-2", "labels": {"node-restriction.kubernetes.io/pool": "a", "zone": "b"}}});
    let (success, _, err) = kubectl_as(
        &s,
        &pi2,
        &["create", "-f", &manifest_file(&s, "node2", &node2)],
    );
    assert!(!success);
    assert!(
        err.contains("node \"pi-2\" is not allowed to set the following labels: node-restriction.kubernetes.io/pool"),
        "{err}"
    );
}
