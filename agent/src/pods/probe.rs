//! Liveness, readiness and startup probes.
//!
//! Two halves: [`ContainerProbes`] is the pure scheduling and threshold logic of one
//! container's probes during one run (no I/O, driven with explicit `Instant`s, unit-tested
//! below); [`run`] performs one probe (exec in the container, httpGet, tcpSocket) and answers
//! an [`Outcome`]. The pod worker ties them together: every supervision round it asks which
//! probes are [`due`](ContainerProbes::due), runs them concurrently, feeds the outcomes back
//! with [`record`](ContainerProbes::record) and sleeps until
//! [`next_due`](ContainerProbes::next_due).
//!
//! Kubernetes semantics kept: defaults period 10 s, timeout 1 s, success 1, failure 3; a
//! success threshold other than 1 only counts for readiness; nothing runs before
//! `initialDelaySeconds` after the container started; liveness and readiness wait for the
//! startup probe to succeed, after which the startup probe stops; readiness starts out failed,
//! liveness succeeded; a liveness or startup failure `failureThreshold` times in a row asks
//! for the container to be killed ([`Verdict::Kill`]), after which nothing runs until the
//! next run of the container ([`ContainerProbes::reset`]).
//!
//! # Network probes and the pod's network namespace
//! A pod without `hostNetwork` has its own network namespace (with only `lo` until pod
//! networking exists), so httpGet and tcpSocket must connect from inside it. Each such probe
//! runs on a short-lived thread of its own that `setns`es into the sandbox's bind-mounted
//! `ns/net` file, does its blocking connect/read with the probe's deadline, and ends. A
//! thread of its own, because the namespace sticks to the thread: an executor or
//! `smol::unblock` pool thread would carry it into unrelated work. A forked child would also
//! work but costs far more (the agent's whole address space) for no gain: `setns(CLONE_NEWNET)`
//! is safe in a multi-threaded process. The default host is 127.0.0.1 inside the pod's
//! namespace (its pod IP once pod networking exists reaches the same sockets), and the node's
//! IP for host-network pods.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use api::core::{Container, Probe};
use api::meta::IntOrString;

use crate::runtime::{ContainerId, Runtime, RuntimeError};
use crate::sys;

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    /// "startup", "liveness", "readiness", as the kubelet's messages say.
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startup",
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
        }
    }
}

/// An httpGet probe with its port resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpCheck {
    pub https: bool,
    /// `None`: the pod's address.
    pub host: Option<String>,
    pub port: u16,
    /// Path and query, starting with '/'.
    pub path: String,
    pub headers: Vec<(String, String)>,
}

/// What a probe does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run this command in the container; exit code 0 is success.
    Exec(Vec<String>),
    /// GET; a status in 200..400 is success.
    Http(HttpCheck),
    /// Open a TCP connection.
    Tcp { host: Option<String>, port: u16 },
    /// Cannot be run (an unknown named port, gRPC): every run fails with this message.
    Invalid(String),
}

/// A probe's timing, Kubernetes defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    /// The timing of `probe` used as a `kind` probe.
    pub fn of(probe: &Probe, kind: ProbeKind) -> Timing {
        let secs = |v: Option<i32>, default: i32, min: i32| {
            Duration::from_secs(v.unwrap_or(default).max(min) as u64)
        };
        let count = |v: Option<i32>, default: i32| v.unwrap_or(default).max(1) as u32;
        Timing {
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: secs(probe.timeout_seconds, 1, 1),
            success_threshold: match kind {
                ProbeKind::Readiness => count(probe.success_threshold, 1),
                ProbeKind::Liveness | ProbeKind::Startup => 1,
            },
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// One probe of a container, ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    pub kind: ProbeKind,
    pub timing: Timing,
    pub action: Action,
    /// The probe's own `terminationGracePeriodSeconds` (liveness and startup kills).
    pub grace: Option<Duration>,
}

/// Resolves a probe port: a number, or the name of one of the container's ports.
fn resolve_port(c: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("invalid port number: {n}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("couldn't find port: {name} in container {}", c.name))
        }
    }
}

