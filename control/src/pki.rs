//! The server's own PKI: a CA made on first start, the serving certificate it signs, the
//! admin bearer token and the admin kubeconfig. Later starts reuse all of it; the serving
//! certificate alone is renewed when it nears expiry or its name list changes.
//!
//! Layout under the data dir: `pki/ca.crt`, `pki/ca.key`, `pki/server.crt`,
//! `pki/server.key`, `pki/apiserver-client.{crt,key}` (what the server shows agents when it
//! fetches logs), `admin-token`, `admin.kubeconfig`. Keys, the token and the kubeconfig
//! are mode 0600, the directories 0700.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::SecureRandom as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
const SERVER_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// The serving certificate is renewed on start when it expires within this.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Backdating of `notBefore`, for clocks slightly behind ours.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);
/// The common name of the client certificate the server presents to agents (for logs). The
/// agent accepts no other client; the same string is `agent::node::logs::APISERVER_CLIENT_CN`.
pub const APISERVER_CLIENT_CN: &str = "skiff-apiserver";

/// What went wrong making or loading the PKI.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot generate the {what}: {error}")]
    Generate {
        what: &'static str,
        error: rcgen::Error,
    },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("{0}")]
    Incomplete(String),
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("invalid certificate signing request: {0}")]
    Csr(String),
}

/// The most groups (O attributes) a signed client certificate carries.
pub const MAX_ORGANIZATIONS: usize = 2;

/// The CA, serving certificate and admin credentials of one server.
pub struct Pki {
    dir: PathBuf,
    ca_cert_pem: String,
    ca_cert_der: CertificateDer<'static>,
    ca_key_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    apiserver_client_cert_pem: String,
    apiserver_client_key_pem: String,
    admin_token: String,
    kubeconfig_path: PathBuf,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// Loads the PKI under `data_dir`, creating what is missing. `sans` are extra names or
    /// addresses for the serving certificate; `server_url` goes into the admin kubeconfig.
    pub fn load_or_create(
        data_dir: &Path,
        sans: &[String],
        server_url: &str,
    ) -> Result<Pki, PkiError> {
        ensure_private_dir(data_dir)?;
        let dir = data_dir.join("pki");
        ensure_private_dir(&dir)?;

        let ca_cert_path = dir.join("ca.crt");
        let ca_key_path = dir.join("ca.key");
        let (ca_cert_pem, ca_key_pem, ca_is_new) =
            match (ca_cert_path.exists(), ca_key_path.exists()) {
                (true, true) => {
                    tighten(&ca_key_path)?;
                    (read(&ca_cert_path)?, read(&ca_key_path)?, false)
                }
                (false, false) => {
                    let (cert, key) = generate_ca()?;
                    write_file(&ca_key_path, &key, 0o600)?;
                    write_file(&ca_cert_path, &cert, 0o644)?;
                    (cert, key, true)
                }
                _ => {
                    return Err(PkiError::Incomplete(format!(
                "only one of {} and {} exists: restore the other or remove both to make a new CA",
                ca_cert_path.display(),
                ca_key_path.display()
            )))
                }
            };
        let ca_cert_der = CertificateDer::from_pem_slice(ca_cert_pem.as_bytes()).map_err(|e| {
            PkiError::Invalid {
                path: ca_cert_path.clone(),
                message: e.to_string(),
            }
        })?;
        KeyPair::from_pem(&ca_key_pem).map_err(|e| PkiError::Invalid {
            path: ca_key_path.clone(),
            message: e.to_string(),
        })?;

        let wanted_sans = serving_sans(sans);
        let server_cert_path = dir.join("server.crt");
        let server_key_path = dir.join("server.key");
        let reuse = !ca_is_new
            && server_key_path.exists()
            && server_cert_path.exists()
            && server_cert_is_current(&read(&server_cert_path)?, &ca_cert_der, &wanted_sans);
        let (server_cert_pem, server_key_pem) = if reuse {
            tighten(&server_key_path)?;
            (read(&server_cert_path)?, read(&server_key_path)?)
        } else {
            let (cert, key) = generate_server_cert(&ca_cert_pem, &ca_key_pem, &wanted_sans)?;
            write_file(&server_key_path, &key, 0o600)?;
            write_file(&server_cert_path, &cert, 0o644)?;
            (cert, key)
        };

        // The server's own client certificate, for the agents' log endpoints.
        let client_cert_path = dir.join("apiserver-client.crt");
        let client_key_path = dir.join("apiserver-client.key");
        let reuse = !ca_is_new
            && client_key_path.exists()
            && client_cert_path.exists()
            && server_cert_is_current(&read(&client_cert_path)?, &ca_cert_der, &BTreeSet::new());
        let (apiserver_client_cert_pem, apiserver_client_key_pem) = if reuse {
            tighten(&client_key_path)?;
            (read(&client_cert_path)?, read(&client_key_path)?)
        } else {
            let (cert, key) = generate_apiserver_client_cert(&ca_cert_pem, &ca_key_pem)?;
            write_file(&client_key_path, &key, 0o600)?;
            write_file(&client_cert_path, &cert, 0o644)?;
            (cert, key)
        };

        let token_path = data_dir.join("admin-token");
        let existing = if token_path.exists() {
            tighten(&token_path)?;
            read(&token_path)?.trim().to_string()
        } else {
            String::new()
        };
        let admin_token = if existing.is_empty() {
            let t = random_hex(32)?;
            write_file(&token_path, &format!("{t}\n"), 0o600)?;
            t
        } else {
            existing
        };

        let kubeconfig_path = data_dir.join("admin.kubeconfig");
        let kubeconfig = api::kubeconfig::Kubeconfig::with_token(
            "skiff",
            server_url,
            &ca_cert_pem,
            "admin",
            &admin_token,
        )
        .to_yaml();
        if fs::read_to_string(&kubeconfig_path).ok().as_deref() != Some(kubeconfig.as_str()) {
            write_file(&kubeconfig_path, &kubeconfig, 0o600)?;
        } else {
            tighten(&kubeconfig_path)?;
        }

        Ok(Pki {
            dir,
            ca_cert_pem,
            ca_cert_der,
            ca_key_pem,
            server_cert_pem,
            server_key_pem,
            apiserver_client_cert_pem,
            apiserver_client_key_pem,
            admin_token,
            kubeconfig_path,
        })
    }

