//! Kubernetes' output shape in one pass: a serde serializer adapter that leaves out what
//! Kubernetes omits while the typed model is being written, so the server can write JSON
//! straight from its objects instead of building a `serde_json::Value` first and pruning it.
//!
//! The rules, applied to the members of every JSON object (struct fields and map entries):
//!
//! * a member whose value is null (`None`) or an empty array is left out (but an APIService's
//!   `spec.service`, which kube writes as `null`);
//! * a member named in [`MAP_FIELDS`] whose value is an empty object is left out (an empty
//!   object anywhere else is meaningful: `emptyDir: {}`);
//! * in an object under a member named `metadata`, members whose value is the empty string are
//!   left out (a pod template's name, uid, resourceVersion); map values inside it, such as an
//!   empty label value, stay;
//! * the object's own metadata (the top level) never carries `selfLink`,
//!   and the top level starts with `kind` and `apiVersion`, as kube-apiserver writes them.
//!
//! Array elements are never left out. Whether a value is "empty" is decided by [`shape`],
//! which looks only as far as the first element or field.

use std::fmt;

use serde::ser::{self, Impossible, Serialize, Serializer};

use crate::object::Kind;

/// Fields that are maps of strings in the model (Kubernetes omits them when empty).
pub const MAP_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "nodeSelector",
    "data",
    "binaryData",
    "stringData",
    "limits",
    "requests",
    "matchLabels",
    "capacity",
    "allocatable",
    "overhead",
];

/// A typed object of kind `kind`, serialized in Kubernetes' output shape.
pub struct Typed<'a, T: ?Sized> {
    pub(crate) kind: Kind,
    pub(crate) value: &'a T,
    pub(crate) view: View,
}

/// How much of an object is written: all of it, or only the part whose field ownership a
/// write can change (what the field manager compares), so that the other part is never
/// serialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Whole,
    /// The whole object as an item of a list: a built-in kind's items carry no `kind` and
    /// `apiVersion` (kube-apiserver's typed lists leave them empty); a custom object's do.
    ListItem,
    /// Everything but `status` and `metadata.managedFields`.
    Main,
    /// `apiVersion`, `kind` and `status` only.
    Status,
}

impl<T: Serialize + ?Sized> Serialize for Typed<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(Omit {
            inner: s,
            mode: Mode::Top(self.kind, self.view),
        })
    }
}

/// Where a compound value sits, which decides what its members may leave out.
#[derive(Clone, Copy)]
enum Mode {
    /// Anywhere else.
    Plain,
    /// The value of a `metadata` member: empty strings go too.
    Metadata,
    /// The object itself: gets `apiVersion` and `kind`; the view may leave out members.
    Top(Kind, View),
    /// The object's own metadata: empty strings and `selfLink` go (and `managedFields`
    /// outside the whole view).
    TopMetadata(View),
    /// A member of a custom object other than its metadata: written as stored.
    Verbatim,
    /// An APIService's spec, whole: its `service` is written even when null (kube's field
    /// has no `omitempty`: a local APIService shows `service: null`).
    ApiServiceSpec,
}

impl Mode {
    /// This mode if it is an object's own, of a kind `keep` accepts.
    fn filter(self, keep: impl FnOnce(Kind) -> bool) -> Mode {
        match self {
            Mode::Top(kind, _) if !keep(kind) => Mode::Plain,
            other => other,
        }
    }

    /// The mode of the value of member `key` of a compound in this mode.
    fn child(self, key: &str) -> Mode {
        match (self, key) {
            (Mode::Top(_, view), "metadata") => Mode::TopMetadata(view),
            (Mode::Top(Kind::APIService, View::Whole | View::ListItem), "spec") => {
                Mode::ApiServiceSpec
            }
            (Mode::Top(kind, _), _) if kind.is_custom() => Mode::Verbatim,
            (_, "metadata") => Mode::Metadata,
            _ => Mode::Plain,
        }
    }

    /// Whether a member `key` with a value of shape `shape` is left out.
    fn omits(self, key: &str, shape: Shape) -> bool {
        match shape {
            Shape::Null => !matches!((self, key), (Mode::ApiServiceSpec, "service")),
            Shape::EmptyArray => true,
            Shape::EmptyObject => MAP_FIELDS.contains(&key),
            Shape::EmptyString => matches!(self, Mode::Metadata | Mode::TopMetadata(_)),
            Shape::Other => false,
        }
    }

