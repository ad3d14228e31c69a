//! Layers shared inside a site (docs/design/site-images.md): with `--share-images`, a node
//! that lacks a layer asks the layer's *home* among the nodes of its site (same
//! `topology.kubernetes.io/zone` label) before the registry, so a site fetches each layer
//! from upstream once.
//!
//! The home of a layer is chosen by rendezvous hashing ([`home`]): every node computes the
//! same one without talking to the others. A home asked for a blob it lacks fetches it from
//! the registry itself; downloads of one blob are single-flight ([`Flights`]), whether for
//! a local pull or for a peer. A peer that fails in any way (unreachable, an error answer,
//! content that is not the digest) costs only a fallback to the registry.
//!
//! Blobs travel over the agents' HTTPS port, `GET /skiff/v1/blobs/<digest>?image=&size=`,
//! with mutual TLS on the node certificates (see [`crate::node::blobs`] for the serving
//! side). The receiver checks size and digest while streaming, as from a registry.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::core::Node;
use api::transport::{Options, Transport};
use rustls::pki_types::ServerName;

use super::error::{ImageError, IoContext};
use super::http::Url;
use super::oci::Descriptor;
use super::{lock, reference, registry, ImageStore, PullOptions, Reference, RegistryConfig};

/// The label whose value names a node's site.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The Node annotation an agent publishes: `"true"` when it shares images (only such nodes
/// are asked for layers), `"false"` otherwise.
pub const SHARING_ANNOTATION: &str = "images.skiff.io/share-images";
/// The path prefix of the blob endpoint on the agents' port.
pub const BLOB_PATH: &str = "/skiff/v1/blobs/";
/// How long the list of the site's nodes is kept.
const MEMBERS_TTL: Duration = Duration::from_secs(30);
/// How long an empty list is kept when the API server could not be asked.
const MEMBERS_RETRY: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the next bytes from a home, which may first fetch the blob upstream.
const PEER_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// A node of the site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// Where its agent's port is; `None` for this node.
    pub address: Option<SocketAddr>,
}

/// The rendezvous weight of `node` for `digest`: the first 8 bytes of
/// SHA-256(node, 0, digest), big-endian.
fn weight(node: &str, digest: &str) -> u64 {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(node.as_bytes());
    ctx.update(&[0]);
    ctx.update(digest.as_bytes());
    let d = ctx.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// The home of `digest` among `nodes`: the one of highest weight (ties to the smaller
/// name); `None` for no nodes.
pub fn home<'a>(nodes: impl IntoIterator<Item = &'a str>, digest: &str) -> Option<&'a str> {
    nodes.into_iter().max_by(|a, b| {
        weight(a, digest)
            .cmp(&weight(b, digest))
            .then_with(|| b.cmp(a))
    })
}

/// One download that others wait for: its leader holds the lock until the result is in.
type Slot = smol::lock::Mutex<Option<Result<(), ImageError>>>;

/// Single-flight downloads by key (a blob digest).
#[derive(Default)]
pub struct Flights {
    inflight: Mutex<HashMap<String, Arc<Slot>>>,
}

/// Removes a finished (or cancelled) download from the map.
struct Landed<'a> {
    flights: &'a Flights,
    key: &'a str,
}

impl Drop for Landed<'_> {
    fn drop(&mut self) {
        lock(&self.flights.inflight).remove(self.key);
    }
}

impl Flights {
    /// Runs `work` unless a download of `key` is in flight, in which case it waits for that
    /// one and answers its success; if that one failed (maybe for want of credentials this
    /// caller has), it runs `work` itself.
    pub async fn once<F>(&self, key: &str, work: F) -> Result<(), ImageError>
    where
        F: Future<Output = Result<(), ImageError>>,
    {
        let mut work = Some(work);
        loop {
            let (slot, leader) = {
                let mut inflight = lock(&self.inflight);
                match inflight.get(key) {
                    Some(s) => (s.clone(), None),
                    None => {
                        let s: Arc<Slot> = Arc::new(smol::lock::Mutex::new(None));
                        // A new mutex is free: the leader holds it until the result is in.
                        let guard = s.try_lock_arc();
                        if guard.is_some() {
                            inflight.insert(key.to_string(), s.clone());
                        }
                        (s, guard)
                    }
                }
            };
            match leader {
                None => {
                    let succeeded = slot.lock().await.as_ref().map(Result::is_ok);
                    match succeeded {
                        Some(true) => return Ok(()),
                        Some(false) => return work.take().expect("run once").await,
                        // The leader was cancelled: try again (maybe as the leader).
                        None => smol::future::yield_now().await,
                    }
                }
                Some(mut done) => {
                    let _landed = Landed { flights: self, key };
                    let result = work.take().expect("run once").await;
                    *done = Some(result.clone());
                    return result;
                }
            }
        }
    }
}

