//! ServiceAccounts: the controller that keeps a `default` ServiceAccount in every namespace
//! (kube-controller-manager's serviceaccount controller), and bound tokens: issued through
//! the TokenRequest subresource, authenticated as `system:serviceaccount:NS:NAME` in the
//! groups `system:serviceaccounts` and `system:serviceaccounts:NS`.

pub mod token;

use std::sync::{Arc, OnceLock};

use api::core::{Namespace, Pod, ServiceAccount};
use api::meta::ObjectMeta;
use api::Kind;

use crate::auth::{TokenAuthenticator, User};
use crate::machinery::informer::Cache;
use crate::machinery::Context;
use token::{Claims, SigningKey};

/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";
/// The group of every ServiceAccount.
pub const ALL_GROUP: &str = "system:serviceaccounts";

/// The user name of ServiceAccount `name` in `namespace`.
pub fn user_name(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Issues and verifies bound tokens against the live ServiceAccounts and pods.
pub struct Tokens {
    key: SigningKey,
    /// The controllers' cache, once started; until then no token authenticates.
    cache: OnceLock<Cache>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").finish_non_exhaustive()
    }
}

impl Tokens {
    pub fn new(key: SigningKey) -> Arc<Tokens> {
        Arc::new(Tokens {
            key,
            cache: OnceLock::new(),
        })
    }

    /// Starts checking tokens' ServiceAccounts and pods in `cache`.
    pub fn set_cache(&self, cache: Cache) {
        let _ = self.cache.set(cache);
    }

    /// A signed token for `sa`, optionally bound to `pod`, valid from `now` for `seconds`.
    pub fn issue(
        &self,
        sa: &ServiceAccount,
        pod: Option<&Pod>,
        audiences: Vec<String>,
        now: i64,
        seconds: i64,
    ) -> String {
        let r = |m: &ObjectMeta| token::Ref {
            name: m.name.clone(),
            uid: m.uid.clone(),
        };
        let claims = Claims::new(
            sa.metadata.namespace(),
            r(&sa.metadata),
            pod.map(|p| r(&p.metadata)),
            audiences,
            now,
            seconds,
        );
        self.key.sign(&claims)
    }

    /// The ServiceAccount user of `token` if it verifies for one of `audiences` and its
    /// ServiceAccount (and bound pod) still exist with the uids it names.
    pub fn authenticate(&self, token: &str, audiences: &[String]) -> Option<User> {
        let claims = match self.key.verify(token, audiences, token::unix_now()) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("service account token refused: {e}");
                return None;
            }
        };
        let cache = self.cache.get()?;
        let k = &claims.kubernetes;
        let live = |m: &ObjectMeta, uid: &str| m.uid == uid && m.deletion_timestamp.is_none();
        let sa: ServiceAccount = cache.get(&k.namespace, &k.serviceaccount.name)?;
        if !live(&sa.metadata, &k.serviceaccount.uid) {
            tracing::debug!(sa = %k.serviceaccount.name, "token of a replaced service account");
            return None;
        }
        if let Some(p) = &k.pod {
            let pod: Pod = cache.get(&k.namespace, &p.name)?;
            if !live(&pod.metadata, &p.uid) {
                tracing::debug!(pod = %p.name, "token of a deleted pod");
                return None;
            }
        }
        Some(User::new(
            user_name(&k.namespace, &k.serviceaccount.name),
            k.serviceaccount.uid.clone(),
            vec![ALL_GROUP.into(), format!("{ALL_GROUP}:{}", k.namespace)],
        ))
    }
}

impl TokenAuthenticator for Tokens {
    fn authenticate_token(&self, token: &str) -> Option<User> {
        self.authenticate(token, &[token::ISSUER.to_string()])
    }

    fn authenticate_token_for(&self, token: &str, audiences: &[String]) -> Option<User> {
        self.authenticate(token, audiences)
    }
}