    /// Whether member `key` is left out whatever its value.
    fn drops(self, key: &str) -> bool {
        match self {
            Mode::TopMetadata(view) => {
                key == "selfLink"
                    || (!matches!(view, View::Whole | View::ListItem) && key == "managedFields")
            }
            Mode::Top(_, View::Main) => key == "status",
            // A custom object writes its own type members.
            Mode::Top(kind, View::Status) if kind.is_custom() => {
                !matches!(key, "status" | "apiVersion" | "kind")
            }
            Mode::Top(_, View::Status) => key != "status",
            _ => false,
        }
    }
}

/// What a value looks like in JSON, as far as omission cares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Shape {
    Null,
    EmptyArray,
    EmptyObject,
    EmptyString,
    Other,
}

/// The JSON shape of `v`, found by serializing only as far as its first element or field.
pub(crate) fn shape<T: Serialize + ?Sized>(v: &T) -> Shape {
    match v.serialize(Probe) {
        Ok(s) | Err(Found(s)) => s,
    }
}

/// The probe's "error": the shape, found before the value was written out.
#[derive(Debug)]
struct Found(Shape);

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Found(Shape::Other)
    }
}

/// Scalar methods of a `Serializer` that answer `$answer` whatever the value.
macro_rules! scalars_answer {
    ($ok:ty, $answer:expr; $($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Result<$ok, Found> {
            $answer
        })*
    };
}

/// Scalar methods of a `Serializer` that hand the value to `self.inner`.
macro_rules! scalars_delegate {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, v: $ty) -> Result<S::Ok, S::Error> {
            self.inner.$method(v)
        })*
    };
}

struct Probe;

/// A compound being probed: any member makes it non-empty; none leaves it `.0`.
struct ProbeCompound(Shape);

const OTHER: Result<Shape, Found> = Ok(Shape::Other);

impl Serializer for Probe {
    type Ok = Shape;
    type Error = Found;
    type SerializeSeq = ProbeCompound;
    type SerializeTuple = ProbeCompound;
    type SerializeTupleStruct = ProbeCompound;
    type SerializeTupleVariant = ProbeCompound;
    type SerializeMap = ProbeCompound;
    type SerializeStruct = ProbeCompound;
    type SerializeStructVariant = ProbeCompound;

