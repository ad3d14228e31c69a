//! The agent's thin system-call layer: every mount, namespace, signal and wait the runtime does
//! goes through these functions, so the code above them can be read (and later tested with
//! fakes) without raw `libc` calls scattered around. Each function is a direct wrapper that
//! returns `nix::Error` (an errno) on failure.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

fn cpath(path: &Path) -> Result<CString, Errno> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)
}

fn check(ret: libc::c_int) -> Result<(), Errno> {
    if ret == -1 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Bind-mounts `source` onto `target` (which must exist).
pub fn bind_mount(source: &Path, target: &Path) -> Result<(), Errno> {
    let src = cpath(source)?;
    let dst = cpath(target)?;
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call; the fs type
    // and data arguments may be null for MS_BIND.
    let ret = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    check(ret)
}

/// Detaches the mount at `target` (`umount2(MNT_DETACH)`).
pub fn unmount_detach(target: &Path) -> Result<(), Errno> {
    let dst = cpath(target)?;
    // SAFETY: `dst` is a valid NUL-terminated string for the duration of the call.
    let ret = unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
    check(ret)
}

/// `unshare(2)` for the calling thread. Only flags that are per-thread (ipc, uts, net) are
/// meant to be used from the agent's multi-threaded process.
pub fn unshare(flags: libc::c_int) -> Result<(), Errno> {
    // SAFETY: unshare takes a plain integer and touches no memory of ours.
    check(unsafe { libc::unshare(flags) })
}

/// Sets the hostname of the calling thread's UTS namespace.
pub fn sethostname(name: &str) -> Result<(), Errno> {
    // SAFETY: the pointer and length describe the bytes of `name`, valid during the call.
    let ret = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
    check(ret)
}

/// Brings the loopback interface of the calling thread's network namespace up.
pub fn loopback_up() -> Result<(), Errno> {
    // SAFETY: plain socket(2) call; the returned descriptor is closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(Errno::last());
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `sock` is an open socket and `req` a properly initialised ifreq that lives for
    // the duration of both ioctls; SIOCGIFFLAGS/SIOCSIFFLAGS read and write ifr_flags only.
    let result = unsafe {
        if libc::ioctl(sock, libc::SIOCGIFFLAGS as _, &mut req) == -1 {
            Err(Errno::last())
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(sock, libc::SIOCSIFFLAGS as _, &req) == -1 {
                Err(Errno::last())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: `sock` is ours and not used after this.
    unsafe { libc::close(sock) };
    result
}

/// Makes the calling process a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphaned
/// descendants are re-parented to it instead of to init, so their exit status can be read.
pub fn set_child_subreaper() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })
}

/// Restores `PR_SET_DUMPABLE` (libcontainer clears it on the calling process while creating a
/// container, which would otherwise stick to the long-running agent).
pub fn set_dumpable(dumpable: bool) -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe {
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            libc::c_ulong::from(dumpable),
            0,
            0,
            0,
        )
    })
}

/// What a non-blocking wait for one child found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildStatus {
    /// Still running (or stopped).
    Alive,
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal number.
    Signaled(i32),
    /// Not a child of this process (ECHILD): it was reaped elsewhere or belongs to an earlier
    /// agent process.
    NotOurs,
}

/// `waitpid(pid, WNOHANG)`: reaps `pid` if it has exited.
pub fn try_wait(pid: i32) -> Result<ChildStatus, Errno> {
    match nix::sys::wait::waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Ok(ChildStatus::Exited(code)),
        Ok(WaitStatus::Signaled(_, sig, _)) => Ok(ChildStatus::Signaled(sig as i32)),
        Ok(_) => Ok(ChildStatus::Alive),
        Err(Errno::ECHILD) => Ok(ChildStatus::NotOurs),
        Err(e) => Err(e),
    }
}

