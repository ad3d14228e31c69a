//! `skiff certs check`: the certificates of a server's (or an agent's) data dir with their
//! subjects, expiry and time left, as `k3s certificate check` and `kubeadm certs
//! check-expiration` print them. Offline: it reads files only.
//!
//! A server's data dir holds `pki/ca.crt`, `pki/server.crt` (serving),
//! `pki/apiserver-client.crt` (what the server shows agents), client certificates embedded
//! in kubeconfigs (the admin's is a token, so it has none) and, under `agent/`, its own
//! node's credentials; an agent's data dir holds `ca.crt` and its node certificate
//! (`node-current.pem` once renewed, else `node.crt`). The service-account signing key is
//! a bare key with no certificate, so it has no expiry to show.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

#[derive(Debug, clap::Subcommand)]
pub enum CertsCommand {
    /// List each certificate of the data dir with its subject, expiry and time left; flag
    /// the expired ones and those near their end.
    Check {
        /// A server's data dir (or an agent's).
        #[arg(long, env = "SKIFF_DATA_DIR", default_value = "/var/lib/skiff/server")]
        data_dir: PathBuf,
    },
}

/// The agent's link to its renewed pair in use (`agent::node::credentials::CURRENT_PAIR`;
/// named here too because this `skiff` may be built without the agent).
const AGENT_CURRENT_PAIR: &str = "node-current.pem";

/// Left less than this, or less than a fifth of its lifetime, a certificate is flagged.
const WARN_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// One certificate found.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// Where, relative to the data dir.
    pub file: String,
    pub subject: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

/// OK, WARNING (near its end) or EXPIRED, at `now`.
pub fn status(c: &Found, now: SystemTime) -> &'static str {
    let Ok(left) = c.not_after.duration_since(now) else {
        return "EXPIRED";
    };
    let lifetime = c
        .not_after
        .duration_since(c.not_before)
        .unwrap_or(Duration::ZERO);
    if left < WARN_BEFORE.min(lifetime / 5) || left.is_zero() {
        "WARNING"
    } else {
        "OK"
    }
}

/// kubeadm's residual time: `39s`, `12m`, `23h`, `364d`, `9y`; `expired` when past.
pub fn residual(not_after: SystemTime, now: SystemTime) -> String {
    let Ok(left) = not_after.duration_since(now) else {
        return "expired".into();
    };
    let s = left.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        86_400..31_536_000 => format!("{}d", s / 86_400),
        _ => format!("{}y", s / 31_536_000),
    }
}

fn parse(file: &str, pem: &str) -> Option<Found> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let at = |t: i64| UNIX_EPOCH + Duration::from_secs(u64::try_from(t).unwrap_or(0));
    let subject = cert.subject().to_string();
    Some(Found {
        file: file.to_string(),
        subject: if subject.is_empty() {
            "-".into()
        } else {
            subject
        },
        not_before: at(cert.validity().not_before.timestamp()),
        not_after: at(cert.validity().not_after.timestamp()),
    })
}

/// The client certificate embedded in (or named by) a kubeconfig, if it has one.
fn kubeconfig_cert(path: &Path) -> Option<String> {
    let kc = api::kubeconfig::Kubeconfig::load(path).ok()?;
    kc.resolve(None).ok()?.client_cert_pem
}

/// The certificates of an agent's data dir (`prefix` names it in the listing).
fn agent_certs(dir: &Path, prefix: &str, out: &mut Vec<Found>) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    if let Some(pem) = read("ca.crt") {
        out.extend(parse(&format!("{prefix}ca.crt"), &pem));
    }
    let current = AGENT_CURRENT_PAIR;
    if let Some(pem) = read(current) {
        let target = std::fs::read_link(dir.join(current))
            .map(|t| format!(" -> {}", t.display()))
            .unwrap_or_default();
        out.extend(parse(&format!("{prefix}{current}{target}"), &pem));
    } else if let Some(pem) = read("node.crt") {
        out.extend(parse(&format!("{prefix}node.crt"), &pem));
    }
}

/// Every certificate under a server's or an agent's data dir.
pub fn find(data_dir: &Path) -> Vec<Found> {
    let mut out = Vec::new();
    for name in [
        "ca.crt",
        "server.crt",
        "apiserver-client.crt",
        "front-proxy-ca.crt",
        "front-proxy-client.crt",
    ] {
        if let Ok(pem) = std::fs::read_to_string(data_dir.join("pki").join(name)) {
            out.extend(parse(&format!("pki/{name}"), &pem));
        }
    }
    let mut kubeconfigs: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "kubeconfig"))
                .collect()
        })
        .unwrap_or_default();
    kubeconfigs.sort();
    for path in kubeconfigs {
        if let Some(pem) = kubeconfig_cert(&path) {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            out.extend(parse(&name, &pem));
        }
    }
    // An agent's own data dir, or the embedded agent's under a server's.
    agent_certs(data_dir, "", &mut out);
    agent_certs(&data_dir.join("agent"), "agent/", &mut out);
    out
}

/// `skiff certs check`.
pub fn check(data_dir: &Path) -> anyhow::Result<()> {
    let found = find(data_dir);
    if found.is_empty() {
        anyhow::bail!("no certificates found in {}", data_dir.display());
    }
    print!("{}", render(&found, SystemTime::now()));
    Ok(())
}

/// The table `skiff certs check` prints.
pub fn render(found: &[Found], now: SystemTime) -> String {
    let mut rows = vec![[
        "CERTIFICATE".to_string(),
        "SUBJECT".to_string(),
        "EXPIRES".to_string(),
        "RESIDUAL TIME".to_string(),
        "STATUS".to_string(),
    ]];
    for c in found {
        rows.push([
            c.file.clone(),
            c.subject.clone(),
            humantime::format_rfc3339_seconds(c.not_after).to_string(),
            residual(c.not_after, now),
            status(c, now).to_string(),
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(lifetime: u64, left: i64, now: SystemTime) -> Found {
        let not_after = if left >= 0 {
            now + Duration::from_secs(left as u64)
        } else {
            now - Duration::from_secs(left.unsigned_abs())
        };
        Found {
            file: "x".into(),
            subject: "CN=x".into(),
            not_before: not_after - Duration::from_secs(lifetime),
            not_after,
        }
    }

    #[test]
    fn near_and_past_expiry_are_flagged() {
        let now = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let year = 365 * 86_400;
        assert_eq!(status(&found(year, 300 * 86_400, now), now), "OK");
        assert_eq!(status(&found(year, 29 * 86_400, now), now), "WARNING");
        assert_eq!(status(&found(year, -1, now), now), "EXPIRED");
        // A short-lived certificate is flagged in its last fifth.
        assert_eq!(status(&found(40, 20, now), now), "OK");
        assert_eq!(status(&found(40, 7, now), now), "WARNING");
        assert_eq!(residual(now + Duration::from_secs(39), now), "39s");
        assert_eq!(residual(now + Duration::from_secs(3599), now), "59m");
        assert_eq!(residual(now + Duration::from_secs(23 * 3600), now), "23h");
        assert_eq!(residual(now + Duration::from_secs(year - 1), now), "364d");
        assert_eq!(residual(now + Duration::from_secs(10 * year), now), "10y");
        assert_eq!(residual(now - Duration::from_secs(1), now), "expired");
        let table = render(&[found(year, 300 * 86_400, now)], now);
        assert!(
            table.starts_with("CERTIFICATE   SUBJECT   EXPIRES"),
            "{table}"
        );
        assert!(
            table.contains("300d") && table.trim_end().ends_with("OK"),
            "{table}"
        );
    }
}
