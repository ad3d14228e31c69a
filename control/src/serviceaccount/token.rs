//! Bound ServiceAccount tokens: JWTs (RFC 7519) signed with ES256 (ECDSA P-256, SHA-256) by a
//! key of the server, with the claims kube-apiserver puts in them.
//!
//! The three base64url parts are encoded here with ring rather than through a JWT crate: one
//! algorithm, a fixed header and the claims below are all there is, and verifying only what
//! we sign leaves no algorithm-confusion surface (`alg` must be ES256, `none` never is).

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::PrivatePkcs8KeyDer;
use serde::{Deserialize, Serialize};

use crate::pki::PkiError;

/// The issuer of the tokens, and the audience they get when the request names none
/// (kube-apiserver's `--service-account-issuer` as k3s and kubeadm set it; its
/// `--api-audiences` default to the issuer).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// How long a token given no expirationSeconds lives (TokenRequest's default).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// Tolerated clock skew on `exp` and `nbf`, as kube-apiserver's validator (go-jose's
/// default leeway).
pub const LEEWAY_SECONDS: i64 = 60;

/// The key file under the PKI directory.
pub const KEY_FILE: &str = "service-account.key";

/// A name and uid, as in the `kubernetes.io` claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    pub name: String,
    pub uid: String,
}

/// The `kubernetes.io` private claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    pub namespace: String,
    pub serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Ref>,
}

/// The claims of a bound token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub iss: String,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
    pub nbf: i64,
    pub sub: String,
}

impl Claims {
    /// The claims of a token for ServiceAccount `sa` in `namespace`, issued `now` (Unix
    /// seconds) and valid for `seconds`.
    pub fn new(
        namespace: &str,
        sa: Ref,
        pod: Option<Ref>,
        audiences: Vec<String>,
        now: i64,
        seconds: i64,
    ) -> Claims {
        Claims {
            aud: audiences,
            exp: now + seconds,
            iat: now,
            iss: ISSUER.into(),
            jti: uuid::Uuid::new_v4().to_string(),
            sub: format!("system:serviceaccount:{namespace}:{}", sa.name),
            kubernetes: KubernetesClaims {
                namespace: namespace.into(),
                serviceaccount: sa,
                pod,
            },
            nbf: now,
        }
    }
}

/// Why a token was refused (for the server's log; callers only hear 401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("not a JWT")]
    Malformed,
    #[error("not signed with ES256 by this server")]
    BadSignature,
    #[error("issued by {0:?}")]
    WrongIssuer(String),
    #[error("expired")]
    Expired,
    #[error("not valid yet")]
    NotYetValid,
    #[error("audiences {0:?} are not accepted")]
    WrongAudience(Vec<String>),
}

