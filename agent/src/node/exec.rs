//! `exec` and `attach` on the agent's endpoint, over WebSocket with Kubernetes' channel
//! protocols (what the kubelet serves at `/exec/{ns}/{pod}/{container}` and
//! `/attach/{ns}/{pod}/{container}`; the API server proxies `pods/NAME/exec` and
//! `pods/NAME/attach` here, byte for byte after the upgrade).
//!
//! Every WebSocket message is one channel's: its first byte is the channel, the rest the
//! payload. 0 is stdin (client to server), 1 stdout, 2 stderr, 3 the error channel (one
//! `metav1.Status` as JSON when the process has ended: `Success`, or `Failure` with reason
//! `NonZeroExitCode` and the code in `details.causes[reason=ExitCode].message`), 4 terminal
//! resizes (`{"Width":..,"Height":..}`). `v5.channel.k8s.io` (kubectl 1.30+) adds channel 255,
//! whose message `[255, 0]` closes stdin; `v4.channel.k8s.io` (the Python client; kubectl as
//! a fallback) has no way to close stdin but closing the connection. Clients may send binary
//! or text messages (the Python client sends text); the server sends binary.
//!
//! `exec` starts the command in the container through libcontainer's tenant builder
//! ([`crate::runtime::Runtime::spawn_exec`]), with pipes or, for `tty=true`, a pseudo-terminal. `attach`
//! streams what the container's main process writes from now on (its log file: stdout and
//! stderr are one file, so both arrive on stdout) until the container ends; with `stdin=true`
//! the client's input goes to the container's stdin, a FIFO, or its terminal, whose resizes
//! it also applies ([`crate::runtime::stdio`]); stdin asked of a container without one is
//! ignored.

use std::io::{self, Read as _};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, FutureExt};
use serde_json::json;

use super::logs::{LogSource, Refusal};
use crate::runtime::exec::{self as rexec, ExecExit, ExecStdio};
use crate::runtime::logs::{self as files, LogQuery, LogReader};
use crate::runtime::stdio::StdinEnd;
use crate::runtime::{ContainerId, ContainerState};

/// The channel protocols served, most preferred first.
pub const EXEC_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// How long a terminal session waits for the client's first size before starting.
const FIRST_RESIZE_WAIT: Duration = Duration::from_millis(300);
/// How often an attach looks for more output.
const ATTACH_POLL: Duration = Duration::from_millis(100);

/// What a parsed `exec` or `attach` request asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct StreamRequest {
    pub attach: bool,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

fn flag(v: &str) -> Result<bool, Refusal> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" | "" => Ok(false),
        _ => Err(Refusal(400, format!("invalid boolean {v:?}"))),
    }
}

/// Parses the path segments after `exec`/`attach` and the query string.
pub fn parse_stream_request(
    attach: bool,
    segs: &[&str],
    query: &str,
) -> Result<StreamRequest, Refusal> {
    let [ns, pod, container] = segs else {
        return Err(Refusal(404, "no such path".into()));
    };
    if [ns, pod, container].iter().any(|s| s.is_empty()) {
        return Err(Refusal(404, "no such path".into()));
    }
    let mut req = StreamRequest {
        attach,
        namespace: ns.to_string(),
        pod: pod.to_string(),
        container: container.to_string(),
        command: Vec::new(),
        stdin: false,
        stdout: false,
        stderr: false,
        tty: false,
    };
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "command" => req.command.push(v.into_owned()),
            "input" | "stdin" => req.stdin = flag(&v)?,
            "output" | "stdout" => req.stdout = flag(&v)?,
            "error" | "stderr" => req.stderr = flag(&v)?,
            "tty" => req.tty = flag(&v)?,
            _ => {}
        }
    }
    if !attach && req.command.is_empty() {
        return Err(Refusal(400, "you must specify at least one command".into()));
    }
    if !(req.stdin || req.stdout || req.stderr) {
        return Err(Refusal(
            400,
            "you must specify at least one of stdin, stdout, stderr".into(),
        ));
    }
    if req.tty && req.stderr {
        // As the kubelet: a terminal merges stderr into stdout.
        req.stderr = false;
    }
    Ok(req)
}

