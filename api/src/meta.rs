//! Object metadata and the small value types shared by every kind.
//!
//! Every type here serializes two ways: as Kubernetes JSON for humans and clients (when the
//! serializer is human readable) and as a compact, non-self-describing form for postcard
//! (the store and the agent's cache). Types therefore never use `skip_serializing_if`,
//! `flatten` or untagged enums; absent values are `None` and the JSON edge strips the nulls
//! (see [`crate::codec`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// A point in time with second precision, RFC 3339 in JSON (`2026-11-21T11:44:00Z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub i64);

impl Time {
    /// The last second RFC 3339 can write with a four-digit year, 9999-12-31T23:59:59Z: the
    /// latest time Kubernetes' JSON carries, so the latest an object can hold.
    pub const MAX: Time = Time(253_402_300_799);

    pub fn now() -> Time {
        Time::from_system(SystemTime::now())
    }

    /// This time plus `secs` seconds (minus, if negative), saturating and then kept between
    /// the Unix epoch and [`Time::MAX`], the times RFC 3339 can write: a user's duration
    /// (a grace period, a token's TTL) never overflows into a time that cannot be written.
    pub fn plus_seconds(self, secs: i64) -> Time {
        Time(self.0.saturating_add(secs).clamp(0, Time::MAX.0))
    }

    pub fn from_system(t: SystemTime) -> Time {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Time(d.as_secs() as i64),
            Err(e) => Time(-(e.duration().as_secs() as i64)),
        }
    }

    pub fn to_system(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_secs(self.0 as u64)
        } else {
            UNIX_EPOCH - Duration::from_secs(self.0.unsigned_abs())
        }
    }

    pub fn parse(s: &str) -> Result<Time, String> {
        // Kubernetes writes UTC with `Z`; accept fractional seconds too (MicroTime).
        humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
            .or_else(|_| humantime::parse_rfc3339(s))
            .map(Time::from_system)
            .map_err(|e| format!("invalid timestamp {s:?}: {e}"))
    }

    /// Seconds since this time (zero if it is in the future).
    pub fn age(self) -> Duration {
        SystemTime::now()
            .duration_since(self.to_system())
            .unwrap_or_default()
    }
}

impl fmt::Display for Time {
    /// RFC 3339. A time before the epoch or after [`Time::MAX`] (which only arithmetic can
    /// make) is written as the nearest one RFC 3339 can write: humantime panics on the one
    /// and fails on the other, and a failing `Display` panics in `to_string` and serde_json.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = Time(self.0.clamp(0, Time::MAX.0));
        write!(f, "{}", humantime::format_rfc3339_seconds(t.to_system()))
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            s.serialize_i64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            Time::parse(&s).map_err(de::Error::custom)
        } else {
            i64::deserialize(d).map(Time)
        }
    }
}

/// A point in time with microsecond precision (Kubernetes' MicroTime), RFC 3339 with six
/// fractional digits in JSON (`2026-11-21T11:44:00.123456Z`); Leases renew with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MicroTime(pub i64);

impl MicroTime {
    pub fn now() -> MicroTime {
        MicroTime::from_system(SystemTime::now())
    }

    pub fn from_system(t: SystemTime) -> MicroTime {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => MicroTime(d.as_micros() as i64),
            Err(e) => MicroTime(-(e.duration().as_micros() as i64)),
        }
    }

    pub fn to_system(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_micros(self.0 as u64)
        } else {
            UNIX_EPOCH - Duration::from_micros(self.0.unsigned_abs())
        }
    }

    pub fn parse(s: &str) -> Result<MicroTime, String> {
        humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
            .or_else(|_| humantime::parse_rfc3339(s))
            .map(MicroTime::from_system)
            .map_err(|e| format!("invalid timestamp {s:?}: {e}"))
    }

    /// The same instant to the second.
    pub fn to_time(self) -> Time {
        Time(self.0.div_euclid(1_000_000))
    }
}

impl From<Time> for MicroTime {
    fn from(t: Time) -> MicroTime {
        MicroTime(t.0.saturating_mul(1_000_000))
    }
}

impl fmt::Display for MicroTime {
    /// RFC 3339 with microseconds, kept between the epoch and the last microsecond of
    /// [`Time::MAX`] as [`Time`]'s is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = Time::MAX.0 * 1_000_000 + 999_999;
        let t = MicroTime(self.0.clamp(0, last));
        write!(f, "{}", humantime::format_rfc3339_micros(t.to_system()))
    }
}

