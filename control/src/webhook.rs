//! Calling a webhook: the API server as a client of an extension (a custom resource's
//! conversion webhook; admission webhooks use the same client). A `WebhookClientConfig` names
//! either a URL or a Service; a Service is resolved per call to one of its ready endpoints
//! (as kube-apiserver does with `--enable-aggregator-routing`, so it works without a service
//! proxy on the server's machine), and its certificate is verified for
//! `<name>.<namespace>.svc` against the `caBundle` (the system's roots when there is none).
//! One JSON POST per call, with a deadline over the whole exchange.

use std::sync::Arc;
use std::time::Duration;

use api::apiextensions::WebhookClientConfig;
use api::core::{Endpoints, Service};
use api::transport::Url;
use api::transport::{Options, Transport};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use crate::registry::Registry;

/// Where the system's trusted roots are on Debian and most distributions.
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The largest answer read from a webhook.
const MAX_ANSWER: usize = 64 << 20;

/// Why a call failed, worded as client-go words it (kube-apiserver wraps it in its own
/// message: `conversion webhook for ... failed: Post "https://...": ...`).
#[derive(Debug, Clone)]
pub struct WebhookError {
    pub message: String,
    /// The webhook was not reached in time (admission reports these apart).
    pub timed_out: bool,
}

impl std::fmt::Display for WebhookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Where a webhook is.
#[derive(Debug)]
enum Target {
    Url(Url),
    Service {
        namespace: String,
        name: String,
        port: i32,
        path: String,
    },
}

/// A webhook's client, made once from its configuration and kept while it is unchanged.
pub struct Webhook {
    target: Target,
    transport: Transport,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("target", &self.target)
            .finish()
    }
}

impl Webhook {
    /// The client of `config` (already validated when its object was stored).
    pub fn new(config: &WebhookClientConfig) -> Result<Webhook, String> {
        let target = match (&config.url, &config.service) {
            (Some(u), None) => Target::Url(Url::parse(u).map_err(|e| format!("url: {e}"))?),
            (None, Some(s)) => Target::Service {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                port: s.port.unwrap_or(443),
                path: s.path.clone().unwrap_or_default(),
            },
            _ => return Err("exactly one of url or service is required".into()),
        };
        let server_name = match &target {
            Target::Service {
                namespace, name, ..
            } => Some(
                ServerName::try_from(format!("{name}.{namespace}.svc"))
                    .map_err(|e| format!("service name: {e}"))?,
            ),
            Target::Url(_) => None,
        };
        let tls = tls_config(config.ca_bundle.as_ref().map(|b| b.0.as_slice()))?;
        let transport = Transport::new(
            Arc::new(tls),
            Options {
                server_name,
                connect_timeout: Duration::from_secs(10),
                read_timeout: None,
                // As client-go's transports keep them (utilnet.SetTransportDefaults).
                pool_size: 25,
                user_agent: concat!("skiff/", env!("CARGO_PKG_VERSION")).into(),
            },
        );
        Ok(Webhook { target, transport })
    }

    /// POSTs `body` and returns the JSON answer; the whole exchange (resolving, connecting,
    /// the answer) ends at `timeout`.
    pub async fn post(
        &self,
        registry: &Registry,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, WebhookError> {
        let call = self.call(registry, body, timeout);
        let deadline = async {
            smol::Timer::after(timeout).await;
            Err(WebhookError {
                message: format!(
                    "Post \"{}\": context deadline exceeded",
                    self.display_url(timeout)
                ),
                timed_out: true,
            })
        };
        futures_lite::future::or(call, deadline).await
    }

    /// The URL as client-go shows it in errors (a Service by its DNS name).
    fn display_url(&self, timeout: Duration) -> String {
        let t = timeout.as_secs();
        match &self.target {
            Target::Url(u) => format!("{u}?timeout={t}s"),
            Target::Service {
                namespace,
                name,
                port,
                path,
            } => format!("https://{name}.{namespace}.svc:{port}{path}?timeout={t}s"),
        }
    }

    async fn call(
        &self,
        registry: &Registry,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, WebhookError> {
        let shown = self.display_url(timeout);
        let fail = |why: String| WebhookError {
            message: format!("Post \"{shown}\": {why}"),
            timed_out: false,
        };
        let url = match &self.target {
            Target::Url(u) => u.clone(),
            Target::Service {
                namespace,
                name,
                port,
                path,
            } => {
                let (host, target_port) =
                    resolve(registry, namespace, name, *port)
                        .await
                        .map_err(|message| WebhookError {
                            message,
                            timed_out: false,
                        })?;
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                Url::parse(&format!("https://{host}:{target_port}{path}"))
                    .map_err(|e| fail(e.to_string()))?
            }
        };
        let bytes = serde_json::to_vec(body).map_err(|e| fail(e.to_string()))?;
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, */*"),
        ];
        let mut answer = self
            .transport
            .send("POST", &url, &headers, &bytes)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = answer.status;
        let body = answer
            .bytes(MAX_ANSWER)
            .await
            .map_err(|e| fail(e.to_string()))?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body);
            return Err(WebhookError {
                message: format!(
                    "the server responded with the status code {status} but did not return more information: {}",
                    text.trim()
                ),
                timed_out: false,
            });
        }
        serde_json::from_slice(&body).map_err(|e| WebhookError {
            message: format!("decoding the webhook's answer: {e}"),
            timed_out: false,
        })
    }
}

/// A ready endpoint of the Service's `port`: its address and the port it listens on, taken
/// in turn among the ready addresses that serve the port (kube's resolver picks one at
/// random), as the webhook client and the aggregator's proxy reach their Services.
pub async fn resolve(
    registry: &Registry,
    namespace: &str,
    name: &str,
    port: i32,
) -> Result<(String, i32), String> {
    let service: Service = registry
        .get(namespace, name)
        .await
        .map_err(|_| format!("service \"{name}\" not found"))?;
    if service.spec.type_.as_deref() == Some("ExternalName") {
        let host = service.spec.external_name.clone().unwrap_or_default();
        return Ok((host, port));
    }
    let svc_port = service
        .spec
        .ports
        .iter()
        .find(|p| p.port == port)
        .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
    let endpoints: Endpoints = registry
        .get(namespace, name)
        .await
        .map_err(|_| format!("endpoints for service/{name} in \"{namespace}\" not found"))?;
    let want = svc_port.name.as_deref().unwrap_or("");
    let ready: Vec<(&str, i32)> = endpoints
        .subsets
        .iter()
        .filter_map(|subset| {
            let p = subset
                .ports
                .iter()
                .find(|p| p.name.as_deref().unwrap_or("") == want)?;
            Some(
                subset
                    .addresses
                    .iter()
                    .map(move |a| (a.ip.as_str(), p.port)),
            )
        })
        .flatten()
        .collect();
    if ready.is_empty() {
        return Err(format!("no endpoints available for service \"{name}\""));
    }
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % ready.len();
    let (ip, port) = ready[i];
    Ok((ip.to_string(), port))
}

/// The roots of `ca` (PEM), or the system's roots without one.
pub fn root_store(ca: Option<&[u8]>) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let system;
    let pem = match ca {
        Some(ca) if !ca.is_empty() => ca,
        _ => {
            system = std::fs::read(SYSTEM_ROOTS).unwrap_or_default();
            &system
        }
    };
    for cert in CertificateDer::pem_slice_iter(pem).flatten() {
        let _ = roots.add(cert);
    }
    roots
}

/// Trusts `ca` (PEM), or the system's roots without one.
fn tls_config(ca: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    let roots = root_store(ca);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}