/// `waitpid(pid, 0)`: waits for `pid` to end and reaps it (blocking).
pub fn wait_blocking(pid: i32) -> Result<ChildStatus, Errno> {
    loop {
        match nix::sys::wait::waitpid(Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(ChildStatus::Exited(code)),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(ChildStatus::Signaled(sig as i32)),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(Errno::ECHILD) => return Ok(ChildStatus::NotOurs),
            Err(e) => return Err(e),
        }
    }
}

/// `pidfd_open(pid, 0)`: a descriptor that polls readable once `pid` has exited (Linux 5.3+).
/// `Ok(None)` if the process no longer exists; `Err(ENOSYS)` on kernels without pidfds.
pub fn pidfd_open(pid: i32) -> Result<Option<OwnedFd>, Errno> {
    // SAFETY: a raw syscall with integer arguments; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return match Errno::last() {
            Errno::ESRCH => Ok(None),
            e => Err(e),
        };
    }
    let fd = RawFd::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Waits until `fd` polls readable (or hung up, or a signal interrupted the wait).
pub fn wait_readable(fd: &impl std::os::fd::AsRawFd) {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack, a count of 1 and no timeout.
    unsafe { libc::poll(&mut pfd, 1, -1) };
}

/// Whether `fd` polls readable right now (without waiting).
pub fn poll_readable(fd: &impl std::os::fd::AsRawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack, a count of 1 and a zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

/// Sends `signal` to `pid`; a process that is already gone is not an error.
pub fn kill(pid: i32, signal: Signal) -> Result<(), Errno> {
    match nix::sys::signal::kill(Pid::from_raw(pid), signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Sets `O_NONBLOCK` on a descriptor.
pub fn set_nonblocking(fd: &impl std::os::fd::AsRawFd) -> Result<(), Errno> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor the caller keeps open for the duration of the call; the
    // flag operations take and return plain integers.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags == -1 {
            return Err(Errno::last());
        }
        check(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK))
    }
}

/// Clock ticks per second, the unit of `/proc/stat` (100 where sysconf does not say).
pub fn clock_ticks() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as u64,
        _ => 100,
    }
}

/// Whether `pid` exists and is not a zombie, judged from `<proc_root>/<pid>/stat`.
pub fn process_alive(proc_root: &Path, pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")) else {
        return false;
    };
    // The state is the first field after the parenthesised command name.
    match stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
    {
        Some("Z") | Some("X") | Some("x") | None => false,
        Some(_) => true,
    }
}