/// This node's part in its site: finding the site's nodes, fetching layers from their
/// homes, and the single-flight downloads into the store's blob area that local pulls and
/// peers share.
pub struct Site {
    node_name: String,
    client: api::client::Client,
    /// The node's client certificate and the cluster CA.
    tls: Arc<rustls::ClientConfig>,
    store: ImageStore,
    /// The node's own registry configuration, for blobs fetched for peers.
    fetch: PullOptions,
    members: Mutex<Option<(Instant, Vec<Member>)>>,
    flights: Flights,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// The member a Node makes: Ready, sharing images, with an InternalIP and an agent port;
/// `me` without an address.
fn member_of(node: &Node, me: &str) -> Option<Member> {
    let name = node.metadata.name.clone();
    if name == me {
        return Some(Member {
            name,
            address: None,
        });
    }
    let ready = node
        .status
        .condition("Ready")
        .is_some_and(|c| c.status == "True");
    let sharing = node.metadata.annotations.get(SHARING_ANNOTATION);
    if sharing.map(String::as_str) != Some("true") {
        return None;
    }
    let ip: std::net::IpAddr = node.status.address("InternalIP")?.parse().ok()?;
    let port = node
        .status
        .daemon_endpoints
        .as_ref()?
        .kubelet_endpoint
        .as_ref()?
        .port;
    let port = u16::try_from(port).ok().filter(|p| *p > 0)?;
    ready.then(|| Member {
        name,
        address: Some(SocketAddr::new(ip, port)),
    })
}

impl Site {
    /// The site of node `node_name`, whose API client is `client`; `tls` holds its node
    /// certificate and the cluster CA, `registries` its registry configuration.
    pub fn new(
        node_name: &str,
        client: api::client::Client,
        tls: Arc<rustls::ClientConfig>,
        store: ImageStore,
        registries: RegistryConfig,
    ) -> Site {
        Site {
            node_name: node_name.to_string(),
            client,
            tls,
            store,
            fetch: PullOptions {
                registries,
                platform: None,
                site: None,
            },
            members: Mutex::new(None),
            flights: Flights::default(),
        }
    }

