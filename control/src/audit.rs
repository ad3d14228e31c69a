//! The audit log: one audit.k8s.io/v1 `Event` per request, as JSON lines, at the Metadata
//! level (who, what verb on which object, from where, the answer's code and when it was
//! received and answered; never a request or response body, so no Secret value can reach
//! it), rotated by size.
//!
//! Requests hand their events to a writer thread through a bounded queue: an API request
//! never waits for the disk. When the queue is full (a disk slower than the API) events are
//! dropped and counted, as kube-apiserver's buffered backend does.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::time::SystemTime;

use serde_json::{json, Value};

use crate::auth::User;
use crate::rbac::Attributes;

/// Events waiting for the writer before new ones are dropped.
const QUEUE: usize = 10_000;

/// Where and how much to log.
#[derive(Clone, Debug)]
pub struct AuditConfig {
    pub path: PathBuf,
    /// Rotate once the file would pass this size.
    pub max_bytes: u64,
    /// Rotated files kept (`audit.log.1` the newest).
    pub max_backups: u32,
}

/// Hands events to the writer thread.
#[derive(Debug)]
pub struct AuditLog {
    tx: SyncSender<String>,
    dropped: AtomicU64,
}

/// What is known of a request when its answer is sent.
pub struct Request<'a> {
    pub user: Option<&'a User>,
    /// Whom the user acted as (impersonation).
    pub impersonated: Option<&'a User>,
    /// Admission's audit annotations (Pod Security's policy and audit-mode violations).
    pub annotations: &'a [(String, String)],
    pub attributes: Option<&'a Attributes>,
    pub method: &'a str,
    pub uri: &'a str,
    pub source: Option<std::net::IpAddr>,
    pub user_agent: Option<&'a str>,
    pub received: SystemTime,
    pub code: u16,
    /// The answer streams on (a watch, exec, a followed log): the event is ResponseStarted.
    pub long_running: bool,
}

fn micro_time(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// The event of a request at the Metadata level.
/// audit.k8s.io's UserInfo of `u`.
fn user_info(u: &User) -> Value {
    let mut v = json!({"username": u.name, "groups": u.groups});
    if !u.uid.is_empty() {
        v["uid"] = json!(u.uid);
    }
    if !u.extra.is_empty() {
        v["extra"] = json!(u.extra);
    }
    v
}

pub fn event(r: &Request<'_>, now: SystemTime) -> Value {
    let user = match r.user {
        Some(u) => user_info(u),
        None => json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]}),
    };
    let verb = match r.attributes {
        Some(a) => a.verb.clone(),
        None => r.method.to_ascii_lowercase(),
    };
    let mut e = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": uuid::Uuid::new_v4().to_string(),
        "stage": if r.long_running { "ResponseStarted" } else { "ResponseComplete" },
        "requestURI": r.uri,
        "verb": verb,
        "user": user,
        "sourceIPs": r.source.map(|ip| vec![ip.to_string()]).unwrap_or_default(),
        "responseStatus": {"metadata": {}, "code": r.code},
        "requestReceivedTimestamp": micro_time(r.received),
        "stageTimestamp": micro_time(now),
    });
    if let Some(u) = r.impersonated {
        e["impersonatedUser"] = user_info(u);
    }
    if let Some(ua) = r.user_agent {
        e["userAgent"] = json!(ua);
    }
    if r.code >= 400 {
        e["responseStatus"]["status"] = json!("Failure");
    }
    if !r.annotations.is_empty() {
        e["annotations"] = r
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    if let Some(res) = r.attributes.and_then(|a| a.resource.as_ref()) {
        let mut o = json!({"resource": res.resource});
        for (k, v) in [
            ("namespace", &res.namespace),
            ("name", &res.name),
            ("apiGroup", &res.group),
            ("subresource", &res.subresource),
        ] {
            if !v.is_empty() {
                o[k] = json!(v);
            }
        }
        o["apiVersion"] = json!(api_version(r.uri, &res.group));
        e["objectRef"] = o;
    }
    e
}

