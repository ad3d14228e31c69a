//! The operator as a program: `skiff-kube-rs-operator [NAMESPACE]`, with the cluster from
//! `KUBECONFIG` (or `~/.kube/config`, or the in-cluster ServiceAccount) as any kube-rs program
//! finds it. It installs the Greeting definition, then reconciles Greetings until SIGTERM or
//! Ctrl-C.

use skiff_kube_rs_operator::{install_crd, run};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let namespace = std::env::args().nth(1);
    let client = kube::Client::try_default().await?;
    install_crd(&client).await?;
    eprintln!("operator: definition established; reconciling");
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    run(client, namespace, shutdown).await;
    eprintln!("operator: stopped");
    Ok(())
}