    scalars_answer!(Shape, OTHER; serialize_bool(bool), serialize_i8(i8), serialize_i16(i16),
        serialize_i32(i32), serialize_i64(i64), serialize_u8(u8), serialize_u16(u16),
        serialize_u32(u32), serialize_u64(u64), serialize_char(char));
    fn serialize_f32(self, v: f32) -> Result<Shape, Found> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<Shape, Found> {
        // serde_json writes non-finite numbers as null.
        Ok(if v.is_finite() {
            Shape::Other
        } else {
            Shape::Null
        })
    }
    fn serialize_str(self, v: &str) -> Result<Shape, Found> {
        Ok(if v.is_empty() {
            Shape::EmptyString
        } else {
            Shape::Other
        })
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Shape, Found> {
        Ok(if v.is_empty() {
            Shape::EmptyArray
        } else {
            Shape::Other
        })
    }
    fn serialize_none(self) -> Result<Shape, Found> {
        Ok(Shape::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<Shape, Found> {
        v.serialize(Probe)
    }
    fn serialize_unit(self) -> Result<Shape, Found> {
        Ok(Shape::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Shape, Found> {
        Ok(Shape::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<Shape, Found> {
        OTHER
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<Shape, Found> {
        v.serialize(Probe)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Shape, Found> {
        OTHER
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<ProbeCompound, Found> {
        compound(len, Shape::EmptyArray)
    }
    fn serialize_tuple(self, len: usize) -> Result<ProbeCompound, Found> {
        compound(Some(len), Shape::EmptyArray)
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<ProbeCompound, Found> {
        compound(Some(len), Shape::EmptyArray)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<ProbeCompound, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<ProbeCompound, Found> {
        compound(len, Shape::EmptyObject)
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<ProbeCompound, Found> {
        compound(Some(len), Shape::EmptyObject)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<ProbeCompound, Found> {
        Err(Found(Shape::Other))
    }
}

fn compound(len: Option<usize>, empty: Shape) -> Result<ProbeCompound, Found> {
    match len {
        Some(n) if n > 0 && empty == Shape::EmptyArray => Err(Found(Shape::Other)),
        // A struct's length counts the fields it may skip, so only a member says it is
        // not empty; a map with a length is handled the same way for simplicity.
        _ => Ok(ProbeCompound(empty)),
    }
}

macro_rules! probe_compound {
    ($($trait:ident :: $method:ident ($($arg:ident : $ty:ty),*);)*) => {
        $(impl ser::$trait for ProbeCompound {
            type Ok = Shape;
            type Error = Found;
            fn $method<T: Serialize + ?Sized>(&mut self, $(_: $ty,)* _: &T) -> Result<(), Found> {
                Err(Found(Shape::Other))
            }
            fn end(self) -> Result<Shape, Found> {
                Ok(self.0)
            }
        })*
    };
}

probe_compound! {
    SerializeSeq::serialize_element();
    SerializeTuple::serialize_element();
    SerializeTupleStruct::serialize_field();
    SerializeTupleVariant::serialize_field();
    SerializeStruct::serialize_field(key: &'static str);
    SerializeStructVariant::serialize_field(key: &'static str);
}

impl ser::SerializeMap for ProbeCompound {
    type Ok = Shape;
    type Error = Found;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), Found> {
        Err(Found(Shape::Other))
    }
    fn end(self) -> Result<Shape, Found> {
        Ok(self.0)
    }
}

/// A value written through [`Omit`] in `mode`.
struct Child<'a, T: ?Sized> {
    value: &'a T,
    mode: Mode,
}

impl<T: Serialize + ?Sized> Serialize for Child<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(Omit {
            inner: s,
            mode: self.mode,
        })
    }
}

/// The adapter: passes everything to `inner`, leaving out members by the rules above.
struct Omit<S> {
    inner: S,
    mode: Mode,
}

/// A compound being written through [`Omit`].
struct OmitCompound<C> {
    inner: C,
    mode: Mode,
    /// A map key held back until its value shows whether the entry stays.
    pending_key: Option<String>,
}

impl<C> OmitCompound<C> {
    fn new(inner: C, mode: Mode) -> Self {
        OmitCompound {
            inner,
            mode,
            pending_key: None,
        }
    }
}

impl<S: Serializer> Serializer for Omit<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = OmitCompound<S::SerializeSeq>;
    type SerializeTuple = OmitCompound<S::SerializeTuple>;
    type SerializeTupleStruct = OmitCompound<S::SerializeTupleStruct>;
    type SerializeTupleVariant = OmitCompound<S::SerializeTupleVariant>;
    type SerializeMap = OmitCompound<S::SerializeMap>;
    type SerializeStruct = OmitCompound<S::SerializeStruct>;
    type SerializeStructVariant = OmitCompound<S::SerializeStructVariant>;

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
    scalars_delegate!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8])
    );
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.inner.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<S::Ok, S::Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.inner.serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.inner.serialize_unit_struct(name)
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.inner.serialize_unit_variant(name, index, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        let mode = self.mode.child(variant);
        self.inner
            .serialize_newtype_variant(name, index, variant, &Child { value: v, mode })
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        Ok(OmitCompound::new(
            self.inner.serialize_seq(len)?,
            Mode::Plain,
        ))
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        Ok(OmitCompound::new(
            self.inner.serialize_tuple(len)?,
            Mode::Plain,
        ))
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        Ok(OmitCompound::new(
            self.inner.serialize_tuple_struct(name, len)?,
            Mode::Plain,
        ))
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        Ok(OmitCompound::new(
            self.inner
                .serialize_tuple_variant(name, index, variant, len)?,
            Mode::Plain,
        ))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        use ser::SerializeMap;
        if let Mode::Top(kind, view) = self.mode.filter(|k| !k.is_custom()) {
            if view == View::ListItem {
                return Ok(OmitCompound::new(self.inner.serialize_map(len)?, self.mode));
            }
            let info = kind.info();
            let mut m = self.inner.serialize_map(len.map(|l| l + 2))?;
            // kube-apiserver's order: `kind`, then `apiVersion`.
            m.serialize_entry("kind", info.kind)?;
            m.serialize_entry("apiVersion", &info.api_version())?;
            return Ok(OmitCompound::new(m, self.mode));
        }
        Ok(OmitCompound::new(self.inner.serialize_map(len)?, self.mode))
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        use ser::SerializeStruct;
        if let Mode::Top(kind, view) = self.mode {
            if view == View::ListItem && !kind.is_custom() {
                return Ok(OmitCompound::new(
                    self.inner.serialize_struct(name, len)?,
                    self.mode,
                ));
            }
            let info = kind.info();
            let mut st = self.inner.serialize_struct(name, len + 2)?;
            st.serialize_field("kind", info.kind)?;
            st.serialize_field("apiVersion", &info.api_version())?;
            return Ok(OmitCompound::new(st, self.mode));
        }
        Ok(OmitCompound::new(
            self.inner.serialize_struct(name, len)?,
            self.mode,
        ))
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        Ok(OmitCompound::new(
            self.inner
                .serialize_struct_variant(name, index, variant, len)?,
            Mode::Plain,
        ))
    }
}

/// Sequence-like compounds: every element stays, written through [`Omit`].
macro_rules! omit_elements {
    ($($trait:ident :: $method:ident;)*) => {
        $(impl<C: ser::$trait> ser::$trait for OmitCompound<C> {
            type Ok = C::Ok;
            type Error = C::Error;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), C::Error> {
                self.inner.$method(&Child { value: v, mode: Mode::Plain })
            }
            fn end(self) -> Result<C::Ok, C::Error> {
                self.inner.end()
            }
        })*
    };
}

omit_elements! {
    SerializeSeq::serialize_element;
    SerializeTuple::serialize_element;
    SerializeTupleStruct::serialize_field;
    SerializeTupleVariant::serialize_field;
}

/// Struct-like compounds: named members, each kept or left out by the rules.
macro_rules! omit_fields {
    ($($trait:ident;)*) => {
        $(impl<C: ser::$trait> ser::$trait for OmitCompound<C> {
            type Ok = C::Ok;
            type Error = C::Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                v: &T,
            ) -> Result<(), C::Error> {
                if self.mode.drops(key) || self.mode.omits(key, shape(v)) {
                    return self.inner.skip_field(key);
                }
                let mode = self.mode.child(key);
                self.inner.serialize_field(key, &Child { value: v, mode })
            }
            fn end(self) -> Result<C::Ok, C::Error> {
                self.inner.end()
            }
        })*
    };
}

omit_fields! {
    SerializeStruct;
    SerializeStructVariant;
}

impl<C: ser::SerializeMap> ser::SerializeMap for OmitCompound<C> {
    type Ok = C::Ok;
    type Error = C::Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), C::Error> {
        match key.serialize(KeyString) {
            Ok(k) => {
                self.pending_key = Some(k);
                Ok(())
            }
            // Not a string: it cannot be named by a rule, so the entry stays.
            Err(_) => self.inner.serialize_key(key),
        }
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), C::Error> {
        match self.pending_key.take() {
            Some(key) => self.entry(&key, v),
            None => self.inner.serialize_value(&Child {
                value: v,
                mode: Mode::Plain,
            }),
        }
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        v: &V,
    ) -> Result<(), C::Error> {
        match key.serialize(KeyString) {
            Ok(k) => self.entry(&k, v),
            Err(_) => self.inner.serialize_entry(
                key,
                &Child {
                    value: v,
                    mode: Mode::Plain,
                },
            ),
        }
    }

    fn end(self) -> Result<C::Ok, C::Error> {
        self.inner.end()
    }
}

impl<C: ser::SerializeMap> OmitCompound<C> {
    fn entry<T: Serialize + ?Sized>(&mut self, key: &str, v: &T) -> Result<(), C::Error> {
        if self.mode.drops(key) {
            return Ok(());
        }
        let mode = self.mode.child(key);
        if matches!(mode, Mode::Verbatim) {
            return self.inner.serialize_entry(key, v);
        }
        if self.mode.omits(key, shape(v)) {
            return Ok(());
        }
        self.inner.serialize_entry(key, &Child { value: v, mode })
    }
}

/// Reads a map key that is a string (every key in the model is).
struct KeyString;

impl Serializer for KeyString {
    type Ok = String;
    type Error = Found;
    type SerializeSeq = Impossible<String, Found>;
    type SerializeTuple = Impossible<String, Found>;
    type SerializeTupleStruct = Impossible<String, Found>;
    type SerializeTupleVariant = Impossible<String, Found>;
    type SerializeMap = Impossible<String, Found>;
    type SerializeStruct = Impossible<String, Found>;
    type SerializeStructVariant = Impossible<String, Found>;

    fn serialize_str(self, v: &str) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_char(self, v: char) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<String, Found> {
        v.serialize(self)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<String, Found> {
        Ok(variant.to_string())
    }
    scalars_answer!(String, Err(Found(Shape::Other)); serialize_bool(bool), serialize_i8(i8),
        serialize_i16(i16), serialize_i32(i32), serialize_i64(i64), serialize_u8(u8),
        serialize_u16(u16), serialize_u32(u32), serialize_u64(u64), serialize_f32(f32),
        serialize_f64(f64), serialize_bytes(&[u8]));
    fn serialize_none(self) -> Result<String, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_unit(self) -> Result<String, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Found> {
        Err(Found(Shape::Other))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Found> {
        Err(Found(Shape::Other))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn written(kind: Kind, v: &serde_json::Value) -> String {
        written_as(kind, v, View::Whole)
    }

    fn written_as(kind: Kind, v: &serde_json::Value, view: View) -> String {
        serde_json::to_string(&Typed {
            kind,
            value: v,
            view,
        })
        .unwrap()
    }

    #[test]
    fn views_write_only_the_part_a_manager_can_own() {
        let pod = json!({
            "metadata": {"name": "a", "managedFields": [{"manager": "m"}], "labels": {"x": "1"}},
            "spec": {"nodeName": "n"},
            "status": {"phase": "Running"}
        });
        assert_eq!(
            written_as(Kind::Pod, &pod, View::Main),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"labels":{"x":"1"},"name":"a"},"spec":{"nodeName":"n"}}"#
        );
        assert_eq!(
            written_as(Kind::Pod, &pod, View::Status),
            r#"{"kind":"Pod","apiVersion":"v1","status":{"phase":"Running"}}"#
        );
        assert!(written(Kind::Pod, &pod).contains("managedFields"));
    }

    #[test]
    fn shapes_are_found_without_writing_the_value() {
        assert_eq!(shape(&None::<u8>), Shape::Null);
        assert_eq!(shape(&Vec::<String>::new()), Shape::EmptyArray);
        assert_eq!(shape(&vec![1]), Shape::Other);
        assert_eq!(
            shape(&std::collections::BTreeMap::<String, String>::new()),
            Shape::EmptyObject
        );
        assert_eq!(shape(&Some("")), Shape::EmptyString);
        assert_eq!(shape(&json!({"a": null})), Shape::Other);
        assert_eq!(shape(&f64::NAN), Shape::Null);
    }

    #[test]
    fn members_are_left_out_by_the_rules() {
        let obj = json!({
            "metadata": {"name": "p", "uid": "", "selfLink": "/x", "managedFields": [],
                         "labels": {"empty": ""}, "annotations": {}},
            "spec": {"template": {"metadata": {"name": "", "labels": {}}},
                     "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [],
                     "nodeName": null, "items": [null, ""], "hostname": ""},
        });
        assert_eq!(
            written(Kind::Pod, &obj),
            concat!(
                r#"{"kind":"Pod","apiVersion":"v1","#,
                r#""metadata":{"labels":{"empty":""},"name":"p"},"#,
                r#""spec":{"hostname":"","items":[null,""],"template":{"metadata":{}},"#,
                r#""volumes":[{"emptyDir":{},"name":"v"}]}}"#
            )
        );
    }
}
