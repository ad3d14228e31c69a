//! Backups of a live store: `skiff backup` asks the server for a snapshot, `skiff restore`
//! turns one into a data dir.
//!
//! A backup is itself a redb file laid out as `state.redb` (same tables, same envelopes),
//! copied inside one read transaction, so every object is at the snapshot's revision. The
//! event log is not copied: the restored store starts with an empty log compacted at that
//! revision (watches from older revisions get 410 and relist, as after any compaction).
//! A `_backup_files` table carries the server's PKI and admin credentials, so a restored
//! server keeps its CA (joined nodes and kubeconfigs stay valid).

use std::path::{Path, PathBuf};

use api::Kind;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::codec::{
    kind_table, EVENT_TABLE, META_COMPACTED, META_REVISION, META_SCHEMA, META_TABLE, SCHEMA_VERSION,
};
use super::{read_meta, Store, StoreError};

/// Extra files of the data dir, by path relative to it.
const FILES_TABLE: TableDefinition<'static, &'static str, &'static [u8]> =
    TableDefinition::new("_backup_files");

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSummary {
    /// The revision every object was read at.
    pub revision: u64,
    /// Objects per kind (kinds with none left out).
    pub objects: Vec<(Kind, u64)>,
    /// The data-dir files it carries (relative paths).
    pub files: Vec<String>,
}

impl Store {
    /// Writes a snapshot of every object, and `files` (relative path, contents), into a new
    /// redb file `dest`; answers the snapshot's revision. Blocks (call it from a blocking
    /// thread); writers go on meanwhile.
    pub fn snapshot_blocking(
        &self,
        dest: &Path,
        files: &[(String, Vec<u8>)],
    ) -> Result<u64, StoreError> {
        let rtx = self.db()?.begin_read()?;
        let revision = read_meta(&rtx.open_table(META_TABLE)?, META_REVISION)?;
        let out = Database::create(dest)
            .map_err(|e| StoreError::Db(format!("creating {}: {e}", dest.display())))?;
        let wtx = out.begin_write()?;
        {
            for kind in Kind::ALL {
                let src = rtx.open_table(kind_table(*kind))?;
                let mut dst = wtx.open_table(kind_table(*kind))?;
                for entry in src.iter()? {
                    let (k, v) = entry?;
                    dst.insert(k.value(), v.value())?;
                }
            }
            // Custom resources' tables (`plural.group`), whichever exist.
            for name in custom_tables(&rtx)? {
                let def = TableDefinition::<&str, &[u8]>::new(&name);
                let src = rtx.open_table(def)?;
                let mut dst = wtx.open_table(def)?;
                for entry in src.iter()? {
                    let (k, v) = entry?;
                    dst.insert(k.value(), v.value())?;
                }
            }
            wtx.open_table(EVENT_TABLE)?;
            let mut meta = wtx.open_table(META_TABLE)?;
            meta.insert(META_SCHEMA, SCHEMA_VERSION)?;
            meta.insert(META_REVISION, revision)?;
            meta.insert(META_COMPACTED, revision)?;
            let mut table = wtx.open_table(FILES_TABLE)?;
            for (name, data) in files {
                table.insert(name.as_str(), data.as_slice())?;
            }
        }
        wtx.commit()?;
        Ok(revision)
    }
}

/// Reads what a backup file holds (and so checks that it is one).
pub fn inspect(path: &Path) -> Result<BackupSummary, StoreError> {
    let db = Database::open(path)
        .map_err(|e| StoreError::Db(format!("{} is not a skiff backup: {e}", path.display())))?;
    let rtx = db.begin_read()?;
    let not_backup = |e: redb::TableError| {
        StoreError::Db(format!("{} is not a skiff backup: {e}", path.display()))
    };
    let meta = rtx.open_table(META_TABLE).map_err(not_backup)?;
    let schema = read_meta(&meta, META_SCHEMA)?;
    if schema > SCHEMA_VERSION {
        return Err(StoreError::Db(format!(
            "the backup has layout {schema}, written by a newer skiff (this one reads up to {SCHEMA_VERSION})"
        )));
    }
    let revision = read_meta(&meta, META_REVISION)?;
    let mut objects = Vec::new();
    for kind in Kind::ALL {
        let n = rtx
            .open_table(kind_table(*kind))
            .map_err(not_backup)?
            .len()?;
        if n > 0 {
            objects.push((*kind, n));
        }
    }
    for name in custom_tables(&rtx)? {
        let n = rtx
            .open_table(TableDefinition::<&str, &[u8]>::new(&name))
            .map_err(not_backup)?
            .len()?;
        let (plural, group) = name.split_once('.').unwrap_or((&name, ""));
        if n > 0 {
            objects.push((Kind::custom_named(group, plural), n));
        }
    }
    let mut files = Vec::new();
    for entry in rtx.open_table(FILES_TABLE).map_err(not_backup)?.iter()? {
        files.push(entry?.0.value().to_string());
    }
    Ok(BackupSummary {
        revision,
        objects,
        files,
    })
}

/// Makes `data_dir` (empty, or missing) the data dir of the backup: `state.redb` and the
/// carried files (mode 0600, directories 0700). Blocks.
pub fn restore(backup: &Path, data_dir: &Path) -> Result<BackupSummary, StoreError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let summary = inspect(backup)?;
    let io = |what: &str, p: &Path, e: std::io::Error| {
        StoreError::Db(format!("{what} {}: {e}", p.display()))
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .map_err(|e| io("creating", data_dir, e))?;
    let tmp = data_dir.join("state.redb.restoring");
    std::fs::copy(backup, &tmp).map_err(|e| io("copying the backup to", &tmp, e))?;
    let db = Database::open(&tmp)?;
    let wtx = db.begin_write()?;
    {
        let table = wtx.open_table(FILES_TABLE)?;
        for entry in table.iter()? {
            let (name, data) = entry?;
            let rel = PathBuf::from(name.value());
            if rel.is_absolute()
                || rel
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(StoreError::Db(format!(
                    "the backup names a file outside the data dir: {}",
                    rel.display()
                )));
            }
            let path = data_dir.join(&rel);
            if let Some(parent) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|e| io("creating", parent, e))?;
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| io("writing", &path, e))?;
            std::io::Write::write_all(&mut f, data.value()).map_err(|e| io("writing", &path, e))?;
        }
    }
    wtx.delete_table(FILES_TABLE)?;
    wtx.commit()?;
    drop(db);
    let state = data_dir.join("state.redb");
    std::fs::rename(&tmp, &state).map_err(|e| io("renaming to", &state, e))?;
    Ok(summary)
}

/// The names of the custom resources' tables in a file (`plural.group`: no built-in
/// kind's table, nor the bookkeeping ones, has a dot).
pub(crate) fn custom_tables(rtx: &redb::ReadTransaction) -> Result<Vec<String>, StoreError> {
    use redb::TableHandle;
    Ok(rtx
        .list_tables()?
        .map(|t| t.name().to_string())
        .filter(|n| n.contains('.'))
        .collect())
}
