//! kube-system/extension-apiserver-authentication: how extension API servers authenticate
//! the aggregator and the users it names, written as kube-apiserver's cluster
//! authentication trust controller writes it: the client CA (`client-ca-file`), the
//! front-proxy CA (`requestheader-client-ca-file`), the names the front proxy's certificate
//! may have and the headers it uses (`requestheader-*`, JSON lists). What is there already
//! (another server's CAs and names) is kept: certificates and names are merged, expired
//! certificates dropped. Every server writes its own at start and checks every minute.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use api::core::ConfigMap;
use api::meta::ObjectMeta;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;

use crate::error::ApiError;
use crate::registry::{Part, Registry};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";

/// How often the ConfigMap is checked (and written again if something took its data out).
const RECHECK: Duration = Duration::from_secs(60);

/// What this server asks extension API servers to trust.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Info {
    /// PEM bundles.
    pub client_ca: String,
    pub request_header_ca: String,
    pub allowed_names: Vec<String>,
    pub extra_prefixes: Vec<String>,
    pub group_headers: Vec<String>,
    pub username_headers: Vec<String>,
}

impl Info {
    /// This server's: its cluster CA, its front-proxy CA, and kube-apiserver's usual
    /// `--requestheader-*` settings.
    pub fn of(pki: &crate::pki::Pki) -> Info {
        Info {
            client_ca: pki.ca_pem().to_string(),
            request_header_ca: pki.front_proxy_ca_pem().to_string(),
            allowed_names: vec![crate::pki::FRONT_PROXY_CLIENT_CN.into()],
            extra_prefixes: vec![super::EXTRA_HEADER_PREFIX.into()],
            group_headers: vec![super::GROUP_HEADER.into()],
            username_headers: vec![super::USER_HEADER.into()],
        }
    }
}

/// Writes this server's trust into the ConfigMap now and every [`RECHECK`].
pub fn start(registry: &Registry, pki: &crate::pki::Pki) {
    let registry = registry.with_manager("kube-apiserver");
    let info = Info::of(pki);
    smol::spawn(async move {
        loop {
            if let Err(e) = sync(&registry, &info).await {
                tracing::warn!(configmap = %format!("{NAMESPACE}/{NAME}"), error = %e, "writing the extension API servers' trust");
            }
            smol::Timer::after(RECHECK).await;
        }
    })
    .detach();
}

/// One pass: the ConfigMap's data merged with `info`, written if it changed.
pub async fn sync(registry: &Registry, info: &Info) -> Result<(), ApiError> {
    for _ in 0..5 {
        let current: Option<ConfigMap> = match registry.get(NAMESPACE, NAME).await {
            Ok(c) => Some(c),
            Err(e) if e.code() == 404 => None,
            Err(e) => return Err(e),
        };
        let existing = current.as_ref().map(|c| c.data.clone()).unwrap_or_default();
        let data = data_for(&combine(&read(&existing), info, SystemTime::now()));
        let result = match current {
            Some(c) if c.data == data => return Ok(()),
            Some(mut c) => {
                c.data = data;
                registry
                    .update(c, Some(NAMESPACE), NAME, Part::Main)
                    .await
                    .map(|_| ())
            }
            None => {
                let c = ConfigMap {
                    metadata: ObjectMeta {
                        name: NAME.into(),
                        namespace: Some(NAMESPACE.into()),
                        ..Default::default()
                    },
                    data,
                    ..Default::default()
                };
                registry.create(c, Some(NAMESPACE)).await.map(|_| ())
            }
        };
        match result {
            // Another server wrote it meanwhile: merge with what it wrote.
            Err(e) if e.code() == 409 => continue,
            other => return other,
        }
    }
    Err(ApiError::conflict(
        api::Kind::ConfigMap,
        NAME,
        "other servers keep writing it",
    ))
}

/// What a ConfigMap's data says (missing or malformed keys read as empty).
fn read(data: &BTreeMap<String, String>) -> Info {
    let list = |k: &str| -> Vec<String> {
        data.get(k)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default()
    };
    Info {
        client_ca: data.get("client-ca-file").cloned().unwrap_or_default(),
        request_header_ca: data
            .get("requestheader-client-ca-file")
            .cloned()
            .unwrap_or_default(),
        allowed_names: list("requestheader-allowed-names"),
        extra_prefixes: list("requestheader-extra-headers-prefix"),
        group_headers: list("requestheader-group-headers"),
        username_headers: list("requestheader-username-headers"),
    }
}