/// The calling process's capability bounding set (`CapBnd` in `<proc_root>/self/status`).
pub fn bounding_capabilities(proc_root: &Path) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(proc_root.join("self/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| std::io::Error::other("no CapBnd in /proc/self/status"))
}

/// Mount points at or below `dir`, read from `<proc_root>/self/mountinfo`.
pub fn mounts_under(proc_root: &Path, dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let info = std::fs::read_to_string(proc_root.join("self/mountinfo"))?;
    Ok(info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mountinfo)
        .map(std::path::PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect())
}

fn unescape_mountinfo(field: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo octal.
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let oct = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs `f` in a child process made by glibc's `fork()` and waits for it; `f`'s error comes
/// back as text. Used for libcontainer's clones: in the agent, other threads may hold locks
/// (malloc's) at any moment, and a raw `clone` from a multi-threaded process copies such a
/// held lock into the child for ever. glibc's `fork()` takes malloc's locks around the fork,
/// and the forked child is single-threaded, so clones made from it are safe.
pub fn in_forked_child<F: FnOnce() -> Result<(), String>>(f: F) -> Result<(), String> {
    forked(|| f().map(|()| Vec::new())).map(drop)
}

/// [`in_forked_child`] for a builder that answers a process id (libcontainer's exec): the
/// pid is passed back to the caller. A process the child started and left running is
/// orphaned when the child exits and, the agent being a child subreaper
/// ([`set_child_subreaper`]), becomes the caller's child, to be reaped with [`try_wait`].
pub fn in_forked_child_pid<F: FnOnce() -> Result<i32, String>>(f: F) -> Result<i32, String> {
    let bytes = forked(|| f().map(|pid| pid.to_le_bytes().to_vec()))?;
    let raw: [u8; 4] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| format!("the forked builder sent {} bytes, not a pid", bytes.len()))?;
    Ok(i32::from_le_bytes(raw))
}

/// The fork/wait behind [`in_forked_child`]: on success the child's payload comes back, on
/// failure its message.
fn forked<F: FnOnce() -> Result<Vec<u8>, String>>(f: F) -> Result<Vec<u8>, String> {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::ForkResult;
    use std::io::Read;

    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the child only runs `f`, writes its answer to the pipe and leaves with `_exit`,
    // never returning into the caller's frames; glibc's fork() leaves malloc usable in it.
    match unsafe { nix::unistd::fork() } {
        Err(e) => Err(format!("fork: {e}")),
        Ok(ForkResult::Child) => {
            drop(read);
            // Containers must start with no signal blocked: a host process may block some
            // for a signal-handling thread (`skiff server` blocks SIGTERM and SIGINT), and a
            // blocked mask survives fork and exec — a container would then ignore SIGTERM.
            let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
            let (code, answer) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                Ok(Ok(payload)) => (0, payload),
                Ok(Err(message)) => (1, message.into_bytes()),
                Err(_) => (2, b"the container builder panicked".to_vec()),
            };
            let mut rest = answer.as_slice();
            while !rest.is_empty() {
                match nix::unistd::write(&write, rest) {
                    Ok(n) if n > 0 => rest = &rest[n..],
                    _ => break,
                }
            }
            // SAFETY: `_exit` ends the child at once, without the parent's atexit handlers,
            // destructors or buffered output.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(write);
            // Wait first: processes cloned from the child may hold the write end until they
            // exec, so the pipe need not reach end-of-file. (Answers are small: they fit in
            // the pipe's buffer, so the child never blocks writing them.)
            let status = waitpid(child, None).map_err(|e| format!("waitpid: {e}"))?;
            set_nonblocking(&read).map_err(|e| format!("pipe: {e}"))?;
            let mut answer = Vec::new();
            let _ = std::fs::File::from(read).read_to_end(&mut answer);
            match status {
                WaitStatus::Exited(_, 0) => Ok(answer),
                other if answer.is_empty() => {
                    Err(format!("the forked builder ended with {other:?}"))
                }
                _ => Err(String::from_utf8_lossy(&answer).into_owned()),
            }
        }
    }
}

/// The environment variable that makes a skiff binary an fd holder ([`spawn_fd_holder`]).
pub const FD_HOLDER_ENV: &str = "SKIFF_FD_HOLDER";

/// First thing in `main` of both binaries: a process started by [`spawn_fd_holder`] does
/// nothing but keep its descriptors open until it is killed.
pub fn run_fd_holder_if_asked() {
    if std::env::var_os(FD_HOLDER_ENV).is_some() {
        loop {
            // SAFETY: pause only waits for a signal.
            unsafe { libc::pause() };
        }
    }
}

