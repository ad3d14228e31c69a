//! Real containers through the runtime (needs root, cgroups and busybox-static).

mod runtime_support;

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use agent::runtime::{
    ContainerId, ContainerState, MountKind, MountSpec, Resources, Runtime, RuntimeError,
    SandboxConfig,
};
use runtime_support::{exit_code, TestEnv};

#[test]
fn echo_hello_and_exit_codes() {
    let env = TestEnv::new("echo");
    let sb = env.sandbox("pod-echo");
    let (state, log) = env.run_to_exit(&sb, &env.spec("hello", &["echo", "hello"]));
    assert_eq!(exit_code(&state), Some(0), "{state:?}");
    assert_eq!(log, "hello\n");

    let (state, log) = env.run_to_exit(
        &sb,
        &env.spec("three", &["sh", "-c", "echo out; echo err >&2; exit 3"]),
    );
    assert_eq!(exit_code(&state), Some(3));
    assert!(matches!(
        state,
        ContainerState::Exited {
            oom_killed: false,
            ..
        }
    ));
    assert_eq!(log, "out\nerr\n");
}

#[test]
fn env_cwd_user_and_hostname() {
    let env = TestEnv::new("env");
    let sb = env.sandbox("pod-env");
    let mut spec = env.spec(
        "show",
        &[
            "sh",
            "-c",
            "echo $FOO; pwd; id -u; id -g; hostname; echo $HOSTNAME",
        ],
    );
    spec.env = vec![("FOO".into(), "bar baz".into())];
    spec.cwd = "/tmp".into();
    spec.user = Some((1000, 1001));
    let (state, log) = env.run_to_exit(&sb, &spec);
    assert_eq!(exit_code(&state), Some(0), "{log}");
    assert_eq!(
        log,
        "bar baz\n/tmp\n1000\n1001\nhost-pod-env\nhost-pod-env\n"
    );
}

fn ns_inode(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).expect("stat ns file").ino()
}

#[test]
fn pod_containers_share_ipc_uts_net_but_not_pid() {
    let env = TestEnv::new("ns");
    let sb = env.sandbox("pod-ns");
    // `a` keeps running, so its namespaces stay alive (exited namespaces' inode numbers are
    // recycled) while `b` reports its own.
    let a_id = env.run(&sb, &env.spec("a", &["sleep", "1000"]));
    let a_pid = match env.rt().state(&a_id).expect("state") {
        ContainerState::Running { pid, .. } => pid,
        other => panic!("{other:?}"),
    };
    let kinds = ["ipc", "uts", "net", "pid", "mnt"];
    let a: Vec<u64> = kinds
        .iter()
        .map(|n| ns_inode(&std::path::PathBuf::from(format!("/proc/{a_pid}/ns/{n}"))))
        .collect();
    let script = "for n in ipc uts net pid mnt; do stat -L -c %i /proc/self/ns/$n; done";
    let (s2, log2) = env.run_to_exit(&sb, &env.spec("b", &["sh", "-c", script]));
    assert_eq!(exit_code(&s2), Some(0), "{log2}");
    let b: Vec<u64> = log2.lines().map(|l| l.parse().expect("inode")).collect();
    assert_eq!(b.len(), 5, "{log2}");
    assert_eq!(a[..3], b[..3], "ipc, uts and net are shared");
    assert_ne!(a[3], b[3], "pid namespaces are separate");
    assert_ne!(a[4], b[4], "mount namespaces are separate");
    // ...and they are the sandbox's namespaces, not the host's.
    assert_eq!(a[0], ns_inode(&sb.ipc_ns_path()));
    assert_eq!(a[1], ns_inode(&sb.uts_ns_path()));
    assert_eq!(a[2], ns_inode(&sb.net_ns_path().expect("net ns")));
    assert_ne!(a[2], ns_inode(std::path::Path::new("/proc/self/ns/net")));
    assert_ne!(a[3], ns_inode(std::path::Path::new("/proc/self/ns/pid")));
}