/// Starts the controller that creates the `default` ServiceAccount in every namespace that
/// lacks it (and recreates it when deleted), as kube-controller-manager does.
pub fn start(ctx: &Context) {
    let changes = ctx
        .informers
        .subscribe(&[Kind::Namespace, Kind::ServiceAccount]);
    let ctx = ctx.clone();
    smol::spawn(async move {
        let registry = ctx.registry.with_manager("service-account-controller");
        loop {
            let missing: Vec<String> = {
                let objects = ctx.informers.cache().read();
                objects
                    .iter::<Namespace>(None)
                    .filter(|n| n.metadata.deletion_timestamp.is_none())
                    .map(|n| n.metadata.name)
                    .filter(|ns| objects.get::<ServiceAccount>(ns, DEFAULT).is_none())
                    .collect()
            };
            for ns in missing {
                let sa = ServiceAccount {
                    metadata: ObjectMeta {
                        name: DEFAULT.into(),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                match registry.create(sa, Some(&ns)).await {
                    Ok(_) => {}
                    // Created meanwhile, or the namespace began terminating.
                    Err(e) if matches!(e.code(), 409 | 403 | 404) => {}
                    Err(e) => {
                        tracing::warn!(namespace = %ns, "creating the default service account: {e}")
                    }
                }
            }
            if changes.recv().await.is_err() {
                return;
            }
        }
    })
    .detach();
}

/// The ConfigMap every namespace gets with the cluster CA (key `ca.crt`).
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// Its description annotation, worded as Kubernetes words it.
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";
/// How often every namespace's copy is checked even without a namespace change (ConfigMaps
/// are not in the controllers' cache, so an edited or deleted copy is found this way).
const ROOT_CA_RESYNC: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts kube-controller-manager's root-ca-cert-publisher: the `kube-root-ca.crt`
/// ConfigMap with `ca_pem` in every active namespace, put back when edited or deleted.
pub fn start_root_ca_publisher(ctx: &Context, ca_pem: String) {
    use api::core::ConfigMap;
    use futures_lite::FutureExt as _;
    let changes = ctx.informers.subscribe(&[Kind::Namespace]);
    let ctx = ctx.clone();
    smol::spawn(async move {
        let registry = ctx.registry.with_manager("root-ca-cert-publisher");
        loop {
            let namespaces: Vec<String> = ctx
                .informers
                .cache()
                .read()
                .iter::<Namespace>(None)
                .filter(|n| n.metadata.deletion_timestamp.is_none())
                .map(|n| n.metadata.name)
                .collect();
            for ns in namespaces {
                let wanted = |cm: &ConfigMap| {
                    cm.data.get("ca.crt").map(String::as_str) == Some(ca_pem.as_str())
                        && cm.data.len() == 1
                        && cm.binary_data.is_empty()
                };
                let r = match registry.get::<ConfigMap>(&ns, ROOT_CA_CONFIG_MAP).await {
                    Ok(cm) if wanted(&cm) => continue,
                    Ok(_) => {
                        let pem = ca_pem.clone();
                        registry
                            .mutate::<ConfigMap>(
                                &ns,
                                ROOT_CA_CONFIG_MAP,
                                crate::registry::Part::Main,
                                move |cm| {
                                    cm.data = [("ca.crt".to_string(), pem.clone())].into();
                                    cm.binary_data.clear();
                                    Ok(())
                                },
                            )
                            .await
                            .map(drop)
                    }
                    Err(e) if e.code() == 404 => {
                        let cm = ConfigMap {
                            metadata: ObjectMeta {
                                name: ROOT_CA_CONFIG_MAP.into(),
                                annotations: [(
                                    "kubernetes.io/description".to_string(),
                                    ROOT_CA_DESCRIPTION.to_string(),
                                )]
                                .into(),
                                ..Default::default()
                            },
                            data: [("ca.crt".to_string(), ca_pem.clone())].into(),
                            ..Default::default()
                        };
                        registry.create(cm, Some(&ns)).await.map(drop)
                    }
                    Err(e) => Err(e),
                };
                match r {
                    Ok(()) => {}
                    // Written meanwhile, or the namespace began terminating.
                    Err(e) if matches!(e.code(), 409 | 403 | 404) => {}
                    Err(e) => {
                        tracing::warn!(namespace = %ns, "publishing {ROOT_CA_CONFIG_MAP}: {e}")
                    }
                }
            }
            let changed = async { changes.recv().await.is_ok() };
            let tick = async {
                smol::Timer::after(ROOT_CA_RESYNC).await;
                true
            };
            if !changed.or(tick).await {
                return;
            }
        }
    })
    .detach();
}
