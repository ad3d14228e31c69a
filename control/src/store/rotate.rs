//! `skiff secrets rotate-key`: a new secrets key, every Secret (in its table and in the
//! event log) sealed again with it, the old key dropped. Offline, on a stopped server's data
//! dir: redb's file lock makes sure no server has the store open, the rewrite is one
//! transaction, and no running reader can hold a keyring that lacks the new key.
//!
//! The new key is written next to the old one before any value changes, so a rotation
//! interrupted at any point leaves every value readable; the old key goes last.

use std::path::Path;

use api::Kind;
use redb::{Database, ReadableTable};

use super::codec::{self, kind_table, EVENT_TABLE};
use super::seal::Keyring;
use super::{StoreError, STATE_FILE};

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    pub old_key: String,
    pub new_key: String,
    /// Secrets sealed again (plain ones from before encryption included).
    pub secrets: usize,
    /// Event-log entries of Secrets sealed again.
    pub events: usize,
}

fn seal_error(e: super::seal::SealError) -> StoreError {
    StoreError::Db(e.to_string())
}

/// Rotates the secrets key of the stopped server's `data_dir`. Blocks.
pub fn rotate_key(data_dir: &Path) -> Result<Rotated, StoreError> {
    let path = data_dir.join(STATE_FILE);
    if !path.exists() {
        return Err(StoreError::Db(format!(
            "{} holds no {STATE_FILE}: not a skiff server's data dir",
            data_dir.display()
        )));
    }
    let db = Database::open(&path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Db(format!(
            "{} is in use: stop the server before rotating its secrets key",
            path.display()
        )),
        e => StoreError::Db(format!("opening {}: {e}", path.display())),
    })?;
    let mut keys = Keyring::load_or_create(data_dir).map_err(seal_error)?;
    let old_key = keys.current_id().to_string();
    let new_key = keys.add_key().map_err(seal_error)?.to_string();
    keys.save(data_dir).map_err(seal_error)?;

    let wtx = db.begin_write()?;
    let (secrets, events) = {
        let mut table = wtx.open_table(kind_table(Kind::Secret))?;
        let mut rewritten = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            let key = k.value().to_string();
            let plain = codec::unseal(v.value(), Some(&keys), || format!("secret {key:?}"))?;
            // Decoding checks the value is what it claims before it is sealed again.
            codec::decode_object(Kind::Secret, &key, &plain, None)?;
            let sealed = codec::seal_for(Kind::Secret, plain.into_owned(), Some(&keys))?;
            rewritten.push((key, sealed));
        }
        for (k, v) in &rewritten {
            table.insert(k.as_str(), v.as_slice())?;
        }
        let mut log = wtx.open_table(EVENT_TABLE)?;
        let mut events = Vec::new();
        for entry in log.iter()? {
            let (k, v) = entry?;
            let revision = k.value();
            let plain = codec::unseal(v.value(), Some(&keys), || {
                format!("the event at revision {revision}")
            })?;
            let (_, object) = codec::decode_event(revision, &plain)?;
            if codec::is_sealed_kind(object.kind()) {
                events.push((
                    revision,
                    codec::seal_for(object.kind(), plain.into_owned(), Some(&keys))?,
                ));
            }
        }
        for (k, v) in &events {
            log.insert(*k, v.as_slice())?;
        }
        (rewritten.len(), events.len())
    };
    wtx.commit()?;
    keys.retire_old_keys();
    keys.save(data_dir).map_err(seal_error)?;
    Ok(Rotated {
        old_key,
        new_key,
        secrets,
        events,
    })
}
