//! Kubeconfig files: parsing, locating and resolving a context into the settings the
//! [`crate::client::Client`] needs.
//!
//! Only what skiff uses is read: clusters (server, CA as data or path, insecure skip, TLS
//! server name), users (token or token file, client certificate and key as data or path),
//! contexts (cluster, user, namespace) and `current-context`. Unknown members are ignored, so
//! kubeconfigs written by other tools load unchanged.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// What went wrong loading or resolving a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("no kubeconfig found: pass --kubeconfig or set KUBECONFIG")]
    NotFound,
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid kubeconfig {path}: {message}")]
    Parse { path: String, message: String },
    #[error("the kubeconfig has no current-context: pass --context")]
    NoCurrentContext,
    #[error("context {0:?} not found in the kubeconfig")]
    ContextNotFound(String),
    #[error("cluster {0:?} not found in the kubeconfig")]
    ClusterNotFound(String),
    #[error("user {0:?} not found in the kubeconfig")]
    UserNotFound(String),
    #[error("cluster {0:?} has no server")]
    NoServer(String),
    #[error("invalid base64 in {field}: {message}")]
    Base64 { field: String, message: String },
}

/// A kubeconfig file (`kind: Config`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub clusters: Vec<NamedCluster>,
    pub users: Vec<NamedUser>,
    pub contexts: Vec<NamedContext>,
    pub current_context: String,
    /// The file this was read from; relative paths inside resolve against its directory.
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamedCluster {
    pub name: String,
    pub cluster: Cluster,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct Cluster {
    pub server: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_authority_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_authority: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamedUser {
    pub name: String,
    pub user: AuthInfo,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct AuthInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_certificate_data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key_data: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamedContext {
    pub name: String,
    pub context: Context,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Context {
    pub cluster: String,
    pub user: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A context resolved into everything a client needs, with files read and base64 decoded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResolvedContext {
    pub context_name: String,
    pub server: String,
    pub ca_pem: Option<String>,
    pub insecure_skip_tls_verify: bool,
    pub tls_server_name: Option<String>,
    pub token: Option<String>,
    pub client_cert_pem: Option<String>,
    pub client_key_pem: Option<String>,
    /// The context's namespace, if it names one.
    pub namespace: Option<String>,
}

/// Finds the kubeconfig file: the explicit path if given, else the first existing file of
/// the colon-separated `KUBECONFIG`, else `~/.kube/config`.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, KubeconfigError> {
    let env = std::env::var_os("KUBECONFIG");
    let home = std::env::var_os("HOME").map(PathBuf::from);
    locate_with(
        explicit,
        env.as_deref().and_then(|s| s.to_str()),
        home.as_deref(),
    )
}

fn locate_with(
    explicit: Option<&Path>,
    kubeconfig_env: Option<&str>,
    home: Option<&Path>,
) -> Result<PathBuf, KubeconfigError> {
    if let Some(p) = explicit {
        if p.as_os_str().is_empty() {
            return Err(KubeconfigError::NotFound);
        }
        return Ok(p.to_path_buf());
    }
    if let Some(list) = kubeconfig_env {
        if let Some(p) = list
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .find(|p| p.is_file())
        {
            return Ok(p);
        }
    }
    if let Some(home) = home {
        let p = home.join(".kube").join("config");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(KubeconfigError::NotFound)
}

impl Kubeconfig {
    /// Parses kubeconfig YAML (or JSON, which is YAML too).
    pub fn parse(text: &str) -> Result<Kubeconfig, KubeconfigError> {
        serde_yaml_ng::from_str(text).map_err(|e| KubeconfigError::Parse {
            path: "<input>".into(),
            message: e.to_string(),
        })
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| KubeconfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        let mut kc: Kubeconfig =
            serde_yaml_ng::from_str(&text).map_err(|e| KubeconfigError::Parse {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
        kc.path = Some(path.to_path_buf());
        Ok(kc)
    }

    /// [`locate`] then [`Kubeconfig::load`].
    pub fn discover(explicit: Option<&Path>) -> Result<Kubeconfig, KubeconfigError> {
        Kubeconfig::load(&locate(explicit)?)
    }

    /// A kubeconfig with one cluster, one token user and one context, all named `name`,
    /// as the current context.
    pub fn with_token(name: &str, server: &str, ca_pem: &str, user: &str, token: &str) -> Self {
        Kubeconfig {
            api_version: "v1".into(),
            kind: "Config".into(),
            clusters: vec![NamedCluster {
                name: name.into(),
                cluster: Cluster {
                    server: server.into(),
                    certificate_authority_data: Some(
                        base64::engine::general_purpose::STANDARD.encode(ca_pem),
                    ),
                    ..Default::default()
                },
            }],
            users: vec![NamedUser {
                name: user.into(),
                user: AuthInfo {
                    token: Some(token.into()),
                    ..Default::default()
                },
            }],
            contexts: vec![NamedContext {
                name: name.into(),
                context: Context {
                    cluster: name.into(),
                    user: user.into(),
                    namespace: None,
                },
            }],
            current_context: name.into(),
            path: None,
        }
    }

    /// A kubeconfig that authenticates with a client certificate (embedded, PEM).
    pub fn with_client_cert(
        name: &str,
        server: &str,
        ca_pem: &str,
        user: &str,
        cert_pem: &str,
        key_pem: &str,
    ) -> Self {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut kc = Kubeconfig::with_token(name, server, ca_pem, user, "");
        kc.users[0].user = AuthInfo {
            client_certificate_data: Some(b64(cert_pem)),
            client_key_data: Some(b64(key_pem)),
            ..Default::default()
        };
        kc
    }

    /// The file as YAML.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }

    /// The context named `context`, or the current one.
    pub fn context(&self, context: Option<&str>) -> Result<&NamedContext, KubeconfigError> {
        let name = match context {
            Some(c) => c,
            None if self.current_context.is_empty() => {
                return Err(KubeconfigError::NoCurrentContext)
            }
            None => self.current_context.as_str(),
        };
        self.contexts
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| KubeconfigError::ContextNotFound(name.into()))
    }

    /// Resolves `context` (or the current context): finds its cluster and user, reads the
    /// files they name (relative to the kubeconfig's directory) and decodes inline data.
    pub fn resolve(&self, context: Option<&str>) -> Result<ResolvedContext, KubeconfigError> {
        let ctx = self.context(context)?;
        let cluster = self
            .clusters
            .iter()
            .find(|c| c.name == ctx.context.cluster)
            .ok_or_else(|| KubeconfigError::ClusterNotFound(ctx.context.cluster.clone()))?;
        let user = if ctx.context.user.is_empty() {
            AuthInfo::default()
        } else {
            self.users
                .iter()
                .find(|u| u.name == ctx.context.user)
                .ok_or_else(|| KubeconfigError::UserNotFound(ctx.context.user.clone()))?
                .user
                .clone()
        };
        let c = &cluster.cluster;
        if c.server.is_empty() {
            return Err(KubeconfigError::NoServer(cluster.name.clone()));
        }
        let ca_pem = self.data_or_file(
            "certificate-authority-data",
            c.certificate_authority_data.as_deref(),
            c.certificate_authority.as_deref(),
        )?;
        let token = match (&user.token, &user.token_file) {
            (Some(t), _) if !t.is_empty() => Some(t.clone()),
            (_, Some(f)) if !f.is_empty() => Some(self.read_file(f)?.trim().to_string()),
            _ => None,
        };
        Ok(ResolvedContext {
            context_name: ctx.name.clone(),
            server: c.server.clone(),
            ca_pem,
            insecure_skip_tls_verify: c.insecure_skip_tls_verify,
            tls_server_name: c.tls_server_name.clone().filter(|s| !s.is_empty()),
            token,
            client_cert_pem: self.data_or_file(
                "client-certificate-data",
                user.client_certificate_data.as_deref(),
                user.client_certificate.as_deref(),
            )?,
            client_key_pem: self.data_or_file(
                "client-key-data",
                user.client_key_data.as_deref(),
                user.client_key.as_deref(),
            )?,
            namespace: ctx.context.namespace.clone().filter(|s| !s.is_empty()),
        })
    }

    fn data_or_file(
        &self,
        field: &str,
        data: Option<&str>,
        file: Option<&str>,
    ) -> Result<Option<String>, KubeconfigError> {
        if let Some(d) = data.filter(|d| !d.is_empty()) {
            let compact: String = d.chars().filter(|c| !c.is_whitespace()).collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|e| KubeconfigError::Base64 {
                    field: field.into(),
                    message: e.to_string(),
                })?;
            let text = String::from_utf8(bytes).map_err(|_| KubeconfigError::Base64 {
                field: field.into(),
                message: "the decoded data is not PEM text".into(),
            })?;
            return Ok(Some(text));
        }
        match file.filter(|f| !f.is_empty()) {
            Some(f) => Ok(Some(self.read_file(f)?)),
            None => Ok(None),
        }
    }

    fn read_file(&self, name: &str) -> Result<String, KubeconfigError> {
        let p = Path::new(name);
        let full = match (&self.path, p.is_relative()) {
            (Some(kc), true) => kc.parent().map(|d| d.join(p)).unwrap_or(p.to_path_buf()),
            _ => p.to_path_buf(),
        };
        std::fs::read_to_string(&full).map_err(|error| KubeconfigError::Read { path: full, error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: skiff
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
- name: other
  cluster:
    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
    tls-server-name: api.internal
users:
- name: admin
  user:
    token: abc123
- name: node
  user:
    client-certificate: node.crt
    client-key-data: a2V5
contexts:
- name: skiff
  context: {cluster: skiff, user: admin}
- name: other
  context: {cluster: other, user: node, namespace: kube-system}
current-context: skiff
preferences: {}
"#;

    #[test]
    fn resolves_the_current_context() {
        let kc = Kubeconfig::parse(SAMPLE).unwrap();
        let r = kc.resolve(None).unwrap();
        assert_eq!(r.server, "https://127.0.0.1:6443");
        assert_eq!(r.ca_pem.as_deref(), Some("-----BEGIN CERTIFICATE-----\n"));
        assert_eq!(r.token.as_deref(), Some("abc123"));
        assert_eq!(r.namespace, None);
        assert!(!r.insecure_skip_tls_verify);
    }

    #[test]
    fn resolves_a_named_context_with_files_relative_to_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("node.crt"), "CERT").unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, SAMPLE).unwrap();
        let kc = Kubeconfig::load(&path).unwrap();
        let r = kc.resolve(Some("other")).unwrap();
        assert_eq!(r.client_cert_pem.as_deref(), Some("CERT"));
        assert_eq!(r.client_key_pem.as_deref(), Some("key"));
        assert_eq!(r.namespace.as_deref(), Some("kube-system"));
        assert_eq!(r.tls_server_name.as_deref(), Some("api.internal"));
        assert!(r.insecure_skip_tls_verify);
        assert_eq!(r.token, None);
    }

    #[test]
    fn missing_context_and_missing_file_are_clear_errors() {
        let kc = Kubeconfig::parse(SAMPLE).unwrap();
        let e = kc.resolve(Some("nope")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "context \"nope\" not found in the kubeconfig"
        );
        let e = kc.resolve(Some("other")).unwrap_err();
        assert!(e.to_string().starts_with("cannot read node.crt"), "{e}");
    }

    #[test]
    fn locate_prefers_explicit_then_env_then_home() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&b, "").unwrap();
        let env = format!("{}:{}", a.display(), b.display());
        assert_eq!(locate_with(Some(&a), Some(&env), None).unwrap(), a);
        assert_eq!(locate_with(None, Some(&env), None).unwrap(), b);
        std::fs::create_dir(dir.path().join(".kube")).unwrap();
        std::fs::write(dir.path().join(".kube/config"), "").unwrap();
        assert_eq!(
            locate_with(None, Some(a.to_str().unwrap()), Some(dir.path())).unwrap(),
            dir.path().join(".kube/config")
        );
        let e = locate_with(None, None, Some(&a)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no kubeconfig found: pass --kubeconfig or set KUBECONFIG"
        );
    }

    #[test]
    fn with_token_round_trips_through_yaml() {
        let kc = Kubeconfig::with_token("skiff", "https://127.0.0.1:1", "PEM", "admin", "t");
        let back = Kubeconfig::parse(&kc.to_yaml()).unwrap();
        assert_eq!(back, kc);
        let r = back.resolve(None).unwrap();
        assert_eq!(r.ca_pem.as_deref(), Some("PEM"));
        assert_eq!(r.token.as_deref(), Some("t"));
        assert!(kc.to_yaml().contains("current-context: skiff"));
        assert!(kc.to_yaml().contains("apiVersion: v1"));
    }
}
