//! The built-in ingress proxy (on by default on every node, `--disable-ingress` turns it
//! off): serves the Ingresses of the IngressClasses whose controller is `skiff.io/ingress`
//! on the node's HTTP (80) and HTTPS (443) ports.
//!
//! ```text
//! watch Ingresses, IngressClasses, Services, Endpoints, Secrets ──> Objects
//!        every change ──> routes::build ──> Table (swapped whole) + certificates by Secret
//! :80  ──> http1 (httparse) ──> proxy::prepare ──> Table::route ──> endpoint (pooled keep-alive)
//! :443 ──> rustls (certificate by SNI from the Table) ──> the same
//! ```
//!
//! A change is applied as soon as its watch event arrives: requests already being forwarded
//! keep the upstream they were routed to, connections stay open, and the next request on
//! them is routed by the new table. A Secret's new certificate serves the next handshake.

mod http1;
mod proxy;
pub mod routes;
mod stream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use api::client::{Client, ClientError, WatchEvent};
use api::core::{Secret, Service};
use api::discovery::EndpointSlice;
use api::networking::{Ingress, IngressClass};
use api::object::Resource;
use futures_lite::StreamExt;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use routes::{Objects, Table};

/// Where the proxy listens.
#[derive(Clone, Debug)]
pub struct IngressConfig {
    pub http: SocketAddr,
    pub https: SocketAddr,
}

impl Default for IngressConfig {
    fn default() -> Self {
        IngressConfig {
            http: SocketAddr::from(([0, 0, 0, 0], 80)),
            https: SocketAddr::from(([0, 0, 0, 0], 443)),
        }
    }
}

/// The type of the Secrets that hold a TLS certificate and key.
const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// A parsed certificate and the Secret version it came from.
struct Cert {
    resource_version: String,
    key: Arc<CertifiedKey>,
}

/// What the watchers fill and the connections read.
pub struct Shared {
    objects: Mutex<Objects>,
    /// TLS Secrets only, by `(namespace, name)`.
    secrets: Mutex<BTreeMap<(String, String), Secret>>,
    table: RwLock<Arc<Table>>,
    /// By `namespace/name` of the Secret.
    certs: RwLock<BTreeMap<String, Cert>>,
    pool: Arc<proxy::Pool>,
    /// Secrets the table names that the Secrets watch has not shown, sent to be read by
    /// name: a node's watch shows only the Secrets it may read, and one an Ingress starts to
    /// name shows up there only on its next change. Each is asked for once while it is named.
    fetch: async_channel::Sender<(String, String)>,
    asked: Mutex<std::collections::BTreeSet<String>>,
}

impl Shared {
    fn new(fetch: async_channel::Sender<(String, String)>) -> Shared {
        Shared {
            objects: Mutex::default(),
            secrets: Mutex::default(),
            table: RwLock::default(),
            certs: RwLock::default(),
            pool: Arc::default(),
            fetch,
            asked: Mutex::default(),
        }
    }

    /// The current routing table.
    pub fn table(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Builds the table from the objects and (re)parses the certificates it names.
    fn rebuild(&self) {
        let table = {
            let objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
            routes::build(&objects)
        };
        let wanted: std::collections::BTreeSet<&String> = table.tls.values().collect();
        {
            let secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
            let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            asked.retain(|k| wanted.contains(k));
            for key in &wanted {
                let Some((ns, name)) = key.split_once('/') else {
                    continue;
                };
                let have = secrets.contains_key(&(ns.to_string(), name.to_string()));
                if !have && asked.insert((*key).clone()) {
                    let _ = self.fetch.try_send((ns.to_string(), name.to_string()));
                }
            }
            drop(asked);
            let mut certs = self.certs.write().unwrap_or_else(|e| e.into_inner());
            certs.retain(|k, _| wanted.contains(k));
            for key in wanted {
                let Some((ns, name)) = key.split_once('/') else {
                    continue;
                };
                let Some(secret) = secrets.get(&(ns.to_string(), name.to_string())) else {
                    certs.remove(key);
                    continue;
                };
                let rv = &secret.metadata.resource_version;
                if certs.get(key).is_some_and(|c| &c.resource_version == rv) {
                    continue;
                }
                match certified_key(secret) {
                    Ok(k) => {
                        tracing::info!(secret = %key, "ingress: loaded the TLS certificate");
                        certs.insert(
                            key.clone(),
                            Cert {
                                resource_version: rv.clone(),
                                key: Arc::new(k),
                            },
                        );
                    }
                    Err(e) => {
                        tracing::warn!(secret = %key, "ingress: unusable TLS Secret: {e}");
                        certs.remove(key);
                    }
                }
            }
        }
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
    }
}

/// The certificate chain and key of a kubernetes.io/tls Secret (`tls.crt`, `tls.key`).
fn certified_key(secret: &Secret) -> Result<CertifiedKey, String> {
    let crt = secret.data.get("tls.crt").ok_or("no tls.crt")?;
    let key = secret.data.get("tls.key").ok_or("no tls.key")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&crt.0)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.crt: {e}"))?;
    if chain.is_empty() {
        return Err("tls.crt holds no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(&key.0).map_err(|e| format!("tls.key: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("tls.key: {e}"))?;
    Ok(CertifiedKey::new(chain, signer))
}

/// Chooses the certificate by the client's SNI, from the current table.
#[derive(Debug)]
struct SniResolver(Arc<Shared>);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?;
        let table = self.0.table();
        let secret = table.secret_for(name)?;
        let certs = self.0.certs.read().unwrap_or_else(|e| e.into_inner());
        certs.get(secret).map(|c| c.key.clone())
    }
}

