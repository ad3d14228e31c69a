//! Builds a protobuf `FileDescriptorSet` for the Kubernetes API from the prost-generated Rust
//! source of the `k8s-pb` crate, so that the server can decode and encode Kubernetes'
//! protobuf wire format generically (with prost-reflect) for every kind, without per-kind code.
//!
//! k8s-pb ships Rust structs, not `.proto` files: each field carries a
//! `#[prost(<type>, optional|repeated, tag = "N")]` attribute (or `btree_map = "k, v"`), and
//! the message type of a message field is its Rust type path. That is everything a descriptor
//! needs except the original field names, which prost turned into snake case (`podIP` became
//! `pod_ip`, `externalIPs` became `external_ips`); [`json_name`] restores them with Go's
//! initialisms, which is how Kubernetes names its JSON fields.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions,
};

/// The k8s-pb modules (directories under its `src/`) that become descriptor files: the API
/// groups skiff serves or may serve, at their stable versions, and the apimachinery packages
/// they refer to.
pub const MODULES: &[&str] = &[
    "apimachinery/pkg/apis/meta/v1",
    "apimachinery/pkg/runtime",
    "apimachinery/pkg/util/intstr",
    "apimachinery/pkg/api/resource",
    "api/core/v1",
    "api/apps/v1",
    "api/batch/v1",
    "api/rbac/v1",
    "api/networking/v1",
    "api/policy/v1",
    "api/autoscaling/v1",
    "api/autoscaling/v2",
    "api/storage/v1",
    "api/coordination/v1",
    "api/certificates/v1",
    "api/authentication/v1",
    "api/authorization/v1",
    "api/discovery/v1",
    "api/events/v1",
    "api/scheduling/v1",
    "api/node/v1",
];

/// Where the descriptor set is kept in the repository (relative to the workspace root).
pub const OUTPUT: &str = "control/src/http/k8s-descriptors.bin";

#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse { path: PathBuf, source: syn::Error },
    #[error("{context}: {message}")]
    Field { context: String, message: String },
}

/// The snake-case names whose JSON name the initialism rule gets wrong: prost split an
/// initialism at the front of a name (`APIGroup` became `a_pi_group`, `UID` became `u_id`).
const NAME_OVERRIDES: &[(&str, &str)] = &[("a_pi_group", "apiGroup"), ("u_id", "uid")];

/// Fields whose JSON name is not even Go's initialism rule: (message, snake name, JSON name).
const FIELD_OVERRIDES: &[(&str, &str, &str)] = &[("DaemonEndpoint", "port", "Port")];

/// Go initialisms as they appear in prost's snake case (one or two segments) and in
/// Kubernetes' JSON names. A name's first segment stays lower case (`ip_family` is `ipFamily`).
const INITIALISMS: &[(&str, &str)] = &[
    ("i_ps", "IPs"),
    ("cid_rs", "CIDRs"),
    ("ur_ls", "URLs"),
    ("ww_ns", "WWNs"),
    ("ip", "IP"),
    ("ips", "IPs"),
    ("id", "ID"),
    ("uid", "UID"),
    ("cidr", "CIDR"),
    ("cidrs", "CIDRs"),
    ("uri", "URI"),
    ("url", "URL"),
    ("uuid", "UUID"),
    ("pid", "PID"),
    ("ipc", "IPC"),
    ("api", "API"),
    ("tls", "TLS"),
    ("cpu", "CPU"),
    ("fqdn", "FQDN"),
    ("io", "IO"),
];

/// Kubernetes' JSON name of a field that prost named `snake`.
pub fn json_name(snake: &str) -> String {
    if let Some((_, j)) = NAME_OVERRIDES.iter().find(|(s, _)| *s == snake) {
        return (*j).to_string();
    }
    let segs: Vec<&str> = snake.split('_').collect();
    let mut out = segs[0].to_string();
    let mut i = 1;
    while i < segs.len() {
        if i + 1 < segs.len() {
            let two = format!("{}_{}", segs[i], segs[i + 1]);
            if let Some((_, j)) = INITIALISMS.iter().find(|(s, _)| *s == two) {
                out.push_str(j);
                i += 2;
                continue;
            }
        }
        if let Some((_, j)) = INITIALISMS.iter().find(|(s, _)| *s == segs[i]) {
            out.push_str(j);
        } else {
            let mut c = segs[i].chars();
            if let Some(first) = c.next() {
                out.extend(first.to_uppercase());
                out.push_str(c.as_str());
            }
        }
        i += 1;
    }
    out
}

