//! `skiff scale KIND/NAME --replicas N`, through the `scale` subresource as kubectl does.

use api::client::resource_path;
use api::Kind;
use serde_json::json;

use super::rollout::parse_target;
use super::{kind_label, Session};

#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// KIND/NAME, or KIND NAME (`deployment/web`, `rs web-5d8f`).
    #[arg(required = true, num_args = 1..=2)]
    pub target: Vec<String>,
    /// The new number of replicas.
    #[arg(long)]
    pub replicas: i32,
}

pub async fn run(session: &Session, args: &ScaleArgs) -> anyhow::Result<()> {
    let (kind, name) = parse_target(&args.target)?;
    if !matches!(
        kind,
        Kind::Deployment | Kind::ReplicaSet | Kind::ReplicationController | Kind::StatefulSet
    ) {
        anyhow::bail!("{} {name:?} cannot be scaled", kind_label(kind));
    }
    if args.replicas < 0 {
        anyhow::bail!("the --replicas value must not be negative");
    }
    let path = format!(
        "{}/scale",
        resource_path(kind, Some(&session.namespace), Some(&name))
    );
    let body = serde_json::to_vec(&json!({"spec": {"replicas": args.replicas}}))?;
    session
        .client
        .request(
            "PATCH",
            &path,
            Some(("application/merge-patch+json", body)),
            api::client::ACCEPT_JSON,
        )
        .await?
        .error_for_status()?;
    println!("{}/{name} scaled", kind_label(kind));
    Ok(())
}
