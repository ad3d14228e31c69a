//! What the store writes into redb: keys, table names and the versioned value envelopes.
//!
//! Values are postcard, which is not self-describing, so every value sits inside an enum
//! whose variant index is the format version. A later release adds `V2` and keeps reading
//! `V1`; an older release reading a newer value fails with a clear error instead of
//! misreading it.
//!
//! Secrets are the exception: their table values and event-log entries are the same
//! envelopes sealed whole by [`Keyring::seal`] (AES-256-GCM; the key id travels in the
//! sealed value, so values sealed before a key rotation still open). A sealed value starts
//! with [`super::seal::MAGIC`], which no envelope starts with, so Secrets stored before
//! encryption was turned on still read until they are rewritten.

use std::borrow::Cow;

use api::{AnyObject, Kind};
use redb::TableDefinition;
use serde::Deserialize;

use super::seal::Keyring;
use super::{EventType, StoreError};

/// Whether values of `kind` are sealed at rest.
pub(crate) fn is_sealed_kind(kind: Kind) -> bool {
    kind == Kind::Secret
}

/// `framed` as stored: sealed for a sealed kind when a keyring is loaded.
pub(crate) fn seal_for(
    kind: Kind,
    framed: Vec<u8>,
    keys: Option<&Keyring>,
) -> Result<Vec<u8>, StoreError> {
    match keys {
        Some(k) if is_sealed_kind(kind) => k
            .seal(&framed)
            .map_err(|e| StoreError::Db(format!("sealing a {kind:?}: {e}"))),
        _ => Ok(framed),
    }
}

/// A stored value's envelope: opened if sealed. `what` names the value for errors.
pub(crate) fn unseal<'b>(
    bytes: &'b [u8],
    keys: Option<&Keyring>,
    what: impl FnOnce() -> String,
) -> Result<Cow<'b, [u8]>, StoreError> {
    if !Keyring::is_sealed(bytes) {
        return Ok(Cow::Borrowed(bytes));
    }
    let Some(keys) = keys else {
        return Err(StoreError::Db(format!(
            "{} is encrypted and no secrets key is loaded",
            what()
        )));
    };
    keys.open(bytes)
        .map(Cow::Owned)
        .map_err(|e| StoreError::Db(format!("cannot decrypt {}: {e}", what())))
}

/// One table per kind, named by the kind's plural (`pods`, `deployments`), keyed by
/// [`object_key`], valued by a postcard [`Stored`].
pub(crate) fn kind_table(kind: Kind) -> TableDefinition<'static, &'static str, &'static [u8]> {
    // Custom resources' tables are `plural.group`: no built-in plural has a dot.
    TableDefinition::new(kind.storage_name())
}

/// Bookkeeping: `revision`, `compacted`, `schema`. The leading underscore keeps it apart from
/// every kind's plural (the Event kind already owns `events`).
pub(crate) const META_TABLE: TableDefinition<'static, &'static str, u64> =
    TableDefinition::new("_meta");

/// The event log: revision -> postcard [`StoredEvent`], bounded to the configured window.
pub(crate) const EVENT_TABLE: TableDefinition<'static, u64, &'static [u8]> =
    TableDefinition::new("_event_log");

/// The last committed revision.
pub(crate) const META_REVISION: &str = "revision";
/// The highest revision whose event was removed from the event log (0: none yet). A watch may
/// resume from any revision at or above it.
pub(crate) const META_COMPACTED: &str = "compacted";
/// The on-disk layout version, so an old binary refuses a file laid out by a newer one.
pub(crate) const META_SCHEMA: &str = "schema";
pub(crate) const SCHEMA_VERSION: u64 = 1;

/// The key of an object in its kind's table: `namespace/name`, and `/name` for cluster-scoped
/// kinds (namespace ""). Names never contain `/`, so the key is unambiguous and every object of
/// a namespace sits in the contiguous range that starts with `namespace/`.
pub(crate) fn object_key(namespace: &str, name: &str) -> String {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key
}

/// The key range `[start, end)` holding every object of `namespace`.
pub(crate) fn namespace_range(namespace: &str) -> (String, String) {
    // '0' is the character after '/', so `ns0` is the first key past every `ns/...`.
    (format!("{namespace}/"), format!("{namespace}0"))
}