/// The protobuf package of a k8s-pb module path (`api/core/v1` is `k8s.io.api.core.v1`).
fn package_of(module: &[String]) -> String {
    format!("k8s.io.{}", module.join("."))
}

/// The descriptor set of [`MODULES`], read from k8s-pb's `src` directory, encoded.
pub fn generate(k8s_pb_src: &Path) -> Result<Vec<u8>, GenError> {
    let mut files = Vec::new();
    for module in MODULES {
        files.push(file_descriptor(k8s_pb_src, module)?);
    }
    Ok(FileDescriptorSet { file: files }.encode_to_vec())
}

fn file_descriptor(src: &Path, module: &str) -> Result<FileDescriptorProto, GenError> {
    let path = src.join(module).join("mod.rs");
    let text = std::fs::read_to_string(&path).map_err(|source| GenError::Read {
        path: path.clone(),
        source,
    })?;
    let file = syn::parse_file(&text).map_err(|source| GenError::Parse {
        path: path.clone(),
        source,
    })?;
    let module_path: Vec<String> = module.split('/').map(str::to_string).collect();
    let package = package_of(&module_path);
    let mut deps = BTreeSet::new();
    let mut messages = Vec::new();
    for item in &file.items {
        let syn::Item::Struct(s) = item else { continue };
        if !derives_message(&s.attrs) {
            continue;
        }
        messages.push(message_descriptor(s, &module_path, &package, &mut deps)?);
    }
    deps.remove(&package);
    Ok(FileDescriptorProto {
        name: Some(file_name(&package)),
        package: Some(package),
        dependency: deps.iter().map(|p| file_name(p)).collect(),
        message_type: messages,
        syntax: Some("proto2".into()),
        ..Default::default()
    })
}

fn file_name(package: &str) -> String {
    format!("{}/generated.proto", package.replace('.', "/"))
}

fn derives_message(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("derive") && {
            let tokens = a.meta.require_list().map(|l| l.tokens.to_string());
            tokens.is_ok_and(|t| t.replace(' ', "").contains("prost::Message"))
        }
    })
}

/// What a `#[prost(...)]` attribute says about a field.
struct ProstAttr {
    scalar: Option<String>,
    repeated: bool,
    map: Option<(String, String)>,
    tag: i32,
}

fn parse_prost_attr(attr: &syn::Attribute, context: &str) -> Result<ProstAttr, GenError> {
    let err = |message: String| GenError::Field {
        context: context.to_string(),
        message,
    };
    let list = attr.meta.require_list().map_err(|e| err(e.to_string()))?;
    let metas = list
        .parse_args_with(syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
        .map_err(|e| err(e.to_string()))?;
    let mut out = ProstAttr {
        scalar: None,
        repeated: false,
        map: None,
        tag: 0,
    };
    for meta in metas {
        match &meta {
            syn::Meta::Path(p) => {
                let name = p.get_ident().map(|i| i.to_string()).unwrap_or_default();
                match name.as_str() {
                    "optional" | "required" => {}
                    "repeated" => out.repeated = true,
                    _ => out.scalar = Some(name),
                }
            }
            syn::Meta::NameValue(nv) => {
                let name = nv
                    .path
                    .get_ident()
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                let value = match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => s.value(),
                    _ => return Err(err(format!("unexpected value of {name}"))),
                };
                match name.as_str() {
                    "tag" => out.tag = value.parse().map_err(|_| err(format!("tag {value}")))?,
                    "btree_map" | "map" | "hash_map" => {
                        let (k, v) = value
                            .split_once(',')
                            .ok_or_else(|| err(format!("map type {value}")))?;
                        out.map = Some((k.trim().to_string(), v.trim().to_string()));
                    }
                    "bytes" => out.scalar = Some("bytes".into()),
                    "packed" => {}
                    _ => return Err(err(format!("unsupported prost option {name}"))),
                }
            }
            syn::Meta::List(_) => return Err(err("unsupported prost option".into())),
        }
    }
    if out.tag == 0 {
        return Err(err("no tag".into()));
    }
    Ok(out)
}

