//! The agent's built-in ingress proxy on its own (run by `bench/ingress.sh`): the same code
//! the agent starts (`agent::ingress::start`, on smol's global executor), fed by the watches
//! of the server named in a kubeconfig, without the rest of the agent, so its memory can be
//! read beside another proxy's.
//!
//! `ingress_proxy KUBECONFIG HTTP_ADDR HTTPS_ADDR`

use std::path::Path;

use api::client::Client;
use api::kubeconfig::Kubeconfig;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kubeconfig, http, https] = args.as_slice() else {
        anyhow::bail!("usage: ingress_proxy KUBECONFIG HTTP_ADDR HTTPS_ADDR");
    };
    let client = Client::from_kubeconfig(&Kubeconfig::load(Path::new(kubeconfig))?)?;
    let cfg = agent::ingress::IngressConfig {
        http: http.parse()?,
        https: https.parse()?,
    };
    // On the executor's threads, as the agent runs it (`api::runtime::run`).
    api::runtime::run(async move {
        agent::ingress::start(client, cfg).await?;
        futures_lite::future::pending::<()>().await;
        Ok(())
    })
}
