//! ServiceAccounts with the machine's real `kubectl`: the `default` ServiceAccount of every
//! namespace, `kubectl create serviceaccount|token`, and bound tokens as bearer tokens under
//! RBAC, refused once expired, meant for another audience or orphaned.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{kubectl, TestServer};
use serde_json::json;
use skiff_control::serviceaccount::token::{Claims, Ref, SigningKey, ISSUER};

fn ok(s: &TestServer, args: &[&str]) -> String {
    let (success, out, err) = kubectl(s, args);
    assert!(success, "kubectl {args:?} failed:\n{out}\n{err}");
    out
}

/// A kubeconfig like the admin's that authenticates with `token` only.
fn kubeconfig_with_token(s: &TestServer, name: &str, token: &str) -> PathBuf {
    let path = s.data_dir().join(format!("{name}.kubeconfig"));
    let admin = std::fs::read_to_string(s.kubeconfig()).unwrap();
    let mut kc = api::kubeconfig::Kubeconfig::parse(&admin).unwrap();
    let user = &mut kc.users[0].user;
    user.token = Some(token.into());
    user.client_certificate = None;
    user.client_certificate_data = None;
    user.client_key = None;
    user.client_key_data = None;
    std::fs::write(&path, kc.to_yaml()).unwrap();
    path
}

