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