    /// TLS for the API: the serving certificate, ALPN `http/1.1`, client certificates
    /// optional but verified against the CA when presented.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca_cert_der.clone())
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| PkiError::Tls(e.to_string()))?;
        let chain = CertificateDer::pem_slice_iter(self.server_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PkiError::Tls(format!("serving certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes())
            .map_err(|e| PkiError::Tls(format!("serving key: {e}")))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PkiError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The CA certificate, DER.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_cert_der
    }

    /// SHA-256 of the CA certificate's DER, lowercase hex (what a join token pins).
    pub fn ca_hash(&self) -> String {
        hex(ring::digest::digest(&ring::digest::SHA256, &self.ca_cert_der).as_ref())
    }

    /// The serving certificate, PEM.
    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    /// `<data-dir>/admin.kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// `<data-dir>/pki`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Signs a client certificate for the CSR's public key. The subject is set here (the
    /// CSR's requested subject and extensions are ignored): CN `common_name`, O
    /// `organization`, client-auth only, valid for `validity` from now.
    pub fn sign_client_csr(
        &self,
        csr_pem: &str,
        common_name: &str,
        organization: &str,
        validity: Duration,
    ) -> Result<String, PkiError> {
        self.sign_csr(
            csr_pem,
            common_name,
            &[organization],
            validity,
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        )
    }

    /// Signs a user's client certificate: CN `user`, one O per group (how Kubernetes reads
    /// groups from a certificate). The CSR's own subject is ignored.
    pub fn sign_user_csr(
        &self,
        csr_pem: &str,
        user: &str,
        groups: &[String],
        validity: Duration,
    ) -> Result<String, PkiError> {
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        self.sign_csr(
            csr_pem,
            user,
            &groups,
            validity,
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        )
    }

    /// The certificate and key (PEM) the server presents to agents: CN
    /// [`APISERVER_CLIENT_CN`], client auth only, signed by the CA.
    pub fn apiserver_client_pem(&self) -> (&str, &str) {
        (
            &self.apiserver_client_cert_pem,
            &self.apiserver_client_key_pem,
        )
    }

    /// TLS for connecting to an agent's log endpoint: the agent's certificate must chain to
    /// the CA (its name is checked by the caller's `ServerName`, the node's name), and the
    /// server authenticates with its own client certificate.
    pub fn agent_client_config(&self) -> Result<Arc<rustls::ClientConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca_cert_der.clone())
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        let chain = CertificateDer::pem_slice_iter(self.apiserver_client_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PkiError::Tls(format!("apiserver client certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(self.apiserver_client_key_pem.as_bytes())
            .map_err(|e| PkiError::Tls(format!("apiserver client key: {e}")))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PkiError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| PkiError::Tls(e.to_string()))?;
        Ok(Arc::new(config))
    }

    /// Signs a node's certificate for the CSR's public key: CN `system:node:<node_name>`, O
    /// `system:nodes`, usable both as a client certificate (to the API) and as the serving
    /// certificate of the agent's log endpoint. Its SANs are the DNS name `node_name` (what
    /// the server verifies when it connects to the agent) and the IP addresses the CSR asks
    /// for (informational: the server never trusts an agent by address, so a node asking
    /// for another node's address gains nothing). Other requested names are ignored.
    pub fn sign_node_csr(
        &self,
        csr_pem: &str,
        node_name: &str,
        validity: Duration,
    ) -> Result<String, PkiError> {
        let requested = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| PkiError::Csr(e.to_string()))?;
        let mut sans = vec![SanType::DnsName(
            node_name
                .to_string()
                .try_into()
                .map_err(|e: rcgen::Error| PkiError::Csr(e.to_string()))?,
        )];
        sans.extend(
            requested
                .params
                .subject_alt_names
                .iter()
                .filter(|s| matches!(s, SanType::IpAddress(_)))
                .cloned(),
        );
        self.sign_csr(
            csr_pem,
            &format!("system:node:{node_name}"),
            &["system:nodes"],
            validity,
            sans,
            vec![
                ExtendedKeyUsagePurpose::ClientAuth,
                ExtendedKeyUsagePurpose::ServerAuth,
            ],
        )
    }

    fn sign_csr(
        &self,
        csr_pem: &str,
        common_name: &str,
        organizations: &[&str],
        validity: Duration,
        sans: Vec<SanType>,
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> Result<String, PkiError> {
        let mut csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| PkiError::Csr(e.to_string()))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        // rcgen keeps one value per attribute type, so a second organization goes in under
        // the same OID spelled as a custom type (see [`MAX_ORGANIZATIONS`]).
        if organizations.len() > MAX_ORGANIZATIONS {
            return Err(PkiError::Csr(format!(
                "at most {MAX_ORGANIZATIONS} groups fit in a certificate, got {}",
                organizations.len()
            )));
        }
        for (i, organization) in organizations.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            params.distinguished_name.push(ty, *organization);
        }
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages;
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial()?);
        let now = unix_now();
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(CLOCK_SKEW);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + validity;
        csr.params = params;
        let issuer = self.issuer()?;
        let cert = csr.signed_by(&issuer).map_err(|error| PkiError::Generate {
            what: "client certificate",
            error,
        })?;
        Ok(cert.pem())
    }

    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, PkiError> {
        let key = KeyPair::from_pem(&self.ca_key_pem).map_err(|e| PkiError::Invalid {
            path: self.dir.join("ca.key"),
            message: e.to_string(),
        })?;
        Issuer::from_ca_cert_pem(&self.ca_cert_pem, key).map_err(|e| PkiError::Invalid {
            path: self.dir.join("ca.crt"),
            message: e.to_string(),
        })
    }
}