impl ProbeSpec {
    /// `probe` of container `c` as a `kind` probe.
    pub fn of(c: &Container, probe: &Probe, kind: ProbeKind) -> ProbeSpec {
        let action = if let Some(e) = &probe.exec {
            if e.command.is_empty() {
                Action::Invalid("exec probe without a command".into())
            } else {
                Action::Exec(e.command.clone())
            }
        } else if let Some(h) = &probe.http_get {
            let scheme = h.scheme.as_deref().unwrap_or("HTTP");
            match (
                resolve_port(c, &h.port),
                scheme.to_ascii_uppercase().as_str(),
            ) {
                (Err(e), _) => Action::Invalid(e),
                (Ok(port), s @ ("HTTP" | "HTTPS")) => {
                    let path = h.path.clone().unwrap_or_default();
                    Action::Http(HttpCheck {
                        https: s == "HTTPS",
                        host: h.host.clone().filter(|h| !h.is_empty()),
                        port,
                        path: if path.starts_with('/') {
                            path
                        } else {
                            format!("/{path}")
                        },
                        headers: h
                            .http_headers
                            .iter()
                            .map(|h| (h.name.clone(), h.value.clone()))
                            .collect(),
                    })
                }
                (Ok(_), other) => Action::Invalid(format!("unsupported scheme: {other:?}")),
            }
        } else if let Some(t) = &probe.tcp_socket {
            match resolve_port(c, &t.port) {
                Ok(port) => Action::Tcp {
                    host: t.host.clone().filter(|h| !h.is_empty()),
                    port,
                },
                Err(e) => Action::Invalid(e),
            }
        } else if probe.grpc.is_some() {
            Action::Invalid("gRPC probes are not supported by skiff".into())
        } else {
            Action::Invalid("probe without a handler".into())
        };
        ProbeSpec {
            kind,
            timing: Timing::of(probe, kind),
            action,
            grace: probe
                .termination_grace_period_seconds
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64)),
        }
    }
}

/// The state of one probe during one container run.
#[derive(Clone, Debug)]
struct ProbeState {
    spec: ProbeSpec,
    /// When it runs next; `None` while it does not run (waiting for the startup probe,
    /// finished startup probe, container not seen running yet).
    next_at: Option<Instant>,
    /// The last raw outcome and how many times in a row it came.
    last: Option<bool>,
    run: u32,
    /// The thresholded result.
    result: bool,
    /// A run has been handed out and not recorded yet.
    in_flight: bool,
}

impl ProbeState {
    fn new(spec: ProbeSpec) -> Self {
        let result = spec.kind == ProbeKind::Liveness;
        ProbeState {
            spec,
            next_at: None,
            last: None,
            run: 0,
            result,
            in_flight: false,
        }
    }

    fn fresh(&self) -> Self {
        ProbeState::new(self.spec.clone())
    }
}

/// What recording an outcome means for the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing visible changed.
    Unchanged,
    /// `started` or `ready` changed.
    Changed,
    /// A liveness or startup probe failed `failureThreshold` times: kill the container.
    Kill,
}

/// The probes of one container and their state during its current run.
#[derive(Clone, Debug, Default)]
pub struct ContainerProbes {
    startup: Option<ProbeState>,
    liveness: Option<ProbeState>,
    readiness: Option<ProbeState>,
    /// When the current run was first seen running; `None` until then.
    since: Option<Instant>,
    /// A kill was asked for: nothing runs until [`ContainerProbes::reset`].
    killing: bool,
}

impl ContainerProbes {
    /// The probes of container `c` (none for init containers: pass `Default`).
    pub fn new(c: &Container) -> Self {
        let make = |p: &Option<Probe>, kind| {
            p.as_ref()
                .map(|p| ProbeState::new(ProbeSpec::of(c, p, kind)))
        };
        ContainerProbes {
            startup: make(&c.startup_probe, ProbeKind::Startup),
            liveness: make(&c.liveness_probe, ProbeKind::Liveness),
            readiness: make(&c.readiness_probe, ProbeKind::Readiness),
            since: None,
            killing: false,
        }
    }

    /// Whether the container has no probes at all.
    pub fn is_empty(&self) -> bool {
        self.startup.is_none() && self.liveness.is_none() && self.readiness.is_none()
    }

    fn get(&self, kind: ProbeKind) -> Option<&ProbeState> {
        match kind {
            ProbeKind::Startup => self.startup.as_ref(),
            ProbeKind::Liveness => self.liveness.as_ref(),
            ProbeKind::Readiness => self.readiness.as_ref(),
        }
    }

    fn get_mut(&mut self, kind: ProbeKind) -> Option<&mut ProbeState> {
        match kind {
            ProbeKind::Startup => self.startup.as_mut(),
            ProbeKind::Liveness => self.liveness.as_mut(),
            ProbeKind::Readiness => self.readiness.as_mut(),
        }
    }

    fn all_mut(&mut self) -> impl Iterator<Item = &mut ProbeState> {
        [&mut self.startup, &mut self.liveness, &mut self.readiness]
            .into_iter()
            .flatten()
    }