/// How a watched kind goes into the shared objects.
trait Watched: Resource + Send + 'static {
    fn set_all(shared: &Shared, all: Vec<Self>);
    fn put(shared: &Shared, o: Self);
    fn remove(shared: &Shared, o: &Self);
}

fn key_of<K: Resource>(o: &K) -> (String, String) {
    (o.meta().namespace().to_string(), o.meta().name.clone())
}

macro_rules! watched_in_objects {
    ($ty:ty, $field:ident, $key:expr) => {
        impl Watched for $ty {
            fn set_all(shared: &Shared, all: Vec<Self>) {
                let mut o = shared.objects.lock().unwrap_or_else(|e| e.into_inner());
                o.$field = all.into_iter().map(|x| ($key(&x), x)).collect();
            }
            fn put(shared: &Shared, x: Self) {
                let mut o = shared.objects.lock().unwrap_or_else(|e| e.into_inner());
                o.$field.insert($key(&x), x);
            }
            fn remove(shared: &Shared, x: &Self) {
                let mut o = shared.objects.lock().unwrap_or_else(|e| e.into_inner());
                o.$field.remove(&$key(x));
            }
        }
    };
}

watched_in_objects!(Ingress, ingresses, key_of);
watched_in_objects!(Service, services, key_of);
/// As ingress controllers do, a Service's endpoints come from its EndpointSlices.
impl Watched for EndpointSlice {
    fn set_all(shared: &Shared, all: Vec<Self>) {
        let mut o = shared.objects.lock().unwrap_or_else(|e| e.into_inner());
        o.slices.set_all(all);
        o.endpoints = o
            .slices
            .all_endpoints()
            .into_iter()
            .map(|e| (key_of(&e), e))
            .collect();
    }
    fn put(shared: &Shared, x: Self) {
        let mut o = shared.objects.lock().unwrap_or_else(|e| e.into_inner());
        for service in o.slices.put(x) {
            refresh_endpoints(&mut o, service);
        }
    }
    fn remove(shared: &Shared, x: &Self) {
        let mut o = shared.objects.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(service) = o.slices.remove(x) {
            refresh_endpoints(&mut o, service);
        }
    }
}

fn refresh_endpoints(o: &mut routes::Objects, service: api::discovery::ServiceKey) {
    match o.slices.endpoints(&service) {
        Some(e) => {
            o.endpoints.insert(service, e);
        }
        None => {
            o.endpoints.remove(&service);
        }
    }
}
watched_in_objects!(IngressClass, classes, |c: &IngressClass| c
    .metadata
    .name
    .clone());

impl Watched for Secret {
    fn set_all(shared: &Shared, all: Vec<Self>) {
        let mut s = shared.secrets.lock().unwrap_or_else(|e| e.into_inner());
        *s = all
            .into_iter()
            .filter(|x| x.type_.as_deref() == Some(TLS_SECRET_TYPE))
            .map(|x| (key_of(&x), x))
            .collect();
    }
    fn put(shared: &Shared, x: Self) {
        let mut s = shared.secrets.lock().unwrap_or_else(|e| e.into_inner());
        if x.type_.as_deref() == Some(TLS_SECRET_TYPE) {
            s.insert(key_of(&x), x);
        } else {
            s.remove(&key_of(&x));
        }
    }
    fn remove(shared: &Shared, x: &Self) {
        let mut s = shared.secrets.lock().unwrap_or_else(|e| e.into_inner());
        s.remove(&key_of(x));
    }
}

