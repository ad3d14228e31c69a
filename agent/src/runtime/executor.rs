//! The workload executor run inside the container's init (and exec) process.
//!
//! libcontainer's default executor replaces the process environment with `std::env::set_var`
//! before `execvp`. That takes the Rust standard library's process-wide environment lock in a
//! process that was `clone`d from the multi-threaded agent; if another agent thread held that
//! lock at the moment of the clone, the child waits forever (seen in the tests). This executor
//! never touches the environment of the process: it resolves the program against the spec's own
//! `PATH` and calls `execve` with the spec's environment.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use libcontainer::oci_spec::runtime::Spec;
use libcontainer::workload::{
    Executor, ExecutorError, ExecutorSetEnvsError, ExecutorValidationError,
};

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Clone)]
pub(super) struct ExecveExecutor {
    /// Make stdin (a terminal's slave side) the controlling terminal before `execve`. The
    /// process is already a session leader (libcontainer's init calls `setsid`), so shells get
    /// job control and the terminal's `SIGWINCH` on resize.
    pub controlling_tty: bool,
}

fn process_parts(spec: &Spec) -> Option<(&Vec<String>, Vec<String>)> {
    let process = spec.process().as_ref()?;
    let args = process.args().as_ref().filter(|a| !a.is_empty())?;
    let env = process.env().clone().unwrap_or_default();
    Some((args, env))
}

/// Finds `name` the way execvp would, but in the spec's `PATH` (we are inside the container's
/// root filesystem when this runs).
fn resolve(name: &str, env: &[String]) -> Option<PathBuf> {
    let is_executable = |p: &PathBuf| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH);
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| PathBuf::from(dir).join(name))
        .find(is_executable)
}

impl Executor for ExecveExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        let (args, env) = process_parts(spec).ok_or(ExecutorError::InvalidArg)?;
        let program = resolve(&args[0], &env)
            .ok_or_else(|| ExecutorError::Other(format!("{:?} not found", args[0])))?;
        let to_c = |s: &str| CString::new(s).map_err(|_| ExecutorError::InvalidArg);
        let program = CString::new(program.into_os_string().into_encoded_bytes())
            .map_err(|_| ExecutorError::InvalidArg)?;
        let argv = args
            .iter()
            .map(|a| to_c(a))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = env.iter().map(|e| to_c(e)).collect::<Result<Vec<_>, _>>()?;
        if self.controlling_tty {
            // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal a terminal that
            // is another session's); fd 0 is the terminal libcontainer set up as stdin.
            let r = unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) };
            if r < 0 {
                return Err(ExecutorError::Other(format!(
                    "TIOCSCTTY: {}",
                    std::io::Error::last_os_error()
                )));
            }
        }
        let err = nix::unistd::execve(&program, &argv, &envp).err();
        Err(ExecutorError::Other(format!(
            "execve {:?}: {}",
            args[0],
            err.map_or_else(|| "returned".to_string(), |e| e.to_string())
        )))
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        let (args, env) = process_parts(spec).ok_or_else(|| {
            ExecutorValidationError::ArgValidationError("spec has no command".into())
        })?;
        if resolve(&args[0], &env).is_none() {
            return Err(ExecutorValidationError::ArgValidationError(format!(
                "executable {:?} not found in the container",
                args[0]
            )));
        }
        Ok(())
    }

    fn setup_envs(&self, _envs: HashMap<String, String>) -> Result<(), ExecutorSetEnvsError> {
        // The environment is passed to execve directly; see the module comment.
        Ok(())
    }
}
