//! Creates, starts, stops and removes 200 pods and checks that nothing is left behind: no
//! mount under the state dir, no cgroup under the parent, no process, no state directory.
//! Needs root, cgroups and busybox-static.

mod runtime_support;

use std::path::Path;
use std::time::{Duration, Instant};

use agent::runtime::{cgroup, ContainerState};
use runtime_support::{exit_code, TestEnv};

const PODS: usize = 200;

fn pods() -> usize {
    std::env::var("LEAK_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PODS)
}

/// Our direct children (including zombies), from /proc.
fn children() -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1));
        if ppid == Some(me.as_str()) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn two_hundred_pods_leave_nothing_behind() {
    let env = TestEnv::new("leak");
    let rt = env.rt();
    let state_dir = env.config.state_dir.clone();
    let t = Instant::now();
    let mut pids = Vec::new();
    let pods = pods();
    let mut phases = [Duration::ZERO; 6];
    for i in 0..pods {
        let p0 = Instant::now();
        let pod = format!("pod-{i}");
        let sb = env.sandbox(&pod);
        phases[0] += p0.elapsed();
        let p1 = Instant::now();
        // Alternate a TERM-honouring shell and a TERM-ignoring pid 1 (killed after grace 0).
        let args: &[&str] = if i % 2 == 0 {
            &[
                "sh",
                "-c",
                "trap 'exit 0' TERM; echo up; while true; do sleep 0.05; done",
            ]
        } else {
            &["sleep", "1000"]
        };
        let mut spec = env.spec(&format!("c{i}"), args);
        spec.resources.memory_limit = Some(32 * 1024 * 1024);
        spec.resources.cpu_shares = Some(256);
        let id = env.run(&sb, &spec);
        phases[1] += p1.elapsed();
        let p2 = Instant::now();
        match rt.state(&id).expect("state") {
            ContainerState::Running { pid, .. } => pids.push(pid),
            other => panic!("{id} not running: {other:?}"),
        }
        if i % 2 == 0 {
            // pid 1 ignores TERM until the shell has installed its trap.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !std::fs::read_to_string(&spec.log_path)
                .unwrap_or_default()
                .contains("up")
            {
                assert!(Instant::now() < deadline, "{id} never came up");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let grace = if i % 2 == 0 {
            Duration::from_secs(5)
        } else {
            Duration::ZERO
        };
        let state = rt.stop(&id, grace).expect("stop");
        phases[2 + 3 * (i % 2)] += p2.elapsed();
        let p3 = Instant::now();
        let expected = if i % 2 == 0 { 0 } else { 137 };
        assert_eq!(exit_code(&state), Some(expected), "{id}: {state:?}");
        rt.remove(&id).expect("remove container");
        phases[3] += p3.elapsed();
        let p4 = Instant::now();
        rt.remove_sandbox(&pod).expect("remove sandbox");
        phases[4] += p4.elapsed();
    }
    let elapsed = t.elapsed();
    eprintln!(
        "{pods} pods created, started, stopped and removed in {elapsed:?} ({:?} per pod); \
         sandbox {:?}, create+start {:?}, stop (TERM) {:?}, stop (KILL) {:?}, remove {:?}, \
         remove sandbox {:?}",
        elapsed / pods as u32,
        phases[0],
        phases[1],
        phases[2],
        phases[5],
        phases[3],
        phases[4]
    );

    let mounts = agent::sys::mounts_under(Path::new("/proc"), &state_dir).expect("mountinfo");
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    for sub in ["sandboxes", "containers", "libcontainer"] {
        let left: Vec<_> = std::fs::read_dir(state_dir.join(sub))
            .expect("state dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{sub} left: {left:?}");
    }
    let parent = &env.config.cgroup_parent;
    for dir in cgroup::all_dirs(&env.config.cgroup_root, parent) {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .expect("cgroup dir")
            .flatten()
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "cgroups left: {left:?}");
    }
    let alive: Vec<_> = pids
        .iter()
        .filter(|&&p| agent::sys::process_alive(Path::new("/proc"), p))
        .collect();
    assert!(alive.is_empty(), "processes left: {alive:?}");
    assert_eq!(children(), Vec::<i32>::new(), "children (or zombies) left");
    assert!(rt.list().expect("list").is_empty());
    assert!(rt.list_sandboxes().expect("list").is_empty());

    rt.remove_cgroup_parent().expect("remove parent");
    assert!(cgroup::all_dirs(&env.config.cgroup_root, parent).is_empty());
}