/// Starts a process that holds `fds` open (at the same numbers) and nothing else, in a
/// session of its own, until killed: this program re-executed (so it keeps none of the
/// caller's memory), named `skiff-fd-holder <tag>`. It outlives the caller; a later caller
/// takes the descriptors back with [`take_fd`] after checking it with [`is_fd_holder`].
pub fn spawn_fd_holder(fds: &[i32], tag: &str) -> Result<i32, Errno> {
    // Everything the child needs is made before the fork: it may only make raw syscalls.
    let exe = CString::new("/proc/self/exe").map_err(|_| Errno::EINVAL)?;
    let argv0 = CString::new("skiff-fd-holder").map_err(|_| Errno::EINVAL)?;
    let argv1 = CString::new(tag).map_err(|_| Errno::EINVAL)?;
    let argv = [argv0.as_ptr(), argv1.as_ptr(), std::ptr::null()];
    let env = CString::new(format!("{FD_HOLDER_ENV}=1")).map_err(|_| Errno::EINVAL)?;
    let envp = [env.as_ptr(), std::ptr::null()];
    let mut keep = fds.to_vec();
    keep.sort_unstable();
    // SAFETY: between fork and exec the child makes only async-signal-safe system calls
    // (setsid, fcntl, close_range, close, sigprocmask, execve, _exit) on data made before.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Errno::last());
    }
    if pid == 0 {
        // SAFETY: the forked child: only the system calls listed above, on descriptors it
        // owns and on pointers to the caller's CStrings and arrays, which live until exec.
        unsafe {
            libc::setsid();
            let mut next: u32 = 0;
            for &fd in &keep {
                libc::fcntl(fd, libc::F_SETFD, 0);
                if fd as u32 > next {
                    close_range_or_loop(next, fd as u32 - 1);
                }
                next = fd as u32 + 1;
            }
            close_range_or_loop(next, u32::MAX);
            let empty: libc::sigset_t = std::mem::zeroed();
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    Ok(pid)
}

/// close_range(2) (Linux 5.9+), or one close per descriptor below the usual limit.
///
/// # Safety
/// Closes descriptors others may use: only in a child between fork and exec.
unsafe fn close_range_or_loop(first: u32, last: u32) {
    // SAFETY: the caller's (see above); integer arguments only.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, last, 0) == 0 {
            return;
        }
        for fd in first..=last.min(65_535) {
            libc::close(fd as i32);
        }
    }
}

/// Whether `pid` is the fd holder started with `tag`.
pub fn is_fd_holder(proc_root: &Path, pid: i32, tag: &str) -> bool {
    std::fs::read(proc_root.join(pid.to_string()).join("cmdline"))
        .is_ok_and(|c| c == format!("skiff-fd-holder\0{tag}\0").as_bytes())
}

/// A copy of descriptor `fd` of process `pid` (pidfd_getfd, Linux 5.6+), close-on-exec.
pub fn take_fd(pid: i32, fd: i32) -> Result<OwnedFd, Errno> {
    use std::os::fd::AsRawFd;
    let pidfd = pidfd_open(pid)?.ok_or(Errno::ESRCH)?;
    // SAFETY: pidfd_getfd takes a pidfd kept open for the call, a number and zero flags.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if r < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just made this descriptor for us.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

/// Kills an fd holder and, if it is this process's child, reaps it.
pub fn kill_fd_holder(pid: i32) {
    let _ = kill(pid, Signal::SIGKILL);
    for _ in 0..100 {
        match try_wait(pid) {
            Ok(ChildStatus::Alive) => std::thread::sleep(std::time::Duration::from_millis(2)),
            _ => return,
        }
    }
}

/// Moves the calling thread into the network namespace of `ns_file` (e.g. a pod sandbox's
/// bind-mounted `ns/net`). Network namespaces are per thread: only use this on a thread of
/// its own that ends afterwards, never on an executor or thread-pool thread.
pub fn setns_net(ns_file: &std::fs::File) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: setns takes a descriptor the caller keeps open for the call and an integer flag.
    check(unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_unescape() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/end\\"), "/end\\");
    }

    #[test]
    fn forked_child_answers() {
        assert_eq!(in_forked_child_pid(|| Ok(4242)), Ok(4242));
        assert_eq!(in_forked_child(|| Ok(())), Ok(()));
        assert_eq!(
            in_forked_child(|| Err("no luck".into())),
            Err("no luck".to_string())
        );
    }

    #[test]
    fn own_process_is_alive() {
        assert!(process_alive(Path::new("/proc"), std::process::id() as i32));
        assert!(!process_alive(Path::new("/proc"), i32::MAX));
    }
}
