//! apps/v1 kinds. (Placeholder shapes: the full model replaces the opaque specs.)

use serde::{Deserialize, Serialize};

use crate::meta::{ObjectMeta, Opaque};
use crate::object::{fingerprint, Kind, Resource};

#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Deployment {
    pub metadata: ObjectMeta,
    pub spec: Option<Opaque>,
    pub status: Option<Opaque>,
}

impl Resource for Deployment {
    const KIND: Kind = Kind::Deployment;
    crate::resource_basics!(Deployment);
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
pub struct ReplicaSet {
    pub metadata: ObjectMeta,
    pub spec: Option<Opaque>,
    pub status: Option<Opaque>,
}

impl Resource for ReplicaSet {
    const KIND: Kind = Kind::ReplicaSet;
    crate::resource_basics!(ReplicaSet);
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
pub struct DaemonSet {
    pub metadata: ObjectMeta,
    pub spec: Option<Opaque>,
    pub status: Option<Opaque>,
}

impl Resource for DaemonSet {
    const KIND: Kind = Kind::DaemonSet;
    crate::resource_basics!(DaemonSet);
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
