//! The server's own PKI: a CA made on first start, the serving certificate it signs, the
//! admin bearer token and the admin kubeconfig. Later starts reuse all of it; the serving
//! certificate (and the server's client certificate for agents) is renewed when it nears
//! expiry or its name list changes, on start and, while the server runs, by
//! [`Pki::renew_due`], which swaps it in for new connections without a restart.
//!
//! How long what the CA signs is valid is [`Lifetimes`]: a year each by default.
//!
//! Layout under the data dir: `pki/ca.crt`, `pki/ca.key`, `pki/server.crt`,
//! `pki/server.key`, `pki/apiserver-client.{crt,key}` (what the server shows agents when it
//! fetches logs), `pki/front-proxy-ca.{crt,key}` and `pki/front-proxy-client.{crt,key}` (the
//! front-proxy CA and the client certificate the server shows extension API servers when it
//! proxies to them, CN [`FRONT_PROXY_CLIENT_CN`], as kubeadm lays them out), `admin-token`,
//! `admin.kubeconfig`. Keys, the token and the kubeconfig are mode 0600, the directories
//! 0700.

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
/// A year: the default lifetime of every certificate the CA signs (kube-controller-manager's
/// `--cluster-signing-duration` default, 8760h).
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// The share of its lifetime after which the server renews its own certificates (with a
/// year's certificate, 73 days before it expires).
const SERVER_RENEW_AT: f64 = 0.8;
/// Backdating of `notBefore`, for clocks slightly behind ours.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);

/// How far a certificate valid for `validity` is backdated: an hour for clocks behind ours,
/// but never more than a tenth of its lifetime, so that a short-lived certificate (minutes,
/// in tests seconds) is not mostly spent before it is issued and its holder's renewal
/// deadline (a share of notBefore..notAfter) stays ahead of it.
pub fn backdating(validity: Duration) -> Duration {
    CLOCK_SKEW.min(validity / 10)
}

/// How long the certificates the CA signs are valid (`skiff server` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    /// The longest a client certificate the cluster's signers issue may be valid, and how
    /// long one is when its request names no shorter duration (CSRs without
    /// `expirationSeconds`, `skiff user create` without `--ttl`): kube-controller-manager's
    /// `--cluster-signing-duration`.
    pub cluster_signing: Duration,
    /// Node certificates, from a join or a renewal (at most `cluster_signing`).
    pub node: Duration,
    /// The serving certificate and the server's client certificate for agents.
    pub serving: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            cluster_signing: DEFAULT_LIFETIME,
            node: DEFAULT_LIFETIME,
            serving: DEFAULT_LIFETIME,
        }
    }
}

impl Lifetimes {
    /// The lifetime of a client certificate whose request asks for `requested`.
    pub fn client(&self, requested: Option<Duration>) -> Duration {
        requested
            .filter(|d| !d.is_zero())
            .map_or(self.cluster_signing, |d| d.min(self.cluster_signing))
    }

    /// The lifetime of a node certificate.
    pub fn node(&self) -> Duration {
        self.node.min(self.cluster_signing)
    }
}
/// The common name of the client certificate the server presents to agents (for logs). The
/// agent accepts no other client; the same string is `agent::node::logs::APISERVER_CLIENT_CN`.
pub const APISERVER_CLIENT_CN: &str = "skiff-apiserver";