    /// The container's run ended: forget every result; the next run starts afresh.
    pub fn reset(&mut self) {
        for p in self.all_mut() {
            *p = p.fresh();
        }
        self.since = None;
        self.killing = false;
    }

    /// The container is seen running at `now`: the first call of a run schedules the
    /// probes (`initialDelaySeconds` from now); later calls do nothing.
    pub fn begin(&mut self, now: Instant) {
        if self.since.is_some() {
            return;
        }
        self.since = Some(now);
        let gated = self.startup.is_some();
        for p in self.all_mut() {
            if p.spec.kind == ProbeKind::Startup || !gated {
                p.next_at = Some(now + p.spec.timing.initial_delay);
            }
        }
    }

    /// Whether the startup probe has succeeded (true without one). Only meaningful while
    /// the container runs.
    pub fn started(&self) -> bool {
        self.startup.as_ref().is_none_or(|s| s.result)
    }

    /// Whether the container counts as ready: started, and its readiness probe (if any)
    /// succeeded. Only meaningful while the container runs.
    pub fn ready(&self) -> bool {
        self.started() && self.readiness.as_ref().is_none_or(|r| r.result) && !self.killing
    }

    /// The probes to run now.
    pub fn due(&self, now: Instant) -> Vec<ProbeKind> {
        if self.killing {
            return Vec::new();
        }
        [&self.startup, &self.liveness, &self.readiness]
            .into_iter()
            .flatten()
            .filter(|p| !p.in_flight && p.next_at.is_some_and(|at| at <= now))
            .map(|p| p.spec.kind)
            .collect()
    }

    /// When the next probe is due, if any is scheduled.
    pub fn next_due(&self) -> Option<Instant> {
        if self.killing {
            return None;
        }
        [&self.startup, &self.liveness, &self.readiness]
            .into_iter()
            .flatten()
            .filter(|p| !p.in_flight)
            .filter_map(|p| p.next_at)
            .min()
    }

    /// Hands out a run of `kind`: its spec, marked in flight until recorded.
    pub fn take(&mut self, kind: ProbeKind) -> Option<ProbeSpec> {
        let p = self.get_mut(kind)?;
        p.in_flight = true;
        Some(p.spec.clone())
    }

    /// The spec of `kind`, if the container has that probe.
    pub fn spec(&self, kind: ProbeKind) -> Option<&ProbeSpec> {
        self.get(kind).map(|p| &p.spec)
    }

    /// Records the outcome of a run of `kind` that began at `began` and ended at `now`.
    pub fn record(
        &mut self,
        kind: ProbeKind,
        success: bool,
        began: Instant,
        now: Instant,
    ) -> Verdict {
        if self.since.is_none() || self.killing {
            // The run ended (or is being killed) while the probe ran: stale.
            if let Some(p) = self.get_mut(kind) {
                p.in_flight = false;
            }
            return Verdict::Unchanged;
        }
        let Some(p) = self.get_mut(kind) else {
            return Verdict::Unchanged;
        };
        p.in_flight = false;
        if p.last == Some(success) {
            p.run = p.run.saturating_add(1);
        } else {
            p.last = Some(success);
            p.run = 1;
        }
        // Every period from the start of the previous run; at once if that is already past.
        p.next_at = Some((began + p.spec.timing.period).max(now));
        let threshold = if success {
            p.spec.timing.success_threshold
        } else {
            p.spec.timing.failure_threshold
        };
        if p.run < threshold {
            return Verdict::Unchanged;
        }
        match kind {
            ProbeKind::Liveness | ProbeKind::Startup if !success => {
                p.run = 0;
                p.last = None;
                self.killing = true;
                Verdict::Kill
            }
            ProbeKind::Startup => {
                // Started: the startup probe stops, liveness and readiness begin.
                p.result = true;
                p.next_at = None;
                let since = self.since.unwrap_or(now);
                for q in [&mut self.liveness, &mut self.readiness]
                    .into_iter()
                    .flatten()
                {
                    q.next_at = Some((since + q.spec.timing.initial_delay).max(now));
                }
                Verdict::Changed
            }
            ProbeKind::Liveness | ProbeKind::Readiness => {
                if p.result == success {
                    Verdict::Unchanged
                } else {
                    p.result = success;
                    Verdict::Changed
                }
            }
        }
    }
}

// ---- running probes ---------------------------------------------------------------------

/// Where a probe reaches its container.
#[derive(Clone)]
pub struct ProbeTarget {
    pub runtime: Arc<Runtime>,
    pub id: ContainerId,
    /// The pod's network namespace file; `None` for host-network pods.
    pub netns: Option<PathBuf>,
    /// The address httpGet and tcpSocket probes use when they name no host.
    pub default_host: IpAddr,
}

