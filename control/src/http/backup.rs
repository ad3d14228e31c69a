//! `GET /skiff/v1/backup` (admins only): a consistent snapshot of the store and the server's
//! PKI and admin credentials, as one redb file (see [`crate::store::backup`]). The Secrets
//! in it stay sealed; the key that opens them (`secrets.key`) comes along only with
//! `?includeKey=true` (`skiff backup --include-key`), so a backup kept apart from its key
//! does not give the Secrets away.

use std::path::{Path, PathBuf};

use tide::http::StatusCode;

use super::State;
use crate::auth::User;
use crate::error::ApiError;

/// The endpoint's path; `skiff backup` calls it.
pub const PATH: &str = "/skiff/v1/backup";

/// The data-dir files a backup carries besides the objects (relative to the data dir);
/// everything in `pki/` is added.
const FILES: [&str; 2] = ["admin-token", "admin.kubeconfig"];

/// Answers the snapshot as `application/octet-stream`; its revision is in
/// `X-Skiff-Revision`.
pub async fn serve(
    state: &State,
    user: &User,
    method: &tide::http::Method,
    include_key: bool,
) -> Result<tide::Response, ApiError> {
    if !user.is_master() {
        return Err(ApiError::forbidden("only an admin may take backups"));
    }
    if *method != tide::http::Method::Get {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow {method} here"
        )));
    }
    let store = state.store.clone();
    let pki_dir = state.pki.dir().to_path_buf();
    let (revision, bytes) = smol::unblock(move || snapshot(&store, &pki_dir, include_key))
        .await
        .map_err(|e| ApiError::internal(format!("taking the backup: {e}")))?;
    tracing::info!(revision, bytes = bytes.len(), "backup taken");
    let mut r = tide::Response::new(StatusCode::Ok);
    r.insert_header("X-Skiff-Revision", revision.to_string());
    r.set_body(bytes);
    r.set_content_type("application/octet-stream");
    Ok(r)
}

fn snapshot(
    store: &crate::store::Store,
    pki_dir: &Path,
    include_key: bool,
) -> anyhow::Result<(u64, Vec<u8>)> {
    let data_dir = pki_dir.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    let mut names: Vec<PathBuf> = FILES.iter().map(PathBuf::from).collect();
    if include_key {
        names.push(PathBuf::from(crate::store::seal::KEY_FILE));
    }
    let pki_name = pki_dir.file_name().map(PathBuf::from).unwrap_or_default();
    for e in std::fs::read_dir(pki_dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            names.push(pki_name.join(e.file_name()));
        }
    }
    for name in names {
        let path = data_dir.join(&name);
        if path.exists() {
            files.push((name.to_string_lossy().into_owned(), std::fs::read(&path)?));
        }
    }
    let path = data_dir.join(format!(".backup-{}.redb", uuid::Uuid::new_v4()));
    let revision = store.snapshot_blocking(&path, &files);
    let bytes = std::fs::read(&path);
    let _ = std::fs::remove_file(&path);
    Ok((revision?, bytes?))
}