impl Serialize for MicroTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            s.serialize_i64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for MicroTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MicroTime, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            MicroTime::parse(&s).map_err(de::Error::custom)
        } else {
            i64::deserialize(d).map(MicroTime)
        }
    }
}

/// An integer or a string, as in `maxSurge: 25%` or `targetPort: http`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(0)
    }
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrString::Int(i) => write!(f, "{i}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}

impl IntOrString {
    /// Resolves an absolute number or a percentage of `total` (rounding up when asked, as
    /// Kubernetes does for maxSurge, and down for maxUnavailable).
    pub fn scaled_value(&self, total: i32, round_up: bool) -> Result<i32, String> {
        match self {
            IntOrString::Int(i) => Ok(*i),
            IntOrString::String(s) => {
                let pct = s
                    .strip_suffix('%')
                    .and_then(|p| p.parse::<i64>().ok())
                    .ok_or_else(|| {
                        format!("invalid value {s:?}: must be an integer or a percentage")
                    })?;
                // In i128, clamped to i32: no percentage of any replica count overflows (Go
                // computes it in float64 and wraps converting back to int32).
                let scaled = i128::from(pct) * i128::from(total);
                let v = if round_up {
                    (scaled + 99) / 100
                } else {
                    scaled / 100
                };
                Ok(v.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32)
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
enum IntOrStringRepr {
    Int(i32),
    String(String),
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (s.is_human_readable(), self) {
            (true, IntOrString::Int(i)) => s.serialize_i32(*i),
            (true, IntOrString::String(v)) => s.serialize_str(v),
            (false, IntOrString::Int(i)) => IntOrStringRepr::Int(*i).serialize(s),
            (false, IntOrString::String(v)) => IntOrStringRepr::String(v.clone()).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<IntOrString, D::Error> {
        if !d.is_human_readable() {
            return Ok(match IntOrStringRepr::deserialize(d)? {
                IntOrStringRepr::Int(i) => IntOrString::Int(i),
                IntOrStringRepr::String(s) => IntOrString::String(s),
            });
        }
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrString, E> {
                i32::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom(format!("integer {v} out of range")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrString, E> {
                i32::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::custom(format!("integer {v} out of range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::String(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A resource quantity (`100m`, `128Mi`, `1`), kept as written. Numbers in manifests
/// (`cpu: 1`) are accepted and kept as their decimal text.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Quantity(pub String);

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
        if !d.is_human_readable() {
            return String::deserialize(d).map(Quantity);
        }
        struct V;
        impl Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as 100m, 128Mi or 1")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A JSON value kept verbatim: used for fields skiff accepts and returns but does not act on.
/// In postcard it is a tagged enum, so it stays decodable without a self-describing format.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Opaque {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    String(String),
    Array(Vec<Opaque>),
    Object(BTreeMap<String, Opaque>),
}

#[derive(Deserialize)]
enum OpaqueRepr {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    String(String),
    Array(Vec<Opaque>),
    Object(BTreeMap<String, Opaque>),
    /// JSON text: how [`ManagedFields`] is stored (an `Opaque` reads it as its tree).
    Json(String),
}

/// The variant index of [`OpaqueRepr::Json`].
const OPAQUE_REPR_JSON: u32 = 8;

impl OpaqueRepr {
    fn into_opaque<E: de::Error>(self) -> Result<Opaque, E> {
        Ok(match self {
            OpaqueRepr::Null => Opaque::Null,
            OpaqueRepr::Bool(b) => Opaque::Bool(b),
            OpaqueRepr::Int(i) => Opaque::Int(i),
            OpaqueRepr::Uint(u) => Opaque::Uint(u),
            OpaqueRepr::Float(f) => Opaque::Float(f),
            OpaqueRepr::String(v) => Opaque::String(v),
            OpaqueRepr::Array(a) => Opaque::Array(a),
            OpaqueRepr::Object(o) => Opaque::Object(o),
            OpaqueRepr::Json(text) => serde_json::from_str::<serde_json::Value>(&text)
                .map(|v| Opaque::from(&v))
                .map_err(E::custom)?,
        })
    }
}

impl From<&serde_json::Value> for Opaque {
    fn from(v: &serde_json::Value) -> Opaque {
        use serde_json::Value as J;
        match v {
            J::Null => Opaque::Null,
            J::Bool(b) => Opaque::Bool(*b),
            J::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Opaque::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Opaque::Uint(u)
                } else {
                    Opaque::Float(n.as_f64().unwrap_or_default())
                }
            }
            J::String(s) => Opaque::String(s.clone()),
            J::Array(a) => Opaque::Array(a.iter().map(Opaque::from).collect()),
            J::Object(o) => Opaque::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), Opaque::from(v)))
                    .collect(),
            ),
        }
    }
}

impl From<&Opaque> for serde_json::Value {
    fn from(v: &Opaque) -> serde_json::Value {
        use serde_json::Value as J;
        match v {
            Opaque::Null => J::Null,
            Opaque::Bool(b) => J::Bool(*b),
            Opaque::Int(i) => J::from(*i),
            Opaque::Uint(u) => J::from(*u),
            Opaque::Float(f) => J::from(*f),
            Opaque::String(s) => J::String(s.clone()),
            Opaque::Array(a) => J::Array(a.iter().map(J::from).collect()),
            Opaque::Object(o) => {
                J::Object(o.iter().map(|(k, v)| (k.clone(), J::from(v))).collect())
            }
        }
    }
}

/// [`OpaqueRepr`] by reference: the same postcard encoding without cloning the tree.
#[derive(Serialize)]
enum OpaqueReprRef<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    String(&'a str),
    Array(&'a [Opaque]),
    Object(&'a BTreeMap<String, Opaque>),
}

impl Serialize for Opaque {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        if s.is_human_readable() {
            // Written directly (managedFields is on every object): no JSON tree in between.
            return match self {
                Opaque::Null => s.serialize_unit(),
                Opaque::Bool(b) => s.serialize_bool(*b),
                Opaque::Int(i) => s.serialize_i64(*i),
                Opaque::Uint(u) => s.serialize_u64(*u),
                Opaque::Float(f) => serde_json::Value::from(*f).serialize(s),
                Opaque::String(v) => s.serialize_str(v),
                Opaque::Array(a) => {
                    let mut seq = s.serialize_seq(Some(a.len()))?;
                    for v in a {
                        seq.serialize_element(v)?;
                    }
                    seq.end()
                }
                Opaque::Object(o) => {
                    let mut map = s.serialize_map(Some(o.len()))?;
                    for (k, v) in o {
                        map.serialize_entry(k, v)?;
                    }
                    map.end()
                }
            };
        }
        let repr = match self {
            Opaque::Null => OpaqueReprRef::Null,
            Opaque::Bool(b) => OpaqueReprRef::Bool(*b),
            Opaque::Int(i) => OpaqueReprRef::Int(*i),
            Opaque::Uint(u) => OpaqueReprRef::Uint(*u),
            Opaque::Float(f) => OpaqueReprRef::Float(*f),
            Opaque::String(v) => OpaqueReprRef::String(v),
            Opaque::Array(a) => OpaqueReprRef::Array(a),
            Opaque::Object(o) => OpaqueReprRef::Object(o),
        };
        repr.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Opaque {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Opaque, D::Error> {
        if d.is_human_readable() {
            let v = serde_json::Value::deserialize(d)?;
            return Ok(Opaque::from(&v));
        }
        OpaqueRepr::deserialize(d)?.into_opaque()
    }
}

/// `metadata.managedFields` as its JSON text (a list of ManagedFieldsEntry), shared.
///
/// Kubernetes keeps `fieldsV1` as raw bytes too: every object carries its field ownership, but
/// only a write that changes ownership reads it. Held as text, an object's clone shares it, a
/// drop frees one allocation, and a JSON answer copies it verbatim; the field manager parses
/// it when it needs the entries.
///
/// In postcard (the store, the informer cache, the agent's pod cache) it is [`Opaque`]'s
/// encoding with a variant for JSON text: values written before it, which held the tree,
/// still decode (into text).
#[derive(Clone)]
pub struct ManagedFields(std::sync::Arc<serde_json::value::RawValue>);

impl ManagedFields {
    /// From JSON text, which must be valid JSON.
    pub fn from_json(text: String) -> Result<ManagedFields, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(|raw| ManagedFields(raw.into()))
    }

    /// From a JSON tree.
    pub fn from_value(v: &serde_json::Value) -> ManagedFields {
        let raw = serde_json::value::to_raw_value(v).expect("a JSON value always serializes");
        ManagedFields(raw.into())
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        self.0.get()
    }
}

impl From<&Opaque> for ManagedFields {
    fn from(v: &Opaque) -> ManagedFields {
        ManagedFields::from_value(&serde_json::Value::from(v))
    }
}

impl PartialEq for ManagedFields {
    fn eq(&self, other: &ManagedFields) -> bool {
        self.json() == other.json()
    }
}

impl fmt::Debug for ManagedFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl Serialize for ManagedFields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            // Verbatim into JSON; serde_json's tree serializer parses it.
            return self.0.serialize(s);
        }
        s.serialize_newtype_variant("OpaqueRepr", OPAQUE_REPR_JSON, "Json", self.json())
    }
}

impl<'de> Deserialize<'de> for ManagedFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ManagedFields, D::Error> {
        if d.is_human_readable() {
            // Any self-describing format (JSON, YAML, a JSON tree): rare on requests.
            let v = serde_json::Value::deserialize(d)?;
            return Ok(ManagedFields::from_value(&v));
        }
        match OpaqueRepr::deserialize(d)? {
            OpaqueRepr::Json(text) => ManagedFields::from_json(text).map_err(de::Error::custom),
            // Stored before managedFields were kept as text: the tree.
            tree => Ok(ManagedFields::from(&tree.into_opaque::<D::Error>()?)),
        }
    }
}

/// metav1.OwnerReference
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference")]
#[schemars(
    description = "OwnerReference names an object that owns this one (for example the ReplicaSet of a Pod)."
)]
pub struct OwnerReference {
    /// API version of the owner.
    pub api_version: String,
    /// Kind of the owner.
    pub kind: String,
    /// Name of the owner.
    pub name: String,
    /// UID of the owner.
    pub uid: String,
    /// If true, this owner is the managing controller. At most one owner may be the controller.
    pub controller: Option<bool>,
    /// If true, foreground deletion of the owner waits until this object is removed.
    pub block_owner_deletion: Option<bool>,
}

/// metav1.ObjectMeta
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")]
#[schemars(
    description = "ObjectMeta is the metadata every persisted object has: its name, namespace, labels, annotations, owners and the bookkeeping the server keeps."
)]
pub struct ObjectMeta {
    /// Name of the object, unique within its namespace (or the cluster, for cluster-scoped
    /// kinds). Cannot be changed once set.
    pub name: String,
    /// Prefix from which the server makes a unique name when name is empty: a random suffix is
    /// added.
    pub generate_name: Option<String>,
    /// Namespace the object lives in. Empty means "default" for namespaced kinds; cluster-
    /// scoped kinds have none.
    pub namespace: Option<String>,
    /// Unique identifier the server gives the object when it is created. Read-only.
    pub uid: String,
    /// Opaque version of this object, changed on every write. Used for optimistic concurrency
    /// and as a starting point of watches. Read-only.
    pub resource_version: String,
    /// Sequence number of changes to the desired state (spec). Read-only.
    pub generation: Option<i64>,
    /// When the object was created. Read-only.
    pub creation_timestamp: Option<Time>,
    /// When the object will be (or started to be) deleted; set by the server when deletion is
    /// requested. Read-only.
    pub deletion_timestamp: Option<Time>,
    /// Seconds the object is allowed to terminate gracefully before it is removed. Read-only.
    pub deletion_grace_period_seconds: Option<i64>,
    /// Map of string keys and values used to organize and select objects (by label selectors of
    /// controllers and services).
    pub labels: BTreeMap<String, String>,
    /// Map of string keys and values for arbitrary non-identifying metadata, kept but not
    /// interpreted.
    pub annotations: BTreeMap<String, String>,
    /// Objects this object depends on. When all owners are deleted, the garbage collector
    /// deletes this object.
    pub owner_references: Vec<OwnerReference>,
    /// Names of cleanups that must finish before the object is removed from storage; deletion
    /// waits until the list is empty.
    pub finalizers: Vec<String>,
    /// Field ownership, kept as its JSON text (a list of ManagedFieldsEntry); the server
    /// maintains it on every write (control's `fieldmanager`).
    pub managed_fields: Option<ManagedFields>,
    /// Deprecated in Kubernetes; accepted and dropped on output.
    pub self_link: Option<String>,
}

