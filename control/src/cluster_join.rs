//! `skiff server --join https://FIRST:6443 --token TOKEN`: the joining side of a server join.
//!
//! On a first start (no `pki/ca.crt` in the data dir) the server fetches what every server
//! of the cluster shares from a running one ([`api::join::ServerJoinResponse`]): as the
//! node join does, it first fetches the CA over an unverified connection and accepts it only
//! if its SHA-256 equals the token's pin; only then, over TLS verified against that CA, does
//! it send the token. Everything is fetched and checked in memory before the first file is
//! written, so a bad token, an unreachable server or a wrong pin leaves the data dir as it
//! was. The files get the modes of a PKI the server makes itself (keys 0600); the serving
//! and client certificates are then made by [`crate::pki::Pki`] as on any start, with this
//! server's own names, signed by the shared CA.
//!
//! On later starts the CA is there: `--join` checks that it is the one the token pins, says
//! so in the log, and does nothing else.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use api::client::{Client, ClientConfig, ClientError};
use api::join::{JoinToken, ServerJoinRequest, ServerJoinResponse, CA_PATH, SERVER_JOIN_PATH};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

use crate::pki::write_file;
use crate::serviceaccount::token::SigningKey;
use crate::store::seal::{self, Keyring};

/// The files a join writes, relative to the data dir, in the order written: the CA
/// certificate last, as its presence is what marks a data dir as joined.
const CA_CERT: &str = "pki/ca.crt";
const CA_KEY: &str = "pki/ca.key";
const ADMIN_TOKEN: &str = "admin-token";

/// Lowercase hex SHA-256 of the first certificate's DER in `pem` (what a join token pins).
fn ca_hash(pem: &str) -> anyhow::Result<String> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| anyhow::anyhow!("not a PEM certificate: {e}"))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    Ok(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes `data_dir` a server of the cluster at `url` unless it already is one. `etcd` is
/// this server's datastore, which must be the one the cluster stands on.
pub fn ensure_joined(
    data_dir: &Path,
    url: &str,
    token: &str,
    etcd: &crate::etcd::EtcdClient,
) -> anyhow::Result<()> {
    let token = JoinToken::parse(token).context("--token")?;
    let url = url.trim_end_matches('/');
    if !url.starts_with("https://") {
        bail!(
            "--join {url}: the URL must start with https:// (a server joins over TLS verified against the token's CA hash, never plain HTTP)"
        );
    }
    let ca_path = data_dir.join(CA_CERT);
    if ca_path.exists() {
        let pem = std::fs::read_to_string(&ca_path)
            .with_context(|| format!("reading {}", ca_path.display()))?;
        let have = ca_hash(&pem).with_context(|| ca_path.display().to_string())?;
        if have != token.ca_hash {
            bail!(
                "{} is not the CA the join token pins (sha256 {have}, the token pins {}): this data dir belongs to another cluster; give --join an empty data dir",
                ca_path.display(),
                token.ca_hash
            );
        }
        tracing::info!(
            data_dir = %data_dir.display(),
            "the data dir already holds the cluster's keys: --join has nothing to do"
        );
        return Ok(());
    }
    let shared = smol::block_on(fetch(url, &token))?;
    check(&shared, &token).with_context(|| format!("{url} sent unusable keys"))?;
    let ours = smol::block_on(etcd.cluster_id()).context("reading the etcd cluster's id")?;
    if shared.datastore_cluster_id != ours {
        bail!(
            "{url} keeps its state in etcd cluster {}, but --datastore-endpoint reaches cluster {ours}: a joining server must use the same etcd cluster",
            shared.datastore_cluster_id
        );
    }
    write(data_dir, &shared)?;
    tracing::info!(server = %url, data_dir = %data_dir.display(), "joined the cluster: wrote its CA, service-account key, secrets key and admin token");
    Ok(())
}

/// Fetches the shared keys: the CA pinned by the token first, then the keys over TLS
/// verified against it.
async fn fetch(url: &str, token: &JoinToken) -> anyhow::Result<ServerJoinResponse> {
    let reach = |e: ClientError| anyhow::anyhow!("cannot reach {url} to join it: {e}");
    let unverified = Client::new(ClientConfig {
        server: url.to_string(),
        insecure_skip_tls_verify: true,
        ..Default::default()
    })
    .with_context(|| format!("--join {url}"))?;
    // The CA alone (public) before anything is trusted; nothing secret is sent here.
    let resp = unverified
        .request("GET", CA_PATH, None, "*/*")
        .await
        .map_err(reach)?
        .error_for_status()
        .map_err(|e| anyhow::anyhow!("{url} did not send its CA: {e}"))?;
    let ca_pem = String::from_utf8(resp.body).context("the CA certificate")?;
    let actual = ca_hash(&ca_pem).with_context(|| format!("{url}'s CA certificate"))?;
    if actual != token.ca_hash {
        bail!(
            "{url}'s CA does not match the join token's pin (expected sha256 {}, got {actual}): refusing to join",
            token.ca_hash
        );
    }
    let pinned = Client::new(ClientConfig {
        server: url.to_string(),
        ca_pem: Some(ca_pem),
        ..Default::default()
    })
    .with_context(|| format!("--join {url}"))?;
    let body = serde_json::to_vec(&ServerJoinRequest {
        token: token.credential(),
    })?;
    let resp = pinned
        .request(
            "POST",
            SERVER_JOIN_PATH,
            Some(("application/json", body)),
            "application/json",
        )
        .await
        .map_err(reach)?;
    if resp.status == 401 {
        bail!("{url} refused the join token: it is unknown, wrong or expired (create one with `skiff token create --server`)");
    }
    if resp.status == 404 {
        bail!("{url} does not serve server joins: it is older than `skiff server --join`");
    }
    let resp = resp
        .error_for_status()
        .map_err(|e| anyhow::anyhow!("{url} refused to let this server join: {e}"))?;
    serde_json::from_slice(&resp.body).with_context(|| format!("{url}'s answer to the join"))
}

/// Checks that the keys are whole and belong together before any is written.
fn check(shared: &ServerJoinResponse, token: &JoinToken) -> anyhow::Result<()> {
    if ca_hash(&shared.ca_cert).context("the CA certificate")? != token.ca_hash {
        bail!("the CA certificate is not the one the token pins");
    }
    let key =
        rcgen::KeyPair::from_pem(&shared.ca_key).map_err(|e| anyhow::anyhow!("the CA key: {e}"))?;
    let der = CertificateDer::from_pem_slice(shared.ca_cert.as_bytes())
        .map_err(|e| anyhow::anyhow!("the CA certificate: {e}"))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| anyhow::anyhow!("the CA certificate: {e}"))?;
    if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
        bail!("the CA key does not belong to the CA certificate");
    }
    let sa = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(
        shared.service_account_key.as_bytes(),
    )
    .map_err(|e| anyhow::anyhow!("the service-account key: {e}"))?;
    SigningKey::from_pkcs8(sa.secret_pkcs8_der())
        .map_err(|e| anyhow::anyhow!("the service-account key: {e}"))?;
    Keyring::parse(Path::new(seal::KEY_FILE), &shared.secrets_key)?;
    let admin = shared.admin_token.trim();
    if admin.is_empty() || admin.contains(char::is_whitespace) {
        bail!("the admin token is empty or malformed");
    }
    Ok(())
}