/// A SAN as it appears in a certificate, for comparing name lists.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum San {
    Dns(String),
    Ip(IpAddr),
}

fn serving_sans(extra: &[String]) -> BTreeSet<San> {
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if let Some(h) = hostname() {
        names.push(h);
    }
    names.extend(extra.iter().map(|s| s.trim().to_string()));
    names
        .into_iter()
        .filter(|s| !s.is_empty())
        .map(|s| match s.parse::<IpAddr>() {
            Ok(ip) => San::Ip(ip),
            Err(_) => San::Dns(s.to_ascii_lowercase()),
        })
        .collect()
}

/// The machine's host name, if it has a usable one.
fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes; gethostname writes at most
    // that many and we only read up to the first NUL (or the whole buffer).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = std::str::from_utf8(&buf[..end])
        .ok()?
        .trim()
        .to_ascii_lowercase();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    valid.then_some(name)
}

/// True when the certificate was issued by `ca`, is valid for a while yet and names
/// exactly `wanted`.
fn server_cert_is_current(cert_pem: &str, ca: &CertificateDer<'_>, wanted: &BTreeSet<San>) -> bool {
    let Ok(der) = CertificateDer::from_pem_slice(cert_pem.as_bytes()) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
        return false;
    };
    let Ok((_, ca_cert)) = x509_parser::parse_x509_certificate(ca) else {
        return false;
    };
    if cert.issuer().as_raw() != ca_cert.subject().as_raw() {
        return false;
    }
    let not_after = cert.validity().not_after.timestamp();
    let renew_at = unix_now().as_secs().saturating_add(RENEW_BEFORE.as_secs());
    if not_after < i64::try_from(renew_at).unwrap_or(i64::MAX) {
        return false;
    }
    let mut have = BTreeSet::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(d) => {
                    have.insert(San::Dns(d.to_ascii_lowercase()));
                }
                x509_parser::extensions::GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                        16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                        _ => None,
                    };
                    match ip {
                        Some(ip) => {
                            have.insert(San::Ip(ip));
                        }
                        None => return false,
                    }
                }
                _ => return false,
            }
        }
    }
    &have == wanted
}