/// The version in the request's path (`/apis/apps/v1/...` gives v1).
fn api_version(uri: &str, group: &str) -> String {
    let path = uri.split('?').next().unwrap_or("");
    let mut parts = path.trim_start_matches('/').split('/');
    match (parts.next(), group.is_empty()) {
        (Some("api"), true) => parts.next().unwrap_or("v1").to_string(),
        (Some("apis"), false) => parts.nth(1).unwrap_or("").to_string(),
        _ => String::new(),
    }
}

impl AuditLog {
    /// Opens (creating its directory, mode 0700, and file, mode 0600) the log and starts the
    /// writer thread.
    pub fn start(cfg: AuditConfig) -> std::io::Result<AuditLog> {
        use std::os::unix::fs::DirBuilderExt;
        if let Some(dir) = cfg.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let file = open(&cfg.path)?;
        let size = file.metadata()?.len();
        let (tx, rx) = sync_channel::<String>(QUEUE);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || {
                let mut w = Writer { cfg, file, size };
                while let Ok(line) = rx.recv() {
                    if let Err(e) = w.write(&line) {
                        tracing::warn!("writing the audit log {}: {e}", w.cfg.path.display());
                    }
                }
            })?;
        Ok(AuditLog {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// Logs the event of a request.
    pub fn record(&self, r: &Request<'_>) {
        let mut line = event(r, SystemTime::now()).to_string();
        line.push('\n');
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(dropped = n, "the audit log cannot keep up; events dropped");
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

struct Writer {
    cfg: AuditConfig,
    file: File,
    size: u64,
}

impl Writer {
    fn write(&mut self, line: &str) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.cfg.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line.as_bytes())?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// `audit.log` becomes `audit.log.1`, `.1` becomes `.2`, and so on; the oldest beyond
    /// `max_backups` goes.
    fn rotate(&mut self) -> std::io::Result<()> {
        let name = |n: u32| {
            let mut p = self.cfg.path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        if self.cfg.max_backups == 0 {
            std::fs::remove_file(&self.cfg.path)?;
        } else {
            let _ = std::fs::remove_file(name(self.cfg.max_backups));
            for n in (1..self.cfg.max_backups).rev() {
                let _ = std::fs::rename(name(n), name(n + 1));
            }
            std::fs::rename(&self.cfg.path, name(1))?;
        }
        self.file = open(&self.cfg.path)?;
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_kubernetes_shaped() {
        let user = User::new("alice", "", vec!["devs".into()]);
        let a = Attributes::resource("get", "apps", "deployments", "scale", "shop", "web");
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        let e = event(
            &Request {
                user: Some(&user),
                impersonated: None,
                annotations: &[],
                attributes: Some(&a),
                method: "GET",
                uri: "/apis/apps/v1/namespaces/shop/deployments/web/scale",
                source: Some("10.0.0.9".parse().unwrap()),
                user_agent: Some("kubectl/v1.32.0"),
                received: t,
                code: 403,
                long_running: false,
            },
            t,
        );
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(e["stage"], "ResponseComplete");
        assert_eq!(e["verb"], "get");
        assert_eq!(e["user"]["username"], "alice");
        assert_eq!(
            e["objectRef"],
            json!({"resource": "deployments", "namespace": "shop", "name": "web",
                   "apiGroup": "apps", "apiVersion": "v1", "subresource": "scale"})
        );
        assert_eq!(e["responseStatus"]["code"], 403);
        assert_eq!(e["requestReceivedTimestamp"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(e["sourceIPs"], json!(["10.0.0.9"]));
    }

    #[test]
    fn the_log_rotates_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit").join("audit.log");
        let mut w = Writer {
            cfg: AuditConfig {
                path: path.clone(),
                max_bytes: 100,
                max_backups: 2,
            },
            file: {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                open(&path).unwrap()
            },
            size: 0,
        };
        let line = format!("{}\n", "x".repeat(59));
        for _ in 0..7 {
            w.write(&line).unwrap();
        }
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        assert_eq!(size(&path), 60);
        assert_eq!(size(&dir.path().join("audit/audit.log.1")), 60);
        assert_eq!(size(&dir.path().join("audit/audit.log.2")), 60);
        assert!(!dir.path().join("audit/audit.log.3").exists());
    }
}