/// The common name of the front-proxy client certificate: what extension API servers accept
/// (`requestheader-allowed-names` of kube-system/extension-apiserver-authentication).
pub const FRONT_PROXY_CLIENT_CN: &str = "front-proxy-client";

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
    /// The serving certificate, swapped in place when renewed.
    serving: Arc<api::tls::LiveCertificate>,
    /// The serving certificate's PEM (what [`Pki::renew_due`] reads its dates from).
    server_cert_pem: std::sync::RwLock<String>,
    /// The names the serving certificate carries.
    sans: BTreeSet<San>,
    /// The certificate and key the server shows agents (PEM), renewed as the serving one.
    apiserver_client: std::sync::RwLock<(String, String)>,
    /// The front-proxy CA certificate (PEM), and its key.
    front_proxy_ca_pem: String,
    front_proxy_ca_key_pem: String,
    /// The front-proxy client certificate and key (PEM), renewed as the serving one, and the
    /// same pair as TLS clients present it.
    front_proxy_client: std::sync::RwLock<(String, String)>,
    front_proxy_live: Arc<api::tls::LiveCertificate>,
    admin_token: String,
    kubeconfig_path: PathBuf,
    lifetimes: Lifetimes,
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
        Pki::load_or_create_with(data_dir, sans, server_url, Lifetimes::default())
    }

    /// [`Pki::load_or_create`] with the certificates' lifetimes.
    pub fn load_or_create_with(
        data_dir: &Path,
        sans: &[String],
        server_url: &str,
        lifetimes: Lifetimes,
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
            let (cert, key) =
                generate_server_cert(&ca_cert_pem, &ca_key_pem, &wanted_sans, lifetimes.serving)?;
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
            let (cert, key) =
                generate_apiserver_client_cert(&ca_cert_pem, &ca_key_pem, lifetimes.serving)?;
            write_file(&client_key_path, &key, 0o600)?;
            write_file(&client_cert_path, &cert, 0o644)?;
            (cert, key)
        };

        // The front-proxy CA (its own, as kube-apiserver's --requestheader-client-ca-file) and
        // the client certificate it signs for the aggregator's proxy.
        let fp_ca_cert_path = dir.join("front-proxy-ca.crt");
        let fp_ca_key_path = dir.join("front-proxy-ca.key");
        let (front_proxy_ca_pem, front_proxy_ca_key_pem, fp_ca_is_new) =
            match (fp_ca_cert_path.exists(), fp_ca_key_path.exists()) {
                (true, true) => {
                    tighten(&fp_ca_key_path)?;
                    (read(&fp_ca_cert_path)?, read(&fp_ca_key_path)?, false)
                }
                _ => {
                    let (cert, key) = generate_ca_named("front-proxy-ca", None)?;
                    write_file(&fp_ca_key_path, &key, 0o600)?;
                    write_file(&fp_ca_cert_path, &cert, 0o644)?;
                    (cert, key, true)
                }
            };
        let fp_ca_der =
            CertificateDer::from_pem_slice(front_proxy_ca_pem.as_bytes()).map_err(|e| {
                PkiError::Invalid {
                    path: fp_ca_cert_path.clone(),
                    message: e.to_string(),
                }
            })?;
        let fp_client_cert_path = dir.join("front-proxy-client.crt");
        let fp_client_key_path = dir.join("front-proxy-client.key");
        let reuse = !fp_ca_is_new
            && fp_client_key_path.exists()
            && fp_client_cert_path.exists()
            && server_cert_is_current(&read(&fp_client_cert_path)?, &fp_ca_der, &BTreeSet::new());
        let (fp_client_cert_pem, fp_client_key_pem) = if reuse {
            tighten(&fp_client_key_path)?;
            (read(&fp_client_cert_path)?, read(&fp_client_key_path)?)
        } else {
            let (cert, key) = generate_client_cert(
                &front_proxy_ca_pem,
                &front_proxy_ca_key_pem,
                FRONT_PROXY_CLIENT_CN,
                None,
                lifetimes.serving,
            )?;
            write_file(&fp_client_key_path, &key, 0o600)?;
            write_file(&fp_client_cert_path, &cert, 0o644)?;
            (cert, key)
        };
        let front_proxy_live =
            api::tls::LiveCertificate::new(&fp_client_cert_pem, &fp_client_key_pem).map_err(
                |e| PkiError::Invalid {
                    path: fp_client_cert_path.clone(),
                    message: e.to_string(),
                },
            )?;

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

        let serving =
            api::tls::LiveCertificate::new(&server_cert_pem, &server_key_pem).map_err(|e| {
                PkiError::Invalid {
                    path: server_cert_path.clone(),
                    message: e.to_string(),
                }
            })?;
        Ok(Pki {
            dir,
            ca_cert_pem,
            ca_cert_der,
            ca_key_pem,
            serving,
            server_cert_pem: std::sync::RwLock::new(server_cert_pem),
            sans: wanted_sans,
            apiserver_client: std::sync::RwLock::new((
                apiserver_client_cert_pem,
                apiserver_client_key_pem,
            )),
            front_proxy_ca_pem,
            front_proxy_ca_key_pem,
            front_proxy_client: std::sync::RwLock::new((fp_client_cert_pem, fp_client_key_pem)),
            front_proxy_live,
            admin_token,
            kubeconfig_path,
            lifetimes,
        })
    }

    /// The lifetimes this server signs with.
    pub fn lifetimes(&self) -> Lifetimes {
        self.lifetimes
    }

    /// Renews the serving certificate and the server's client certificate that are past
    /// their renewal point (80% of their lifetime): new keys, signed by the CA, written to
    /// their files and put in use for the connections that follow. Answers when to call
    /// again. Blocking (key generation, file writes).
    pub fn renew_due(&self) -> Result<SystemTime, PkiError> {
        let now = SystemTime::now();
        let serving_pem = self
            .server_cert_pem
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut serving_at = renewal_point(&serving_pem).unwrap_or(now);
        if serving_at <= now {
            let (cert, key) = generate_server_cert(
                &self.ca_cert_pem,
                &self.ca_key_pem,
                &self.sans,
                self.lifetimes.serving,
            )?;
            write_file(&self.dir.join("server.key"), &key, 0o600)?;
            write_file(&self.dir.join("server.crt"), &cert, 0o644)?;
            self.serving
                .replace(&cert, &key)
                .map_err(|e| PkiError::Tls(e.to_string()))?;
            serving_at = renewal_point(&cert).unwrap_or(now + self.lifetimes.serving);
            *self
                .server_cert_pem
                .write()
                .unwrap_or_else(|e| e.into_inner()) = cert;
            tracing::info!("renewed the serving certificate");
        }
        let client_pem = self
            .apiserver_client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone();
        let mut client_at = renewal_point(&client_pem).unwrap_or(now);
        if client_at <= now {
            let (cert, key) = generate_apiserver_client_cert(
                &self.ca_cert_pem,
                &self.ca_key_pem,
                self.lifetimes.serving,
            )?;
            write_file(&self.dir.join("apiserver-client.key"), &key, 0o600)?;
            write_file(&self.dir.join("apiserver-client.crt"), &cert, 0o644)?;
            client_at = renewal_point(&cert).unwrap_or(now + self.lifetimes.serving);
            *self
                .apiserver_client
                .write()
                .unwrap_or_else(|e| e.into_inner()) = (cert, key);
            tracing::info!("renewed the apiserver client certificate");
        }
        let front_proxy_pem = self
            .front_proxy_client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone();
        let mut front_proxy_at = renewal_point(&front_proxy_pem).unwrap_or(now);
        if front_proxy_at <= now {
            let (cert, key) = generate_client_cert(
                &self.front_proxy_ca_pem,
                &self.front_proxy_ca_key_pem,
                FRONT_PROXY_CLIENT_CN,
                None,
                self.lifetimes.serving,
            )?;
            write_file(&self.dir.join("front-proxy-client.key"), &key, 0o600)?;
            write_file(&self.dir.join("front-proxy-client.crt"), &cert, 0o644)?;
            self.front_proxy_live
                .replace(&cert, &key)
                .map_err(|e| PkiError::Tls(e.to_string()))?;
            front_proxy_at = renewal_point(&cert).unwrap_or(now + self.lifetimes.serving);
            *self
                .front_proxy_client
                .write()
                .unwrap_or_else(|e| e.into_inner()) = (cert, key);
            tracing::info!("renewed the front-proxy client certificate");
        }
        Ok(serving_at.min(client_at).min(front_proxy_at))
    }

    /// The front-proxy CA certificate, PEM (what extension API servers verify the
    /// aggregator's client certificate against).
    pub fn front_proxy_ca_pem(&self) -> &str {
        &self.front_proxy_ca_pem
    }

    /// The front-proxy client certificate and key in use (PEM).
    pub fn front_proxy_client_pem(&self) -> (String, String) {
        self.front_proxy_client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The front-proxy client certificate as TLS clients present it, renewed in place.
    pub fn front_proxy_client(&self) -> Arc<api::tls::LiveCertificate> {
        self.front_proxy_live.clone()
    }

    /// TLS for the API: the serving certificate (renewed in place, see [`Pki::renew_due`]),
    /// ALPN `http/1.1`, and a client certificate asked for but not required. The handshake
    /// only checks that the client holds the key of the certificate it shows; whether the
    /// CA signed it and whether it is still valid is the authenticator's to say, so that an
    /// expired or foreign certificate gets 401 Unauthorized, as from kube-apiserver, and not
    /// a failed handshake.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, PkiError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (_, ca) = x509_parser::parse_x509_certificate(&self.ca_cert_der)
            .map_err(|e| PkiError::Tls(format!("CA certificate: {e}")))?;
        let verifier = RequestClientCert {
            hints: vec![rustls::DistinguishedName::from(
                ca.subject().as_raw().to_vec(),
            )],
            provider: provider.clone(),
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PkiError::Tls(e.to_string()))?
            .with_client_cert_verifier(Arc::new(verifier))
            .with_cert_resolver(self.serving.clone());
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

    /// The CA's private key, PEM: only for a server that joins the cluster
    /// ([`crate::join::server_join`]).
    pub(crate) fn ca_key_pem(&self) -> &str {
        &self.ca_key_pem
    }

    /// The CA certificate, DER.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_cert_der
    }

    /// SHA-256 of the CA certificate's DER, lowercase hex (what a join token pins).
    pub fn ca_hash(&self) -> String {
        hex(ring::digest::digest(&ring::digest::SHA256, &self.ca_cert_der).as_ref())
    }

    /// The serving certificate in use, PEM.
    pub fn server_cert_pem(&self) -> String {
        self.server_cert_pem
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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
    pub fn apiserver_client_pem(&self) -> (String, String) {
        self.apiserver_client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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
        let (cert_pem, key_pem) = self.apiserver_client_pem();
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PkiError::Tls(format!("apiserver client certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
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
        params.not_before =
            rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(backdating(validity));
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
    if renewal_point(cert_pem).is_none_or(|at| at <= SystemTime::now()) {
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

/// When a certificate the server holds is renewed: 80% into its validity.
fn renewal_point(cert_pem: &str) -> Option<SystemTime> {
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let from = cert.validity().not_before.timestamp();
    let to = cert.validity().not_after.timestamp();
    let total = to.checked_sub(from).filter(|t| *t > 0)? as f64;
    let at = from as f64 + total * SERVER_RENEW_AT;
    Some(UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0)))
}

/// Asks TLS clients for a certificate (naming the CA as acceptable), takes none as well,
/// and checks only the handshake signature: that the client holds the certificate's key.
/// Go's `tls.RequestClientCert`, what kube-apiserver serves with; the chain and the dates
/// are checked by [`crate::auth::Authenticator`].
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<rustls::DistinguishedName>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::server::danger::ClientCertVerifier for RequestClientCert {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &self.hints
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn generate_ca() -> Result<(String, String), PkiError> {
    generate_ca_named("skiff-ca", Some("skiff"))
}

/// A self-signed CA, CN `common_name`, valid ten years.
fn generate_ca_named(
    common_name: &str,
    organization: Option<&str>,
) -> Result<(String, String), PkiError> {
    let gen = |error| PkiError::Generate { what: "CA", error };
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
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
    validity: Duration,
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
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(backdating(validity));
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + validity;
    let cert = params.signed_by(&key, &issuer).map_err(gen)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn generate_apiserver_client_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    validity: Duration,
) -> Result<(String, String), PkiError> {
    generate_client_cert(
        ca_cert_pem,
        ca_key_pem,
        APISERVER_CLIENT_CN,
        Some("skiff"),
        validity,
    )
}

/// A client certificate (client auth only), CN `common_name`, signed by the CA given.
fn generate_client_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    organization: Option<&str>,
    validity: Duration,
) -> Result<(String, String), PkiError> {
    let gen = |error| PkiError::Generate {
        what: "client certificate",
        error,
    };
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(gen)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(gen)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial()?);
    let now = unix_now();
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(backdating(validity));
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + validity;
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
    fn short_lifetimes_are_backdated_by_a_tenth_at_most() {
        assert_eq!(backdating(DEFAULT_LIFETIME), CLOCK_SKEW);
        assert_eq!(backdating(Duration::from_secs(40)), Duration::from_secs(4));
        let l = Lifetimes {
            cluster_signing: Duration::from_secs(600),
            node: Duration::from_secs(3600),
            serving: DEFAULT_LIFETIME,
        };
        assert_eq!(l.node(), Duration::from_secs(600));
        assert_eq!(l.client(None), Duration::from_secs(600));
        assert_eq!(l.client(Some(Duration::ZERO)), Duration::from_secs(600));
        assert_eq!(
            l.client(Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
        assert_eq!(
            l.client(Some(Duration::from_secs(6000))),
            Duration::from_secs(600)
        );
    }

    #[test]
    fn the_server_renews_its_certificates_at_four_fifths_of_their_life() {
        let dir = tempfile::tempdir().unwrap();
        let lifetimes = Lifetimes {
            serving: Duration::from_secs(100),
            ..Lifetimes::default()
        };
        let pki =
            Pki::load_or_create_with(dir.path(), &[], "https://127.0.0.1:1", lifetimes).unwrap();
        let first = pki.server_cert_pem();
        let next = pki.renew_due().unwrap();
        // Issued now, backdated 10 s, valid 100 s from now: 80% of 110 s is 78 s from now.
        let wait = next.duration_since(SystemTime::now()).unwrap();
        assert!(
            wait > Duration::from_secs(70) && wait <= Duration::from_secs(78),
            "{wait:?}"
        );
        assert_eq!(pki.server_cert_pem(), first);
        // A certificate past its point is renewed, in use and on disk.
        *pki.server_cert_pem.write().unwrap() = String::new();
        pki.renew_due().unwrap();
        let second = pki.server_cert_pem();
        assert_ne!(second, first);
        assert_eq!(
            fs::read_to_string(dir.path().join("pki/server.crt")).unwrap(),
            second
        );
        let live = pki.serving.current();
        assert_eq!(
            live.cert[0].as_ref(),
            CertificateDer::from_pem_slice(second.as_bytes())
                .unwrap()
                .as_ref()
        );
    }

    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(hex(&[0, 1, 0xab]), "0001ab");
        assert_eq!(random_hex(32).unwrap().len(), 64);
    }
}