#[test]
fn memory_limit_oom_kill_is_reported() {
    let env = TestEnv::new("oom");
    let sb = env.sandbox("pod-oom");
    let mut spec = env.spec(
        "hog",
        &["dd", "if=/dev/zero", "of=/dev/shm/x", "bs=1M", "count=60"],
    );
    spec.resources.memory_limit = Some(16 * 1024 * 1024);
    let (state, log) = env.run_to_exit(&sb, &spec);
    match state {
        ContainerState::Exited {
            exit_code,
            oom_killed,
            ..
        } => {
            assert!(oom_killed, "not OOM killed: {exit_code:?} {log}");
            assert_eq!(exit_code, Some(137));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn cpu_and_memory_limits_reach_the_cgroup() {
    let env = TestEnv::new("cpu");
    let sb = env.sandbox("pod-cpu");
    let mut spec = env.spec("limited", &["sleep", "1000"]);
    spec.resources = Resources {
        cpu_shares: Some(512),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        memory_limit: Some(64 * 1024 * 1024),
    };
    let id = env.run(&sb, &spec);
    let rt = env.rt();
    let read = |controller: &str, file: &str| {
        std::fs::read_to_string(rt.cgroup_dir(&id, controller).join(file))
            .unwrap_or_else(|e| panic!("read {controller}/{file}: {e}"))
            .trim()
            .to_string()
    };
    let pid = match rt.state(&id).expect("state") {
        ContainerState::Running { pid, .. } => pid,
        other => panic!("not running: {other:?}"),
    };
    if rt.cgroup_dir(&id, "cpu").join("cpu.shares").exists() {
        assert_eq!(read("cpu", "cpu.shares"), "512");
        assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");
        assert_eq!(read("cpu", "cpu.cfs_period_us"), "100000");
        assert_eq!(read("memory", "memory.limit_in_bytes"), "67108864");
        let procs = read("memory", "cgroup.procs");
        assert!(procs.lines().any(|p| p == pid.to_string()), "{procs}");
    } else {
        // cgroup v2: shares are converted to a weight.
        assert_eq!(
            read("cpu", "cpu.weight"),
            (1 + (510 * 9999) / 262142).to_string()
        );
        assert_eq!(read("cpu", "cpu.max"), "50000 100000");
        assert_eq!(read("memory", "memory.max"), "67108864");
    }
    let state = rt.stop(&id, Duration::from_secs(0)).expect("stop");
    assert_eq!(exit_code(&state), Some(137));
}

#[test]
fn readonly_rootfs_and_tmpfs_mount() {
    let env = TestEnv::new("ro");
    let sb = env.sandbox("pod-ro");
    let script = "touch /file && echo root-writable || echo root-readonly; \
                  touch /scratch/f && echo scratch-writable";
    let mut spec = env.spec("ro", &["sh", "-c", script]);
    spec.readonly_rootfs = true;
    spec.mounts.push(MountSpec {
        source: "tmpfs".into(),
        destination: "/scratch".into(),
        readonly: false,
        kind: MountKind::Tmpfs,
    });
    std::fs::create_dir_all(env.rootfs.join("scratch")).expect("mkdir");
    let (state, log) = env.run_to_exit(&sb, &spec);
    assert_eq!(exit_code(&state), Some(0), "{log}");
    assert!(log.contains("root-readonly"), "{log}");
    assert!(log.contains("scratch-writable"), "{log}");
    assert!(!env.rootfs.join("file").exists());

    // The same image without the flag is writable.
    let (_, log) = env.run_to_exit(&sb, &env.spec("rw", &["sh", "-c", script]));
    assert!(log.contains("root-writable"), "{log}");
    let _ = std::fs::remove_file(env.rootfs.join("file"));
}

#[test]
fn bind_mounts_respect_readonly() {
    let env = TestEnv::new("bind");
    let sb = env.sandbox("pod-bind");
    let host = env.dir.path().join("volume");
    std::fs::create_dir_all(&host).expect("mkdir");
    std::fs::write(host.join("in"), "from host\n").expect("write");
    for d in ["data", "rodata"] {
        std::fs::create_dir_all(env.rootfs.join(d)).expect("mkdir");
    }
    let mut spec = env.spec(
        "vol",
        &[
            "sh",
            "-c",
            "cat /data/in; echo out > /data/out; echo x > /rodata/x || echo ro-denied",
        ],
    );
    spec.mounts = vec![
        MountSpec {
            source: host.clone(),
            destination: "/data".into(),
            readonly: false,
            kind: MountKind::Bind,
        },
        MountSpec {
            source: host.clone(),
            destination: "/rodata".into(),
            readonly: true,
            kind: MountKind::Bind,
        },
    ];
    let (state, log) = env.run_to_exit(&sb, &spec);
    assert_eq!(exit_code(&state), Some(0), "{log}");
    assert!(log.starts_with("from host\n"), "{log}");
    assert!(log.contains("ro-denied"), "{log}");
    assert_eq!(
        std::fs::read_to_string(host.join("out")).expect("out"),
        "out\n"
    );
    assert!(!host.join("x").exists());
}

fn cap_eff(log: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.starts_with("CapEff:"))
        .unwrap_or_else(|| panic!("no CapEff in {log}"));
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).expect("hex")
}

#[test]
fn capabilities_add_and_drop() {
    const CHOWN: u64 = 1 << 0;
    const NET_ADMIN: u64 = 1 << 12;
    const SYS_ADMIN: u64 = 1 << 21;
    let env = TestEnv::new("caps");
    let sb = env.sandbox("pod-caps");
    let args = ["grep", "CapEff", "/proc/self/status"];
    let (_, log) = env.run_to_exit(&sb, &env.spec("default", &args));
    let default = cap_eff(&log);
    assert_ne!(default & CHOWN, 0);
    assert_eq!(default & NET_ADMIN, 0);
    assert_eq!(default & SYS_ADMIN, 0);

    let mut spec = env.spec("changed", &args);
    spec.caps_drop = vec!["CHOWN".into()];
    spec.caps_add = vec!["NET_ADMIN".into()];
    let (_, log) = env.run_to_exit(&sb, &spec);
    let changed = cap_eff(&log);
    assert_eq!(changed & CHOWN, 0);
    assert_ne!(changed & NET_ADMIN, 0);
    assert_eq!(changed | CHOWN, default | NET_ADMIN);
}

#[test]
fn stop_honours_term_then_kills_after_grace() {
    let env = TestEnv::new("stop");
    let sb = env.sandbox("pod-stop");
    let rt = env.rt();
    let polite = env.run(
        &sb,
        &env.spec(
            "polite",
            &[
                "sh",
                "-c",
                "trap 'echo got-term; exit 7' TERM; echo ready; while true; do sleep 0.1; done",
            ],
        ),
    );
    // pid 1 of a pid namespace ignores TERM without a handler: busybox sleep has none.
    let stubborn = env.run(&sb, &env.spec("stubborn", &["sleep", "1000"]));
    // Let the shell install its trap.
    let log = env.log_path("polite");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("ready")
    {
        assert!(
            Instant::now() < deadline,
            "polite container never became ready"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let t = Instant::now();
    let state = rt
        .stop(&polite, Duration::from_secs(10))
        .expect("stop polite");
    assert_eq!(exit_code(&state), Some(7), "{state:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(std::fs::read_to_string(&log)
        .expect("log")
        .contains("got-term"));

    let t = Instant::now();
    let state = rt
        .stop(&stubborn, Duration::from_millis(700))
        .expect("stop stubborn");
    assert_eq!(exit_code(&state), Some(137), "{state:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // Stopping again is a no-op that reports the same exit.
    assert_eq!(
        exit_code(&rt.stop(&stubborn, Duration::ZERO).expect("stop")),
        Some(137)
    );
    rt.remove(&polite).expect("remove");
    rt.remove(&stubborn).expect("remove");
    assert!(rt.list().expect("list").is_empty());
}

#[test]
fn exec_in_running_container() {
    let env = TestEnv::new("exec");
    let sb = env.sandbox("pod-exec");
    let rt = env.rt();
    let mut spec = env.spec("main", &["sleep", "1000"]);
    spec.env = vec![("GREETING".into(), "hi".into())];
    spec.user = Some((1000, 1000));
    let id = env.run(&sb, &spec);
    let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    let r = rt
        .exec(
            &id,
            &argv(&["sh", "-c", "echo $GREETING; id -u; hostname; exit 4"]),
            Duration::from_secs(10),
        )
        .expect("exec");
    assert_eq!(r.exit_code, 4);
    assert_eq!(
        String::from_utf8_lossy(&r.output),
        "hi\n1000\nhost-pod-exec\n"
    );

    // It sees the container's processes (same pid namespace): the main process is pid 1.
    let r = rt
        .exec(
            &id,
            &argv(&["cat", "/proc/1/cmdline"]),
            Duration::from_secs(10),
        )
        .expect("exec");
    assert_eq!(r.exit_code, 0);
    assert_eq!(String::from_utf8_lossy(&r.output), "sleep\u{0}1000\u{0}");

    // A background process keeping stdout open does not hold the exec up.
    let t = Instant::now();
    let r = rt
        .exec(
            &id,
            &argv(&["sh", "-c", "sleep 30 & echo bg"]),
            Duration::from_secs(10),
        )
        .expect("exec");
    assert_eq!((r.exit_code, r.output.as_slice()), (0, &b"bg\n"[..]));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    let t = Instant::now();
    match rt.exec(&id, &argv(&["sleep", "30"]), Duration::from_millis(300)) {
        Err(RuntimeError::ExecTimeout(_)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        rt.state(&id).expect("state"),
        ContainerState::Running { .. }
    ));
    rt.stop(&id, Duration::ZERO).expect("stop");
    assert!(rt
        .exec(&id, &argv(&["true"]), Duration::from_secs(1))
        .is_err());
}

#[test]
fn restarted_runtime_readopts_running_containers() {
    let mut env = TestEnv::new("adopt");
    let sb = env.sandbox("pod-adopt");
    let id = env.run(
        &sb,
        &env.spec("long", &["sh", "-c", "echo started; exec sleep 1000"]),
    );
    let pid = match env.rt().state(&id).expect("state") {
        ContainerState::Running { pid, .. } => pid,
        other => panic!("{other:?}"),
    };
    // "Restart the agent": forget every in-memory object and open the same state again.
    drop(env.runtime.take());
    drop(sb);
    let rt = Runtime::new(env.config.clone()).expect("reopen");
    assert_eq!(rt.list().expect("list"), vec![id.clone()]);
    assert_eq!(
        rt.list_sandboxes().expect("sandboxes"),
        vec!["pod-adopt".to_string()]
    );
    let sb = rt
        .sandbox("pod-adopt")
        .expect("load")
        .expect("sandbox exists");
    assert_eq!(sb.config.hostname, "host-pod-adopt");
    match rt.state(&id).expect("state") {
        ContainerState::Running { pid: p, started_at } => {
            assert_eq!(p, pid, "the same process, not a restarted one");
            assert!(started_at.is_some());
        }
        other => panic!("{other:?}"),
    }
    // The re-adopted sandbox still works for new containers.
    let (state, log) = {
        let spec = env.spec("later", &["hostname"]);
        let later = rt.create_container(&sb, &spec).expect("create");
        rt.start(&later).expect("start");
        let state = rt.wait_exit(&later, Duration::from_secs(10)).expect("wait");
        (
            state,
            std::fs::read_to_string(&spec.log_path).unwrap_or_default(),
        )
    };
    assert_eq!(exit_code(&state), Some(0));
    assert_eq!(log, "host-pod-adopt\n");
    let state = rt.stop(&id, Duration::from_millis(100)).expect("stop");
    assert_eq!(exit_code(&state), Some(137));
    rt.remove_sandbox("pod-adopt").expect("remove sandbox");
    assert!(rt.list().expect("list").is_empty());
    env.runtime = Some(rt);
}

#[test]
fn privileged_and_host_pid_need_permission() {
    let env = TestEnv::new("priv");
    let sb = env.sandbox("pod-priv");
    let mut spec = env.spec("priv", &["true"]);
    spec.privileged = true;
    assert!(matches!(
        env.rt().create_container(&sb, &spec),
        Err(RuntimeError::Refused(_))
    ));
    assert!(env.rt().list().expect("list").is_empty());
    let host_pid = SandboxConfig {
        hostname: "h".into(),
        host_network: true,
        host_pid: true,
        share_pid: false,
    };
    assert!(matches!(
        env.rt().create_sandbox("pod-hostpid", &host_pid),
        Err(RuntimeError::Refused(_))
    ));

    let allowed = TestEnv::with_privileged("priv-ok", true);
    let sb = allowed.sandbox("pod-priv");
    let mut spec = allowed.spec("priv", &["grep", "CapEff", "/proc/self/status"]);
    spec.privileged = true;
    let (state, log) = allowed.run_to_exit(&sb, &spec);
    assert_eq!(exit_code(&state), Some(0), "{log}");
    assert_ne!(cap_eff(&log) & (1 << 21), 0, "privileged has CAP_SYS_ADMIN");

    let hsb = allowed
        .rt()
        .create_sandbox("pod-hostpid", &host_pid)
        .expect("host pid sandbox");
    assert!(hsb.net_ns_path().is_none());
    let (state, log) = allowed.run_to_exit(
        &hsb,
        &allowed.spec(
            "hp",
            &[
                "sh",
                "-c",
                "stat -L -c %i /proc/self/ns/pid /proc/self/ns/net",
            ],
        ),
    );
    assert_eq!(exit_code(&state), Some(0), "{log}");
    let inodes: Vec<u64> = log.lines().map(|l| l.parse().expect("inode")).collect();
    assert_eq!(
        inodes[0],
        ns_inode(std::path::Path::new("/proc/self/ns/pid"))
    );
    assert_eq!(
        inodes[1],
        ns_inode(std::path::Path::new("/proc/self/ns/net"))
    );
}

#[test]
fn logs_keep_flowing_after_rotation() {
    let env = TestEnv::new("logs");
    let sb = env.sandbox("pod-logs");
    let id = env.run(
        &sb,
        &env.spec(
            "chatty",
            &[
                "sh",
                "-c",
                "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.01; done",
            ],
        ),
    );
    let log = env.log_path("chatty");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) < 200 {
        assert!(Instant::now() < deadline, "no output");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(agent::runtime::rotate_log(&log, 100, 2).expect("rotate"));
    let rotated = std::fs::read_to_string(log.with_extension("log.1")).expect("rotated copy");
    assert!(rotated.starts_with("line 0\n"), "{rotated}");
    std::thread::sleep(Duration::from_millis(200));
    let live = std::fs::read_to_string(&log).expect("live");
    assert!(live.contains("line "), "{live:?}");
    assert!(
        !live.starts_with('\0'),
        "O_APPEND writes restart at offset 0 after truncation"
    );
    env.rt().stop(&id, Duration::ZERO).expect("stop");
}

const HELPER_ENV: &str = "SKIFF_RUNTIME_TEST_AGENT";

/// Not a test: the "agent" process that `agent_killed_with_sigkill_leaves_containers_running`
/// starts, which creates a pod and then dies by SIGKILL.
#[test]
#[ignore = "helper process for agent_killed_with_sigkill_leaves_containers_running"]
fn helper_agent_that_gets_killed() {
    let Ok(spec) = std::env::var(HELPER_ENV) else {
        return;
    };
    let mut parts = spec.split('\n');
    let (state_dir, cgroup_parent, rootfs, log) = (
        parts.next().expect("state dir"),
        parts.next().expect("cgroup parent"),
        parts.next().expect("rootfs"),
        parts.next().expect("log"),
    );
    let rt = Runtime::new(agent::runtime::RuntimeConfig::new(state_dir, cgroup_parent))
        .expect("runtime");
    let sb = rt
        .create_sandbox(
            "pod-orphan",
            &SandboxConfig {
                hostname: "orphan".into(),
                host_network: false,
                host_pid: false,
                share_pid: false,
            },
        )
        .expect("sandbox");
    let spec = agent::runtime::ContainerSpec::new(
        "ticker",
        rootfs,
        &["sh", "-c", "while true; do echo tick; sleep 0.05; done"],
        log,
    );
    let id = rt.create_container(&sb, &spec).expect("create");
    rt.start(&id).expect("start");
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL).expect("raise");
}

#[test]
fn agent_killed_with_sigkill_leaves_containers_running() {
    let env = TestEnv::new("orphan");
    let log = env.log_path("ticker");
    let status = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--ignored",
            "--exact",
            "helper_agent_that_gets_killed",
            "--nocapture",
        ])
        .env(
            HELPER_ENV,
            format!(
                "{}\n{}\n{}\n{}",
                env.config.state_dir.display(),
                env.config.cgroup_parent,
                env.rootfs.display(),
                log.display()
            ),
        )
        .status()
        .expect("run helper agent");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "helper agent should die by SIGKILL"
    );

    // The "restarted agent": nothing in memory, the container is no longer its child.
    let rt = env.rt();
    let ids = rt.list().expect("list");
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = &ids[0];
    let pid = match rt.state(id).expect("state") {
        ContainerState::Running { pid, .. } => pid,
        other => panic!("container did not survive the agent: {other:?}"),
    };
    let size = || std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let before = size();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        size() > before,
        "the container keeps logging without an agent"
    );
    assert!(
        matches!(rt.state(id).expect("state"), ContainerState::Running { pid: p, .. } if p == pid)
    );

    // Exec and stop still work. The exit code of a process that is not our child is unknown;
    // here the test process is itself a child subreaper (every Runtime makes its process one),
    // so the orphaned container came to it and its SIGKILL status (137) is known.
    let r = rt
        .exec(id, &["hostname".to_string()], Duration::from_secs(10))
        .expect("exec");
    assert_eq!(String::from_utf8_lossy(&r.output), "orphan\n");
    let state = rt.stop(id, Duration::from_millis(200)).expect("stop");
    assert!(
        matches!(
            state,
            ContainerState::Exited {
                exit_code: None | Some(137),
                oom_killed: false,
                ..
            }
        ),
        "{state:?}"
    );
    rt.remove_sandbox("pod-orphan").expect("remove sandbox");
    assert!(rt.list().expect("list").is_empty());
}

