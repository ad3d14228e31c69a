//! `skiff backup FILE` (from a live server) and `skiff restore FILE --data-dir DIR`
//! (offline, into a new data dir).

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::Session;
use crate::store::backup::{self, BackupSummary};

#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// Where to write the backup (mode 0600: it holds the CA key). Replaced atomically.
    pub file: PathBuf,
    /// Also carry the key the Secrets are encrypted with (without it, a restored server
    /// needs the old data dir's secrets.key to read them).
    #[arg(long)]
    pub include_key: bool,
}

#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// A file written by `skiff backup`.
    pub file: PathBuf,
    /// The data dir to restore into; start `skiff server --data-dir DIR` on it afterwards.
    #[arg(long, default_value = "/var/lib/skiff/server")]
    pub data_dir: PathBuf,
    /// Restore into a data dir that is not empty (its state and PKI are replaced; the
    /// server must be stopped).
    #[arg(long)]
    pub force: bool,
}

fn describe(s: &BackupSummary) -> String {
    let objects: u64 = s.objects.iter().map(|(_, n)| n).sum();
    format!(
        "revision {}, {objects} objects, {} files",
        s.revision,
        s.files.len()
    )
}

/// Downloads a snapshot into `FILE.partial`, checks it, and renames it to `FILE`.
pub async fn run_backup(session: &Session, args: &BackupArgs) -> anyhow::Result<()> {
    let r = session
        .client
        .request(
            "GET",
            &if args.include_key {
                format!("{}?includeKey=true", crate::http::BACKUP_PATH)
            } else {
                crate::http::BACKUP_PATH.to_string()
            },
            None,
            "application/octet-stream",
        )
        .await?;
    if r.status != 200 {
        let msg = serde_json::from_slice::<serde_json::Value>(&r.body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&r.body).into_owned());
        anyhow::bail!("the server refused the backup ({}): {msg}", r.status);
    }
    let file = args.file.clone();
    let summary = smol::unblock(move || write_checked(&file, &r.body)).await?;
    println!(
        "backup of {} written to {}",
        describe(&summary),
        args.file.display()
    );
    Ok(())
}

fn write_checked(file: &Path, bytes: &[u8]) -> anyhow::Result<BackupSummary> {
    let mut partial = file.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("writing {}", partial.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing {}", partial.display()))?;
    let summary = match backup::inspect(&partial) {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e).context("the server's answer is not a backup");
        }
    };
    std::fs::rename(&partial, file).with_context(|| format!("writing {}", file.display()))?;
    Ok(summary)
}

/// Restores offline into a data dir.
pub fn run_restore(args: &RestoreArgs) -> anyhow::Result<()> {
    let occupied = std::fs::read_dir(&args.data_dir)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if occupied && !args.force {
        anyhow::bail!(
            "{} is not empty: restore into a new data dir, or stop the server and pass --force to replace its state",
            args.data_dir.display()
        );
    }
    let summary = backup::restore(&args.file, &args.data_dir)
        .with_context(|| format!("restoring {}", args.file.display()))?;
    println!(
        "restored {} into {}",
        describe(&summary),
        args.data_dir.display()
    );
    Ok(())
}