    /// The nodes of this node's site, itself included (alone when it has no zone label or
    /// the API server cannot be asked). Kept for 30 s.
    pub async fn members(&self) -> Vec<Member> {
        if let Some((at, m)) = lock(&self.members).as_ref() {
            let ttl = if m.len() > 1 {
                MEMBERS_TTL
            } else {
                MEMBERS_RETRY
            };
            if at.elapsed() < ttl {
                return m.clone();
            }
        }
        let mut found = match self.list_members().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("image sharing: cannot list the site's nodes: {e}");
                Vec::new()
            }
        };
        if !found.iter().any(|m| m.name == self.node_name) {
            found.push(Member {
                name: self.node_name.clone(),
                address: None,
            });
        }
        *lock(&self.members) = Some((Instant::now(), found.clone()));
        found
    }

    async fn list_members(&self) -> Result<Vec<Member>, api::client::ClientError> {
        let me: Node = self.client.get("", &self.node_name).await?;
        let Some(zone) = me.metadata.labels.get(ZONE_LABEL) else {
            return Ok(Vec::new());
        };
        let selector = format!("{ZONE_LABEL}={zone}");
        let (nodes, _) = self
            .client
            .list::<Node>(None, Some(&selector), None)
            .await?;
        Ok(nodes
            .iter()
            .filter_map(|n| member_of(n, &self.node_name))
            .collect())
    }

    /// The compressed blob of layer `d` of `image` in the store's blob area, kept there: if
    /// not there already, from the layer's home when that is another node, else (or when the
    /// home fails) downloaded by `download` into `tmp` (from the registry), once however
    /// many ask at a time. `None` when this node is in no site (alone in it): the pull
    /// goes on as without sharing, keeping nothing.
    pub(crate) async fn layer_blob<F>(
        &self,
        image: &Reference,
        d: &Descriptor,
        tmp: &Path,
        download: F,
    ) -> Result<Option<PathBuf>, ImageError>
    where
        F: Future<Output = Result<(), ImageError>>,
    {
        let path = self.store.blob_path(&d.digest);
        if path.is_file() {
            return Ok(Some(path));
        }
        let members = Box::pin(self.members()).await;
        if members.len() < 2 {
            return Ok(None);
        }
        let home = home(members.iter().map(|m| m.name.as_str()), &d.digest);
        let peer = members
            .iter()
            .find(|m| Some(m.name.as_str()) == home && m.address.is_some());
        // From the home first; the registry if it fails: one attempt for all who ask.
        let from_home = async {
            if let Some(peer) = peer {
                match Box::pin(self.fetch_from_peer(peer, image, d, tmp)).await {
                    Ok(()) => return Ok(()),
                    Err(e) => tracing::warn!(
                        image = %image, layer = %d.digest, peer = %peer.name,
                        "the layer's home failed, pulling it from the registry: {e}"
                    ),
                }
            }
            download.await
        };
        self.keep(&d.digest, tmp, from_home).await?;
        Ok(Some(path))
    }

    /// Runs `download` (into `tmp`) as the one download of `digest`, and moves its result
    /// into the blob area.
    async fn keep<F>(&self, digest: &str, tmp: &Path, download: F) -> Result<(), ImageError>
    where
        F: Future<Output = Result<(), ImageError>>,
    {
        let path = self.store.blob_path(digest);
        let work = async {
            if path.is_file() {
                return Ok(());
            }
            let result = download.await.and_then(|()| {
                std::fs::rename(tmp, &path)
                    .ctx(|| format!("cannot move a blob to {}", path.display()))
            });
            let _ = std::fs::remove_file(tmp);
            result
        };
        self.flights.once(digest, work).await
    }

    /// Fetches layer `d` from `peer` into `tmp`, checking size and digest.
    async fn fetch_from_peer(
        &self,
        peer: &Member,
        image: &Reference,
        d: &Descriptor,
        tmp: &Path,
    ) -> Result<(), ImageError> {
        let source = format!("peer {}", peer.name);
        let net = |detail: String| ImageError::Network {
            registry: source.clone(),
            detail,
        };
        let addr = peer.address.ok_or_else(|| net("no address".into()))?;
        let mut url = Url::parse(&format!("https://{addr}{BLOB_PATH}{}", d.digest))
            .map_err(|e| net(format!("bad URL: {e}")))?;
        url.query_pairs_mut()
            .append_pair("image", &image.to_string())
            .append_pair("size", &d.size.to_string());
        let name = ServerName::try_from(peer.name.clone())
            .map_err(|e| net(format!("node name {:?}: {e}", peer.name)))?;
        let http = Transport::new(
            self.tls.clone(),
            Options {
                server_name: Some(name),
                connect_timeout: CONNECT_TIMEOUT,
                read_timeout: Some(PEER_READ_TIMEOUT),
                user_agent: "skiff-agent".into(),
                ..Default::default()
            },
        );
        let mut resp = http
            .send("GET", &url, &[], b"")
            .await
            .map_err(|e| net(e.to_string()))?;
        if resp.status != 200 {
            let body = resp.bytes(4096).await.unwrap_or_default();
            return Err(ImageError::Registry {
                registry: source.clone(),
                status: resp.status,
                what: format!("layer {}", d.digest),
                detail: String::from_utf8_lossy(&body).trim().to_string(),
            });
        }
        registry::write_verified(&mut resp, d, tmp, &source).await
    }

    /// The blob `digest` (of `size` bytes, 0 if unknown) of `image`, for a peer: from the
    /// blob area, or fetched from the registry with this node's registry configuration (once
    /// for all who ask at a time) and kept. Answers the open file and its length.
    pub async fn blob_for_peer(
        &self,
        digest: &str,
        image: &str,
        size: u64,
    ) -> Result<(std::fs::File, u64), ImageError> {
        reference::check_digest(digest).map_err(|reason| ImageError::InvalidReference {
            reference: digest.to_string(),
            reason,
        })?;
        let r = Reference::parse(image).map_err(|reason| ImageError::InvalidReference {
            reference: image.to_string(),
            reason,
        })?;
        let d = Descriptor {
            digest: digest.to_string(),
            size,
            ..Default::default()
        };
        // Kept from garbage collection until the file is open.
        let mut pins = self.store.pins();
        pins.add(digest);
        let path = self.store.blob_path(digest);
        if !path.is_file() {
            let tmp = self.store.temp_path("download");
            let download = Box::pin(registry::fetch_blob(&r, &d, &self.fetch, &tmp));
            self.keep(digest, &tmp, download).await?;
        }
        let file = std::fs::File::open(&path).ctx(|| format!("cannot open {}", path.display()))?;
        let len = file
            .metadata()
            .ctx(|| format!("cannot read {}", path.display()))?
            .len();
        Ok((file, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_home_is_the_same_whatever_the_order() {
        let nodes = ["a", "b", "c", "d", "e"];
        let mut homes = std::collections::BTreeMap::new();
        for i in 0..200 {
            let digest = format!("sha256:{i:064x}");
            let h = home(nodes, &digest).unwrap();
            let reversed: Vec<&str> = nodes.iter().rev().copied().collect();
            assert_eq!(home(reversed, &digest), Some(h));
            *homes.entry(h).or_insert(0) += 1;
        }
        // Spread over all the nodes, none with most of them.
        assert_eq!(homes.len(), 5, "{homes:?}");
        assert!(homes.values().all(|n| *n < 80), "{homes:?}");
        assert_eq!(home(Vec::<&str>::new(), "sha256:0"), None);
    }

    #[test]
    fn removing_a_node_moves_only_its_layers() {
        let all = ["a", "b", "c", "d"];
        let fewer = ["a", "b", "d"];
        for i in 0..100 {
            let digest = format!("sha256:{i:064x}");
            let before = home(all, &digest).unwrap();
            if before != "c" {
                assert_eq!(home(fewer, &digest), Some(before));
            }
        }
    }

    #[test]
    fn concurrent_downloads_of_one_key_run_once() {
        let flights = Flights::default();
        let counter = AtomicUsize::new(0);
        let runs = &counter;
        let work = move || async move {
            runs.fetch_add(1, Ordering::SeqCst);
            smol::Timer::after(Duration::from_millis(50)).await;
            Ok(())
        };
        let results = smol::block_on(futures_lite::future::zip(
            futures_lite::future::zip(flights.once("k", work()), flights.once("k", work())),
            flights.once("other", work()),
        ));
        assert!(results.0 .0.is_ok() && results.0 .1.is_ok() && results.1.is_ok());
        assert_eq!(runs.load(Ordering::SeqCst), 2, "one run per key");
        // Finished flights are forgotten: a later one runs again.
        smol::block_on(flights.once("k", work())).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert!(lock(&flights.inflight).is_empty());
    }

    #[test]
    fn a_failed_download_lets_the_waiters_try_themselves() {
        let flights = Flights::default();
        let runs = AtomicUsize::new(0);
        let failing = async {
            runs.fetch_add(1, Ordering::SeqCst);
            smol::Timer::after(Duration::from_millis(50)).await;
            Err(ImageError::Config("no".into()))
        };
        let working = async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        let (a, b) = smol::block_on(futures_lite::future::zip(
            flights.once("k", failing),
            flights.once("k", working),
        ));
        assert!(a.is_err());
        assert!(b.is_ok());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn members_are_ready_nodes_with_an_address_and_a_port() {
        let node = |name: &str, ready: &str, port: i32| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "annotations": {SHARING_ANNOTATION: "true"}},
                "status": {
                    "conditions": [{"type": "Ready", "status": ready}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                },
            }))
            .unwrap()
        };
        assert_eq!(
            member_of(&node("b", "True", 10250), "a"),
            Some(Member {
                name: "b".into(),
                address: Some("10.0.0.7:10250".parse().unwrap()),
            })
        );
        assert_eq!(member_of(&node("b", "Unknown", 10250), "a"), None);
        assert_eq!(member_of(&node("b", "True", 0), "a"), None);
        let mut not_sharing = node("b", "True", 10250);
        not_sharing.metadata.annotations.clear();
        assert_eq!(member_of(&not_sharing, "a"), None);
        assert_eq!(
            member_of(&node("a", "Unknown", 0), "a"),
            Some(Member {
                name: "a".into(),
                address: None
            })
        );
    }
}
