//! Joining a node: the join token format and the messages of the join exchange.
//!
//! A join token as printed by `skiff token create` is `SK1::<ca-sha256-hex>::<id>.<secret>`.
//! The agent first fetches the server's CA over an unverified connection and accepts it only
//! if its SHA-256 matches the pinned hash; every later request verifies the server against
//! that CA. The `<id>.<secret>` part authenticates the node once, to get its certificate.
//!
//! A server join token (`skiff token create --server`) has the same format; the server
//! knows it as one for servers. A second server (`skiff server --join URL --token ...`)
//! pins the CA the same way, then sends it to [`SERVER_JOIN_PATH`] for what every server
//! of one cluster shares ([`ServerJoinResponse`]). A node's token is refused there.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The version prefix of join tokens.
pub const TOKEN_PREFIX: &str = "SK1";

/// Where the agent fetches the CA certificate (no authentication).
pub const CA_PATH: &str = "/skiff/v1/ca.crt";
/// Where the agent sends its join request (authenticated by the token).
pub const JOIN_PATH: &str = "/skiff/v1/join";
/// Where an admin creates join tokens.
pub const TOKENS_PATH: &str = "/skiff/v1/tokens";
/// Where a joining server fetches the cluster's shared keys (authenticated by a server join
/// token, over TLS verified against the pinned CA).
pub const SERVER_JOIN_PATH: &str = "/skiff/v1/server-join";
/// Where an admin has a user's client certificate signed (`skiff user create`).
pub const USERS_PATH: &str = "/skiff/v1/users";

/// A request to sign a user's client certificate: CN `name`, one O per group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserCertRequest {
    pub name: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// 0: the server's default (its cluster signing duration).
    #[serde(default)]
    pub ttl_seconds: u64,
    /// PEM certificate signing request for the user's key (the key never leaves the client).
    pub csr: String,
}

/// The signed certificate and the CA that verifies the server (PEM).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserCertResponse {
    pub certificate: String,
    pub ca: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("malformed join token: expected SK1::<ca-hash>::<id>.<secret>")]
    Malformed,
}

/// A parsed join token.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// Lowercase hex SHA-256 of the server CA's DER certificate.
    pub ca_hash: String,
    /// Six lowercase letters or digits: names the token on the server.
    pub id: String,
    /// Sixteen lowercase letters or digits.
    pub secret: String,
}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("JoinToken")
            .field("ca_hash", &self.ca_hash)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

fn is_token_part(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl JoinToken {
    pub fn parse(s: &str) -> Result<JoinToken, TokenError> {
        let mut parts = s.trim().split("::");
        let (Some(prefix), Some(ca_hash), Some(cred), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let (id, secret) = cred.split_once('.').ok_or(TokenError::Malformed)?;
        let hash_ok = ca_hash.len() == 64
            && ca_hash
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        if prefix != TOKEN_PREFIX || !hash_ok || !is_token_part(id, 6) || !is_token_part(secret, 16)
        {
            return Err(TokenError::Malformed);
        }
        Ok(JoinToken {
            ca_hash: ca_hash.to_string(),
            id: id.to_string(),
            secret: secret.to_string(),
        })
    }

    /// The `<id>.<secret>` part sent to the server.
    pub fn credential(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

impl fmt::Display for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{TOKEN_PREFIX}::{}::{}.{}",
            self.ca_hash, self.id, self.secret
        )
    }
}

/// `POST /skiff/v1/join`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinRequest {
    /// `<id>.<secret>`
    pub token: String,
    pub node_name: String,
    /// A PEM certificate signing request for the node's own key.
    pub csr: String,
}

/// The answer to a join: the node's client certificate and the CA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinResponse {
    pub certificate: String,
    pub ca: String,
}

/// `POST /skiff/v1/tokens`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRequest {
    pub ttl_seconds: u64,
    /// A token that joins servers (and fetches the cluster's keys), not only nodes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub server: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The answer to a token request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenResponse {
    pub token: String,
    /// RFC 3339.
    pub expires: String,
    /// The token joins servers. A server from before server tokens leaves it out (false),
    /// so a client that asked for one can tell it got a node token instead.
    #[serde(default, skip_serializing_if = "is_false")]
    pub server: bool,
}

/// `POST /skiff/v1/server-join`
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJoinRequest {
    /// `<id>.<secret>` of a server join token.
    pub token: String,
}

impl fmt::Debug for ServerJoinRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerJoinRequest").finish_non_exhaustive()
    }
}

/// What every server of one cluster shares, for a server that joins it: with these its
/// certificates chain to the same CA, its ServiceAccount tokens verify on every server (and
/// theirs on it), it opens the Secrets the others sealed, and the admin kubeconfig works
/// against any of them. Each server makes its own serving and client certificates.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJoinResponse {
    /// `pki/ca.crt` (PEM).
    pub ca_cert: String,
    /// `pki/ca.key` (PEM).
    pub ca_key: String,
    /// `pki/service-account.key`: signs and verifies ServiceAccount tokens (PEM).
    pub service_account_key: String,
    /// `secrets.key`: the keys Secrets are sealed with at rest (the file's text).
    pub secrets_key: String,
    /// `admin-token`.
    pub admin_token: String,
    /// The etcd cluster id (hex) of the answering server's datastore, so that the joining
    /// server can check it was pointed at the same one.
    #[serde(default)]
    pub datastore_cluster_id: String,
}

impl fmt::Debug for ServerJoinResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the keys.
        f.debug_struct("ServerJoinResponse")
            .field("datastore_cluster_id", &self.datastore_cluster_id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_malformed_tokens() {
        let hash = "a".repeat(64);
        let text = format!("SK1::{hash}::abc123.0123456789abcdef");
        let t = JoinToken::parse(&text).unwrap();
        assert_eq!(t.id, "abc123");
        assert_eq!(t.credential(), "abc123.0123456789abcdef");
        assert_eq!(t.to_string(), text);
        assert!(!format!("{t:?}").contains("0123456789abcdef"));
        for bad in [
            "",
            "SK1::abc::abc123.0123456789abcdef",
            &format!("SK2::{hash}::abc123.0123456789abcdef"),
            &format!("SK1::{hash}::abc12.0123456789abcdef"),
            &format!("SK1::{hash}::ABC123.0123456789abcdef"),
            &format!("SK1::{hash}::abc1230123456789abcdef"),
            &format!("SK1::{hash}::abc123.0123456789abcdef::x"),
        ] {
            assert_eq!(JoinToken::parse(bad), Err(TokenError::Malformed), "{bad}");
        }
    }
}
