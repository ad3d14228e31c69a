//! Joining the cluster once, and the credentials kept afterwards.
//!
//! The join fetches the server's CA over an unverified connection, accepts it only if the
//! SHA-256 of its DER encoding equals the token's pin, sends a CSR for a fresh ECDSA P-256 key
//! together with the token, and stores the signed certificate. Files in the data dir:
//! `ca.crt`, `node.crt`, `node.key`, `server` (the cluster's server URLs, one a line, the
//! agent's API client failing over between them), all 0600, the dir 0700. Renewed
//! certificates (see [`super::rotation`]) are kept as the kubelet keeps them: certificate
//! and key in one file, `node-<time>.pem`, beside the previous one, with the symbolic link
//! `node-current.pem` naming the one in use; when it exists it wins over `node.crt`.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use api::client::{Client, ClientConfig, ClientError};
use api::join::{JoinRequest, JoinResponse, JoinToken, CA_PATH, JOIN_PATH};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

/// What went wrong while joining or loading the node's credentials.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("{0}")]
    Token(#[from] api::join::TokenError),
    #[error("the join token was refused by the server: it is unknown, wrong or expired (create a new one with `skiff token create`)")]
    Refused,
    #[error("the server's CA certificate does not match the join token's pin (expected sha256 {expected}, got {actual}): refusing to join")]
    CaMismatch { expected: String, actual: String },
    #[error("the server sent an unreadable CA certificate: {0}")]
    BadCa(String),
    #[error("cannot talk to the server: {0}")]
    Client(#[from] ClientError),
    #[error("cannot make the node key or CSR: {0}")]
    Key(String),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("this node has not joined yet: give --server and --token")]
    NotJoined,
}

