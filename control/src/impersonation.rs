//! Impersonation (kube-apiserver's WithImpersonation filter): a request carrying
//! `Impersonate-User` (and optionally `Impersonate-Group`, `Impersonate-Uid` and
//! `Impersonate-Extra-<key>` headers) runs as that user when its sender may `impersonate`
//! each part of the identity:
//!
//! * the user: `users` (core group) named for it, or `serviceaccounts` in its namespace for
//!   `system:serviceaccount:NS:NAME`;
//! * each group: `groups` (core group);
//! * the uid: `uids` in authentication.k8s.io;
//! * each extra value: `userextras` in authentication.k8s.io, with the key as subresource.
//!
//! Without groups, a ServiceAccount gets its fixed groups; every impersonated user but
//! `system:anonymous` gets `system:authenticated`. The audit event names both users.

use std::collections::BTreeMap;

use crate::auth::{User, AUTHENTICATED_GROUP};
use crate::error::ApiError;
use crate::rbac::{Attributes, Authorizer};

pub const USER_HEADER: &str = "impersonate-user";
pub const GROUP_HEADER: &str = "impersonate-group";
pub const UID_HEADER: &str = "impersonate-uid";
pub const EXTRA_PREFIX: &str = "impersonate-extra-";
/// The group of the uid and user-extra impersonation resources.
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
/// The anonymous user, which is not made a member of system:authenticated.
const ANONYMOUS: &str = "system:anonymous";
const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// The identity a request asks to act as.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub name: String,
    pub uid: Option<String>,
    /// None: no `Impersonate-Group` header (the user's fixed groups, if any, apply).
    pub groups: Option<Vec<String>>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// An extra key as sent in a header name is percent-encoded (header names cannot carry
/// every character a key may have); one that does not decode is taken as it is.
fn unescape_extra_key(encoded: &str) -> String {
    percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .map(|s| s.into_owned())
        .unwrap_or_else(|_| encoded.to_string())
}

/// The identity the headers ask for: None without impersonation headers. `headers` are
/// (name, value) pairs, one per value, names in any case.
pub fn wanted<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Option<Wanted>, ApiError> {
    let mut w = Wanted::default();
    let (mut any, mut has_user) = (false, false);
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if lower == USER_HEADER {
            // Go's Header.Get: the first value.
            if !has_user {
                w.name = value.to_string();
                has_user = !value.is_empty();
            }
            any = true;
        } else if lower == GROUP_HEADER {
            w.groups
                .get_or_insert_with(Vec::new)
                .push(value.to_string());
            any = true;
        } else if lower == UID_HEADER {
            if w.uid.is_none() && !value.is_empty() {
                w.uid = Some(value.to_string());
            }
            any = true;
        } else if let Some(key) = lower.strip_prefix(EXTRA_PREFIX) {
            w.extra
                .entry(unescape_extra_key(key))
                .or_default()
                .push(value.to_string());
            any = true;
        }
    }
    if !any {
        return Ok(None);
    }
    if !has_user {
        if w.uid.is_none() && w.groups.is_none() && w.extra.is_empty() {
            // Only an empty Impersonate-User: no impersonation, as in Kubernetes.
            return Ok(None);
        }
        return Err(ApiError::bad_request(
            "requested impersonation of groups, a uid or extra fields without impersonating a user name",
        ));
    }
    Ok(Some(w))
}

/// A ServiceAccount user name's namespace and name.
fn service_account(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("system:serviceaccount:")?;
    let (ns, sa) = rest.split_once(':')?;
    (!ns.is_empty() && !sa.is_empty() && !sa.contains(':')).then_some((ns, sa))
}

/// The user `requestor` acts as, if it may impersonate every part of `wanted`; else the
/// authorizer's 403 for the first part it may not.
pub fn impersonate(
    authorizer: &Authorizer,
    requestor: &User,
    wanted: &Wanted,
) -> Result<User, ApiError> {
    let check = |group: &str, resource: &str, sub: &str, ns: &str, name: &str| {
        authorizer.check(
            requestor,
            &Attributes::resource("impersonate", group, resource, sub, ns, name),
        )
    };
    let mut groups = wanted.groups.clone().unwrap_or_default();
    match service_account(&wanted.name) {
        Some((ns, sa)) => {
            check("", "serviceaccounts", "", ns, sa)?;
            if wanted.groups.is_none() {
                groups = vec![
                    crate::serviceaccount::ALL_GROUP.to_string(),
                    format!("{}:{ns}", crate::serviceaccount::ALL_GROUP),
                ];
            }
        }
        None => check("", "users", "", "", &wanted.name)?,
    }
    if let Some(uid) = &wanted.uid {
        check(AUTHENTICATION_GROUP, "uids", "", "", uid)?;
    }
    for g in wanted.groups.iter().flatten() {
        check("", "groups", "", "", g)?;
    }
    for (key, values) in &wanted.extra {
        for v in values {
            check(AUTHENTICATION_GROUP, "userextras", key, "", v)?;
        }
    }
    if wanted.name == ANONYMOUS {
        if !groups.iter().any(|g| g == UNAUTHENTICATED_GROUP) {
            groups.push(UNAUTHENTICATED_GROUP.to_string());
        }
    } else if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        groups.push(AUTHENTICATED_GROUP.to_string());
    }
    Ok(User {
        name: wanted.name.clone(),
        uid: wanted.uid.clone().unwrap_or_default(),
        groups,
        extra: wanted.extra.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_name_the_wanted_identity() {
        assert_eq!(wanted([("Accept", "x")]).unwrap(), None);
        let w = wanted([
            ("Impersonate-User", "alice"),
            ("impersonate-group", "devs"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-example.org%2fteam", "a"),
            ("Impersonate-Extra-example.org%2Fteam", "b"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(w.name, "alice");
        assert_eq!(w.uid.as_deref(), Some("u-1"));
        assert_eq!(w.groups, Some(vec!["devs".into(), "ops".into()]));
        assert_eq!(w.extra["scopes"], ["view"]);
        assert_eq!(w.extra["example.org/team"], ["a", "b"]);
        // Groups without a user are refused.
        let e = wanted([("Impersonate-Group", "devs")]).unwrap_err();
        assert_eq!(e.code(), 400);
    }

    #[test]
    fn service_account_names_are_recognised() {
        assert_eq!(
            service_account("system:serviceaccount:ns:bot"),
            Some(("ns", "bot"))
        );
        assert_eq!(service_account("system:serviceaccount:ns"), None);
        assert_eq!(service_account("alice"), None);
    }

    #[test]
    fn masters_may_impersonate_anyone_and_groups_follow_the_rules() {
        let authz = Authorizer::new();
        let admin = User::admin();
        let sa = impersonate(
            &authz,
            &admin,
            &Wanted {
                name: "system:serviceaccount:ns:bot".into(),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ]
        );
        let anon = impersonate(
            &authz,
            &admin,
            &Wanted {
                name: ANONYMOUS.into(),
                groups: Some(vec![]),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(anon.groups, ["system:unauthenticated"]);
        // Nobody else may impersonate without a binding.
        let alice = User::new("alice", "", vec![]);
        let e = impersonate(
            &authz,
            &alice,
            &Wanted {
                name: "bob".into(),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.0.message,
            "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
    }
}