/// The envelope of every object value.
#[derive(Debug, Deserialize)]
pub enum Stored {
    V1(AnyObject),
}

/// Encodes exactly like [`Stored`]: the reference the framed encodings are tested against.
#[cfg(test)]
#[derive(serde::Serialize)]
enum StoredRef<'a> {
    V1(&'a AnyObject),
}

/// The envelope of every event log value.
#[derive(Debug, Deserialize)]
pub enum StoredEvent {
    V1(EventType, AnyObject),
}

#[cfg(test)]
#[derive(serde::Serialize)]
enum StoredEventRef<'a> {
    V1(EventType, &'a AnyObject),
}

#[cfg(test)]
pub(crate) fn encode_object(obj: &AnyObject) -> Result<Vec<u8>, StoreError> {
    postcard::to_allocvec(&StoredRef::V1(obj))
        .map_err(|e| StoreError::Db(format!("encoding {:?} object: {e}", obj.kind())))
}

/// The postcard encoding of the object alone (what the informer cache keeps), refused unless
/// it reads back as the same object: postcard is not self-describing, so a model type that
/// serde could write but not read (a JSON value, an untagged enum) would make an acknowledged
/// write unreadable. The check costs a decode of what was just encoded.
pub(crate) fn pack_object(obj: &AnyObject) -> Result<Vec<u8>, StoreError> {
    let packed = postcard::to_allocvec(obj)
        .map_err(|e| StoreError::Db(format!("encoding {:?} object: {e}", obj.kind())))?;
    check_reads_back(obj, &packed)?;
    Ok(packed)
}

fn check_reads_back(obj: &AnyObject, packed: &[u8]) -> Result<(), StoreError> {
    let unreadable = |why: String| {
        let meta = obj.meta();
        StoreError::Db(format!(
            "refusing to store {} {:?}: its stored form would not read back ({why})",
            obj.kind().info().qualified_plural(),
            object_key(meta.namespace(), &meta.name)
        ))
    };
    match postcard::from_bytes::<AnyObject>(packed) {
        Ok(back) if back == *obj => Ok(()),
        Ok(_) => Err(unreadable("it reads back different".into())),
        Err(e) => Err(unreadable(e.to_string())),
    }
}

/// The first variant of an envelope (`V1`): postcard writes a variant index as a varint.
const V1_TAG: u8 = 0;

/// [`encode_object`] from the object's [`pack_object`] bytes: postcard encodes a newtype
/// variant as its index followed by the value's own encoding, so the object is encoded once
/// for the table, the event log and the watchers.
pub(crate) fn frame_object(packed: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(packed.len() + 1);
    out.push(V1_TAG);
    out.extend_from_slice(packed);
    out
}

/// [`encode_event`] from the object's [`pack_object`] bytes (a tuple variant is its index,
/// then each field's encoding in order).
pub(crate) fn frame_event(event_type: EventType, packed: &[u8]) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(packed.len() + 2);
    out.push(V1_TAG);
    out = postcard::to_extend(&event_type, out)
        .map_err(|e| StoreError::Db(format!("encoding an event type: {e}")))?;
    out.extend_from_slice(packed);
    Ok(out)
}

pub(crate) fn decode_object(
    kind: Kind,
    key: &str,
    bytes: &[u8],
    keys: Option<&Keyring>,
) -> Result<AnyObject, StoreError> {
    let bytes = unseal(bytes, keys, || format!("{} {key:?}", kind.info().plural))?;
    let Stored::V1(obj) = postcard::from_bytes(&bytes).map_err(|e| {
        StoreError::Db(format!(
            "unreadable value for {} {key:?}: {e}",
            kind.info().plural
        ))
    })?;
    if obj.kind() != kind {
        return Err(StoreError::Db(format!(
            "value for {} {key:?} holds a {:?}",
            kind.info().plural,
            obj.kind()
        )));
    }
    Ok(obj)
}

#[cfg(test)]
pub(crate) fn encode_event(event_type: EventType, obj: &AnyObject) -> Result<Vec<u8>, StoreError> {
    postcard::to_allocvec(&StoredEventRef::V1(event_type, obj))
        .map_err(|e| StoreError::Db(format!("encoding {:?} event: {e}", obj.kind())))
}