fn io_err(what: &'static str, path: &Path, source: std::io::Error) -> JoinError {
    JoinError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// The node's credentials: everything needed to build an API client.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// The cluster's servers (`https://host:port`), at least one; the client uses the first
    /// and fails over to the others.
    pub servers: Vec<String>,
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Credentials {
    /// The client configuration for these credentials.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig {
            server: self.server().to_string(),
            failover_servers: self.servers.iter().skip(1).cloned().collect(),
            ca_pem: Some(self.ca_pem.clone()),
            client_cert_pem: Some(self.cert_pem.clone()),
            client_key_pem: Some(self.key_pem.clone()),
            ..Default::default()
        }
    }

    /// A client that authenticates as the node.
    pub fn client(&self) -> Result<Client, ClientError> {
        Client::new(self.client_config())
    }

    /// A client that authenticates with `live`, the node's certificate as it is renewed.
    pub fn live_client(
        &self,
        live: std::sync::Arc<api::tls::LiveCertificate>,
    ) -> Result<Client, ClientError> {
        Client::new(ClientConfig {
            client_identity: Some(live),
            client_cert_pem: None,
            client_key_pem: None,
            ..self.client_config()
        })
    }

    /// The first server (where the node joined, unless the list was changed since).
    pub fn server(&self) -> &str {
        self.servers.first().map_or("", String::as_str)
    }

    /// Replaces the stored server list (`--server` changed on a later start).
    pub fn store_servers(data_dir: &Path, servers: &[String]) -> Result<(), JoinError> {
        write_private(&data_dir.join("server"), servers_file(servers).as_bytes())
    }

    /// Keeps a renewed certificate and its key: written as `node-<time>.pem` (0600), then
    /// `node-current.pem` is pointed at it in one rename, so a crash leaves either pair
    /// whole. The pair it replaces stays beside it; older ones are removed.
    pub fn store_renewed(
        data_dir: &Path,
        cert_pem: &str,
        key_pem: &str,
        stamp: &str,
    ) -> Result<std::path::PathBuf, JoinError> {
        let name = format!("{PAIR_PREFIX}{stamp}.pem");
        let file = data_dir.join(&name);
        let mut pem = cert_pem.trim_end().to_string();
        pem.push('\n');
        pem.push_str(key_pem);
        write_private(&file, pem.as_bytes())?;
        let previous = fs::read_link(data_dir.join(CURRENT_PAIR)).ok();
        let link_tmp = data_dir.join(format!(".{CURRENT_PAIR}.tmp"));
        let _ = fs::remove_file(&link_tmp);
        std::os::unix::fs::symlink(&name, &link_tmp).map_err(|e| io_err("link", &link_tmp, e))?;
        fs::rename(&link_tmp, data_dir.join(CURRENT_PAIR))
            .map_err(|e| io_err("rename", &link_tmp, e))?;
        let keep: Vec<std::ffi::OsString> =
            [Some(name.into()), previous.map(|p| p.into_os_string())]
                .into_iter()
                .flatten()
                .collect();
        if let Ok(entries) = fs::read_dir(data_dir) {
            for e in entries.flatten() {
                let n = e.file_name();
                let ours = n.to_str().is_some_and(|s| {
                    s.starts_with(PAIR_PREFIX) && s.ends_with(".pem") && s != CURRENT_PAIR
                });
                if ours && !keep.contains(&n) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(file)
    }

    /// Loads stored credentials, or `None` if the node has not joined.
    pub fn load(data_dir: &Path) -> Result<Option<Credentials>, JoinError> {
        let read = |name: &str| -> Result<Option<String>, JoinError> {
            let p = data_dir.join(name);
            match fs::read_to_string(&p) {
                Ok(s) => Ok(Some(s)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err("read", &p, e)),
            }
        };
        let renewed = read(CURRENT_PAIR)?.map(|pem| split_pair(&pem));
        let (cert, key) = match renewed {
            Some(pair) => (Some(pair.0), Some(pair.1)),
            None => (read("node.crt")?, read("node.key")?),
        };
        let (Some(server), Some(ca_pem), Some(cert_pem), Some(key_pem)) =
            (read("server")?, read("ca.crt")?, cert, key)
        else {
            return Ok(None);
        };
        let servers: Vec<String> = server
            .lines()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if servers.is_empty() {
            return Ok(None);
        }
        Ok(Some(Credentials {
            servers,
            ca_pem,
            cert_pem,
            key_pem,
        }))
    }

    /// Writes the credentials (0600 files in a 0700 dir); the key is written last-but-one
    /// and the server URL last, so a half-written set is never taken as joined.
    pub fn store(&self, data_dir: &Path) -> Result<(), JoinError> {
        fs::create_dir_all(data_dir).map_err(|e| io_err("create", data_dir, e))?;
        fs::set_permissions(data_dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err("chmod", data_dir, e))?;
        for (name, content) in [
            ("ca.crt", &self.ca_pem),
            ("node.crt", &self.cert_pem),
            ("node.key", &self.key_pem),
            ("server", &servers_file(&self.servers)),
        ] {
            write_private(&data_dir.join(name), content.as_bytes())?;
        }
        Ok(())
    }
}

/// The `server` file: one URL a line.
fn servers_file(servers: &[String]) -> String {
    let mut text = servers.join("\n");
    text.push('\n');
    text
}

/// The server URLs of `--server`: each value may hold several, comma-separated; trailing
/// slashes dropped, duplicates and empty ones left out, order kept.
pub fn server_list<S: AsRef<str>>(values: &[S]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for url in values
        .iter()
        .flat_map(|v| v.as_ref().split(','))
        .map(|u| u.trim().trim_end_matches('/'))
        .filter(|u| !u.is_empty())
    {
        if !out.iter().any(|o| o == url) {
            out.push(url.to_string());
        }
    }
    out
}

/// The link to the renewed certificate and key in use.
pub const CURRENT_PAIR: &str = "node-current.pem";
/// How renewed pairs are named: `node-<time>.pem`.
const PAIR_PREFIX: &str = "node-";

/// The certificate blocks and the key block of a combined PEM file.
fn split_pair(pem: &str) -> (String, String) {
    let mut cert = String::new();
    let mut key = String::new();
    let mut in_key = false;
    for line in pem.lines() {
        if line.starts_with("-----BEGIN") {
            in_key = line.contains("PRIVATE KEY");
        }
        let out = if in_key { &mut key } else { &mut cert };
        out.push_str(line);
        out.push('\n');
    }
    (cert, key)
}

/// Writes `path` with mode 0600 via a temporary file and a rename.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), JoinError> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io_err("create", &tmp, e))?;
    f.write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(|e| io_err("write", &tmp, e))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))
        .map_err(|e| io_err("chmod", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_err("rename", path, e))
}

