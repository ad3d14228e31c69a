//! `-f FILE|DIR|-`: reading manifests into objects with their kind, name and namespace.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use api::Kind;
use serde_json::Value;

/// One object from a manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct ManifestObject {
    /// The file it came from (`-` for stdin).
    pub source: String,
    pub kind: Kind,
    pub name: String,
    /// The namespace for namespaced kinds: the object's own, else the default one; None
    /// for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object, with `metadata.namespace` filled in for namespaced kinds.
    pub object: Value,
}

/// The files a `-f` argument names: stdin, a file, or the manifests (`.yaml`, `.yml`,
/// `.json`) directly in a directory, in name order.
pub fn expand(arg: &str) -> anyhow::Result<Vec<PathBuf>> {
    if arg == "-" {
        return Ok(vec![PathBuf::from("-")]);
    }
    if arg.starts_with("http://") || arg.starts_with("https://") {
        anyhow::bail!("reading manifests from URLs is not supported: {arg}");
    }
    let path = Path::new(arg);
    let meta =
        std::fs::metadata(path).with_context(|| format!("the path {arg:?} does not exist"))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading directory {arg}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every object of every `-f` argument, in order.
pub fn read_all(args: &[String], default_namespace: &str) -> anyhow::Result<Vec<ManifestObject>> {
    let mut out = Vec::new();
    for arg in args {
        for file in expand(arg)? {
            let (source, text) = if file.as_os_str() == "-" {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("reading manifests from stdin")?;
                ("-".to_string(), text)
            } else {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                (file.display().to_string(), text)
            };
            out.extend(parse_text(&source, &text, default_namespace)?);
        }
    }
    if out.is_empty() {
        anyhow::bail!("no objects passed to the command");
    }
    Ok(out)
}

/// Splits one manifest text into its objects.
pub fn parse_text(
    source: &str,
    text: &str,
    default_namespace: &str,
) -> anyhow::Result<Vec<ManifestObject>> {
    let docs = api::codec::parse_manifests(text).with_context(|| format!("parsing {source}"))?;
    docs.into_iter()
        .map(|mut object| {
            let kind = api::codec::type_of(&object).with_context(|| format!("in {source}"))?;
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if name.is_empty() {
                anyhow::bail!(
                    "in {source}: a {} has no metadata.name (resource name may not be empty)",
                    kind.info().kind
                );
            }
            let namespace = if kind.info().namespaced {
                let ns = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .unwrap_or(default_namespace)
                    .to_string();
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("namespace".into(), Value::String(ns.clone()));
                }
                Some(ns)
            } else {
                None
            };
            Ok(ManifestObject {
                source: source.to_string(),
                kind,
                name,
                namespace,
                object,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MULTI: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
---
# a comment-only document is skipped
---
apiVersion: v1
kind: Namespace
metadata:
  name: edge
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  namespace: other
data:
  a: b
";

    #[test]
    fn multi_document_yaml_splits_with_namespaces_filled_in() {
        let objs = parse_text("m.yaml", MULTI, "dev").unwrap();
        let summary: Vec<_> = objs
            .iter()
            .map(|o| (o.kind, o.name.as_str(), o.namespace.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                (Kind::Deployment, "web", Some("dev")),
                (Kind::Namespace, "edge", None),
                (Kind::ConfigMap, "cfg", Some("other")),
            ]
        );
        assert_eq!(objs[0].object["metadata"]["namespace"], "dev");
        assert!(objs[1].object["metadata"].get("namespace").is_none());
    }

    #[test]
    fn json_lists_are_flattened() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}},
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"b"}}]}"#;
        let objs = parse_text("l.json", text, "default").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].kind, Kind::Service);
    }

    #[test]
    fn unknown_kinds_and_missing_names_are_errors() {
        let e = parse_text(
            "x.yaml",
            "apiVersion: v1\nkind: Widget\nmetadata: {name: a}\n",
            "d",
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("Widget"), "{e:#}");
        let e = parse_text("x.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {}\n", "d").unwrap_err();
        assert!(
            e.to_string().contains("resource name may not be empty"),
            "{e}"
        );
    }

    #[test]
    fn directories_expand_to_their_manifests_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.yaml", "a.json", "c.txt", "d.yml"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let files = expand(dir.path().to_str().unwrap()).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a.json", "b.yaml", "d.yml"]);
        assert!(expand("/nonexistent/x.yaml").is_err());
    }
}
