//! `skiff rollout status|undo|restart|pause|resume KIND/NAME`, as kubectl's.

use std::time::{Duration, Instant};

use api::apps::{DaemonSet, Deployment, ReplicaSet};
use api::client::resource_path;
use api::meta::Time;
use api::Kind;
use serde_json::{json, Value};

use super::{kind_label, resolve_kind, Session};

#[derive(Debug, clap::Subcommand)]
pub enum RolloutCommand {
    /// Wait until the rollout of a Deployment or DaemonSet is done.
    Status(StatusArgs),
    /// Roll a Deployment back to its previous (or a given) revision.
    Undo(UndoArgs),
    /// Restart every pod of a Deployment or DaemonSet by a new rollout.
    Restart(TargetArgs),
    /// Pause a Deployment's rollouts.
    Pause(TargetArgs),
    /// Resume a paused Deployment.
    Resume(TargetArgs),
}

#[derive(Debug, clap::Args)]
pub struct TargetArgs {
    /// KIND/NAME, or KIND NAME (`deployment/web`, `ds agent`).
    #[arg(required = true, num_args = 1..=2)]
    pub target: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Give up after this long (e.g. `30s`, `5m`); default: wait as long as it takes.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Keep watching until the rollout is done (`--watch=false`: report once).
    #[arg(short = 'w', long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub watch: bool,
}

#[derive(Debug, clap::Args)]
pub struct UndoArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// The revision to go back to (default: the previous one).
    #[arg(long, default_value_t = 0)]
    pub to_revision: i64,
}

/// `deployment/web` or `deployment web` as a kind and a name.
pub fn parse_target(target: &[String]) -> anyhow::Result<(Kind, String)> {
    match target {
        [one] => match one.split_once('/') {
            Some((k, n)) if !n.is_empty() => Ok((resolve_kind(k)?, n.to_string())),
            _ => anyhow::bail!("expected KIND/NAME or KIND NAME, got {one:?}"),
        },
        [k, n] => Ok((resolve_kind(k)?, n.clone())),
        _ => anyhow::bail!("expected KIND/NAME or KIND NAME"),
    }
}

pub async fn run(session: &Session, cmd: &RolloutCommand) -> anyhow::Result<()> {
    match cmd {
        RolloutCommand::Status(a) => status(session, a).await,
        RolloutCommand::Undo(a) => undo(session, a).await,
        RolloutCommand::Restart(a) => {
            let (kind, name) = parse_target(&a.target)?;
            if !matches!(kind, Kind::Deployment | Kind::DaemonSet) {
                anyhow::bail!("{} {name:?} is not restartable", kind_label(kind));
            }
            let now = Time::now().to_string();
            let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": now}}}}});
            merge_patch(session, kind, &name, &patch).await?;
            println!("{}/{name} restarted", kind_label(kind));
            Ok(())
        }
        RolloutCommand::Pause(a) | RolloutCommand::Resume(a) => {
            let pause = matches!(cmd, RolloutCommand::Pause(_));
            let (kind, name) = parse_target(&a.target)?;
            if kind != Kind::Deployment {
                anyhow::bail!("{} {name:?} cannot be paused", kind_label(kind));
            }
            let d: Deployment = session.client.get(&session.namespace, &name).await?;
            let label = format!("{}/{name}", kind_label(kind));
            if d.spec.paused.unwrap_or(false) == pause {
                if pause {
                    anyhow::bail!("{label} is already paused");
                }
                anyhow::bail!("{label} is not paused");
            }
            merge_patch(session, kind, &name, &json!({"spec": {"paused": pause}})).await?;
            println!("{label} {}", if pause { "paused" } else { "resumed" });
            Ok(())
        }
    }
}

async fn merge_patch(
    session: &Session,
    kind: Kind,
    name: &str,
    patch: &Value,
) -> anyhow::Result<Value> {
    Ok(session
        .client
        .patch_value(
            kind,
            Some(&session.namespace),
            name,
            "application/merge-patch+json",
            patch,
        )
        .await?)
}

/// Where a rollout stands, with kubectl's message for it.
#[derive(Debug, PartialEq, Eq)]
pub enum Rollout {
    Waiting(String),
    Done(String),
}

pub fn deployment_status(d: &Deployment) -> Result<Rollout, String> {
    let name = &d.metadata.name;
    if d.metadata.generation > d.status.observed_generation {
        return Ok(Rollout::Waiting(
            "Waiting for deployment spec update to be observed...".into(),
        ));
    }
    if d.status.conditions.iter().any(|c| {
        c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    }) {
        return Err(format!(
            "deployment {name:?} exceeded its progress deadline"
        ));
    }
    let replicas = d.spec.replicas.unwrap_or(1);
    let updated = d.status.updated_replicas.unwrap_or(0);
    let total = d.status.replicas.unwrap_or(0);
    let available = d.status.available_replicas.unwrap_or(0);
    Ok(if updated < replicas {
        Rollout::Waiting(format!("Waiting for deployment {name:?} rollout to finish: {updated} out of {replicas} new replicas have been updated..."))
    } else if total > updated {
        Rollout::Waiting(format!("Waiting for deployment {name:?} rollout to finish: {} old replicas are pending termination...", total - updated))
    } else if available < updated {
        Rollout::Waiting(format!("Waiting for deployment {name:?} rollout to finish: {available} of {updated} updated replicas are available..."))
    } else {
        Rollout::Done(format!("deployment {name:?} successfully rolled out"))
    })
}