/// Lowercase hex SHA-256 of the first certificate's DER in `pem`.
pub fn ca_fingerprint(pem: &str) -> Result<String, JoinError> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| JoinError::BadCa(e.to_string()))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    Ok(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// A fresh ECDSA P-256 key (PKCS#8 PEM) and a CSR (PEM) for a renewal of the node's client
/// certificate: CN `system:node:<node_name>`, O `system:nodes` and nothing else, which is
/// what the server's approver accepts from a node for its own identity (the signer adds the
/// node's name for the endpoint's serving use).
pub fn make_renewal_key_and_csr(node_name: &str) -> Result<(String, String), JoinError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| JoinError::Key(e.to_string()))?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("system:node:{node_name}"),
    );
    let csr = params
        .serialize_request(&key)
        .and_then(|c| c.pem())
        .map_err(|e| JoinError::Key(e.to_string()))?;
    Ok((key.serialize_pem(), csr))
}

/// A fresh ECDSA P-256 key (PKCS#8 PEM) and a CSR (PEM) for `system:node:<node_name>`,
/// asking for the node's name and `addresses` as SANs: the certificate is also the serving
/// certificate of the agent's log endpoint (the server signs it for both uses).
pub fn make_key_and_csr(
    node_name: &str,
    addresses: &[IpAddr],
) -> Result<(String, String), JoinError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| JoinError::Key(e.to_string()))?;
    let mut params = rcgen::CertificateParams::new(vec![node_name.to_string()])
        .map_err(|e| JoinError::Key(e.to_string()))?;
    params
        .subject_alt_names
        .extend(addresses.iter().map(|ip| rcgen::SanType::IpAddress(*ip)));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("system:node:{node_name}"),
    );
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let csr = params
        .serialize_request(&key)
        .and_then(|c| c.pem())
        .map_err(|e| JoinError::Key(e.to_string()))?;
    Ok((key.serialize_pem(), csr))
}

