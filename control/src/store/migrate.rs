//! `skiff migrate`: copies a cluster's objects between the embedded redb store and an etcd
//! datastore, either way, with the server stopped (docs/etcd.md).
//!
//! Objects are read through the source store and written through the destination's, so each
//! gets a revision of the destination (redb's counter, or etcd's mod_revision) while keeping
//! its uid, timestamps, owners and everything else. Secrets are opened and sealed again with
//! the redb data dir's `secrets.key`, which every server of the cluster shares.

use std::path::PathBuf;
use std::sync::Arc;

use api::object::Resource;
use api::{AnyObject, Kind};

use super::seal::{Keyring, KEY_FILE};
use super::{Store, StoreConfig, StoreError};
use crate::etcd::{EtcdClient, EtcdConfig};

/// One side of a migration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// A server's data dir (its `state.redb` and `secrets.key`).
    Redb(PathBuf),
    /// etcd client URLs.
    Etcd(Vec<String>),
}

impl std::str::FromStr for Place {
    type Err = String;

    fn from_str(s: &str) -> Result<Place, String> {
        if let Some(dir) = s.strip_prefix("redb:") {
            if dir.is_empty() {
                return Err("redb: needs a data dir (redb:/var/lib/skiff/server)".into());
            }
            return Ok(Place::Redb(PathBuf::from(dir)));
        }
        if let Some(urls) = s.strip_prefix("etcd:") {
            let urls: Vec<String> = urls
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect();
            if urls.is_empty() {
                return Err(
                    "etcd: needs client URLs (etcd:https://h1:2379,https://h2:2379)".into(),
                );
            }
            return Ok(Place::Etcd(urls));
        }
        Err(format!("{s:?}: want redb:DATA_DIR or etcd:URL[,URL...]"))
    }
}

/// What a migration copied: objects per kind.
#[derive(Debug, Default)]
pub struct Copied {
    pub kinds: Vec<(Kind, usize)>,
}

impl Copied {
    pub fn total(&self) -> usize {
        self.kinds.iter().map(|(_, n)| n).sum()
    }
}

/// How many objects go in one write (etcd refuses transactions of more than 128 operations
/// by default).
const CHUNK: usize = 100;

/// Copies every object from `from` into `to`, which must hold none. `tls` carries the
/// `--datastore-*` trust settings for the etcd side.
pub async fn migrate(from: &Place, to: &Place, tls: &EtcdConfig) -> Result<Copied, StoreError> {
    let dir = match (from, to) {
        (Place::Redb(d), Place::Etcd(_)) | (Place::Etcd(_), Place::Redb(d)) => d.clone(),
        _ => {
            return Err(StoreError::BadRequest(
                "migrate copies between redb and etcd: one side must be each".into(),
            ))
        }
    };
    if !dir.join(KEY_FILE).exists() {
        return Err(StoreError::BadRequest(format!(
            "{} holds no {KEY_FILE}: copy the cluster's secrets key there first (every server shares it)",
            dir.display()
        )));
    }
    let keys =
        Arc::new(Keyring::load_or_create(&dir).map_err(|e| {
            StoreError::Db(format!("loading {}: {e}", dir.join(KEY_FILE).display()))
        })?);
    let source = open(from, tls, keys.clone()).await?;
    let dest = open(to, tls, keys).await?;
    for kind in Kind::ALL {
        let (found, _) = dest.list(*kind, None).await?;
        if !found.is_empty() {
            return Err(StoreError::BadRequest(format!(
                "the destination already holds {} {}: migrate only into an empty store",
                found.len(),
                kind.info().plural
            )));
        }
    }
    // The built-in kinds (CustomResourceDefinitions among them), then the objects of every
    // custom resource the source defines.
    let (crds, _) = source.list(Kind::CustomResourceDefinition, None).await?;
    let custom = crds
        .iter()
        .filter_map(api::apiextensions::CustomResourceDefinition::from_any_ref)
        // Defined here as a server defines them (names, for the stored form and the keys).
        .filter_map(|crd| crate::crd::install_one(crd)?.builtin());
    let kinds: Vec<Kind> = Kind::ALL.iter().copied().chain(custom).collect();
    let mut copied = Copied::default();
    for kind in &kinds {
        let (objects, _) = source.list(*kind, None).await?;
        if objects.is_empty() {
            continue;
        }
        copied.kinds.push((*kind, objects.len()));
        for chunk in objects.chunks(CHUNK) {
            let chunk: Vec<AnyObject> = chunk.to_vec();
            dest.write(move |txn| -> Result<(), StoreError> {
                for obj in chunk {
                    txn.put(obj)?;
                }
                Ok(())
            })
            .await?;
        }
    }
    dest.close().await;
    source.close().await;
    Ok(copied)
}

async fn open(place: &Place, tls: &EtcdConfig, keys: Arc<Keyring>) -> Result<Store, StoreError> {
    match place {
        Place::Redb(dir) => {
            let dir = dir.clone();
            smol::unblock(move || {
                Store::open(StoreConfig {
                    keys: Some(keys),
                    ..StoreConfig::in_dir(&dir)
                })
            })
            .await
        }
        Place::Etcd(urls) => {
            let config = EtcdConfig {
                endpoints: urls.clone(),
                ..tls.clone()
            };
            let client = EtcdClient::new(&config).map_err(StoreError::from)?;
            Store::open_etcd(
                client,
                StoreConfig::DEFAULT_WATCH_QUEUE_CAPACITY,
                Some(keys),
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_parse_with_clear_errors() {
        assert_eq!(
            "redb:/srv/skiff".parse::<Place>(),
            Ok(Place::Redb("/srv/skiff".into()))
        );
        assert_eq!(
            "etcd:http://a:2379, http://b:2379".parse::<Place>(),
            Ok(Place::Etcd(vec![
                "http://a:2379".into(),
                "http://b:2379".into()
            ]))
        );
        assert!("redb:".parse::<Place>().is_err());
        assert!("etcd:".parse::<Place>().is_err());
        assert!("/srv/skiff"
            .parse::<Place>()
            .unwrap_err()
            .contains("redb:DATA_DIR"));
    }
}