impl ObjectMeta {
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    /// The revision of the last change, as a number (0 when unset or malformed).
    pub fn revision(&self) -> u64 {
        self.resource_version.parse().unwrap_or(0)
    }

    pub fn controller_ref(&self) -> Option<&OwnerReference> {
        self.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }
}

/// metav1.ListMeta
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")]
pub struct ListMeta {
    // Kubernetes omits each member when empty (`omitempty`): a Status's `metadata` is `{}`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<i64>,
}

/// metav1.LabelSelectorRequirement
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement")]
#[schemars(
    description = "A requirement on one label key: an operator relating the key to a set of values."
)]
pub struct LabelSelectorRequirement {
    /// The label key the requirement applies to.
    pub key: String,
    /// How the key relates to the values: In, NotIn, Exists or DoesNotExist.
    pub operator: String,
    /// Values for In and NotIn (must be non-empty); empty for Exists and DoesNotExist.
    pub values: Vec<String>,
}

/// metav1.LabelSelector
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector")]
#[schemars(
    description = "A label selector: a query over labels. matchLabels and matchExpressions are ANDed; an empty selector matches every object."
)]
pub struct LabelSelector {
    /// Map of label keys and values; each pair must match exactly.
    pub match_labels: BTreeMap<String, String>,
    /// Label selector requirements; all must hold.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// metav1.Status: the error body of every failed request.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.Status")]
pub struct Status {
    // Members Kubernetes leaves out when empty (`omitempty`), as clients that compare error
    // bodies expect.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    pub metadata: ListMeta,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    #[serde(skip_serializing_if = "is_zero")]
    pub code: u16,
}

fn is_zero(n: &u16) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.StatusDetails")]
pub struct StatusDetails {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.StatusCause")]
pub struct StatusCause {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl Status {
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Status {
        Status {
            kind: "Status".into(),
            api_version: "v1".into(),
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            code,
            ..Default::default()
        }
    }

