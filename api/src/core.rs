//! core/v1 kinds. (Placeholder shapes: the full model replaces the opaque specs.)

use serde::{Deserialize, Serialize};

use crate::meta::{ObjectMeta, Opaque};
use crate::object::{fingerprint, Kind, Resource};

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Namespace {
    pub metadata: ObjectMeta,
    pub spec: Option<Opaque>,
    pub status: Option<Opaque>,
}

impl Resource for Namespace {
    const KIND: Kind = Kind::Namespace;
    crate::resource_basics!(Namespace);
    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&self.spec)
    }
    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Node {
    pub metadata: ObjectMeta,
    pub spec: Option<Opaque>,
    pub status: Option<Opaque>,
}

impl Resource for Node {
    const KIND: Kind = Kind::Node;
    crate::resource_basics!(Node);
    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&self.spec)
    }
    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: Option<Opaque>,
    pub status: Option<Opaque>,
}

impl Resource for Pod {
    const KIND: Kind = Kind::Pod;
    crate::resource_basics!(Pod);
    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&self.spec)
    }
    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Service {
    pub metadata: ObjectMeta,
    pub spec: Option<Opaque>,
    pub status: Option<Opaque>,
}

impl Resource for Service {
    const KIND: Kind = Kind::Service;
    crate::resource_basics!(Service);
    fn spec_fingerprint(&self) -> Vec<u8> {
        fingerprint(&self.spec)
    }
    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }
    fn clear_status(&mut self) {
        self.status = None;
    }
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Endpoints {
    pub metadata: ObjectMeta,
    pub subsets: Option<Opaque>,
}

impl Resource for Endpoints {
    const KIND: Kind = Kind::Endpoints;
    crate::resource_basics!(Endpoints);
    fn spec_fingerprint(&self) -> Vec<u8> {
        let mut c = self.clone();
        c.metadata = ObjectMeta::default();
        fingerprint(&c)
    }
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ConfigMap {
    pub metadata: ObjectMeta,
    pub data: Option<Opaque>,
    pub binary_data: Option<Opaque>,
    pub immutable: Option<Opaque>,
}

impl Resource for ConfigMap {
    const KIND: Kind = Kind::ConfigMap;
    crate::resource_basics!(ConfigMap);
    fn spec_fingerprint(&self) -> Vec<u8> {
        let mut c = self.clone();
        c.metadata = ObjectMeta::default();
        fingerprint(&c)
    }
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Secret {
    pub metadata: ObjectMeta,
    pub data: Option<Opaque>,
    pub string_data: Option<Opaque>,
    #[serde(rename = "type")]
    pub type_: Option<Opaque>,
    pub immutable: Option<Opaque>,
}

impl Resource for Secret {
    const KIND: Kind = Kind::Secret;
    crate::resource_basics!(Secret);
    fn spec_fingerprint(&self) -> Vec<u8> {
        let mut c = self.clone();
        c.metadata = ObjectMeta::default();
        fingerprint(&c)
    }
}

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Event {
    pub metadata: ObjectMeta,
    pub involved_object: Option<Opaque>,
    pub reason: Option<Opaque>,
    pub message: Option<Opaque>,
    pub source: Option<Opaque>,
    pub first_timestamp: Option<Opaque>,
    pub last_timestamp: Option<Opaque>,
    pub count: Option<Opaque>,
    #[serde(rename = "type")]
    pub type_: Option<Opaque>,
    pub event_time: Option<Opaque>,
    pub reporting_component: Option<Opaque>,
    pub reporting_instance: Option<Opaque>,
    pub action: Option<Opaque>,
    pub related: Option<Opaque>,
    pub series: Option<Opaque>,
}

impl Resource for Event {
    const KIND: Kind = Kind::Event;
    crate::resource_basics!(Event);
    fn spec_fingerprint(&self) -> Vec<u8> {
        let mut c = self.clone();
        c.metadata = ObjectMeta::default();
        fingerprint(&c)
    }
}