impl ProbeTarget {
    /// The default host for a pod with (`netns` set) or without its own network namespace.
    pub fn default_host_for(netns: bool, node_ip: &str) -> IpAddr {
        if netns {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            node_ip.parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
        }
    }
}

/// What one probe run found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub success: bool,
    /// Why it failed (or the exec output), for logs and messages.
    pub message: String,
}

impl Outcome {
    fn ok() -> Self {
        Outcome {
            success: true,
            message: String::new(),
        }
    }

    fn fail(message: impl Into<String>) -> Self {
        Outcome {
            success: false,
            message: message.into(),
        }
    }
}

/// How much of a probe's output is kept in its message.
const MESSAGE_LIMIT: usize = 1024;

fn clip(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MESSAGE_LIMIT)]);
    text.trim().to_string()
}

/// Runs `action` once against `target`, within `timeout`. Never blocks the calling executor:
/// exec goes through `smol::unblock`, network probes through a thread of their own.
pub async fn run(action: &Action, target: &ProbeTarget, timeout: Duration) -> Outcome {
    match action {
        Action::Invalid(m) => Outcome::fail(m.clone()),
        Action::Exec(argv) => {
            let rt = target.runtime.clone();
            let id = target.id.clone();
            let argv = argv.clone();
            match smol::unblock(move || rt.exec(&id, &argv, timeout)).await {
                Ok(r) if r.exit_code == 0 => Outcome {
                    success: true,
                    message: clip(&r.output),
                },
                Ok(r) => Outcome::fail(format!(
                    "command exited with {}: {}",
                    r.exit_code,
                    clip(&r.output)
                )),
                Err(RuntimeError::ExecTimeout(t)) => {
                    Outcome::fail(format!("command timed out after {}s", t.as_secs()))
                }
                Err(e) => Outcome::fail(format!("exec failed: {e}")),
            }
        }
        Action::Http(check) => {
            let check = check.clone();
            let host = target.default_host;
            in_netns(target.netns.clone(), timeout, move || {
                http_probe(&check, host, timeout)
            })
            .await
        }
        Action::Tcp { host, port } => {
            let (name, port) = (host.clone(), *port);
            let default = target.default_host;
            in_netns(target.netns.clone(), timeout, move || {
                let deadline = Instant::now() + timeout;
                match connect(name.as_deref(), default, port, deadline) {
                    Ok(_) => Outcome::ok(),
                    Err(e) => Outcome::fail(e),
                }
            })
            .await
        }
    }
}

/// Runs `f` on a new thread inside the network namespace `netns` (or the agent's own) and
/// awaits its answer without blocking the executor; see the module comment for why a thread.
async fn in_netns<F>(netns: Option<PathBuf>, timeout: Duration, f: F) -> Outcome
where
    F: FnOnce() -> Outcome + Send + 'static,
{
    let (tx, rx) = async_channel::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("probe".into())
        .spawn(move || {
            let outcome = match &netns {
                Some(path) => match std::fs::File::open(path) {
                    Ok(file) => match sys::setns_net(&file) {
                        Ok(()) => f(),
                        Err(e) => Outcome::fail(format!("cannot enter the pod network: {e}")),
                    },
                    Err(e) => Outcome::fail(format!("cannot open {}: {e}", path.display())),
                },
                None => f(),
            };
            let _ = tx.try_send(outcome);
        });
    if let Err(e) = spawned {
        return Outcome::fail(format!("cannot start a probe thread: {e}"));
    }
    // The thread keeps its own deadline; this is only a backstop.
    let backstop = async {
        smol::Timer::after(timeout + Duration::from_secs(2)).await;
        Err(async_channel::RecvError)
    };
    match futures_lite::future::or(rx.recv(), backstop).await {
        Ok(o) => o,
        Err(_) => Outcome::fail(format!("probe timed out after {}s", timeout.as_secs())),
    }
}

fn remaining(deadline: Instant) -> Result<Duration, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err("timeout".into())
    } else {
        Ok(left)
    }
}

/// Connects to `host` (or `default`) on `port` before `deadline`.
fn connect(
    host: Option<&str>,
    default: IpAddr,
    port: u16,
    deadline: Instant,
) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = match host {
        None => vec![SocketAddr::new(default, port)],
        Some(h) => match h.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => (h, port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {h}: {e}"))?
                .collect(),
        },
    };
    let mut last = format!("no address for {}", host.unwrap_or("the pod"));
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, remaining(deadline)?) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("dial tcp {addr}: {e}"),
        }
    }
    Err(last)
}

