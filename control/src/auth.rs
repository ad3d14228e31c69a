//! Who is calling, as Kubernetes' authenticators say it: a user name, a uid and groups.
//!
//! * A client certificate signed by the cluster CA: CN is the user, each O a group. Node
//!   certificates are CN=system:node:<name>, O=system:nodes; user certificates come from
//!   `skiff user create`.
//! * A bearer token: the admin token (user `system:admin`, group `system:masters`), or a token
//!   of the static token file (`--token-auth-file`, kube-apiserver's CSV format
//!   `token,user,uid,"group1,group2"`), which is what Kubernetes and k3s users already write
//!   for long-lived tokens. Further token authenticators (ServiceAccount JWTs) plug in as
//!   [`TokenAuthenticator`]s.
//!
//! Every authenticated user is also in `system:authenticated`, as in Kubernetes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

use crate::pki::{Pki, PkiError};

/// The organization of node client certificates.
pub const NODES_GROUP: &str = "system:nodes";
/// The common-name prefix of node client certificates.
pub const NODE_PREFIX: &str = "system:node:";

/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The group whose members every authorizer allows everything.
pub const MASTERS_GROUP: &str = "system:masters";
/// The user the admin token authenticates as.
pub const ADMIN_USER: &str = "system:admin";

/// An authenticated caller: Kubernetes' user.Info.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Further attributes an authenticator or impersonation gives (Kubernetes' user extra).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl User {
    /// A user with `groups` and [`AUTHENTICATED_GROUP`].
    pub fn new(name: impl Into<String>, uid: impl Into<String>, groups: Vec<String>) -> User {
        let mut groups = groups;
        if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            groups.push(AUTHENTICATED_GROUP.to_string());
        }
        User {
            name: name.into(),
            uid: uid.into(),
            groups,
            extra: Default::default(),
        }
    }

    /// The admin token's user.
    pub fn admin() -> User {
        User::new(ADMIN_USER, "", vec![MASTERS_GROUP.to_string()])
    }

    /// The user of node `name`'s certificate.
    pub fn node(name: &str) -> User {
        User::new(format!("{NODE_PREFIX}{name}"), "", vec![NODES_GROUP.into()])
    }

    /// The node's name, when this is a node's identity (system:node:<name> in system:nodes).
    pub fn node_name(&self) -> Option<&str> {
        let name = self.name.strip_prefix(NODE_PREFIX)?;
        (!name.is_empty() && self.in_group(NODES_GROUP)).then_some(name)
    }

    /// Whether the user is in system:masters (allowed everything).
    pub fn is_master(&self) -> bool {
        self.in_group(MASTERS_GROUP)
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// A source of bearer-token identities beyond the admin token and the token file (the
/// ServiceAccount token verifier plugs in here).
pub trait TokenAuthenticator: Send + Sync {
    /// The user of `token`, or None when this authenticator does not know it.
    fn authenticate_token(&self, token: &str) -> Option<User>;

    /// The user of `token` when it is meant for one of `audiences` (TokenReview's
    /// `spec.audiences`); authenticators without audiences ignore them.
    fn authenticate_token_for(&self, token: &str, audiences: &[String]) -> Option<User> {
        let _ = audiences;
        self.authenticate_token(token)
    }
}

/// kube-apiserver's static token file: `token,user,uid[,"group1,group2"]` per line, `#`
/// comments and blank lines ignored.
pub fn parse_token_file(text: &str) -> Result<HashMap<String, User>, String> {
    let mut tokens = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = split_csv(line);
        if fields.len() < 3 || fields[0].is_empty() || fields[1].is_empty() {
            return Err(format!(
                "line {}: want token,user,uid[,\"groups\"], got {} fields",
                n + 1,
                fields.len()
            ));
        }
        let groups = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let user = User::new(fields[1].clone(), fields[2].clone(), groups);
        tokens.insert(fields[0].clone(), user);
    }
    Ok(tokens)
}

/// One CSV record: fields split at commas outside double quotes, quotes removed.
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().expect("never empty").push(c),
        }
    }
    fields.into_iter().map(|f| f.trim().to_string()).collect()
}

/// Why a request was not authenticated. Every variant shows as `Unauthorized` (what the
/// caller is told); [`AuthError::detail`] says more for the server's log.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("Unauthorized")]
    NoCredentials,
    #[error("Unauthorized")]
    BadToken,
    #[error("Unauthorized")]
    BadCertificate(String),
}

impl AuthError {
    pub fn detail(&self) -> String {
        match self {
            AuthError::NoCredentials => "no bearer token and no client certificate".into(),
            AuthError::BadToken => "invalid bearer token".into(),
            AuthError::BadCertificate(why) => format!("client certificate refused: {why}"),
        }
    }
}

/// Checks credentials against the server's PKI.
pub struct Authenticator {
    admin_token: Vec<u8>,
    verifier: Arc<dyn ClientCertVerifier>,
    /// The static token file's tokens.
    tokens: HashMap<String, User>,
    others: Vec<Arc<dyn TokenAuthenticator>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").finish_non_exhaustive()
    }
}