fn scalar_type(name: &str) -> Option<Type> {
    Some(match name {
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "bool" => Type::Bool,
        "int32" => Type::Int32,
        "int64" => Type::Int64,
        "uint32" => Type::Uint32,
        "uint64" => Type::Uint64,
        "sint32" => Type::Sint32,
        "sint64" => Type::Sint64,
        "fixed32" => Type::Fixed32,
        "fixed64" => Type::Fixed64,
        "double" => Type::Double,
        "float" => Type::Float,
        _ => return None,
    })
}

/// The message type a Rust field type names, as a fully qualified protobuf name: wrappers
/// (`Option`, `Vec`, `Box`, the value of a map) are looked through, and the path is resolved
/// against the module it appears in (`super::` climbs one module).
fn message_type_name(ty: &syn::Type, module: &[String]) -> Option<String> {
    let syn::Type::Path(tp) = ty else { return None };
    let last = tp.path.segments.last()?;
    let wrapper = matches!(
        last.ident.to_string().as_str(),
        "Option" | "Vec" | "Box" | "BTreeMap" | "HashMap"
    );
    if wrapper {
        if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
            let inner = args.args.iter().rev().find_map(|a| match a {
                syn::GenericArgument::Type(t) => Some(t),
                _ => None,
            })?;
            return message_type_name(inner, module);
        }
        return None;
    }
    let mut resolved: Vec<String> = module.to_vec();
    let segs: Vec<String> = tp
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    let (name, prefix) = segs.split_last()?;
    for seg in prefix {
        match seg.as_str() {
            "super" => {
                resolved.pop();
            }
            "crate" => resolved.clear(),
            other => resolved.push(other.to_string()),
        }
    }
    Some(format!(".{}.{}", package_of(&resolved), name))
}