    pub fn success() -> Status {
        Status {
            kind: "Status".into(),
            api_version: "v1".into(),
            status: "Success".into(),
            code: 200,
            ..Default::default()
        }
    }

    pub fn with_details(mut self, details: StatusDetails) -> Status {
        self.details = Some(details);
        self
    }
}

/// metav1.DeleteOptions (the body of a DELETE; also read from query parameters).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions")]
pub struct DeleteOptions {
    pub kind: Option<String>,
    pub api_version: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub preconditions: Option<Preconditions>,
    pub propagation_policy: Option<String>,
    pub orphan_dependents: Option<bool>,
    pub dry_run: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(rename = "io.k8s.apimachinery.pkg.apis.meta.v1.Preconditions")]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_past_what_rfc3339_writes_are_clamped_not_a_panic() {
        for (t, want) in [
            (Time(i64::MAX), "9999-12-31T23:59:59Z"),
            (Time(Time::MAX.0 + 1), "9999-12-31T23:59:59Z"),
            (Time(i64::MIN), "1970-01-01T00:00:00Z"),
            (Time(-1), "1970-01-01T00:00:00Z"),
            (Time(0), "1970-01-01T00:00:00Z"),
        ] {
            assert_eq!(t.to_string(), want, "{t:?}");
            assert_eq!(serde_json::to_value(t).unwrap(), want, "{t:?}");
        }
        assert_eq!(
            MicroTime(i64::MAX).to_string(),
            "9999-12-31T23:59:59.999999Z"
        );
        assert_eq!(
            MicroTime(i64::MIN).to_string(),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(MicroTime::from(Time(i64::MAX)), MicroTime(i64::MAX));
        assert_eq!(MicroTime::from(Time(i64::MIN)), MicroTime(i64::MIN));
    }

    #[test]
    fn plus_seconds_saturates_within_writable_times() {
        let now = Time(1_800_000_000);
        assert_eq!(now.plus_seconds(30), Time(1_800_000_030));
        assert_eq!(now.plus_seconds(i64::MAX), Time::MAX);
        assert_eq!(Time::MAX.plus_seconds(i64::MAX), Time::MAX);
        assert_eq!(now.plus_seconds(i64::MIN), Time(0));
        assert_eq!(now.plus_seconds(-30), Time(1_799_999_970));
        assert_eq!(Time(i64::MIN).plus_seconds(i64::MIN), Time(0));
    }

    #[test]
    fn percentages_of_any_count_do_not_overflow() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(pct("25%").scaled_value(10, true), Ok(3));
        assert_eq!(pct("25%").scaled_value(10, false), Ok(2));
        assert_eq!(pct("100%").scaled_value(i32::MAX, true), Ok(i32::MAX));
        assert_eq!(pct("200%").scaled_value(i32::MAX, true), Ok(i32::MAX));
        let huge = format!("{}%", i64::MAX);
        assert_eq!(pct(&huge).scaled_value(i32::MAX, true), Ok(i32::MAX));
        assert_eq!(pct(&huge).scaled_value(i32::MIN, false), Ok(i32::MIN));
        let tiny = format!("{}%", i64::MIN);
        assert_eq!(pct(&tiny).scaled_value(i32::MAX, false), Ok(i32::MIN));
        assert_eq!(pct(&tiny).scaled_value(i32::MIN, true), Ok(i32::MAX));
        assert_eq!(pct(&tiny).scaled_value(0, true), Ok(0));
        assert_eq!(
            IntOrString::Int(i32::MIN).scaled_value(5, true),
            Ok(i32::MIN)
        );
    }
}