/// Joins the cluster at `servers` (the first that can be reached) with `token` as
/// `node_name` (reachable at `addresses`); stores and returns the credentials, which name
/// every server.
pub async fn join(
    servers: &[String],
    token: &str,
    node_name: &str,
    addresses: &[IpAddr],
    data_dir: &Path,
) -> Result<Credentials, JoinError> {
    let token = JoinToken::parse(token)?;
    let servers = server_list(servers);
    let mut unreachable = None;
    for server in &servers {
        match join_at(server, &token, node_name, addresses).await {
            Ok((ca_pem, cert_pem, key_pem)) => {
                let creds = Credentials {
                    servers: servers.clone(),
                    ca_pem,
                    cert_pem,
                    key_pem,
                };
                creds.store(data_dir)?;
                return Ok(creds);
            }
            Err(JoinError::Client(e @ ClientError::Connect { .. })) => {
                tracing::warn!(%server, "cannot reach the server to join, trying the next: {e}");
                unreachable = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(match unreachable {
        Some(e) => JoinError::Client(e),
        None => JoinError::NotJoined,
    })
}

/// The join at one server: the CA it sent (checked against the pin), the node's
/// certificate and its key.
async fn join_at(
    server: &str,
    token: &JoinToken,
    node_name: &str,
    addresses: &[IpAddr],
) -> Result<(String, String, String), JoinError> {
    let unverified = Client::new(ClientConfig {
        server: server.to_string(),
        insecure_skip_tls_verify: true,
        ..Default::default()
    })?;
    let resp = unverified
        .request("GET", CA_PATH, None, "*/*")
        .await?
        .error_for_status()?;
    let ca_pem = String::from_utf8(resp.body).map_err(|e| JoinError::BadCa(e.to_string()))?;
    let actual = ca_fingerprint(&ca_pem)?;
    if actual != token.ca_hash {
        return Err(JoinError::CaMismatch {
            expected: token.ca_hash.clone(),
            actual,
        });
    }
    // From here on the server is verified against the pinned CA.
    let pinned = Client::new(ClientConfig {
        server: server.to_string(),
        ca_pem: Some(ca_pem.clone()),
        ..Default::default()
    })?;
    let (key_pem, csr) = make_key_and_csr(node_name, addresses)?;
    let req = JoinRequest {
        token: token.credential(),
        node_name: node_name.to_string(),
        csr,
    };
    let body = serde_json::to_vec(&req).map_err(|e| JoinError::Key(e.to_string()))?;
    let resp = pinned
        .request(
            "POST",
            JOIN_PATH,
            Some(("application/json", body)),
            "application/json",
        )
        .await?;
    if resp.status == 401 || resp.status == 403 {
        return Err(JoinError::Refused);
    }
    let resp = resp.error_for_status()?;
    let answer: JoinResponse =
        serde_json::from_slice(&resp.body).map_err(|e| ClientError::Decode(e.to_string()))?;
    Ok((answer.ca, answer.certificate, key_pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csr_names_the_node_and_files_are_private() {
        let ip: IpAddr = "10.0.0.5".parse().expect("ip");
        let (key, csr) = make_key_and_csr("pi-1", &[ip]).expect("csr");
        assert!(key.contains("PRIVATE KEY"));
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&csr).expect("parse");
        let cn = parsed
            .params
            .distinguished_name
            .get(&rcgen::DnType::CommonName)
            .cloned();
        assert_eq!(
            cn,
            Some(rcgen::DnValue::Utf8String("system:node:pi-1".into()))
        );
        assert!(parsed
            .params
            .subject_alt_names
            .contains(&rcgen::SanType::IpAddress(ip)));

        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path().join("agent");
        let creds = Credentials {
            servers: vec![
                "https://127.0.0.1:6443".into(),
                "https://127.0.0.2:6443".into(),
            ],
            ca_pem: "ca".into(),
            cert_pem: "cert".into(),
            key_pem: key,
        };
        assert!(Credentials::load(&data).expect("load").is_none());
        creds.store(&data).expect("store");
        let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("node.key")), 0o600);
        let back = Credentials::load(&data).expect("load").expect("joined");
        assert_eq!(back.servers, creds.servers);
        assert_eq!(back.server(), "https://127.0.0.1:6443");
        assert_eq!(
            back.client_config().failover_servers,
            ["https://127.0.0.2:6443"]
        );
        // A server file from before server lists: one URL.
        fs::write(data.join("server"), "https://127.0.0.1:6443").expect("write");
        let one = Credentials::load(&data).expect("load").expect("joined");
        assert_eq!(one.servers, ["https://127.0.0.1:6443"]);
    }

    #[test]
    fn a_renewed_pair_wins_and_keeps_the_previous_one_beside_it() {
        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path();
        let creds = Credentials {
            servers: vec!["https://127.0.0.1:6443".into()],
            ca_pem: "ca".into(),
            cert_pem: "joined-cert".into(),
            key_pem: "joined-key".into(),
        };
        creds.store(data).expect("store");
        let pem = |n: &str| {
            (
                format!("-----BEGIN CERTIFICATE-----\n{n}\n-----END CERTIFICATE-----\n"),
                format!("-----BEGIN PRIVATE KEY-----\n{n}\n-----END PRIVATE KEY-----\n"),
            )
        };
        for (i, stamp) in ["1", "2", "3"].iter().enumerate() {
            let (c, k) = pem(&format!("renewed{i}"));
            let file = Credentials::store_renewed(data, &c, &k, stamp).expect("renewed");
            let mode = fs::metadata(&file).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            let back = Credentials::load(data).expect("load").expect("joined");
            assert_eq!((back.cert_pem, back.key_pem), (c, k));
        }
        assert!(!data.join("node-1.pem").exists());
        assert!(data.join("node-2.pem").exists());
        assert!(data.join("node-3.pem").exists());
        assert_eq!(
            fs::read_link(data.join(CURRENT_PAIR)).expect("link"),
            Path::new("node-3.pem")
        );
    }

    #[test]
    fn server_lists_split_on_commas_and_repeats() {
        assert_eq!(
            server_list(&[
                "https://a:6443/,https://b:6443",
                " https://c:6443",
                "https://a:6443",
                ""
            ]),
            ["https://a:6443", "https://b:6443", "https://c:6443"]
        );
        assert!(server_list::<&str>(&[]).is_empty());
    }

    #[test]
    fn fingerprint_of_a_certificate() {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["x".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let fp = ca_fingerprint(&cert.pem()).expect("fp");
        let want: String = ring::digest::digest(&ring::digest::SHA256, cert.der())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(fp, want);
        assert!(ca_fingerprint("nonsense").is_err());
    }
}