fn message_descriptor(
    s: &syn::ItemStruct,
    module: &[String],
    package: &str,
    deps: &mut BTreeSet<String>,
) -> Result<DescriptorProto, GenError> {
    let name = s.ident.to_string();
    let mut fields = Vec::new();
    let mut entries = Vec::new();
    let syn::Fields::Named(named) = &s.fields else {
        return Ok(DescriptorProto {
            name: Some(name),
            ..Default::default()
        });
    };
    for f in &named.named {
        let Some(attr) = f.attrs.iter().find(|a| a.path().is_ident("prost")) else {
            continue;
        };
        let snake = f
            .ident
            .as_ref()
            .map(|i| i.to_string().trim_start_matches("r#").to_string())
            .unwrap_or_default();
        let context = format!("{package}.{name}.{snake}");
        let p = parse_prost_attr(attr, &context)?;
        let json = FIELD_OVERRIDES
            .iter()
            .find(|(m, f, _)| *m == name && *f == snake)
            .map(|(_, _, j)| (*j).to_string())
            .unwrap_or_else(|| json_name(&snake));
        let mut fd = FieldDescriptorProto {
            name: Some(json.clone()),
            json_name: Some(json.clone()),
            number: Some(p.tag),
            label: Some(if p.repeated || p.map.is_some() {
                Label::Repeated
            } else {
                Label::Optional
            } as i32),
            ..Default::default()
        };
        let message_of = |deps: &mut BTreeSet<String>| {
            let full = message_type_name(&f.ty, module).ok_or_else(|| GenError::Field {
                context: context.clone(),
                message: "cannot resolve the message type".into(),
            })?;
            let pkg = full[1..].rsplit_once('.').map(|(p, _)| p.to_string());
            deps.extend(pkg);
            Ok::<_, GenError>(full)
        };
        if let Some((k, v)) = &p.map {
            let entry = format!("{}Entry", upper_first(&json));
            let key_type = scalar_type(k).ok_or_else(|| GenError::Field {
                context: context.clone(),
                message: format!("map key type {k}"),
            })?;
            let mut value = FieldDescriptorProto {
                name: Some("value".into()),
                json_name: Some("value".into()),
                number: Some(2),
                label: Some(Label::Optional as i32),
                ..Default::default()
            };
            match scalar_type(v) {
                Some(t) => value.r#type = Some(t as i32),
                None if v == "message" => {
                    value.r#type = Some(Type::Message as i32);
                    value.type_name = Some(message_of(deps)?);
                }
                None => {
                    return Err(GenError::Field {
                        context,
                        message: format!("map value type {v}"),
                    })
                }
            }
            entries.push(DescriptorProto {
                name: Some(entry.clone()),
                field: vec![
                    FieldDescriptorProto {
                        name: Some("key".into()),
                        json_name: Some("key".into()),
                        number: Some(1),
                        label: Some(Label::Optional as i32),
                        r#type: Some(key_type as i32),
                        ..Default::default()
                    },
                    value,
                ],
                options: Some(MessageOptions {
                    map_entry: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            });
            fd.r#type = Some(Type::Message as i32);
            fd.type_name = Some(format!(".{package}.{name}.{entry}"));
        } else {
            match p.scalar.as_deref() {
                Some("message") => {
                    fd.r#type = Some(Type::Message as i32);
                    fd.type_name = Some(message_of(deps)?);
                }
                Some(other) => {
                    fd.r#type = Some(scalar_type(other).ok_or_else(|| GenError::Field {
                        context: context.clone(),
                        message: format!("unsupported type {other}"),
                    })? as i32);
                }
                None => {
                    return Err(GenError::Field {
                        context,
                        message: "no type".into(),
                    })
                }
            }
        }
        fields.push(fd);
    }
    Ok(DescriptorProto {
        name: Some(name),
        field: fields,
        nested_type: entries,
        ..Default::default()
    })
}

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The `src` directory of the k8s-pb crate that the workspace depends on, found with
/// `cargo metadata` (run in `workspace`).
pub fn locate_k8s_pb(workspace: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(workspace)
        .args(["metadata", "--format-version", "1"])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let packages = meta["packages"].as_array().cloned().unwrap_or_default();
    let mut found: BTreeMap<String, PathBuf> = BTreeMap::new();
    for p in packages {
        if p["name"] == "k8s-pb" {
            let manifest = p["manifest_path"].as_str().unwrap_or_default();
            let dir = Path::new(manifest).parent().unwrap_or(Path::new("."));
            found.insert(
                p["version"].as_str().unwrap_or_default().to_string(),
                dir.join("src"),
            );
        }
    }
    anyhow::ensure!(
        found.len() == 1,
        "expected exactly one k8s-pb in the dependency graph, found {:?}",
        found.keys().collect::<Vec<_>>()
    );
    Ok(found.into_values().next().unwrap_or_default())
}

/// The workspace root (this crate lives in `tools/protogen`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_restore_initialisms() {
        for (snake, json) in [
            ("pod_ip", "podIP"),
            ("pod_ips", "podIPs"),
            ("external_ips", "externalIPs"),
            ("cluster_ip", "clusterIP"),
            ("pod_cid_rs", "podCIDRs"),
            ("host_pid", "hostPID"),
            ("set_hostname_as_fqdn", "setHostnameAsFQDN"),
            ("ip_family_policy", "ipFamilyPolicy"),
            ("api_version", "apiVersion"),
            ("non_resource_ur_ls", "nonResourceURLs"),
            ("a_pi_group", "apiGroup"),
            ("uid", "uid"),
            (
                "termination_grace_period_seconds",
                "terminationGracePeriodSeconds",
            ),
            ("insecure_skip_tls_verify", "insecureSkipTLSVerify"),
        ] {
            assert_eq!(json_name(snake), json, "{snake}");
        }
    }

    /// The committed descriptor set is what the k8s-pb dependency gives today.
    #[test]
    fn committed_descriptor_set_is_current() {
        let root = workspace_root();
        let src = locate_k8s_pb(&root).expect("k8s-pb source");
        let fresh = generate(&src).expect("generate");
        let committed = std::fs::read(root.join(OUTPUT)).expect("committed descriptor set");
        assert!(
            fresh == committed,
            "{OUTPUT} is stale: run `cargo run -p skiff-protogen`"
        );
    }
}
