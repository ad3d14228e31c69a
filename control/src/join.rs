//! Joining nodes and servers: join tokens (stored as kubeadm-style bootstrap token Secrets
//! in kube-system), the exchange that turns a valid token and a CSR into a node
//! certificate, and the one that hands a joining server what the servers of a cluster share.
//!
//! A server token is a bootstrap token whose `auth-extra-groups` name
//! [`SERVER_TOKEN_GROUP`]. It joins servers, and nodes too (as k3s' server token does); a
//! node token joins only nodes: [`server_join`] refuses it with 403.

use std::collections::BTreeMap;
use std::time::Duration;

use api::core::{ByteString, Secret};
use api::join::{
    JoinRequest, JoinResponse, JoinToken, ServerJoinRequest, ServerJoinResponse, TokenResponse,
};
use api::meta::{ObjectMeta, Time};
use ring::rand::SecureRandom;

use crate::auth::constant_time_eq;
use crate::error::ApiError;
use crate::pki::Pki;
use crate::registry::Registry;

/// The type of the Secrets that hold join tokens (as kubeadm's bootstrap tokens).
pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
const TOKEN_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
/// The group a server join token authenticates as (in its Secret's `auth-extra-groups`, as
/// kubeadm names a bootstrap token's groups): the one thing it may do beyond joining a node
/// is fetch the cluster's shared keys.
pub const SERVER_TOKEN_GROUP: &str = "system:bootstrappers:skiff:servers";

/// What a join token joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenUsage {
    /// Nodes (`skiff-agent --token`).
    Node,
    /// Servers (`skiff server --join URL --token`), and nodes.
    Server,
}

fn secret_name(id: &str) -> String {
    format!("bootstrap-token-{id}")
}

fn random_token_part(len: usize) -> Result<String, ApiError> {
    let rng = ring::rand::SystemRandom::new();
    let mut out = String::with_capacity(len);
    while out.len() < len {
        let mut bytes = [0u8; 32];
        rng.fill(&mut bytes)
            .map_err(|_| ApiError::internal("the system's random source failed"))?;
        // 36 does not divide 256: drop the top values so that every character is equally likely.
        for b in bytes.into_iter().filter(|b| (*b as usize) < 252) {
            if out.len() < len {
                out.push(TOKEN_ALPHABET[b as usize % TOKEN_ALPHABET.len()] as char);
            }
        }
    }
    Ok(out)
}