fn kubectl_as(s: &TestServer, kc: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kc)
        .env("HOME", s.data_dir())
        .output()
        .expect("kubectl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Retries `kubectl_as` for up to 5 s until `done` holds (the token authenticator and the
/// RBAC index read the watch-fed cache, a moment behind the store).
fn eventually(
    s: &TestServer,
    kc: &Path,
    args: &[&str],
    done: impl Fn(bool, &str, &str) -> bool,
) -> (bool, String, String) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (success, out, err) = kubectl_as(s, kc, args);
        if done(success, &out, &err) || Instant::now() > deadline {
            return (success, out, err);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn unauthorized(success: bool, _out: &str, err: &str) -> bool {
    !success && err.contains("Unauthorized")
}

#[test]
fn every_namespace_has_a_default_service_account() {
    let s = TestServer::start();
    ok(&s, &["create", "namespace", "team"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let out = loop {
        let out = ok(&s, &["get", "sa", "-A"]);
        let defaults = out
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == Some("default"))
            .count();
        if defaults >= 4 || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAMESPACE", "NAME", "SECRETS", "AGE"], "{out}");
    for ns in ["default", "kube-system", "kube-public", "team"] {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().take(3).eq([ns, "default", "0"])),
            "no default ServiceAccount in {ns}:\n{out}"
        );
    }
    // Deleted, it comes back (with a new uid).
    let uid = ok(
        &s,
        &[
            "get",
            "sa",
            "default",
            "-n",
            "team",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    ok(&s, &["delete", "sa", "default", "-n", "team"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (success, again, _) = kubectl(
            &s,
            &[
                "get",
                "sa",
                "default",
                "-n",
                "team",
                "-o",
                "jsonpath={.metadata.uid}",
            ],
        );
        if success && !again.is_empty() && again != uid {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "default ServiceAccount not recreated"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Discovery: the short name and the token subresource.
    let out = ok(&s, &["api-resources", "--api-group="]);
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().take(2).eq(["serviceaccounts", "sa"])),
        "{out}"
    );
    let (_, list) = s.http("GET", "/api/v1", None);
    let token = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned()
        .unwrap_or_default();
    assert_eq!(token["kind"], "TokenRequest", "{list}");
    assert_eq!(token["group"], "authentication.k8s.io");
}

#[test]
fn a_requested_token_authenticates_the_service_account_under_rbac() {
    let s = TestServer::start();
    assert_eq!(
        ok(&s, &["create", "serviceaccount", "bot"]).trim(),
        "serviceaccount/bot created"
    );
    let token = ok(&s, &["create", "token", "bot"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let bot = kubeconfig_with_token(&s, "bot", &token);

    // Authenticated as the ServiceAccount, but allowed nothing yet.
    let (success, out, err) = eventually(&s, &bot, &["auth", "whoami"], |ok, _, _| ok);
    assert!(success, "{out}{err}");
    assert!(out.contains("system:serviceaccount:default:bot"), "{out}");
    assert!(
        out.contains(
            "[system:serviceaccounts system:serviceaccounts:default system:authenticated]"
        ),
        "{out}"
    );
    let (success, _, err) = kubectl_as(&s, &bot, &["get", "pods"]);
    assert!(
        !success
            && err.contains(
                "User \"system:serviceaccount:default:bot\" cannot list resource \"pods\""
            ),
        "{err}"
    );
    // A RoleBinding to the ServiceAccount lets it read pods, and nothing more.
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "bot-view",
            "--clusterrole=view",
            "--serviceaccount=default:bot",
        ],
    );
    let (success, out, err) = eventually(&s, &bot, &["get", "pods"], |ok, _, _| ok);
    assert!(success, "{out}{err}");
    let (success, _, err) = kubectl_as(&s, &bot, &["create", "configmap", "x"]);
    assert!(!success && err.contains("cannot create resource"), "{err}");

    // TokenReview answers for the token, and for the API server's audience only.
    let (code, review) = s.json(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}),
    );
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:bot"
    );
    let uid = ok(&s, &["get", "sa", "bot", "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(review["status"]["user"]["uid"], uid.as_str());
    assert_eq!(review["status"]["audiences"], json!([ISSUER]));
    let (_, review) = s.json(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"spec": {"token": token, "audiences": ["vault"]}}),
    );
    assert_eq!(review["status"]["authenticated"], false, "{review}");

    // A token for another audience is not an API credential, but TokenReview vouches for
    // it to that audience.
    let vault = ok(&s, &["create", "token", "bot", "--audience=vault"])
        .trim()
        .to_string();
    let kc = kubeconfig_with_token(&s, "vault", &vault);
    let (success, _, err) = kubectl_as(&s, &kc, &["get", "pods"]);
    assert!(unauthorized(success, "", &err), "{err}");
    let (_, review) = s.json(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"spec": {"token": vault, "audiences": ["vault"]}}),
    );
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(review["status"]["audiences"], json!(["vault"]));

    // An expired token, signed with the server's own key, is refused.
    let key = SigningKey::load_or_create(&s.data_dir().join("pki")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let sa = Ref {
        name: "bot".into(),
        uid: uid.clone(),
    };
    let fresh = key.sign(&Claims::new(
        "default",
        sa.clone(),
        None,
        vec![ISSUER.into()],
        now,
        600,
    ));
    let kc = kubeconfig_with_token(&s, "fresh", &fresh);
    let (success, out, err) = kubectl_as(&s, &kc, &["get", "pods"]);
    assert!(success, "the test's own signature is valid: {out}{err}");
    let expired = key.sign(&Claims::new(
        "default",
        sa,
        None,
        vec![ISSUER.into()],
        now - 7200,
        3600,
    ));
    let kc = kubeconfig_with_token(&s, "expired", &expired);
    let (success, _, err) = kubectl_as(&s, &kc, &["get", "pods"]);
    assert!(unauthorized(success, "", &err), "{err}");

    // Too short a lifetime is invalid, as in Kubernetes.
    let (success, _, err) = kubectl(&s, &["create", "token", "bot", "--duration=1m"]);
    assert!(
        !success && err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let (success, _, err) = kubectl(&s, &["create", "token", "nobody"]);
    assert!(
        !success && err.contains("serviceaccounts \"nobody\" not found"),
        "{err}"
    );

    // Deleting the ServiceAccount revokes its tokens, also after it is recreated.
    ok(&s, &["delete", "sa", "bot"]);
    let (success, _, err) = eventually(&s, &bot, &["get", "pods"], unauthorized);
    assert!(unauthorized(success, "", &err), "{err}");
    ok(&s, &["create", "serviceaccount", "bot"]);
    std::thread::sleep(Duration::from_millis(300));
    let (success, _, err) = kubectl_as(&s, &bot, &["get", "pods"]);
    assert!(unauthorized(success, "", &err), "{err}");
}

#[test]
fn a_pod_bound_token_dies_with_its_pod() {
    let s = TestServer::start();
    ok(&s, &["create", "serviceaccount", "bot"]);
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "bot-view",
            "--clusterrole=view",
            "--serviceaccount=default:bot",
        ],
    );
    ok(&s, &["run", "web", "--image=busybox", "--restart=Never"]);
    let token = ok(
        &s,
        &[
            "create",
            "token",
            "bot",
            "--bound-object-kind=Pod",
            "--bound-object-name=web",
        ],
    )
    .trim()
    .to_string();
    let payload = token.split('.').nth(1).unwrap();
    use base64::Engine as _;
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    let pod_uid = ok(&s, &["get", "pod", "web", "-o", "jsonpath={.metadata.uid}"]);
    // Created without one, the pod runs as its namespace's default ServiceAccount.
    let sa = ok(
        &s,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.serviceAccountName}/{.spec.serviceAccount}",
        ],
    );
    assert_eq!(sa, "default/default");
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "web", "{claims}");
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], pod_uid.as_str());
    assert_eq!(claims["sub"], "system:serviceaccount:default:bot");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3600
    );
    let kc = kubeconfig_with_token(&s, "bound", &token);
    let (success, out, err) = eventually(&s, &kc, &["get", "pods"], |ok, _, _| ok);
    assert!(success, "{out}{err}");
    // No node runs the pod, so deleting it removes it at once.
    ok(&s, &["delete", "pod", "web", "--grace-period=0", "--force"]);
    let (success, _, err) = eventually(&s, &kc, &["get", "pods"], unauthorized);
    assert!(unauthorized(success, "", &err), "{err}");
    let (success, _, err) = kubectl(
        &s,
        &[
            "create",
            "token",
            "bot",
            "--bound-object-kind=Pod",
            "--bound-object-name=web",
        ],
    );
    assert!(!success && err.contains("pods \"web\" not found"), "{err}");
}