fn generate_ca() -> Result<(String, String), PkiError> {
    let gen = |error| PkiError::Generate { what: "CA", error };
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "skiff-ca");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "skiff");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(random_serial()?);
    let now = unix_now();
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(CLOCK_SKEW);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + CA_VALIDITY;
    let cert = params.self_signed(&key).map_err(gen)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn generate_server_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    sans: &BTreeSet<San>,
) -> Result<(String, String), PkiError> {
    let gen = |error| PkiError::Generate {
        what: "serving certificate",
        error,
    };
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(gen)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(gen)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "skiff-server");
    params.subject_alt_names = sans
        .iter()
        .map(|s| match s {
            San::Dns(d) => d.clone().try_into().map(SanType::DnsName),
            San::Ip(ip) => Ok(SanType::IpAddress(*ip)),
        })
        .collect::<Result<_, _>>()
        .map_err(gen)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial()?);
    let now = unix_now();
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(CLOCK_SKEW);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + SERVER_VALIDITY;
    let cert = params.signed_by(&key, &issuer).map_err(gen)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn generate_apiserver_client_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
) -> Result<(String, String), PkiError> {
    let gen = |error| PkiError::Generate {
        what: "apiserver client certificate",
        error,
    };
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(gen)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(gen)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, APISERVER_CLIENT_CN);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "skiff");
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial()?);
    let now = unix_now();
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(CLOCK_SKEW);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + SERVER_VALIDITY;
    let cert = params.signed_by(&key, &issuer).map_err(gen)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

fn random_bytes<const N: usize>() -> Result<[u8; N], PkiError> {
    let mut b = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| PkiError::Tls("the system random source failed".into()))?;
    Ok(b)
}

fn random_serial() -> Result<SerialNumber, PkiError> {
    let mut b = random_bytes::<16>()?;
    // Positive and without a leading zero byte, as RFC 5280 wants.
    b[0] = (b[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&b))
}

fn random_hex(n: usize) -> Result<String, PkiError> {
    let b = random_bytes::<64>()?;
    Ok(hex(&b[..n.min(64)]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |error| PkiError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn read(path: &Path) -> Result<String, PkiError> {
    fs::read_to_string(path).map_err(io_err(path))
}

fn ensure_private_dir(dir: &Path) -> Result<(), PkiError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(dir))
}

/// Makes an existing secret file 0600 if an operator loosened it.
pub(crate) fn tighten(path: &Path) -> Result<(), PkiError> {
    let mode = fs::metadata(path)
        .map_err(io_err(path))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_err(path))?;
    }
    Ok(())
}

/// Writes atomically (temp file, fsync, rename) with `mode` from the start, so a secret
/// is never readable by others even for a moment.
pub(crate) fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), PkiError> {
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{file_name}.tmp"));
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(contents.as_bytes()).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, path).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn san_lists_include_the_defaults_and_normalise() {
        let s = serving_sans(&["Example.COM".into(), "10.0.0.5".into(), " ".into()]);
        assert!(s.contains(&San::Dns("localhost".into())));
        assert!(s.contains(&San::Dns("example.com".into())));
        assert!(s.contains(&San::Ip("127.0.0.1".parse().unwrap())));
        assert!(s.contains(&San::Ip("::1".parse().unwrap())));
        assert!(s.contains(&San::Ip("10.0.0.5".parse().unwrap())));
        assert!(!s.contains(&San::Dns(String::new())));
    }

    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(hex(&[0, 1, 0xab]), "0001ab");
        assert_eq!(random_hex(32).unwrap().len(), 64);
    }
}