/// Creates a join token for `usage`, valid for `ttl`.
pub async fn create_token(
    registry: &Registry,
    pki: &Pki,
    ttl: Duration,
    usage: TokenUsage,
) -> Result<TokenResponse, ApiError> {
    let id = random_token_part(6)?;
    let secret = random_token_part(16)?;
    // Any TTL: past i64 seconds, or the last time RFC 3339 can write, it saturates there.
    let expires = Time::now().plus_seconds(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
    let mut fields = vec![
        ("token-id", id.clone()),
        ("token-secret", secret.clone()),
        ("expiration", expires.to_string()),
        ("usage-bootstrap-authentication", "true".to_string()),
    ];
    match usage {
        TokenUsage::Node => fields.push(("description", "skiff node join token".to_string())),
        TokenUsage::Server => {
            fields.push(("description", "skiff server join token".to_string()));
            fields.push(("auth-extra-groups", SERVER_TOKEN_GROUP.to_string()));
        }
    }
    let data: BTreeMap<String, ByteString> = fields
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
        .collect();
    let obj = Secret {
        metadata: ObjectMeta {
            name: secret_name(&id),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        data,
        type_: Some(TOKEN_SECRET_TYPE.into()),
        ..Default::default()
    };
    registry.create(obj, Some("kube-system")).await?;
    let token = JoinToken {
        ca_hash: pki.ca_hash(),
        id,
        secret,
    };
    Ok(TokenResponse {
        token: token.to_string(),
        expires: expires.to_string(),
        server: usage == TokenUsage::Server,
    })
}

fn refused() -> ApiError {
    ApiError::unauthorized().with_message("the join token is unknown, wrong or expired")
}

/// Checks a token's `<id>.<secret>`: its id and what it joins, or 401 if it is unknown,
/// wrong or expired.
async fn check_token<'a>(
    registry: &Registry,
    credential: &'a str,
) -> Result<(&'a str, TokenUsage), ApiError> {
    let (id, secret) = credential.split_once('.').ok_or_else(refused)?;
    let stored: Secret = registry
        .get("kube-system", &secret_name(id))
        .await
        .map_err(|_| refused())?;
    let field = |k: &str| {
        stored
            .data
            .get(k)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    if stored.type_.as_deref() != Some(TOKEN_SECRET_TYPE)
        || !constant_time_eq(field("token-secret").as_bytes(), secret.as_bytes())
    {
        return Err(refused());
    }
    let expired = Time::parse(&field("expiration"))
        .map(|t| t <= Time::now())
        .unwrap_or(true);
    if expired {
        return Err(refused());
    }
    let server = field("auth-extra-groups")
        .split(',')
        .any(|g| g.trim() == SERVER_TOKEN_GROUP);
    Ok((
        id,
        if server {
            TokenUsage::Server
        } else {
            TokenUsage::Node
        },
    ))
}

/// Checks the token and signs the node's CSR.
pub async fn join(
    registry: &Registry,
    pki: &Pki,
    req: JoinRequest,
) -> Result<JoinResponse, ApiError> {
    if let Err(why) = api::validation::dns1123_subdomain(&req.node_name) {
        return Err(ApiError::invalid(
            api::Kind::Node,
            &req.node_name,
            vec![api::validation::FieldError::invalid(
                "nodeName",
                &req.node_name,
                why,
            )],
        ));
    }
    let (id, _) = check_token(registry, &req.token).await?;
    let certificate = pki
        .sign_node_csr(&req.csr, &req.node_name, pki.lifetimes().node())
        .map_err(|e| {
            ApiError::bad_request(format!("the certificate signing request was refused: {e}"))
        })?;
    tracing::info!(node = %req.node_name, token = id, "node joined");
    Ok(JoinResponse {
        certificate,
        ca: pki.ca_pem().to_string(),
    })
}

/// Where a server's shared keys live on disk, beside the ones [`Pki`] holds in memory.
pub struct SharedFiles {
    /// `<data-dir>/pki/service-account.key`
    pub service_account_key: std::path::PathBuf,
    /// `<data-dir>/secrets.key`
    pub secrets_key: std::path::PathBuf,
}

impl SharedFiles {
    pub fn of(pki: &Pki) -> SharedFiles {
        let data_dir = pki.dir().parent().unwrap_or(pki.dir());
        SharedFiles {
            service_account_key: crate::serviceaccount::token::SigningKey::path(pki.dir()),
            secrets_key: data_dir.join(crate::store::seal::KEY_FILE),
        }
    }
}

/// A server joins: for a server token, what every server of the cluster shares (the CA and
/// its key, the ServiceAccount signing key, the secrets key, the admin token). 401 for a
/// token that is unknown, wrong or expired, 403 for a node's token, 400 when this server
/// keeps its state in its own embedded store, which no other server can share.
pub async fn server_join(
    registry: &Registry,
    pki: &Pki,
    store: &crate::store::Store,
    req: ServerJoinRequest,
) -> Result<ServerJoinResponse, ApiError> {
    let (id, usage) = check_token(registry, &req.token).await?;
    if usage != TokenUsage::Server {
        tracing::warn!(
            token = id,
            "a node join token was used to join a server: refused"
        );
        return Err(ApiError::forbidden(
            "this join token joins nodes only: a server joins with a token from `skiff token create --server`",
        ));
    }
    let datastore_cluster_id = store
        .shared_datastore_id()
        .await
        .map_err(|e| ApiError::internal(format!("reading the datastore's cluster id: {e}")))?
        .ok_or_else(|| {
            ApiError::bad_request(
                "this server keeps its state in its embedded store (redb), which no other server can share: \
                 servers join a server on a shared datastore (skiff server --datastore-endpoint; \
                 `skiff migrate` moves a cluster's state to etcd)",
            )
        })?;
    let files = SharedFiles::of(pki);
    let (service_account_key, secrets_key) = smol::unblock(move || {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p)
                .map_err(|e| ApiError::internal(format!("reading {}: {e}", p.display())))
        };
        Ok::<_, ApiError>((read(&files.service_account_key)?, read(&files.secrets_key)?))
    })
    .await?;
    tracing::info!(
        token = id,
        "a server joined: sent it the cluster's shared keys"
    );
    Ok(ServerJoinResponse {
        ca_cert: pki.ca_pem().to_string(),
        ca_key: pki.ca_key_pem().to_string(),
        service_account_key,
        secrets_key,
        admin_token: pki.admin_token().to_string(),
        datastore_cluster_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreConfig};

    /// A token of any TTL: a u64 of seconds overflowed `now + ttl` (a panic, or in a release
    /// build an expiration before 1970 that panicked when written as RFC 3339).
    #[test]
    fn a_token_of_the_longest_ttl_expires_at_the_last_writable_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(StoreConfig::in_dir(dir.path().join("store"))).expect("store");
        let registry = Registry::new(store);
        let pki = Pki::load_or_create(&dir.path().join("pki"), &[], "https://127.0.0.1:6443")
            .expect("pki");
        smol::block_on(async {
            let mut ns = api::core::Namespace::default();
            ns.metadata.name = "kube-system".into();
            registry.create(ns, None).await.expect("namespace");
            for ttl in [
                Duration::MAX,
                Duration::from_secs(u64::MAX),
                Duration::from_secs(i64::MAX as u64),
            ] {
                let answer = create_token(&registry, &pki, ttl, TokenUsage::Node)
                    .await
                    .expect("token");
                assert_eq!(answer.expires, "9999-12-31T23:59:59Z");
                // And it is a valid token (not one that expired in 1970).
                let credential = answer.token.rsplit("::").next().unwrap_or_default();
                check_token(&registry, credential)
                    .await
                    .expect("a valid token");
            }
            let short = create_token(&registry, &pki, Duration::from_secs(60), TokenUsage::Node)
                .await
                .expect("token");
            assert!(Time::parse(&short.expires).expect("time") > Time::now());
        });
    }
}
