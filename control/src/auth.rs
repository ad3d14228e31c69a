//! Who is calling: the admin (bearer token) or a node (client certificate signed by the CA
//! with O=system:nodes, CN=system:node:<name>).

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

use crate::pki::{Pki, PkiError};

/// The organization of node client certificates.
pub const NODES_GROUP: &str = "system:nodes";
/// The common-name prefix of node client certificates.
pub const NODE_PREFIX: &str = "system:node:";

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum User {
    Admin,
    /// A node, by its name.
    Node(String),
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
        })
    }

    /// Authenticates a request from its `Authorization` header and the client certificate
    /// chain the TLS layer received (leaf first). A valid node certificate wins; otherwise
    /// a bearer token must be the admin token.
    pub fn authenticate(
        &self,
        authorization_header: Option<&str>,
        peer_certs: Option<&[CertificateDer<'_>]>,
    ) -> Result<User, AuthError> {
        let cert_result = match peer_certs {
            Some([leaf, intermediates @ ..]) => Some(self.node_from_cert(leaf, intermediates)),
            _ => None,
        };
        if let Some(Ok(user)) = cert_result {
            return Ok(user);
        }
        if let Some(header) = authorization_header {
            let token = bearer_token(header).ok_or(AuthError::BadToken)?;
            return if constant_time_eq(token.as_bytes(), &self.admin_token) {
                Ok(User::Admin)
            } else {
                Err(AuthError::BadToken)
            };
        }
        match cert_result {
            Some(Err(e)) => Err(e),
            _ => Err(AuthError::NoCredentials),
        }
    }

    fn node_from_cert(
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
        let in_nodes_group = subject
            .iter_organization()
            .any(|o| o.as_str() == Ok(NODES_GROUP));
        if !in_nodes_group {
            return Err(AuthError::BadCertificate(format!(
                "organization is not {NODES_GROUP}"
            )));
        }
        let cn = subject
            .iter_common_name()
            .next()
            .and_then(|c| c.as_str().ok())
            .unwrap_or("");
        match cn.strip_prefix(NODE_PREFIX) {
            Some(name) if !name.is_empty() => Ok(User::Node(name.to_string())),
            _ => Err(AuthError::BadCertificate(format!(
                "common name {cn:?} is not {NODE_PREFIX}<name>"
            ))),
        }
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
        assert_eq!(auth.authenticate(Some(&header), None), Ok(User::Admin));
        let header = format!("bearer  {}", pki.admin_token());
        assert_eq!(auth.authenticate(Some(&header), None), Ok(User::Admin));
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
            Ok(User::Node("pi-1".into()))
        );
    }

    #[test]
    fn certificates_of_the_wrong_group_name_or_ca_are_refused() {
        let (_d, pki) = pki();
        let auth = Authenticator::new(&pki).unwrap();
        let wrong_group = pki
            .sign_client_csr(
                &csr("x"),
                "system:node:pi-1",
                "system:masters",
                Duration::from_secs(3600),
            )
            .unwrap();
        let e = auth
            .authenticate(None, Some(&[der(&wrong_group)]))
            .unwrap_err();
        assert!(matches!(e, AuthError::BadCertificate(_)), "{e:?}");

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
            Ok(User::Admin)
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