impl Authenticator {
    pub fn new(pki: &Pki) -> Result<Authenticator, PkiError> {
        Authenticator::from_parts(pki.admin_token(), pki.ca_der().clone())
    }

    /// From the admin token and the CA certificate (DER).
    pub fn from_parts(
        admin_token: &str,
        ca: CertificateDer<'static>,
    ) -> Result<Authenticator, PkiError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).map_err(|e| PkiError::Tls(e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| PkiError::Tls(e.to_string()))?;
        Ok(Authenticator {
            admin_token: admin_token.as_bytes().to_vec(),
            verifier,
            tokens: HashMap::new(),
            others: Vec::new(),
        })
    }

    /// Also accepts the tokens of a static token file.
    pub fn with_token_file(mut self, path: &Path) -> Result<Authenticator, PkiError> {
        let text = std::fs::read_to_string(path).map_err(|e| PkiError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        self.tokens = parse_token_file(&text).map_err(|message| PkiError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(self)
    }

    /// Also asks `other` about bearer tokens that are neither the admin's nor the file's.
    pub fn with_token_authenticator(mut self, other: Arc<dyn TokenAuthenticator>) -> Self {
        self.others.push(other);
        self
    }

    /// The user of a bearer token (what TokenReview answers).
    pub fn authenticate_token(&self, token: &str) -> Option<User> {
        if constant_time_eq(token.as_bytes(), &self.admin_token) {
            return Some(User::admin());
        }
        // A hash lookup is not constant-time, but what it could leak is only whether a
        // guess shares a hash bucket, not a prefix of a real token.
        if let Some(user) = self.tokens.get(token) {
            return Some(user.clone());
        }
        self.others.iter().find_map(|a| a.authenticate_token(token))
    }

    /// The user of a bearer token meant for one of `audiences` (TokenReview with
    /// `spec.audiences`); an empty list means the API server's own audience.
    pub fn authenticate_token_for(&self, token: &str, audiences: &[String]) -> Option<User> {
        let api = crate::serviceaccount::token::ISSUER;
        if audiences.is_empty() {
            return self.authenticate_token(token);
        }
        // The admin and file tokens have no audience but the API server's.
        if audiences.iter().any(|a| a == api) {
            if constant_time_eq(token.as_bytes(), &self.admin_token) {
                return Some(User::admin());
            }
            if let Some(user) = self.tokens.get(token) {
                return Some(user.clone());
            }
        }
        self.others
            .iter()
            .find_map(|a| a.authenticate_token_for(token, audiences))
    }

    /// Authenticates a request from its `Authorization` header and the client certificate
    /// chain the TLS layer received (leaf first). A valid certificate wins; otherwise a
    /// bearer token must be known.
    pub fn authenticate(
        &self,
        authorization_header: Option<&str>,
        peer_certs: Option<&[CertificateDer<'_>]>,
    ) -> Result<User, AuthError> {
        let cert_result = match peer_certs {
            Some([leaf, intermediates @ ..]) => Some(self.user_from_cert(leaf, intermediates)),
            _ => None,
        };
        if let Some(Ok(user)) = cert_result {
            return Ok(user);
        }
        if let Some(header) = authorization_header {
            let token = bearer_token(header).ok_or(AuthError::BadToken)?;
            return self.authenticate_token(token).ok_or(AuthError::BadToken);
        }
        match cert_result {
            Some(Err(e)) => Err(e),
            _ => Err(AuthError::NoCredentials),
        }
    }

    /// The user of a CA-signed client certificate: CN the name, each O a group. A
    /// certificate in system:nodes must name a node (CN system:node:<name>).
    fn user_from_cert(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
    ) -> Result<User, AuthError> {
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| AuthError::BadCertificate(e.to_string()))?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| AuthError::BadCertificate(e.to_string()))?;
        let subject = cert.subject();
        let groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .map(String::from)
            .collect();
        let cn = subject
            .iter_common_name()
            .next()
            .and_then(|c| c.as_str().ok())
            .unwrap_or("");
        if cn.is_empty() {
            return Err(AuthError::BadCertificate("no common name".into()));
        }
        let user = User::new(cn, "", groups);
        if user.in_group(NODES_GROUP) && user.node_name().is_none() {
            return Err(AuthError::BadCertificate(format!(
                "common name {cn:?} is not {NODE_PREFIX}<name>"
            )));
        }
        Ok(user)
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares without an early exit, so timing does not reveal how much of a guess matched.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use rcgen::{CertificateParams, DnType, KeyPair};
    use rustls::pki_types::pem::PemObject as _;

    fn pki() -> (tempfile::TempDir, Pki) {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &[], "https://127.0.0.1:6443").unwrap();
        (dir, pki)
    }

    fn csr(cn: &str) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn the_admin_token_is_admin() {
        let (_d, pki) = pki();
        let auth = Authenticator::new(&pki).unwrap();
        let header = format!("Bearer {}", pki.admin_token());
        let admin = auth.authenticate(Some(&header), None).unwrap();
        assert_eq!(admin, User::admin());
        assert!(admin.is_master());
        assert_eq!(admin.groups, ["system:masters", "system:authenticated"]);
        let header = format!("bearer  {}", pki.admin_token());
        assert_eq!(auth.authenticate(Some(&header), None), Ok(User::admin()));
    }

    #[test]
    fn missing_or_wrong_credentials_are_unauthorized() {
        let (_d, pki) = pki();
        let auth = Authenticator::new(&pki).unwrap();
        let e = auth.authenticate(None, None).unwrap_err();
        assert_eq!(e, AuthError::NoCredentials);
        assert_eq!(e.to_string(), "Unauthorized");
        let e = auth.authenticate(Some("Bearer nope"), None).unwrap_err();
        assert_eq!(e, AuthError::BadToken);
        assert_eq!(e.to_string(), "Unauthorized");
        let e = auth
            .authenticate(Some(&format!("Basic {}", pki.admin_token())), None)
            .unwrap_err();
        assert_eq!(e, AuthError::BadToken);
        let almost = format!("Bearer {}x", pki.admin_token());
        assert!(auth.authenticate(Some(&almost), None).is_err());
    }

    #[test]
    fn a_node_certificate_signed_by_the_ca_is_that_node() {
        let (_d, pki) = pki();
        let auth = Authenticator::new(&pki).unwrap();
        let cert = pki
            .sign_client_csr(
                &csr("ignored"),
                "system:node:pi-1",
                NODES_GROUP,
                Duration::from_secs(3600),
            )
            .unwrap();
        let chain = [der(&cert)];
        assert_eq!(
            auth.authenticate(None, Some(&chain)),
            Ok(User::node("pi-1"))
        );
        assert_eq!(User::node("pi-1").name, "system:node:pi-1");
        assert_eq!(User::node("pi-1").node_name(), Some("pi-1"));
    }

    #[test]
    fn a_user_certificate_names_the_user_and_its_groups() {
        let (_d, pki) = pki();
        let auth = Authenticator::new(&pki).unwrap();
        let cert = pki
            .sign_client_csr(&csr("x"), "alice", "devs", Duration::from_secs(3600))
            .unwrap();
        let user = auth.authenticate(None, Some(&[der(&cert)])).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["devs", "system:authenticated"]);
        assert_eq!(user.node_name(), None);
        // A node's name alone, outside system:nodes, is not a node.
        let cert = pki
            .sign_client_csr(
                &csr("x"),
                "system:node:pi-1",
                "devs",
                Duration::from_secs(3600),
            )
            .unwrap();
        let user = auth.authenticate(None, Some(&[der(&cert)])).unwrap();
        assert_eq!(user.node_name(), None);
    }

    #[test]
    fn the_token_file_maps_tokens_to_users() {
        let tokens =
            parse_token_file("# comment\n\nt0ken,bob,1001,\"devs,ops\"\nsecond,carol,1002\n")
                .unwrap();
        assert_eq!(
            tokens["t0ken"],
            User::new("bob", "1001", vec!["devs".into(), "ops".into()])
        );
        assert_eq!(tokens["second"].groups, ["system:authenticated"]);
        assert!(parse_token_file("only,two").is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens.csv");
        std::fs::write(&file, "t0ken,bob,1001,devs\n").unwrap();
        let (_d, pki) = pki();
        let auth = Authenticator::new(&pki)
            .unwrap()
            .with_token_file(&file)
            .unwrap();
        assert_eq!(
            auth.authenticate(Some("Bearer t0ken"), None).unwrap().name,
            "bob"
        );
        assert!(auth.authenticate(Some("Bearer t0ke"), None).is_err());
    }

    #[test]
    fn certificates_of_the_wrong_name_or_ca_are_refused() {
        let (_d, pki) = pki();
        let auth = Authenticator::new(&pki).unwrap();

        let wrong_cn = pki
            .sign_client_csr(&csr("x"), "pi-1", NODES_GROUP, Duration::from_secs(3600))
            .unwrap();
        assert!(auth.authenticate(None, Some(&[der(&wrong_cn)])).is_err());

        let (_d2, other) = self::pki();
        let foreign = other
            .sign_client_csr(
                &csr("x"),
                "system:node:pi-1",
                NODES_GROUP,
                Duration::from_secs(3600),
            )
            .unwrap();
        let e = auth.authenticate(None, Some(&[der(&foreign)])).unwrap_err();
        assert!(e.detail().contains("client certificate refused"), "{e:?}");

        // A refused certificate does not hide a valid admin token.
        let header = format!("Bearer {}", pki.admin_token());
        assert_eq!(
            auth.authenticate(Some(&header), Some(&[der(&foreign)])),
            Ok(User::admin())
        );
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert_eq!(bearer_token("Bearer  t "), Some("t"));
        assert_eq!(bearer_token("Bearer"), None);
    }
}