/// `existing` and `mine` together, as kube's `combinedClusterAuthenticationInfo`: lists
/// without repeats (existing first), certificates without repeats or those expired more
/// than five minutes ago.
fn combine(existing: &Info, mine: &Info, now: SystemTime) -> Info {
    let union = |a: &[String], b: &[String]| {
        let mut out: Vec<String> = Vec::new();
        for s in a.iter().chain(b) {
            if !out.contains(s) {
                out.push(s.clone());
            }
        }
        out
    };
    Info {
        client_ca: combine_certs(&existing.client_ca, &mine.client_ca, now),
        request_header_ca: combine_certs(&existing.request_header_ca, &mine.request_header_ca, now),
        allowed_names: union(&existing.allowed_names, &mine.allowed_names),
        extra_prefixes: union(&existing.extra_prefixes, &mine.extra_prefixes),
        group_headers: union(&existing.group_headers, &mine.group_headers),
        username_headers: union(&existing.username_headers, &mine.username_headers),
    }
}

/// Two PEM bundles as one, written as Go's `pem.Encode` writes certificates.
fn combine_certs(a: &str, b: &str, now: SystemTime) -> String {
    let five_minutes_ago = now - Duration::from_secs(300);
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut out = String::new();
    for cert in CertificateDer::pem_slice_iter(a.as_bytes())
        .chain(CertificateDer::pem_slice_iter(b.as_bytes()))
        .flatten()
    {
        if seen.iter().any(|s| s.as_slice() == cert.as_ref()) {
            continue;
        }
        let expired = x509_parser::parse_x509_certificate(&cert)
            .map(|(_, c)| {
                let until = c.validity().not_after.timestamp();
                SystemTime::UNIX_EPOCH + Duration::from_secs(until.max(0) as u64)
                    <= five_minutes_ago
            })
            .unwrap_or(true);
        if expired {
            continue;
        }
        out.push_str(&pem_encode(&cert));
        seen.push(cert.as_ref().to_vec());
    }
    out
}

fn pem_encode(der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The ConfigMap's data for `info`, as kube's `getConfigMapDataFor` writes it: the
/// `requestheader-*` keys only with a front-proxy CA.
fn data_for(info: &Info) -> BTreeMap<String, String> {
    let json = |v: &[String]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    let mut data = BTreeMap::new();
    if !info.client_ca.is_empty() {
        data.insert("client-ca-file".into(), info.client_ca.clone());
    }
    if !info.request_header_ca.is_empty() {
        data.insert(
            "requestheader-username-headers".into(),
            json(&info.username_headers),
        );
        data.insert(
            "requestheader-group-headers".into(),
            json(&info.group_headers),
        );
        data.insert(
            "requestheader-extra-headers-prefix".into(),
            json(&info.extra_prefixes),
        );
        data.insert(
            "requestheader-client-ca-file".into(),
            info.request_header_ca.clone(),
        );
        data.insert(
            "requestheader-allowed-names".into(),
            json(&info.allowed_names),
        );
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(name: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn the_data_kube_apiserver_writes() {
        let (client, front) = (ca("client"), ca("front"));
        let mine = Info {
            client_ca: client.clone(),
            request_header_ca: front.clone(),
            allowed_names: vec!["front-proxy-client".into()],
            extra_prefixes: vec!["X-Remote-Extra-".into()],
            group_headers: vec!["X-Remote-Group".into()],
            username_headers: vec!["X-Remote-User".into()],
        };
        let data = data_for(&combine(&Info::default(), &mine, SystemTime::now()));
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "client-ca-file",
                "requestheader-allowed-names",
                "requestheader-client-ca-file",
                "requestheader-extra-headers-prefix",
                "requestheader-group-headers",
                "requestheader-username-headers",
            ]
        );
        assert_eq!(
            data["requestheader-allowed-names"],
            r#"["front-proxy-client"]"#
        );
        assert_eq!(
            data["requestheader-extra-headers-prefix"],
            r#"["X-Remote-Extra-"]"#
        );
        assert_eq!(data["requestheader-group-headers"], r#"["X-Remote-Group"]"#);
        assert_eq!(
            data["requestheader-username-headers"],
            r#"["X-Remote-User"]"#
        );
        // Re-encoded as Go's pem.Encode writes it: the same certificate.
        let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(der(&data["client-ca-file"]), der(&client));
        assert!(data["requestheader-client-ca-file"].ends_with("-----END CERTIFICATE-----\n"));

        // A second server's CA and a name of its own join the first's.
        let other = Info {
            request_header_ca: ca("other"),
            allowed_names: vec!["other-proxy".into()],
            ..mine.clone()
        };
        let merged = combine(&read(&data), &other, SystemTime::now());
        assert_eq!(merged.allowed_names, ["front-proxy-client", "other-proxy"]);
        assert_eq!(
            CertificateDer::pem_slice_iter(merged.request_header_ca.as_bytes()).count(),
            2
        );
        // Merging again changes nothing.
        let again = combine(&merged, &other, SystemTime::now());
        assert_eq!(again, merged);
    }
}