/// The WebSocket handshake's answer: `Sec-WebSocket-Accept` and the chosen protocol.
pub struct Handshake {
    pub accept: String,
    pub protocol: String,
}

/// The request head's header `name` (all its values, comma-separated lists split).
pub fn header_values(head: &str, name: &str) -> Vec<String> {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(',').map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .collect()
}

/// Checks a WebSocket upgrade request and picks the first of `supported` the client offers.
pub fn websocket_handshake(head: &str, supported: &[&str]) -> Result<Handshake, Refusal> {
    let upgrade = header_values(head, "Upgrade");
    if !upgrade.iter().any(|u| u.eq_ignore_ascii_case("websocket")) {
        return Err(Refusal(
            400,
            "this endpoint needs a WebSocket upgrade (SPDY is not supported)".into(),
        ));
    }
    let key = header_values(head, "Sec-WebSocket-Key")
        .into_iter()
        .next()
        .ok_or_else(|| Refusal(400, "missing Sec-WebSocket-Key".into()))?;
    let offered = header_values(head, "Sec-WebSocket-Protocol");
    let protocol = supported
        .iter()
        .find(|p| offered.iter().any(|o| o == *p))
        .ok_or_else(|| {
            Refusal(
                400,
                format!(
                    "none of the requested protocols {offered:?} is supported (supported: {})",
                    supported.join(", ")
                ),
            )
        })?;
    Ok(Handshake {
        accept: accept_key(&key),
        protocol: protocol.to_string(),
    })
}

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key` (RFC 6455 section 4.2.2).
pub fn accept_key(key: &str) -> String {
    use base64::Engine;
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key.as_bytes());
    ctx.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(ctx.finish())
}

/// The `101 Switching Protocols` answer.
pub fn switching_protocols(h: &Handshake) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {}\r\n\r\n",
        h.accept, h.protocol
    )
}

/// The error channel's Status for a process that ended with `exit`.
pub fn exit_status(command: &[String], exit: &ExecExit) -> serde_json::Value {
    match exit {
        ExecExit::Code(0) => json!({"metadata": {}, "status": "Success"}),
        ExecExit::Code(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"
            ),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        ExecExit::Unknown => failure("the exit code of the command is unknown"),
    }
}

/// An error channel Status for a stream that could not run.
pub fn failure(message: &str) -> serde_json::Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "InternalError",
        "code": 500,
    })
}

/// Finds the pod's container (blocking: reads the pod cache and the runtime).
fn find_container(source: &LogSource, req: &StreamRequest) -> Result<ContainerId, Refusal> {
    let pod = super::logs::find_pod(source, &req.namespace, &req.pod)?;
    let id = ContainerId::new(&pod.metadata.uid, &req.container)
        .map_err(|e| Refusal(400, e.to_string()))?;
    match source.runtime.state(&id) {
        Ok(ContainerState::Running { .. }) => Ok(id),
        _ => Err(Refusal(
            400,
            format!(
                "container {} is not valid for pod {}: it is not running",
                req.container, req.pod
            ),
        )),
    }
}

/// Frames to send: channel byte first. A single writer task owns the WebSocket sender.
type Frames = async_channel::Sender<Vec<u8>>;

fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(data.len() + 1);
    f.push(channel);
    f.extend_from_slice(data);
    f
}

/// Serves an `exec` or `attach` after the request head: checks, upgrades, runs the session.
pub async fn serve<S>(mut stream: S, head: &str, req: StreamRequest, source: Arc<LogSource>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if !req.attach {
        rexec::warm_cgroup_migration(&source.runtime.config().cgroup_root);
    }
    let checked = match websocket_handshake(head, &EXEC_PROTOCOLS) {
        Ok(h) => {
            let src = source.clone();
            let (r, req) = smol::unblock(move || (find_container(&src, &req), req)).await;
            r.map(|id| (h, id, req))
        }
        Err(r) => Err(r),
    };
    let (handshake, id, req) = match checked {
        Ok(c) => c,
        Err(refusal) => {
            let _ = super::logs::refuse(&mut stream, refusal).await;
            return;
        }
    };
    if stream
        .write_all(switching_protocols(&handshake).as_bytes())
        .await
        .is_err()
        || stream.flush().await.is_err()
    {
        return;
    }
    let v5 = handshake.protocol == EXEC_PROTOCOLS[0];
    let (sender, receiver) =
        soketto::connection::Builder::new(stream, soketto::connection::Mode::Server).finish();
    let (frames, queued) = async_channel::bounded::<Vec<u8>>(16);
    let writer = smol::spawn(write_frames(sender, queued));
    if req.attach {
        attach(&source, &id, &req, v5, frames, receiver).await;
    } else {
        exec(&source, id, req, v5, frames, receiver).await;
    }
    writer.await;
}

async fn write_frames<T: AsyncRead + AsyncWrite + Unpin>(
    mut sender: soketto::connection::Sender<T>,
    queued: async_channel::Receiver<Vec<u8>>,
) {
    while let Ok(f) = queued.recv().await {
        if sender.send_binary(&f).await.is_err() {
            return;
        }
        // Send at once unless more is already waiting (interactive output must not linger).
        if queued.is_empty() && sender.flush().await.is_err() {
            return;
        }
    }
    let _ = sender.close().await;
}

/// The process's side of the streams.
struct Ends {
    /// Where stdin goes (a pipe, or the terminal's master side).
    stdin: Option<smol::Async<std::fs::File>>,
    stdout: Option<smol::Async<std::fs::File>>,
    stderr: Option<smol::Async<std::fs::File>>,
    /// The terminal, for resizes.
    pty: Option<Arc<OwnedFd>>,
}

fn async_file(fd: OwnedFd) -> io::Result<smol::Async<std::fs::File>> {
    smol::Async::new(std::fs::File::from(fd))
}

/// Makes the stdio of the process and the agent's ends of it.
fn make_stdio(req: &StreamRequest) -> Result<(ExecStdio, Ends), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    if req.tty {
        let pty = rexec::open_pty().map_err(|x| e(&x))?;
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|x| e(&x));
        let stdio = ExecStdio {
            stdin: dup(&pty.slave)?,
            stdout: dup(&pty.slave)?,
            stderr: pty.slave,
            tty: true,
        };
        let ends = Ends {
            stdin: if req.stdin {
                Some(async_file(dup(&pty.master)?).map_err(|x| e(&x))?)
            } else {
                None
            },
            stdout: Some(async_file(dup(&pty.master)?).map_err(|x| e(&x))?),
            stderr: None,
            pty: Some(Arc::new(pty.master)),
        };
        return Ok((stdio, ends));
    }
    let pipe = || -> Result<(OwnedFd, OwnedFd), String> {
        let (r, w) = std::io::pipe().map_err(|x| e(&x))?;
        Ok((OwnedFd::from(r), OwnedFd::from(w)))
    };
    let null = || rexec::dev_null().map_err(|x| e(&x));
    let (stdin, stdin_end) = if req.stdin {
        let (r, w) = pipe()?;
        (r, Some(async_file(w).map_err(|x| e(&x))?))
    } else {
        (null()?, None)
    };
    let out = |wanted: bool| -> Result<(OwnedFd, Option<smol::Async<std::fs::File>>), String> {
        if wanted {
            let (r, w) = pipe()?;
            Ok((w, Some(async_file(r).map_err(|x| e(&x))?)))
        } else {
            Ok((null()?, None))
        }
    };
    let (stdout, stdout_end) = out(req.stdout)?;
    let (stderr, stderr_end) = out(req.stderr)?;
    Ok((
        ExecStdio {
            stdin,
            stdout,
            stderr,
            tty: false,
        },
        Ends {
            stdin: stdin_end,
            stdout: stdout_end,
            stderr: stderr_end,
            pty: None,
        },
    ))
}

/// Sends what the process writes on `channel` until end of file, or, once it has exited
/// (`exited` closes), what is left in the pipe: a background process that keeps the pipe
/// open cannot hold the session.
async fn pump(
    end: Option<smol::Async<std::fs::File>>,
    channel: u8,
    exited: async_channel::Receiver<()>,
    frames: Frames,
) {
    let Some(mut end) = end else { return };
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let read = async { Some(end.read(&mut buf).await) }
            .or(async {
                let _ = exited.recv().await;
                None
            })
            .await;
        match read {
            Some(Ok(0)) | Some(Err(_)) => return,
            Some(Ok(n)) => {
                if frames.send(frame(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
            None => {
                // Non-blocking reads of what is buffered (a terminal whose slave is closed
                // answers EIO: the end).
                while let Ok(n @ 1..) = end.get_ref().read(&mut buf) {
                    if frames.send(frame(channel, &buf[..n])).await.is_err() {
                        return;
                    }
                }
                return;
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct TerminalSize {
    #[serde(rename = "Width")]
    width: u16,
    #[serde(rename = "Height")]
    height: u16,
}

/// Reads the client's messages until it goes away: stdin, resizes, stdin's close. `msg` is
/// a message already received, or empty. `stdin_closed` is closed once stdin is (or when
/// there is none).
async fn read_input<T: AsyncRead + AsyncWrite + Unpin>(
    mut receiver: soketto::connection::Receiver<T>,
    mut msg: Vec<u8>,
    mut stdin: Option<smol::Async<std::fs::File>>,
    pty: Option<Arc<OwnedFd>>,
    v5: bool,
    stdin_closed: &async_channel::Sender<()>,
) {
    loop {
        if stdin.is_none() {
            stdin_closed.close();
        }
        if msg.is_empty() && receiver.receive_data(&mut msg).await.is_err() {
            return;
        }
        let Some((&channel, data)) = msg.split_first() else {
            continue;
        };
        match channel {
            STDIN if !data.is_empty() => {
                if let Some(w) = &mut stdin {
                    if w.write_all(data).await.is_err() || w.flush().await.is_err() {
                        // The process closed its stdin; keep reading resizes.
                        stdin = None;
                    }
                }
            }
            RESIZE => {
                if let Some(pty) = &pty {
                    apply_resize(pty, data);
                }
            }
            CLOSE if v5 && data.first() == Some(&STDIN) => stdin = None,
            _ => {}
        }
        msg.clear();
    }
}

async fn exec<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    source: &LogSource,
    id: ContainerId,
    req: StreamRequest,
    v5: bool,
    frames: Frames,
    receiver: soketto::connection::Receiver<T>,
) {
    let mut receiver = receiver;
    let mut early = Vec::new();
    let started = match make_stdio(&req) {
        Ok((stdio, ends)) => {
            // kubectl sends the terminal's size right after the upgrade: set it before the
            // process starts, so that it sees the right size from its first line.
            if let Some(pty) = &ends.pty {
                early = first_message(&mut receiver).await;
                if early.first() == Some(&RESIZE) {
                    apply_resize(pty, &early[1..]);
                    early.clear();
                }
            }
            let rt = source.runtime.clone();
            let command = req.command.clone();
            smol::unblock(move || rt.spawn_exec(&id, &command, stdio))
                .await
                .map(|pid| (pid, ends))
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e),
    };
    let (pid, ends) = match started {
        Ok(s) => s,
        Err(message) => {
            let status = failure(&format!(
                "failed to exec in container {}: {message}",
                req.container
            ));
            let _ = frames
                .send(frame(ERROR, status.to_string().as_bytes()))
                .await;
            return;
        }
    };
    let Ends {
        stdin,
        stdout,
        stderr,
        pty,
    } = ends;
    // The process is reaped on a blocking thread, which goes on even if the client leaves.
    let waiter = smol::unblock(move || rexec::wait_exec(pid));
    let (exited_tx, exited) = async_channel::bounded::<()>(1);
    let out = smol::spawn(pump(stdout, STDOUT, exited.clone(), frames.clone()));
    let err = smol::spawn(pump(stderr, STDERR, exited, frames.clone()));
    let session = async move {
        let exit = waiter.await.unwrap_or(ExecExit::Unknown);
        drop(exited_tx);
        out.await;
        err.await;
        let status = exit_status(&req.command, &exit);
        let _ = frames
            .send(frame(ERROR, status.to_string().as_bytes()))
            .await;
    };
    // A client that goes away ends the session (closing stdin and the terminal); the process
    // is left to finish and is still reaped.
    session
        .or(async move {
            let (closed, _) = async_channel::bounded(1);
            read_input(receiver, early, stdin, pty, v5, &closed).await;
        })
        .await;
}

/// The client's first message, if one comes within a moment (empty otherwise).
async fn first_message<T: AsyncRead + AsyncWrite + Unpin>(
    receiver: &mut soketto::connection::Receiver<T>,
) -> Vec<u8> {
    let mut msg = Vec::new();
    let got = async { receiver.receive_data(&mut msg).await.is_ok() }
        .or(async {
            smol::Timer::after(FIRST_RESIZE_WAIT).await;
            false
        })
        .await;
    if got {
        msg
    } else {
        Vec::new()
    }
}

fn apply_resize(pty: &OwnedFd, data: &[u8]) {
    if let Ok(size) = serde_json::from_slice::<TerminalSize>(data) {
        let _ = rexec::resize_pty(pty, size.width, size.height);
    }
}

/// Follows the container's current log from its end until the container stops, and, with
/// stdin, passes the client's input to the container's stdin (or terminal).
async fn attach<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    source: &LogSource,
    id: &ContainerId,
    req: &StreamRequest,
    v5: bool,
    frames: Frames,
    receiver: soketto::connection::Receiver<T>,
) {
    let container_dir = source
        .pods_dir
        .join(id.pod_uid())
        .join("logs")
        .join(&req.container);
    type Opened = (u32, LogReader, Option<StdinEnd>, Option<Arc<OwnedFd>>);
    let opened = {
        let dir = container_dir.clone();
        let (rt, cid, want_stdin) = (source.runtime.clone(), id.clone(), req.stdin);
        smol::unblock(move || -> Result<Opened, String> {
            let run = *files::runs(&dir)
                .last()
                .ok_or_else(|| "the container has no log yet".to_string())?;
            let mut reader = LogReader::open(
                files::run_files(&dir, run),
                LogQuery {
                    tail_lines: Some(0),
                    ..LogQuery::default()
                },
            )
            .map_err(|e| e.to_string())?;
            // Skip what is there: attach shows output from now on.
            reader.read_more().map_err(|e| e.to_string())?;
            // As the kubelet's runtimes: stdin asked of a container without one is ignored.
            let stdin = if want_stdin {
                rt.open_stdin(&cid).map_err(|e| e.to_string())?
            } else {
                None
            };
            Ok((run, reader, stdin, rt.terminal(&cid)))
        })
        .await
    };
    let opened = opened.and_then(|(run, reader, end, pty)| {
        let stdin = end
            .map(|end| async_file(OwnedFd::from(end.file)))
            .transpose()
            .map_err(|e| e.to_string())?;
        Ok((run, reader, stdin, pty))
    });
    let (run, mut reader, stdin, pty) = match opened {
        Ok(r) => r,
        Err(message) => {
            let _ = frames
                .send(frame(ERROR, failure(&message).to_string().as_bytes()))
                .await;
            return;
        }
    };
    let had_stdin = stdin.is_some();
    let channel = if req.stdout { STDOUT } else { STDERR };
    let runtime = source.runtime.clone();
    let cid = id.clone();
    let follow = async move {
        loop {
            let (rt, dir, cid) = (runtime.clone(), container_dir.clone(), cid.clone());
            let (r, chunk, ended) = smol::unblock(move || {
                let newer = files::runs(&dir).last().is_some_and(|&r| r > run);
                let ended = newer
                    || !matches!(
                        rt.state(&cid),
                        Ok(ContainerState::Running { .. } | ContainerState::Created)
                    );
                let chunk = reader.read_more();
                (reader, chunk, ended)
            })
            .await;
            reader = r;
            let Ok(chunk) = chunk else { break };
            if !chunk.is_empty() && frames.send(frame(channel, &chunk)).await.is_err() {
                return;
            }
            if chunk.is_empty() {
                if ended {
                    break;
                }
                smol::Timer::after(ATTACH_POLL).await;
            }
        }
        let status = json!({"metadata": {}, "status": "Success"});
        let _ = frames
            .send(frame(ERROR, status.to_string().as_bytes()))
            .await;
    };
    let (closed_tx, closed) = async_channel::bounded::<()>(1);
    let input = async move {
        read_input(receiver, Vec::new(), stdin, pty, v5, &closed_tx).await;
    };
    // The session's stdin ends (the client closed it, or left): with stdinOnce, so does the
    // container's.
    let end_stdin = || {
        let (rt, cid) = (source.runtime.clone(), id.clone());
        smol::unblock(move || rt.end_stdin_session(&cid))
    };
    let once = async {
        let _ = closed.recv().await;
        if had_stdin {
            end_stdin().await;
        }
        std::future::pending::<()>().await
    };
    follow.or(input).or(once).await;
    if had_stdin {
        end_stdin().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exec_requests() {
        let r = parse_stream_request(
            false,
            &["default", "web", "main"],
            "command=sh&command=-c&command=echo%20hi%20%26%26%20exit%203&stdin=true&stdout=true&stderr=true&tty=false",
        )
        .expect("parse");
        assert_eq!(r.command, ["sh", "-c", "echo hi && exit 3"]);
        assert!(r.stdin && r.stdout && r.stderr && !r.tty);
        let tty = parse_stream_request(
            false,
            &["a", "b", "c"],
            "command=sh&stdin=true&stdout=true&stderr=true&tty=true",
        )
        .expect("parse");
        assert!(tty.tty && !tty.stderr, "a terminal merges stderr");
        assert_eq!(
            parse_stream_request(false, &["a", "b", "c"], "stdout=true")
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(
            parse_stream_request(false, &["a", "b"], "command=ls&stdout=true")
                .unwrap_err()
                .0,
            404
        );
        let attach = parse_stream_request(true, &["a", "b", "c"], "stdin=true&stdout=true")
            .expect("attach with stdin");
        assert!(attach.attach && attach.stdin && attach.command.is_empty());
    }

    #[test]
    fn handshake_picks_the_newest_protocol_and_accepts_the_key() {
        // RFC 6455's example key and answer.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        let head = "GET /exec/a/b/c HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v4.channel.k8s.io, v5.channel.k8s.io\r\n\r\n";
        let h = websocket_handshake(head, &EXEC_PROTOCOLS).expect("handshake");
        assert_eq!(h.protocol, "v5.channel.k8s.io");
        let old = head.replace(", v5.channel.k8s.io", "");
        assert_eq!(
            websocket_handshake(&old, &EXEC_PROTOCOLS)
                .expect("v4")
                .protocol,
            "v4.channel.k8s.io"
        );
        let none = head.replace("v4.channel.k8s.io, v5.channel.k8s.io", "channel.k8s.io");
        assert_eq!(
            websocket_handshake(&none, &EXEC_PROTOCOLS)
                .err()
                .map(|r| r.0),
            Some(400)
        );
        let spdy = "POST /exec/a/b/c HTTP/1.1\r\nUpgrade: SPDY/3.1\r\n\r\n";
        assert!(websocket_handshake(spdy, &EXEC_PROTOCOLS).is_err());
    }

    #[test]
    fn exit_statuses() {
        let cmd = vec!["sh".to_string()];
        assert_eq!(
            exit_status(&cmd, &ExecExit::Code(0))["status"],
            json!("Success")
        );
        let s = exit_status(&cmd, &ExecExit::Code(3));
        assert_eq!(s["reason"], json!("NonZeroExitCode"));
        assert_eq!(
            s["details"]["causes"][0],
            json!({"reason": "ExitCode", "message": "3"})
        );
    }
}