pub fn daemonset_status(ds: &DaemonSet) -> Result<Rollout, String> {
    let name = &ds.metadata.name;
    let strategy = ds
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate");
    if strategy != "RollingUpdate" {
        return Err("rollout status is only available for RollingUpdate strategy type".into());
    }
    if ds.metadata.generation > ds.status.observed_generation {
        return Ok(Rollout::Waiting(
            "Waiting for daemon set spec update to be observed...".into(),
        ));
    }
    let desired = ds.status.desired_number_scheduled;
    let updated = ds.status.updated_number_scheduled.unwrap_or(0);
    let available = ds.status.number_available.unwrap_or(0);
    Ok(if updated < desired {
        Rollout::Waiting(format!("Waiting for daemon set {name:?} rollout to finish: {updated} out of {desired} new pods have been updated..."))
    } else if available < desired {
        Rollout::Waiting(format!("Waiting for daemon set {name:?} rollout to finish: {available} of {desired} updated pods are available..."))
    } else {
        Rollout::Done(format!("daemon set {name:?} successfully rolled out"))
    })
}

async fn status(session: &Session, a: &StatusArgs) -> anyhow::Result<()> {
    let (kind, name) = parse_target(&a.target.target)?;
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let state = match kind {
            Kind::Deployment => {
                deployment_status(&session.client.get(&session.namespace, &name).await?)
            }
            Kind::DaemonSet => {
                daemonset_status(&session.client.get(&session.namespace, &name).await?)
            }
            other => anyhow::bail!(
                "no status viewer has been implemented for {}",
                kind_label(other)
            ),
        }
        .map_err(|e| anyhow::anyhow!(e))?;
        match state {
            Rollout::Done(msg) => {
                println!("{msg}");
                return Ok(());
            }
            Rollout::Waiting(msg) => {
                if msg != last {
                    println!("{msg}");
                    last = msg;
                }
                if !a.watch {
                    return Ok(());
                }
            }
        }
        if a.timeout.is_some_and(|t| started.elapsed() >= t) {
            anyhow::bail!("timed out waiting for the condition");
        }
        smol::Timer::after(Duration::from_millis(300)).await;
    }
}

async fn undo(session: &Session, a: &UndoArgs) -> anyhow::Result<()> {
    let (kind, name) = parse_target(&a.target.target)?;
    if kind != Kind::Deployment {
        anyhow::bail!(
            "no rollbacker has been implemented for {}",
            kind_label(kind)
        );
    }
    let ns = &session.namespace;
    let d: Deployment = session.client.get(ns, &name).await?;
    let label = format!("{}/{name}", kind_label(kind));
    if d.spec.paused == Some(true) {
        anyhow::bail!("you cannot rollback a paused deployment; resume it first with 'skiff rollout resume {label}' and try again");
    }
    let (rss, _) = session
        .client
        .list::<ReplicaSet>(Some(ns), None, None)
        .await?;
    let mut history: Vec<(i64, ReplicaSet)> = rss
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .controller_ref()
                .is_some_and(|r| r.uid == d.metadata.uid)
        })
        .map(|rs| (revision(&rs), rs))
        .filter(|(r, _)| *r > 0)
        .collect();
    history.sort_by_key(|(r, _)| *r);
    let target = if a.to_revision == 0 {
        let current = history.last().map(|(r, _)| *r);
        history.iter().rev().find(|(r, _)| Some(*r) != current)
    } else {
        history.iter().find(|(r, _)| *r == a.to_revision)
    };
    let Some((rev, rs)) = target else {
        if a.to_revision == 0 {
            anyhow::bail!("no rollout history found for deployment {name:?}");
        }
        anyhow::bail!(
            "unable to find specified revision {} in history",
            a.to_revision
        );
    };
    let mut template = api::codec::to_json(rs)
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove("pod-template-hash");
    }
    let current = api::codec::to_json(&d)
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    if current == template {
        println!("{label} skipped rollback (current template already matches revision {rev})");
        return Ok(());
    }
    let patch = json!([{"op": "replace", "path": "/spec/template", "value": template}]);
    let path = resource_path(kind, Some(ns), Some(&name));
    session
        .client
        .request(
            "PATCH",
            &path,
            Some(("application/json-patch+json", serde_json::to_vec(&patch)?)),
            api::client::ACCEPT_JSON,
        )
        .await?
        .error_for_status()?;
    println!("{label} rolled back");
    Ok(())
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .get("deployment.kubernetes.io/revision")
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_both_ways() {
        assert_eq!(
            parse_target(&["deployment/web".into()]).unwrap(),
            (Kind::Deployment, "web".into())
        );
        assert_eq!(
            parse_target(&["ds".into(), "agent".into()]).unwrap(),
            (Kind::DaemonSet, "agent".into())
        );
        assert!(parse_target(&["web".into()]).is_err());
    }

    #[test]
    fn deployment_status_messages() {
        let mut d = Deployment::default();
        d.metadata.name = "web".into();
        d.metadata.generation = Some(2);
        d.spec.replicas = Some(3);
        assert!(
            matches!(deployment_status(&d), Ok(Rollout::Waiting(m)) if m.contains("spec update"))
        );
        d.status.observed_generation = Some(2);
        d.status.replicas = Some(4);
        d.status.updated_replicas = Some(3);
        d.status.available_replicas = Some(3);
        assert!(
            matches!(deployment_status(&d), Ok(Rollout::Waiting(m)) if m.contains("1 old replicas"))
        );
        d.status.replicas = Some(3);
        assert_eq!(
            deployment_status(&d),
            Ok(Rollout::Done(
                "deployment \"web\" successfully rolled out".into()
            ))
        );
        d.status.conditions.push(api::apps::DeploymentCondition {
            type_: "Progressing".into(),
            status: "False".into(),
            reason: Some("ProgressDeadlineExceeded".into()),
            ..Default::default()
        });
        assert!(deployment_status(&d).is_err());
    }
}