/// The server's token signing key.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    /// The key id (`kid`): base64url SHA-256 of the public key, as kube-apiserver derives it
    /// from the key (so a rotated key gets a new id).
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Loads `<pki_dir>/service-account.key` (PKCS#8 PEM), creating it (mode 0600) if missing.
    pub fn load_or_create(pki_dir: &Path) -> Result<SigningKey, PkiError> {
        let path = pki_dir.join(KEY_FILE);
        if !path.exists() {
            let key =
                rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|error| {
                    PkiError::Generate {
                        what: "service account signing key",
                        error,
                    }
                })?;
            crate::pki::write_file(&path, &key.serialize_pem(), 0o600)?;
        }
        crate::pki::tighten(&path)?;
        let pem = std::fs::read(&path).map_err(|error| PkiError::Io {
            path: path.clone(),
            error,
        })?;
        let invalid = |message: String| PkiError::Invalid {
            path: path.clone(),
            message,
        };
        let der = PrivatePkcs8KeyDer::from_pem_slice(&pem).map_err(|e| invalid(e.to_string()))?;
        SigningKey::from_pkcs8(der.secret_pkcs8_der()).map_err(invalid)
    }

    /// A key from PKCS#8 DER (an ECDSA P-256 key).
    pub fn from_pkcs8(der: &[u8]) -> Result<SigningKey, String> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| format!("not an ECDSA P-256 key: {e}"))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, pair.public_key().as_ref());
        Ok(SigningKey {
            kid: URL_SAFE_NO_PAD.encode(digest.as_ref()),
            pair,
            rng,
        })
    }

    /// The path of the key file in `pki_dir`.
    pub fn path(pki_dir: &Path) -> PathBuf {
        pki_dir.join(KEY_FILE)
    }

    /// The compact JWS of `claims`.
    pub fn sign(&self, claims: &Claims) -> String {
        let header = serde_json::json!({"alg": "ES256", "kid": self.kid});
        let mut jwt = URL_SAFE_NO_PAD.encode(header.to_string());
        jwt.push('.');
        jwt.push_str(
            &URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims always serialize")),
        );
        let sig = self
            .pair
            .sign(&self.rng, jwt.as_bytes())
            .expect("ECDSA signing only fails when the system RNG does");
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(sig.as_ref()));
        jwt
    }

    /// The claims of `token` if this key signed it, it is valid at `now` (Unix seconds),
    /// came from [`ISSUER`] and names one of `audiences`.
    pub fn verify(
        &self,
        token: &str,
        audiences: &[String],
        now: i64,
    ) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).map_err(|_| TokenError::Malformed);
        let header: serde_json::Value =
            serde_json::from_slice(&decode(header)?).map_err(|_| TokenError::Malformed)?;
        if header.get("alg").and_then(|a| a.as_str()) != Some("ES256") {
            return Err(TokenError::BadSignature);
        }
        let signed = &token[..token.len() - sig.len() - 1];
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.pair.public_key().as_ref(),
        )
        .verify(signed.as_bytes(), &decode(sig)?)
        .map_err(|_| TokenError::BadSignature)?;
        let claims: Claims =
            serde_json::from_slice(&decode(payload)?).map_err(|_| TokenError::Malformed)?;
        if claims.iss != ISSUER {
            return Err(TokenError::WrongIssuer(claims.iss));
        }
        if now > claims.exp + LEEWAY_SECONDS {
            return Err(TokenError::Expired);
        }
        if now + LEEWAY_SECONDS < claims.nbf {
            return Err(TokenError::NotYetValid);
        }
        if !claims.aud.iter().any(|a| audiences.contains(a)) {
            return Err(TokenError::WrongAudience(claims.aud));
        }
        Ok(claims)
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (tempfile::TempDir, SigningKey) {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::load_or_create(dir.path()).unwrap();
        (dir, key)
    }

    fn claims(now: i64, seconds: i64) -> Claims {
        Claims::new(
            "ns",
            Ref {
                name: "bot".into(),
                uid: "u-1".into(),
            },
            Some(Ref {
                name: "p".into(),
                uid: "u-2".into(),
            }),
            vec![ISSUER.into()],
            now,
            seconds,
        )
    }

    fn api() -> Vec<String> {
        vec![ISSUER.to_string()]
    }

    #[test]
    fn a_signed_token_verifies_with_kubernetes_claims() {
        let (dir, key) = key();
        let now = unix_now();
        let c = claims(now, 600);
        let token = key.sign(&c);
        assert_eq!(key.verify(&token, &api(), now), Ok(c.clone()));
        // The payload is what Kubernetes' clients and tools read.
        let payload = token.split('.').nth(1).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        assert_eq!(v["sub"], "system:serviceaccount:ns:bot");
        assert_eq!(v["iss"], ISSUER);
        assert_eq!(v["aud"], serde_json::json!([ISSUER]));
        assert_eq!(v["exp"], now + 600);
        assert_eq!(v["iat"], now);
        assert_eq!(v["nbf"], now);
        assert_eq!(v["kubernetes.io"]["namespace"], "ns");
        assert_eq!(v["kubernetes.io"]["serviceaccount"]["uid"], "u-1");
        assert_eq!(v["kubernetes.io"]["pod"]["name"], "p");
        let header = token.split('.').next().unwrap();
        let h: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
        assert_eq!(h["alg"], "ES256");
        // The key persists, private, and verifies what it signed before a restart.
        let again = SigningKey::load_or_create(dir.path()).unwrap();
        assert_eq!(again.verify(&token, &api(), now), Ok(c));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(SigningKey::path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn expired_early_wrong_audience_and_tampered_tokens_are_refused() {
        let (_d, key) = key();
        let now = unix_now();
        let token = key.sign(&claims(now - 4000, 3600));
        assert_eq!(key.verify(&token, &api(), now), Err(TokenError::Expired));
        // Within the leeway it still passes.
        let token = key.sign(&claims(now - 3630, 3600));
        assert!(key.verify(&token, &api(), now).is_ok());
        let token = key.sign(&claims(now + 600, 3600));
        assert_eq!(
            key.verify(&token, &api(), now),
            Err(TokenError::NotYetValid)
        );
        let token = key.sign(&claims(now, 3600));
        assert!(matches!(
            key.verify(&token, &["vault".to_string()], now),
            Err(TokenError::WrongAudience(_))
        ));
        // Another key's signature, a changed payload, `alg: none` and junk.
        let (_d2, other) = self::key();
        assert_eq!(
            other.verify(&token, &api(), now),
            Err(TokenError::BadSignature)
        );
        let mut forged = claims(now, 3600);
        forged.kubernetes.serviceaccount.name = "admin".into();
        let parts: Vec<&str> = token.split('.').collect();
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        let tampered = format!("{}.{payload}.{}", parts[0], parts[2]);
        assert_eq!(
            key.verify(&tampered, &api(), now),
            Err(TokenError::BadSignature)
        );
        let none = URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#);
        assert_eq!(
            key.verify(&format!("{none}.{payload}."), &api(), now),
            Err(TokenError::BadSignature)
        );
        for junk in ["", "a.b", "a.b.c.d", "!!.!!.!!"] {
            assert!(key.verify(junk, &api(), now).is_err(), "{junk}");
        }
    }
}