/// Reads the Secrets the table names that the watch has not shown (see [`Shared::fetch`]).
async fn fetch_secrets(
    client: Client,
    shared: Arc<Shared>,
    wanted: async_channel::Receiver<(String, String)>,
) {
    while let Ok((ns, name)) = wanted.recv().await {
        match client.get::<Secret>(&ns, &name).await {
            Ok(secret) => {
                Secret::put(&shared, secret);
                shared.rebuild();
            }
            // It shows up in the watch once it exists.
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(secret = %format!("{ns}/{name}"), "ingress: reading a TLS Secret: {e}; trying again");
                let shared = shared.clone();
                smol::spawn(async move {
                    smol::Timer::after(Duration::from_secs(2)).await;
                    let key = format!("{ns}/{name}");
                    shared
                        .asked
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                    shared.rebuild();
                })
                .detach();
            }
        }
    }
}

/// Keeps one kind in `shared` from a list then watches; any error lists again after a
/// pause (as the DNS server's watchers do).
async fn reflect<K: Watched>(client: Client, shared: Arc<Shared>) {
    let kind = K::KIND.info().plural;
    let mut pause = Duration::from_millis(200);
    loop {
        match list_and_watch::<K>(&client, &shared).await {
            Ok(()) => pause = Duration::from_millis(200),
            Err(e) => {
                tracing::warn!("ingress: watching {kind}: {e}; listing again");
                smol::Timer::after(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn list_and_watch<K: Watched>(client: &Client, shared: &Shared) -> Result<(), ClientError> {
    let (items, mut version) = client.list::<K>(None, None, None).await?;
    K::set_all(shared, items);
    shared.rebuild();
    loop {
        let mut events = client
            .watch::<K>(None, &version, None, None, Some(Duration::from_secs(300)))
            .await?;
        while let Some(event) = events.next().await {
            let event = event?;
            if let Some(v) = event
                .object()
                .map(|o| o.meta().resource_version.clone())
                .filter(|v| !v.is_empty())
            {
                version = v;
            }
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => K::put(shared, o),
                WatchEvent::Deleted(o) => K::remove(shared, &o),
                WatchEvent::Bookmark { resource_version } => {
                    version = resource_version;
                    continue;
                }
            }
            shared.rebuild();
        }
    }
}

/// Binds the ports and starts the watchers and the listeners on the current executor.
/// A port that cannot be bound is an error (the caller logs it; the node runs on).
pub async fn start(client: Client, cfg: IngressConfig) -> std::io::Result<()> {
    let http = smol::Async::<std::net::TcpListener>::bind(cfg.http)?;
    let https = smol::Async::<std::net::TcpListener>::bind(cfg.https)?;
    let (fetch, to_fetch) = async_channel::unbounded();
    let shared = Arc::new(Shared::new(fetch));
    smol::spawn(fetch_secrets(client.clone(), shared.clone(), to_fetch)).detach();
    smol::spawn(reflect::<IngressClass>(client.clone(), shared.clone())).detach();
    smol::spawn(reflect::<Ingress>(client.clone(), shared.clone())).detach();
    smol::spawn(reflect::<Service>(client.clone(), shared.clone())).detach();
    smol::spawn(reflect::<EndpointSlice>(client.clone(), shared.clone())).detach();
    smol::spawn(reflect::<Secret>(client, shared.clone())).detach();

    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(SniResolver(shared.clone())));
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = futures_rustls::TlsAcceptor::from(Arc::new(tls));

    tracing::info!(http = %cfg.http, https = %cfg.https, "ingress proxy listening");
    smol::spawn(accept_loop(http, shared.clone(), None)).detach();
    smol::spawn(accept_loop(https, shared, Some(acceptor))).detach();
    Ok(())
}

async fn accept_loop(
    listener: smol::Async<std::net::TcpListener>,
    shared: Arc<Shared>,
    tls: Option<futures_rustls::TlsAcceptor>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                tracing::warn!("ingress: accept: {e}");
                smol::Timer::after(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.get_ref().set_nodelay(true);
        let tcp = stream::Stream::new(tcp);
        // One connection per turn of the executor (nginx's `multi_accept off`): a burst of
        // new connections, each a TLS handshake's worth of work, then queues in the kernel
        // instead of ahead of the requests of the connections already served.
        futures_lite::future::yield_now().await;
        let shared = shared.clone();
        let tls = tls.clone();
        smol::spawn(async move {
            match tls {
                None => proxy::serve(tcp, shared, peer, false).await,
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(s) => proxy::serve(s, shared, peer, true).await,
                    Err(e) => tracing::debug!(%peer, error = %e, "ingress: TLS handshake failed"),
                },
            }
        })
        .detach();
    }
}