/// The GET request a probe sends. Headers of the probe replace the defaults of the same name
/// (Host, User-Agent, Accept), as the kubelet does.
pub fn http_request(check: &HttpCheck, host: &str) -> Vec<u8> {
    let mut headers: Vec<(String, String)> = vec![
        ("Host".into(), host.to_string()),
        ("User-Agent".into(), "kube-probe/1.32".into()),
        ("Accept".into(), "*/*".into()),
    ];
    for (name, value) in &check.headers {
        if let Some(h) = headers
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            h.1 = value.clone();
        } else {
            headers.push((name.clone(), value.clone()));
        }
    }
    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("connection"));
    headers.push(("Connection".into(), "close".into()));
    let mut out = format!("GET {} HTTP/1.1\r\n", check.path);
    for (n, v) in headers {
        // Header values cannot carry line breaks into the request.
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        let n: String = n.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// The status code of an HTTP response's status line (`head` holds at least that line).
pub fn parse_status(head: &[u8]) -> Result<u16, String> {
    let end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .or_else(|| head.iter().position(|b| *b == b'\n'))
        .ok_or_else(|| "incomplete HTTP response".to_string())?;
    let line = std::str::from_utf8(&head[..end]).map_err(|_| "malformed HTTP response")?;
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(format!("malformed HTTP status line: {line:?}"));
    }
    code.parse::<u16>()
        .map_err(|_| format!("malformed HTTP status line: {line:?}"))
}

/// Whether a status code counts as success (the kubelet's 200 <= code < 400).
pub fn http_success(code: u16) -> bool {
    (200..400).contains(&code)
}

fn http_probe(check: &HttpCheck, default: IpAddr, timeout: Duration) -> Outcome {
    let deadline = Instant::now() + timeout;
    match http_exchange(check, default, deadline) {
        Ok(code) if http_success(code) => Outcome::ok(),
        Ok(code) => Outcome::fail(format!("HTTP probe failed with statuscode: {code}")),
        Err(e) => Outcome::fail(e),
    }
}

fn http_exchange(check: &HttpCheck, default: IpAddr, deadline: Instant) -> Result<u16, String> {
    let tcp = connect(check.host.as_deref(), default, check.port, deadline)?;
    let host_name = check.host.clone().unwrap_or_else(|| default.to_string());
    let authority = match host_name.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{}", check.port),
        _ => format!("{host_name}:{}", check.port),
    };
    let request = http_request(check, &authority);
    let control = tcp.try_clone().map_err(|e| e.to_string())?;
    let set_deadline = || -> Result<(), String> {
        let left = remaining(deadline)?;
        control
            .set_read_timeout(Some(left))
            .and_then(|()| control.set_write_timeout(Some(left)))
            .map_err(|e| e.to_string())
    };
    if check.https {
        let name = rustls_pki_types::ServerName::try_from(host_name.clone())
            .map_err(|e| format!("invalid TLS server name {host_name}: {e}"))?;
        let conn = rustls::ClientConnection::new(insecure_tls_config(), name)
            .map_err(|e| format!("TLS: {e}"))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        exchange(&mut stream, &request, set_deadline)
    } else {
        let mut stream = tcp;
        exchange(&mut stream, &request, set_deadline)
    }
}

/// Sends the request and reads until the status line is in.
fn exchange(
    stream: &mut (impl Read + Write),
    request: &[u8],
    set_deadline: impl Fn() -> Result<(), String>,
) -> Result<u16, String> {
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timeout".to_string(),
        _ => e.to_string(),
    };
    set_deadline()?;
    stream.write_all(request).map_err(io)?;
    stream.flush().map_err(io)?;
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        set_deadline()?;
        let n = stream.read(&mut buf).map_err(io)?;
        if n == 0 {
            return parse_status(&head);
        }
        head.extend_from_slice(&buf[..n]);
        if head.contains(&b'\n') || head.len() > 8192 {
            return parse_status(&head);
        }
    }
}

/// TLS for HTTPS probes: like the kubelet, the server's certificate is not verified (only
/// the handshake signatures are checked against it).
fn insecure_tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let verifier = Arc::new(AcceptAnyCertificate(provider.clone()));
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| {
                    b.dangerous()
                        .with_custom_certificate_verifier(verifier.clone())
                        .with_no_client_auth()
                })
                .unwrap_or_else(|_| {
                    rustls::ClientConfig::builder()
                        .dangerous()
                        .with_custom_certificate_verifier(verifier)
                        .with_no_client_auth()
                });
            Arc::new(config)
        })
        .clone()
}

