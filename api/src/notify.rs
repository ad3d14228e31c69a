//! The systemd notification protocol (`sd_notify`), for units with `Type=notify`: one
//! datagram of `KEY=VALUE` lines to the socket named by `$NOTIFY_SOCKET` (a path, or an
//! abstract name when it starts with `@`). Outside systemd the variable is unset and every
//! call is a no-op.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `"READY=1"`, `"STOPPING=1"`, `"STATUS=..."`) to systemd. Answers
/// `Ok(false)` when not started by systemd (no `$NOTIFY_SOCKET`), `Ok(true)` once sent.
pub fn notify(state: &str) -> std::io::Result<bool> {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    send(&socket.to_string_lossy(), state)?;
    Ok(true)
}

/// Sends `state` to the notification socket `socket` (`$NOTIFY_SOCKET`'s syntax).
pub fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => send_abstract(&sock, name, state),
        None => sock.send_to(state.as_bytes(), socket).map(|_| ()),
    }
}

#[cfg(target_os = "linux")]
fn send_abstract(sock: &UnixDatagram, name: &str, state: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn send_abstract(_: &UnixDatagram, _: &str, _: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract sockets exist only on Linux",
    ))
}

/// `READY=1` with a status line; a failure to notify is only worth a warning to the caller.
pub fn ready(status: &str) -> std::io::Result<bool> {
    notify(&format!("READY=1\nSTATUS={status}"))
}

/// `STOPPING=1`: the service is shutting down on purpose.
pub fn stopping() -> std::io::Result<bool> {
    notify("STOPPING=1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_reach_path_and_abstract_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 256];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("skiff-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = UnixDatagram::bind_addr(&addr).unwrap();
        send(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");

        // Nobody listening: an error, which callers only log.
        assert!(send(dir.path().join("none").to_str().unwrap(), "READY=1").is_err());
    }
}