pub(crate) fn decode_event(
    revision: u64,
    bytes: &[u8],
) -> Result<(EventType, AnyObject), StoreError> {
    let StoredEvent::V1(event_type, obj) = postcard::from_bytes(bytes)
        .map_err(|e| StoreError::Db(format!("unreadable event at revision {revision}: {e}")))?;
    Ok((event_type, obj))
}

/// The object's [`pack_object`] bytes inside an event-log entry (what [`frame_event`] put
/// after the envelope's variant index and the event type).
pub(crate) fn event_packed_object(revision: u64, bytes: &[u8]) -> Result<&[u8], StoreError> {
    postcard::take_from_bytes::<(u32, EventType)>(bytes)
        .map(|(_, packed)| packed)
        .map_err(|e| StoreError::Db(format!("unreadable event at revision {revision}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::meta::ObjectMeta;

    #[test]
    fn framing_packed_bytes_gives_the_envelope_encodings() {
        let obj = config_map("framed");
        let packed = pack_object(&obj).unwrap();
        assert_eq!(frame_object(&packed), encode_object(&obj).unwrap());
        for t in [EventType::Added, EventType::Modified, EventType::Deleted] {
            assert_eq!(
                frame_event(t, &packed).unwrap(),
                encode_event(t, &obj).unwrap()
            );
            assert_eq!(
                decode_event(1, &frame_event(t, &packed).unwrap()).unwrap(),
                (t, obj.clone())
            );
            assert_eq!(
                event_packed_object(1, &frame_event(t, &packed).unwrap()).unwrap(),
                packed.as_slice()
            );
        }
    }

    fn config_map(name: &str) -> AnyObject {
        AnyObject::ConfigMap(api::core::ConfigMap {
            metadata: ObjectMeta {
                name: name.into(),
                namespace: Some("default".into()),
                resource_version: "7".into(),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn object_envelope_round_trips_and_starts_with_version_tag() {
        let obj = config_map("a");
        let bytes = encode_object(&obj).unwrap();
        assert_eq!(bytes[0], 0, "V1 is variant 0");
        let back = decode_object(Kind::ConfigMap, "default/a", &bytes, None).unwrap();
        assert_eq!(back, obj);
        assert!(decode_object(Kind::Pod, "default/a", &bytes, None).is_err());
    }

    #[test]
    fn a_value_that_would_not_read_back_is_refused() {
        // The shape of the defect: a JSON value inside a model type, which postcard writes
        // but cannot read (deserialize_any).
        #[derive(serde::Serialize)]
        enum Fake {
            ConfigMap(serde_json::Value),
        }
        let packed = postcard::to_allocvec(&Fake::ConfigMap(serde_json::json!({"a": 1}))).unwrap();
        let obj = config_map("poison");
        let e = check_reads_back(&obj, &packed).unwrap_err();
        assert!(e.to_string().contains("would not read back"), "{e}");
        // A good object passes.
        pack_object(&obj).unwrap();
    }

    #[test]
    fn unknown_envelope_version_is_an_error() {
        let mut bytes = encode_object(&config_map("a")).unwrap();
        bytes[0] = 1; // a V2 written by a newer release
        assert!(matches!(
            decode_object(Kind::ConfigMap, "default/a", &bytes, None),
            Err(StoreError::Db(_))
        ));
    }

    #[test]
    fn event_envelope_round_trips() {
        let obj = config_map("b");
        let bytes = encode_event(EventType::Deleted, &obj).unwrap();
        let (t, back) = decode_event(3, &bytes).unwrap();
        assert_eq!(t, EventType::Deleted);
        assert_eq!(back, obj);
    }

    #[test]
    fn namespace_range_holds_exactly_that_namespace() {
        let (start, end) = namespace_range("ns");
        for key in ["ns/a", "ns/zzz", "ns/0"] {
            assert!(start.as_str() <= key && key < end.as_str(), "{key}");
        }
        for key in ["ns-a/x", "ns0/x", "n/x", "nsa/x", "/ns"] {
            assert!(!(start.as_str() <= key && key < end.as_str()), "{key}");
        }
        assert_eq!(object_key("", "node1"), "/node1");
    }
}
