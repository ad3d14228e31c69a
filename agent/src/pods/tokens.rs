//! The node's ServiceAccount token manager (the kubelet's): tokens for the
//! `serviceAccountToken` sources of projected volumes, requested through the TokenRequest
//! subresource bound to the pod, cached, and requested again once 80% of their lifetime
//! has passed or they are older than 24 hours, whichever comes first.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use api::client::{encode_query, Client, ACCEPT_JSON};
use api::core::Pod;
use serde_json::{json, Value};

/// A token older than this is renewed whatever its lifetime (the kubelet's `maxTTL`).
const MAX_AGE_SECONDS: i64 = 24 * 60 * 60;

/// What a token is for: the pod (by uid), its ServiceAccount, the audience and lifetime.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    service_account: String,
    pod_uid: String,
    audience: String,
    seconds: i64,
}

#[derive(Clone, Debug)]
struct Token {
    token: String,
    /// Unix seconds.
    issued: i64,
    expires: i64,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Whether a token issued at `issued` and expiring at `expires` is due for renewal at `now`.
pub fn requires_refresh(issued: i64, expires: i64, now: i64) -> bool {
    if now >= expires {
        return true;
    }
    let ttl = expires.saturating_sub(issued);
    now >= issued.saturating_add(ttl / 10 * 8 + ttl % 10 * 8 / 10)
        || now.saturating_sub(issued) > MAX_AGE_SECONDS
}

/// Every pod of this process shares one cache, keyed by the pod's uid (one agent per
/// process, and uids never repeat across nodes).
fn cache() -> &'static Mutex<HashMap<Key, Token>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Token>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// A token of `pod`'s ServiceAccount for `audience` (empty: the API's own), bound to the
/// pod: the cached one while it is fresh, else a new one from the API.
pub async fn get(
    client: &Client,
    pod: &Pod,
    audience: &str,
    seconds: i64,
) -> Result<String, String> {
    let ns = pod.metadata.namespace().to_string();
    let sa = pod
        .spec
        .service_account_name
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into());
    let key = Key {
        namespace: ns.clone(),
        service_account: sa.clone(),
        pod_uid: pod.metadata.uid.clone(),
        audience: audience.to_string(),
        seconds,
    };
    let t = now();
    {
        let mut c = cache().lock().unwrap_or_else(|e| e.into_inner());
        // Forget what has expired (tokens of pods long gone among them).
        c.retain(|_, v| v.expires > t);
        if let Some(tok) = c.get(&key) {
            if !requires_refresh(tok.issued, tok.expires, t) {
                return Ok(tok.token.clone());
            }
        }
    }
    let audiences: Vec<&str> = if audience.is_empty() {
        Vec::new()
    } else {
        vec![audience]
    };
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": audiences,
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.metadata.name,
                "uid": pod.metadata.uid,
            },
        },
    });
    let path = format!(
        "/api/v1/namespaces/{}/serviceaccounts/{}/token",
        encode_query(&ns),
        encode_query(&sa)
    );
    let answer = client
        .request_json("POST", &path, Some(&body), ACCEPT_JSON)
        .await
        .map_err(|e| format!("failed to fetch token: {e}"))?;
    let token = answer
        .pointer("/status/token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or("failed to fetch token: the TokenRequest answered no token")?
        .to_string();
    // The server may shorten the lifetime: its answer says what was granted.
    let granted = answer
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(seconds);
    let expires = answer
        .pointer("/status/expirationTimestamp")
        .and_then(|v| serde_json::from_value::<api::meta::Time>(v.clone()).ok())
        .map(|t| t.0)
        .unwrap_or(t.saturating_add(granted));
    let tok = Token {
        token: token.clone(),
        issued: expires.saturating_sub(granted),
        expires,
    };
    cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, tok);
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_at_80_percent_or_a_day() {
        // An hour and seven seconds: renewed after 2885 s.
        assert!(!requires_refresh(0, 3607, 2884));
        assert!(requires_refresh(0, 3607, 2885));
        assert!(requires_refresh(0, 3607, 4000));
        // A year-long token: renewed after a day.
        let year = 365 * 24 * 3600;
        assert!(!requires_refresh(0, year, MAX_AGE_SECONDS));
        assert!(requires_refresh(0, year, MAX_AGE_SECONDS + 1));
        // Whatever the times (they come from the server's answer): no overflow.
        assert!(!requires_refresh(0, i64::MAX, 1));
        assert!(requires_refresh(i64::MIN, i64::MAX, 0));
        assert!(requires_refresh(i64::MAX, i64::MIN, 0));
        assert!(!requires_refresh(i64::MIN, i64::MAX, i64::MIN));
    }
}