#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::{ContainerPort, ExecAction, HttpGetAction, HttpHeader, TcpSocketAction};

    fn exec_probe(period: i32, success: i32, failure: i32, delay: i32) -> Probe {
        Probe {
            exec: Some(ExecAction {
                command: vec!["true".into()],
            }),
            period_seconds: Some(period),
            success_threshold: Some(success),
            failure_threshold: Some(failure),
            initial_delay_seconds: Some(delay),
            ..Default::default()
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn defaults_are_kubernetes() {
        let p = Probe {
            tcp_socket: Some(TcpSocketAction::default()),
            success_threshold: Some(3),
            ..Default::default()
        };
        let t = Timing::of(&p, ProbeKind::Liveness);
        assert_eq!(
            t,
            Timing {
                initial_delay: Duration::ZERO,
                period: secs(10),
                timeout: secs(1),
                success_threshold: 1,
                failure_threshold: 3,
            }
        );
        assert_eq!(Timing::of(&p, ProbeKind::Readiness).success_threshold, 3);
        assert_eq!(Timing::of(&p, ProbeKind::Startup).success_threshold, 1);
        let zero = Probe {
            period_seconds: Some(0),
            timeout_seconds: Some(0),
            failure_threshold: Some(0),
            ..p
        };
        let t = Timing::of(&zero, ProbeKind::Readiness);
        assert_eq!(
            (t.period, t.timeout, t.failure_threshold),
            (secs(1), secs(1), 1)
        );
    }

    #[test]
    fn ports_and_actions() {
        let c = Container {
            name: "web".into(),
            ports: vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }],
            ..Default::default()
        };
        let http = Probe {
            http_get: Some(HttpGetAction {
                path: Some("healthz?x=1".into()),
                port: IntOrString::String("http".into()),
                scheme: Some("HTTP".into()),
                http_headers: vec![HttpHeader {
                    name: "X-A".into(),
                    value: "b".into(),
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = ProbeSpec::of(&c, &http, ProbeKind::Readiness);
        assert_eq!(
            s.action,
            Action::Http(HttpCheck {
                https: false,
                host: None,
                port: 8080,
                path: "/healthz?x=1".into(),
                headers: vec![("X-A".into(), "b".into())],
            })
        );
        let missing = Probe {
            tcp_socket: Some(TcpSocketAction {
                port: IntOrString::String("nope".into()),
                host: None,
            }),
            termination_grace_period_seconds: Some(5),
            ..Default::default()
        };
        let s = ProbeSpec::of(&c, &missing, ProbeKind::Liveness);
        assert!(matches!(&s.action, Action::Invalid(m) if m.contains("couldn't find port")));
        assert_eq!(s.grace, Some(secs(5)));
        let grpc = Probe {
            grpc: Some(Default::default()),
            ..Default::default()
        };
        assert!(matches!(
            ProbeSpec::of(&c, &grpc, ProbeKind::Liveness).action,
            Action::Invalid(_)
        ));
    }

    fn container(
        startup: Option<Probe>,
        liveness: Option<Probe>,
        readiness: Option<Probe>,
    ) -> ContainerProbes {
        ContainerProbes::new(&Container {
            name: "c".into(),
            startup_probe: startup,
            liveness_probe: liveness,
            readiness_probe: readiness,
            ..Default::default()
        })
    }

    /// Runs every due probe at `t` with the outcome `ok(kind)`; answers the verdicts.
    fn tick(
        p: &mut ContainerProbes,
        t: Instant,
        ok: impl Fn(ProbeKind) -> bool,
    ) -> Vec<(ProbeKind, Verdict)> {
        let mut out = Vec::new();
        for kind in p.due(t) {
            p.take(kind).expect("spec");
            out.push((kind, p.record(kind, ok(kind), t, t)));
        }
        out
    }

    #[test]
    fn readiness_thresholds_and_schedule() {
        let t0 = Instant::now();
        let mut p = container(None, None, Some(exec_probe(2, 2, 3, 5)));
        assert!(p.due(t0).is_empty(), "nothing before the container runs");
        assert_eq!(p.next_due(), None);
        p.begin(t0);
        assert!(!p.ready(), "readiness starts out failed");
        assert!(p.started());
        assert!(p.due(t0 + secs(4)).is_empty(), "initial delay");
        assert_eq!(p.next_due(), Some(t0 + secs(5)));
        // One success is not enough (successThreshold 2), the second makes it ready.
        assert_eq!(
            tick(&mut p, t0 + secs(5), |_| true),
            vec![(ProbeKind::Readiness, Verdict::Unchanged)]
        );
        assert!(!p.ready());
        assert!(p.due(t0 + secs(6)).is_empty(), "period 2");
        assert_eq!(p.next_due(), Some(t0 + secs(7)));
        assert_eq!(
            tick(&mut p, t0 + secs(7), |_| true),
            vec![(ProbeKind::Readiness, Verdict::Changed)]
        );
        assert!(p.ready());
        // Two failures keep it ready, the third (failureThreshold 3) does not.
        for (i, want) in [
            (9, Verdict::Unchanged),
            (11, Verdict::Unchanged),
            (13, Verdict::Changed),
        ] {
            assert_eq!(
                tick(&mut p, t0 + secs(i), |_| false),
                vec![(ProbeKind::Readiness, want)]
            );
        }
        assert!(!p.ready());
        // A success in between restarts the count.
        tick(&mut p, t0 + secs(15), |_| true);
        tick(&mut p, t0 + secs(17), |_| false);
        tick(&mut p, t0 + secs(19), |_| true);
        assert!(!p.ready());
        tick(&mut p, t0 + secs(21), |_| true);
        assert!(p.ready());
        // A run that lasted longer than the period is followed at once.
        let kinds = p.due(t0 + secs(23));
        assert_eq!(kinds, vec![ProbeKind::Readiness]);
        p.take(ProbeKind::Readiness);
        assert!(p.due(t0 + secs(24)).is_empty(), "in flight");
        assert_eq!(p.next_due(), None);
        p.record(ProbeKind::Readiness, true, t0 + secs(23), t0 + secs(30));
        assert_eq!(p.next_due(), Some(t0 + secs(30)));
    }

    #[test]
    fn liveness_kills_after_the_failure_threshold() {
        let t0 = Instant::now();
        let mut p = container(None, Some(exec_probe(1, 1, 3, 0)), None);
        p.begin(t0);
        assert!(p.ready(), "no readiness probe: ready while running");
        assert_eq!(p.due(t0), vec![ProbeKind::Liveness]);
        tick(&mut p, t0, |_| false);
        tick(&mut p, t0 + secs(1), |_| false);
        assert_eq!(
            tick(&mut p, t0 + secs(2), |_| false),
            vec![(ProbeKind::Liveness, Verdict::Kill)]
        );
        assert!(
            p.due(t0 + secs(10)).is_empty(),
            "nothing runs while killing"
        );
        assert_eq!(p.next_due(), None);
        // The next run starts afresh.
        p.reset();
        assert!(p.due(t0 + secs(20)).is_empty());
        p.begin(t0 + secs(20));
        tick(&mut p, t0 + secs(20), |_| false);
        tick(&mut p, t0 + secs(21), |_| true);
        tick(&mut p, t0 + secs(22), |_| false);
        assert_eq!(
            tick(&mut p, t0 + secs(23), |_| false),
            vec![(ProbeKind::Liveness, Verdict::Unchanged)],
            "not three in a row"
        );
    }

    #[test]
    fn startup_gates_liveness_and_readiness() {
        let t0 = Instant::now();
        let mut p = container(
            Some(exec_probe(1, 1, 5, 0)),
            Some(exec_probe(1, 1, 1, 3)),
            Some(exec_probe(1, 1, 1, 0)),
        );
        p.begin(t0);
        assert!(!p.started() && !p.ready());
        assert_eq!(p.due(t0), vec![ProbeKind::Startup]);
        tick(&mut p, t0, |_| false);
        assert_eq!(
            tick(&mut p, t0 + secs(1), |_| true),
            vec![(ProbeKind::Startup, Verdict::Changed)]
        );
        assert!(p.started());
        assert!(!p.ready(), "readiness has not succeeded yet");
        // Readiness at once; liveness after its initial delay (from the container's start).
        assert_eq!(p.due(t0 + secs(1)), vec![ProbeKind::Readiness]);
        assert_eq!(
            tick(&mut p, t0 + secs(1), |_| true),
            vec![(ProbeKind::Readiness, Verdict::Changed)]
        );
        assert!(p.ready());
        assert_eq!(p.due(t0 + secs(2)), vec![ProbeKind::Readiness]);
        assert_eq!(
            p.due(t0 + secs(3)),
            vec![ProbeKind::Liveness, ProbeKind::Readiness]
        );
        assert!(
            !p.due(t0 + secs(100)).contains(&ProbeKind::Startup),
            "the startup probe stops once it succeeded"
        );
    }

    #[test]
    fn startup_failures_kill() {
        let t0 = Instant::now();
        let mut p = container(
            Some(exec_probe(1, 1, 2, 0)),
            Some(exec_probe(1, 1, 1, 0)),
            None,
        );
        p.begin(t0);
        tick(&mut p, t0, |_| false);
        assert_eq!(
            tick(&mut p, t0 + secs(1), |_| false),
            vec![(ProbeKind::Startup, Verdict::Kill)]
        );
        assert!(!p.started());
    }

    #[test]
    fn stale_results_are_dropped() {
        let t0 = Instant::now();
        let mut p = container(None, None, Some(exec_probe(1, 1, 1, 0)));
        p.begin(t0);
        p.take(ProbeKind::Readiness);
        p.reset();
        assert_eq!(
            p.record(ProbeKind::Readiness, true, t0, t0),
            Verdict::Unchanged
        );
        p.begin(t0 + secs(5));
        assert_eq!(p.due(t0 + secs(5)), vec![ProbeKind::Readiness]);
        assert!(!p.ready());
    }

    #[test]
    fn http_requests_and_status_lines() {
        let check = HttpCheck {
            https: false,
            host: None,
            port: 80,
            path: "/healthz".into(),
            headers: vec![
                ("host".into(), "example.test".into()),
                ("X-Custom".into(), "a\r\nInjected: yes".into()),
            ],
        };
        let req = String::from_utf8(http_request(&check, "127.0.0.1:80")).unwrap();
        assert_eq!(
            req,
            "GET /healthz HTTP/1.1\r\nHost: example.test\r\nUser-Agent: kube-probe/1.32\r\n\
             Accept: */*\r\nX-Custom: aInjected: yes\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\nServer: x\r\n"), Ok(200));
        assert_eq!(parse_status(b"HTTP/1.0 404 Not Found\r\n"), Ok(404));
        assert_eq!(parse_status(b"HTTP/1.1 302\r\n"), Ok(302));
        assert_eq!(parse_status(b"HTTP/1.1 204 No Content\n"), Ok(204));
        assert!(parse_status(b"HTTP/1.1 200 OK").is_err(), "incomplete");
        assert!(parse_status(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse_status(b"HTTP/1.1 2000 OK\r\n").is_err());
        assert!(parse_status(b"").is_err());
        assert!(http_success(200) && http_success(399));
        assert!(!http_success(199) && !http_success(400) && !http_success(500));
    }

    /// A one-shot HTTP server on loopback answering `response`.
    fn serve_once(response: &'static [u8]) -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(response);
            }
        });
        port
    }

    #[test]
    fn http_and_tcp_probes_on_loopback() {
        let host = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let check = |port| HttpCheck {
            https: false,
            host: None,
            port,
            path: "/".into(),
            headers: Vec::new(),
        };
        let ok = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(http_probe(&check(ok), host, secs(2)), Outcome::ok());
        let missing = serve_once(b"HTTP/1.1 404 Not Found\r\n\r\n");
        let o = http_probe(&check(missing), host, secs(2));
        assert!(!o.success);
        assert!(o.message.contains("404"), "{}", o.message);
        // Nobody listening.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        assert!(!http_probe(&check(closed), host, secs(2)).success);
        assert!(connect(None, host, closed, Instant::now() + secs(2)).is_err());
        let open = serve_once(b"");
        assert!(connect(Some("127.0.0.1"), host, open, Instant::now() + secs(2)).is_ok());
        // A server that never answers runs into the timeout.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let silent = listener.local_addr().expect("addr").port();
        let t = Instant::now();
        let o = http_probe(&check(silent), host, secs(1));
        assert!(!o.success && o.message.contains("timeout"), "{}", o.message);
        assert!(t.elapsed() < secs(3));
        drop(listener);
    }

    #[test]
    fn https_probes_skip_certificate_verification() {
        let key = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let cert = key.cert.der().clone();
        let private = rustls_pki_types::PrivateKeyDer::Pkcs8(
            rustls_pki_types::PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()),
        );
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], private)
        .expect("server config");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Ok((s, _)) = listener.accept() {
                let conn = rustls::ServerConnection::new(Arc::new(config)).expect("conn");
                let mut tls = rustls::StreamOwned::new(conn, s);
                let mut buf = [0u8; 1024];
                let _ = tls.read(&mut buf);
                let _ = tls.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
                let _ = tls.flush();
            }
        });
        let check = HttpCheck {
            https: true,
            host: None,
            port,
            path: "/".into(),
            headers: Vec::new(),
        };
        let o = http_probe(&check, IpAddr::V4(Ipv4Addr::LOCALHOST), secs(5));
        assert_eq!(o, Outcome::ok());
    }
}
