//! `skiff delete KIND NAME... | -f FILE`: delete, then (by default) wait until the objects
//! are gone, watching each with `fieldSelector=metadata.name=<name>` as kubectl does.

use std::time::Duration;

use api::client::{ClientError, ListOptions, WatchEvent, ACCEPT_JSON};
use api::meta::DeleteOptions;
use api::Kind;
use futures_lite::StreamExt as _;
use serde_json::Value;

use super::{kind_label, manifest, resolve_kind, AlreadyReported, Session};

#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The kind (`pods`, `deploy`, ...), or KIND/NAME.
    #[arg(required_unless_present = "files")]
    pub kind: Option<String>,
    /// Names of the objects.
    pub names: Vec<String>,
    /// Delete the objects in these manifests (file, directory or `-`; repeatable).
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        conflicts_with = "kind"
    )]
    pub files: Vec<String>,
    /// Wait until the objects are gone.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub wait: bool,
    /// Give up waiting after this long (e.g. `30s`, `2m`); default: wait as long as it takes.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Treat objects that do not exist as deleted.
    #[arg(long)]
    pub ignore_not_found: bool,
}

/// One object to delete.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub kind: Kind,
    pub namespace: Option<String>,
    pub name: String,
}

pub fn targets(args: &DeleteArgs, default_namespace: &str) -> anyhow::Result<Vec<Target>> {
    if !args.files.is_empty() {
        return Ok(manifest::read_all(&args.files, default_namespace)?
            .into_iter()
            .map(|o| Target {
                kind: o.kind,
                namespace: o.namespace,
                name: o.name,
            })
            .collect());
    }
    let kind_arg = args.kind.as_deref().unwrap_or("");
    let (kind_name, mut names) = match kind_arg.split_once('/') {
        Some((k, n)) => (k, vec![n.to_string()]),
        None => (kind_arg, Vec::new()),
    };
    names.extend(args.names.iter().cloned());
    let kind = resolve_kind(kind_name)?;
    if names.is_empty() {
        anyhow::bail!("resource(s) were provided, but no name was specified");
    }
    let namespace = kind
        .info()
        .namespaced
        .then(|| default_namespace.to_string());
    Ok(names
        .into_iter()
        .map(|name| Target {
            kind,
            namespace: namespace.clone(),
            name,
        })
        .collect())
}

pub async fn run(session: &Session, args: &DeleteArgs) -> anyhow::Result<()> {
    let targets = targets(args, &session.namespace)?;
    let options = DeleteOptions {
        propagation_policy: Some("Background".into()),
        ..Default::default()
    };
    let mut failed = 0;
    let mut deleted = Vec::new();
    for t in &targets {
        match session
            .client
            .delete_value(t.kind, t.namespace.as_deref(), &t.name, &options)
            .await
        {
            Ok(_) => {
                println!("{} \"{}\" deleted", kind_label(t.kind), t.name);
                deleted.push(t);
            }
            Err(e) if e.is_not_found() && args.ignore_not_found => {}
            Err(e) => {
                failed += 1;
                eprintln!("error: {e}");
            }
        }
    }
    if args.wait {
        for t in deleted {
            let wait = wait_until_gone(session, t);
            let result = match args.timeout {
                Some(limit) => {
                    smol::future::or(wait, async {
                        smol::Timer::after(limit).await;
                        Err(anyhow::anyhow!(
                            "timed out waiting for {} \"{}\" to be deleted",
                            kind_label(t.kind),
                            t.name
                        ))
                    })
                    .await
                }
                None => wait.await,
            };
            if let Err(e) = result {
                failed += 1;
                eprintln!("error: {}", super::error_line(&e));
            }
        }
    }
    if failed > 0 {
        return Err(AlreadyReported(failed).into());
    }
    Ok(())
}

/// Returns once the object no longer exists.
async fn wait_until_gone(session: &Session, t: &Target) -> anyhow::Result<()> {
    let client = &session.client;
    let ns = t.namespace.as_deref();
    let selector = format!("metadata.name={}", t.name);
    loop {
        let list = client
            .list_value(
                t.kind,
                ns,
                &ListOptions {
                    field_selector: Some(selector.clone()),
                    ..Default::default()
                },
            )
            .await?;
        let still_there = list
            .get("items")
            .and_then(Value::as_array)
            .is_some_and(|items| !items.is_empty());
        if !still_there {
            return Ok(());
        }
        let rv = list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let options = ListOptions {
            field_selector: Some(selector.clone()),
            resource_version: Some(rv),
            ..Default::default()
        };
        let mut events = client
            .watch_value(t.kind, ns, &options, ACCEPT_JSON)
            .await?;
        while let Some(ev) = events.next().await {
            match ev {
                Ok(WatchEvent::Deleted(_)) => return Ok(()),
                Ok(_) => {}
                // Our resourceVersion fell out of the window: list again.
                Err(ClientError::Api(s)) if s.code == 410 => break,
                Err(e) => return Err(e.into()),
            }
        }
        // The watch ended (timeout or expiry): look again.
        smol::Timer::after(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn delete_args(args: &[&str]) -> DeleteArgs {
        let cli = super::super::Cli::try_parse_from(
            ["skiff", "delete"].into_iter().chain(args.iter().copied()),
        )
        .unwrap();
        match cli.command {
            super::super::Command::Delete(d) => d,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_and_kind_slash_name_become_targets() {
        let t = targets(&delete_args(&["po", "a", "b"]), "dev").unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].name, "b");
        assert_eq!(t[0].namespace.as_deref(), Some("dev"));
        let t = targets(&delete_args(&["node/pi-1"]), "dev").unwrap();
        assert_eq!(
            t,
            [Target {
                kind: Kind::Node,
                namespace: None,
                name: "pi-1".into()
            }]
        );
        assert!(targets(&delete_args(&["po"]), "dev").is_err());
    }

    #[test]
    fn wait_defaults_to_true_and_can_be_turned_off() {
        assert!(delete_args(&["po", "a"]).wait);
        assert!(delete_args(&["po", "a", "--wait"]).wait);
        assert!(!delete_args(&["po", "a", "--wait=false"]).wait);
        let d = delete_args(&["po", "a", "--timeout", "30s"]);
        assert_eq!(d.timeout, Some(Duration::from_secs(30)));
    }

    #[test]
    fn files_name_the_targets() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.yaml");
        std::fs::write(
            &f,
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: edge}\n",
        )
        .unwrap();
        let t = targets(&delete_args(&["-f", f.to_str().unwrap()]), "dev").unwrap();
        assert_eq!(t[0].kind, Kind::Deployment);
        assert_eq!(t[0].namespace.as_deref(), Some("edge"));
    }
}
