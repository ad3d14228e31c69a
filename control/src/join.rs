//! Joining nodes: join tokens (stored as kubeadm-style bootstrap token Secrets in
//! kube-system) and the exchange that turns a valid token and a CSR into a node certificate.

use std::collections::BTreeMap;
use std::time::Duration;

use api::core::{ByteString, Secret};
use api::join::{JoinRequest, JoinResponse, JoinToken, TokenResponse};
use api::meta::{ObjectMeta, Time};
use ring::rand::SecureRandom;

use crate::auth::constant_time_eq;
use crate::error::ApiError;
use crate::pki::Pki;
use crate::registry::Registry;

/// The type of the Secrets that hold join tokens (as kubeadm's bootstrap tokens).
pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
const TOKEN_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

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

/// Creates a join token valid for `ttl`.
pub async fn create_token(
    registry: &Registry,
    pki: &Pki,
    ttl: Duration,
) -> Result<TokenResponse, ApiError> {
    let id = random_token_part(6)?;
    let secret = random_token_part(16)?;
    let expires = Time(Time::now().0 + ttl.as_secs() as i64);
    let data: BTreeMap<String, ByteString> = [
        ("token-id", id.clone()),
        ("token-secret", secret.clone()),
        ("expiration", expires.to_string()),
        ("usage-bootstrap-authentication", "true".to_string()),
        ("description", "skiff node join token".to_string()),
    ]
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
    })
}

fn refused() -> ApiError {
    ApiError::unauthorized().with_message("the join token is unknown, wrong or expired")
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
    let (id, secret) = req.token.split_once('.').ok_or_else(refused)?;
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