/// A kubeconfig with node `node`'s client certificate, signed by the server's CA.
fn node_kubeconfig(s: &TestServer, node: &str) -> PathBuf {
    let server = format!("https://{}", s.addr);
    let pki = skiff_control::pki::Pki::load_or_create(s.data_dir(), &[], &server).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    let cert = pki
        .sign_node_csr(&csr, node, Duration::from_secs(3600))
        .unwrap();
    let kc = api::kubeconfig::Kubeconfig::with_client_cert(
        "skiff",
        &server,
        pki.ca_pem(),
        &format!("system:node:{node}"),
        &cert,
        &key.serialize_pem(),
    );
    let path = s.data_dir().join(format!("{node}.kubeconfig"));
    std::fs::write(&path, kc.to_yaml()).unwrap();
    path
}

#[test]
fn pods_get_the_api_access_volume_and_nodes_only_tokens_of_their_pods() {
    let s = TestServer::start();
    ok(&s, &["create", "serviceaccount", "bot"]);
    ok(&s, &["create", "serviceaccount", "quiet"]);
    ok(
        &s,
        &[
            "patch",
            "serviceaccount",
            "quiet",
            "-p",
            r#"{"automountServiceAccountToken": false}"#,
        ],
    );
    let pod = |name: &str, node: &str, sa: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"nodeName": node, "serviceAccountName": sa,
                        "containers": [{"name": "c", "image": "busybox"}]}})
    };
    for (name, node, sa) in [
        ("mine", "pi-1", "bot"),
        ("theirs", "pi-2", "bot"),
        ("silent", "pi-1", "quiet"),
    ] {
        let (code, body) = s.json(
            "POST",
            "/api/v1/namespaces/default/pods",
            &pod(name, node, sa),
        );
        assert_eq!(code, 201, "{body}");
    }
    // A ServiceAccount that does not exist is refused, as kube-apiserver's admission does.
    let (code, body) = s.json(
        "POST",
        "/api/v1/namespaces/default/pods",
        &pod("ghost", "pi-1", "nobody"),
    );
    assert_eq!(code, 403, "{body}");
    assert!(
        body.to_string().contains(
            r#"error looking up service account default/nobody: serviceaccount \"nobody\" not found"#
        ),
        "{body}"
    );
    // The SA's automountServiceAccountToken: false leaves the pod without the volume.
    let vols = ok(
        &s,
        &["get", "pod", "silent", "-o", "jsonpath={.spec.volumes}"],
    );
    assert_eq!(vols.trim(), "");
    let vols = ok(
        &s,
        &[
            "get",
            "pod",
            "mine",
            "-o",
            "jsonpath={.spec.volumes[0].name} {.spec.containers[0].volumeMounts[0].mountPath}",
        ],
    );
    assert!(
        vols.starts_with("kube-api-access-")
            && vols.ends_with(" /var/run/secrets/kubernetes.io/serviceaccount"),
        "{vols}"
    );

    let node = node_kubeconfig(&s, "pi-1");
    let token = |sa: &str, pod: Option<&str>| {
        let mut args = vec!["create", "token", sa];
        if let Some(p) = pod {
            args.extend(["--bound-object-kind=Pod", "--bound-object-name", p]);
        }
        kubectl_as(&s, &node, &args)
    };
    let (success, out, err) = token("bot", Some("mine"));
    assert!(success && out.trim().split('.').count() == 3, "{out}{err}");
    let (success, _, err) = token("bot", None);
    assert!(
        !success && err.contains("node requested token not bound to a pod"),
        "{err}"
    );
    let (success, _, err) = token("bot", Some("theirs"));
    assert!(
        !success
            && err.contains("node requested token bound to a pod scheduled on a different node"),
        "{err}"
    );
    let (success, _, err) = token("default", Some("mine"));
    assert!(
        !success && err.contains("which pod \"mine\" does not run as"),
        "{err}"
    );
}