/// Writes the keys with the modes of a PKI the server makes itself (the data dir and `pki/`
/// 0700, keys and the token 0600, the CA certificate 0644), the CA certificate last. If a
/// write fails, what was written is removed again.
fn write(data_dir: &Path, shared: &ServerJoinResponse) -> anyhow::Result<()> {
    let files: [(PathBuf, String, u32); 5] = [
        (
            PathBuf::from(seal::KEY_FILE),
            shared.secrets_key.clone(),
            0o600,
        ),
        (
            PathBuf::from(ADMIN_TOKEN),
            format!("{}\n", shared.admin_token.trim()),
            0o600,
        ),
        (
            Path::new("pki").join(crate::serviceaccount::token::KEY_FILE),
            shared.service_account_key.clone(),
            0o600,
        ),
        (PathBuf::from(CA_KEY), shared.ca_key.clone(), 0o600),
        (PathBuf::from(CA_CERT), shared.ca_cert.clone(), 0o644),
    ];
    let mut written: Vec<PathBuf> = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for dir in [data_dir.to_path_buf(), data_dir.join("pki")] {
            private_dir(&dir)?;
        }
        for (name, contents, mode) in &files {
            let path = data_dir.join(name);
            write_file(&path, contents, *mode)?;
            written.push(path);
        }
        Ok(())
    })();
    if let Err(e) = result {
        for path in written {
            let _ = std::fs::remove_file(path);
        }
        return Err(e.context(format!(
            "writing the cluster's keys into {}",
            data_dir.display()
        )));
    }
    Ok(())
}

fn private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("securing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material() -> (ServerJoinResponse, JoinToken) {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::Pki::load_or_create(dir.path(), &[], "https://127.0.0.1:1").unwrap();
        SigningKey::load_or_create(pki.dir()).unwrap();
        Keyring::load_or_create(dir.path()).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        let shared = ServerJoinResponse {
            ca_cert: read(CA_CERT),
            ca_key: read(CA_KEY),
            service_account_key: read("pki/service-account.key"),
            secrets_key: read(seal::KEY_FILE),
            admin_token: pki.admin_token().to_string(),
            datastore_cluster_id: "1".into(),
        };
        let token = JoinToken {
            ca_hash: pki.ca_hash(),
            id: "abcdef".into(),
            secret: "0123456789abcdef".into(),
        };
        (shared, token)
    }

    #[test]
    fn the_keys_are_checked_then_written_with_a_self_made_pkis_modes() {
        use std::os::unix::fs::PermissionsExt as _;
        let (shared, token) = material();
        check(&shared, &token).unwrap();

        let mut other_key = shared.clone();
        other_key.ca_key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        assert!(check(&other_key, &token).is_err());
        let mut other_pin = token.clone();
        other_pin.ca_hash = "0".repeat(64);
        assert!(check(&shared, &other_pin).is_err());
        let mut bad_secrets = shared.clone();
        bad_secrets.secrets_key = "nonsense".into();
        assert!(check(&bad_secrets, &token).is_err());

        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("server");
        write(&data, &shared).unwrap();
        let mode = |p: &str| {
            std::fs::metadata(data.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(""), 0o700);
        assert_eq!(mode("pki"), 0o700);
        for key in [
            CA_KEY,
            "pki/service-account.key",
            seal::KEY_FILE,
            ADMIN_TOKEN,
        ] {
            assert_eq!(mode(key), 0o600, "{key}");
        }
        assert_eq!(mode(CA_CERT), 0o644);
        // What a server then loads: the same CA, its own serving certificate.
        let pki =
            crate::pki::Pki::load_or_create(&data, &["b.example".into()], "https://b:1").unwrap();
        assert_eq!(pki.ca_hash(), token.ca_hash);
        assert_eq!(pki.admin_token(), shared.admin_token);
        assert!(data.join("pki/server.crt").exists());
    }
}