/// Creates and starts containers from several threads at once, as a burst of new pods does:
/// builds run in parallel (each in its own forked child) and every start must reach its own
/// container (libcontainer's start changes the process's working directory).
#[test]
fn parallel_creates_and_starts_all_succeed() {
    let env = TestEnv::new("parallel");
    let sandboxes: Vec<_> = (0..4)
        .map(|i| env.sandbox(&format!("pod-par-{i}")))
        .collect();
    const N: usize = 16;
    let go = std::sync::Barrier::new(N);
    let ids: Vec<ContainerId> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let (env, sb, go) = (&env, &sandboxes[i % sandboxes.len()], &go);
                s.spawn(move || {
                    let name = format!("c{i}");
                    let spec = env.spec(&name, &["sh", "-c", &format!("echo hello-{i}; sleep 60")]);
                    let id = env
                        .rt()
                        .create_container(sb, &spec)
                        .unwrap_or_else(|e| panic!("create {name}: {e}"));
                    // All start at the same instant.
                    go.wait();
                    env.rt()
                        .start(&id)
                        .unwrap_or_else(|e| panic!("start {name}: {e}"));
                    id
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    for (i, id) in ids.iter().enumerate() {
        assert!(
            matches!(env.rt().state(id), Ok(ContainerState::Running { .. })),
            "{id}: {:?}",
            env.rt().state(id)
        );
        let log = env.log_path(&format!("c{i}"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&format!("hello-{i}"))
        {
            assert!(Instant::now() < deadline, "c{i} never wrote its line");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The exit descriptor becomes readable when the container's process exits, and not before.
#[test]
fn exit_fd_is_readable_once_the_container_exits() {
    let env = TestEnv::new("exitfd");
    let sb = env.sandbox("pod-exitfd");
    let id = env.run(&sb, &env.spec("waiter", &["sleep", "60"]));
    let fd = env
        .rt()
        .exit_fd(&id)
        .expect("exit fd")
        .expect("a pidfd on this kernel");
    assert!(!agent::sys::poll_readable(&fd), "readable while running");
    env.rt()
        .kill(&id, agent::runtime::Signal::SIGKILL)
        .expect("kill");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !agent::sys::poll_readable(&fd) {
        assert!(Instant::now() < deadline, "pidfd never became readable");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(exit_code(&env.rt().state(&id).expect("state")), Some(137));
    // Once the exit is recorded there is nothing left to wait for.
    assert!(env.rt().exit_fd(&id).expect("exit fd").is_none());
}
