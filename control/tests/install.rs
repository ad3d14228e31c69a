//! Installing and operating skiff: the systemd units (systemd-analyze verify), install.sh
//! (shellcheck, then real runs against temporary root filesystems), the server's config file
//! and its sd_notify messages.

mod opsutil;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn shell_scripts_are_shellcheck_clean() {
    let r = repo();
    let mut scripts = vec![
        r.join("systemd/install.sh"),
        r.join("cross/build.sh"),
        r.join("cross/smoke.sh"),
    ];
    for dir in ["scripts", "bench"] {
        let mut found: Vec<_> = std::fs::read_dir(r.join(dir))
            .expect("script dir")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sh"))
            .collect();
        found.sort();
        scripts.extend(found);
    }
    let out = Command::new("shellcheck")
        .current_dir(&r)
        .args(&scripts)
        .output()
        .expect("shellcheck (scripts/setup.sh installs it)");
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn units_pass_systemd_analyze_verify() {
    let dir = tempfile::tempdir().expect("temp dir");
    // ExecStart must name existing binaries: point the units at the built ones.
    let bin = opsutil::skiff_bin();
    let bin_dir = bin.parent().expect("bin dir");
    for unit in ["skiff-server.service", "skiff-agent.service"] {
        let src = std::fs::read_to_string(repo().join("systemd").join(unit)).expect("unit");
        let rewritten = src.replace("/usr/local/bin/", &format!("{}/", bin_dir.display()));
        assert_ne!(src, rewritten, "{unit} runs a binary from /usr/local/bin");
        std::fs::write(dir.path().join(unit), rewritten).expect("write unit");
    }
    // skiff-agent may not be built when only this package's tests run; verify needs it.
    let agent = bin_dir.join("skiff-agent");
    if !agent.exists() {
        std::fs::copy(&bin, dir.path().join("skiff-agent")).expect("stand-in");
        let p = dir.path().join("skiff-agent.service");
        let s = std::fs::read_to_string(&p).expect("unit");
        std::fs::write(
            &p,
            s.replace(
                &agent.display().to_string(),
                &dir.path().join("skiff-agent").display().to_string(),
            ),
        )
        .expect("write unit");
    }
    // The hardening drop-in is verified with the server unit.
    let dropins = dir.path().join("skiff-server.service.d");
    std::fs::create_dir(&dropins).expect("drop-in dir");
    std::fs::copy(
        repo().join("systemd/skiff-server-hardening.conf"),
        dropins.join("hardening.conf"),
    )
    .expect("copy drop-in");
    let version = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .expect("systemd-analyze (the systemd package)");
    let v: u32 = String::from_utf8_lossy(&version.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("systemd version");
    if v >= 254 {
        for unit in ["skiff-server", "skiff-agent"] {
            let d = dir.path().join(format!("{unit}.service.d"));
            std::fs::create_dir_all(&d).expect("drop-in dir");
            std::fs::copy(
                repo().join("systemd/skiff-backoff.conf"),
                d.join("backoff.conf"),
            )
            .expect("copy");
        }
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("skiff-server.service"))
        .arg(dir.path().join("skiff-agent.service"))
        // Drop-ins are found through the unit path; the trailing ':' keeps the defaults.
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.path().display()))
        .output()
        .expect("systemd-analyze verify");
    // verify reports unknown keys and bad values as warnings with exit 0: any output fails.
    assert!(
        out.status.success() && text(&out).trim().is_empty(),
        "systemd-analyze verify: {}",
        text(&out)
    );
    // And it does catch a bad key (so an empty output means something).
    std::fs::write(dropins.join("bad.conf"), "[Service]\nKillMode=bogus\n").expect("write");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("skiff-server.service"))
        .env("SYSTEMD_UNIT_PATH", format!("{}:", dir.path().display()))
        .output()
        .expect("systemd-analyze verify");
    assert!(text(&out).contains("bogus"), "{}", text(&out));
}

/// A dist dir (fake binaries with real checksums) and a root filesystem of a given arch.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let f = Fixture {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        let dist = f.dist();
        std::fs::create_dir(&dist).expect("dist");
        let mut sums = String::new();
        for target in [
            "x86_64-unknown-linux-musl",
            "aarch64-unknown-linux-musl",
            "armv7-unknown-linux-gnueabihf",
        ] {
            for bin in ["skiff", "skiff-agent"] {
                if bin == "skiff-agent" && target.starts_with("armv7") {
                    continue;
                }
                let name = format!("{bin}-{target}");
                let body = format!("#!/bin/sh\necho {name}\n");
                std::fs::write(dist.join(&name), &body).expect("write");
                let digest = ring::digest::digest(&ring::digest::SHA256, body.as_bytes());
                let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
                sums.push_str(&format!("{hex}  {name}\n"));
            }
        }
        std::fs::write(dist.join("SHA256SUMS"), sums).expect("sums");
        f
    }

    fn dist(&self) -> PathBuf {
        self.dir.path().join("dist")
    }

    /// A root filesystem whose usr/bin/env is an ELF of `e_machine`, with systemd `version`.
    fn root(&self, name: &str, e_machine: u16, systemd: Option<u32>) -> PathBuf {
        let root = self.dir.path().join(name);
        std::fs::create_dir_all(root.join("usr/bin")).expect("root");
        let mut elf = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        elf.resize(18, 0);
        elf.extend_from_slice(&e_machine.to_le_bytes());
        elf.resize(64, 0);
        std::fs::write(root.join("usr/bin/env"), elf).expect("env");
        if let Some(v) = systemd {
            std::fs::create_dir_all(root.join("usr/lib/systemd")).expect("systemd dir");
            std::fs::write(
                root.join(format!("usr/lib/systemd/libsystemd-shared-{v}.so")),
                "",
            )
            .expect("lib");
        }
        root
    }

    fn install(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("systemd/install.sh"));
        if let Some((command, rest)) = args.split_first() {
            cmd.arg(command).arg("--from").arg(self.dist()).args(rest);
        }
        cmd.output().expect("run install.sh")
    }
}

const X86_64: u16 = 0x3e;
const AARCH64: u16 = 0xb7;
const ARM: u16 = 0x28;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn install_sh_writes_an_agent_onto_a_board_root() {
    if !is_root() {
        eprintln!("install.sh needs root: only its refusal is checked");
    }
    let f = Fixture::new();
    let root = f.root("pi", AARCH64, Some(252));
    let r = root.to_str().expect("path");
    let out = f.install(&[
        "agent",
        "--root",
        r,
        "--server",
        "https://10.0.0.1:6443",
        "--token",
        "SK1::abc::id.secret",
        "--node-name",
        "pi-1",
        "--node-label",
        "zone=shed",
    ]);
    if !is_root() {
        assert!(!out.status.success());
        assert!(text(&out).contains("must run as root"), "{}", text(&out));
        return;
    }
    assert!(out.status.success(), "{}", text(&out));
    let bin = root.join("usr/local/bin/skiff-agent");
    assert_eq!(
        std::fs::read_to_string(&bin).expect("binary"),
        "#!/bin/sh\necho skiff-agent-aarch64-unknown-linux-musl\n"
    );
    assert_eq!(mode(&bin), 0o755);
    assert!(!root.join("usr/local/bin/skiff").exists());
    let conf = root.join("etc/skiff/agent.toml");
    assert_eq!(mode(&conf), 0o600, "the config holds the join token");
    assert_eq!(mode(&root.join("etc/skiff")), 0o755);
    let settings = api::config::load(&conf).expect("config");
    let get = |k: &str| {
        settings
            .iter()
            .find(|s| s.key == k)
            .map(|s| s.values.clone())
            .unwrap_or_default()
    };
    assert_eq!(get("server"), ["https://10.0.0.1:6443"]);
    assert_eq!(get("token"), ["SK1::abc::id.secret"]);
    assert_eq!(get("data-dir"), ["/var/lib/skiff/agent"]);
    assert_eq!(get("node-name"), ["pi-1"]);
    assert_eq!(get("node-label"), ["zone=shed"]);
    // The real agent accepts the file (every key is one of its flags).
    let agent = opsutil::skiff_bin().with_file_name("skiff-agent");
    if agent.exists() {
        let o = Command::new(&agent)
            .arg("--config")
            .arg(&conf)
            .args(["--data-dir", "/nonexistent", "self-check"])
            .output()
            .expect("skiff-agent");
        assert!(o.status.success(), "{}", text(&o));
    }
    let unit = root.join("etc/systemd/system/skiff-agent.service");
    assert_eq!(
        std::fs::read(&unit).expect("unit"),
        std::fs::read(repo().join("systemd/skiff-agent.service")).expect("source")
    );
    assert_eq!(mode(&unit), 0o644);
    let wants = root.join("etc/systemd/system/multi-user.target.wants/skiff-agent.service");
    assert_eq!(
        std::fs::read_link(&wants).expect("wants symlink"),
        Path::new("/etc/systemd/system/skiff-agent.service")
    );
    // systemd 252 on the board: no back-off drop-in (it would be an unknown key there).
    assert!(!root
        .join("etc/systemd/system/skiff-agent.service.d")
        .exists());
    assert_eq!(mode(&root.join("var/lib/skiff")), 0o700);

    // Uninstall keeps the state only when asked.
    std::fs::create_dir_all(root.join("var/lib/skiff/agent/pods/x")).expect("pod data");
    let out = f.install(&["uninstall", "--root", r, "--keep-data"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(root.join("var/lib/skiff/agent/pods/x").exists());
    for gone in [
        "usr/local/bin/skiff-agent",
        "etc/skiff",
        "etc/systemd/system/skiff-agent.service",
        "etc/systemd/system/multi-user.target.wants/skiff-agent.service",
    ] {
        assert!(
            !root.join(gone).exists() && std::fs::symlink_metadata(root.join(gone)).is_err(),
            "{gone} left"
        );
    }
    let out = f.install(&["uninstall", "--root", r]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!root.join("var/lib/skiff").exists());
    // What is left is what was there before.
    let mut left = Vec::new();
    for e in walk(&root) {
        left.push(e.strip_prefix(&root).expect("prefix").to_path_buf());
    }
    left.sort();
    let expected: Vec<PathBuf> = [
        "etc",
        "etc/systemd",
        "etc/systemd/system",
        "etc/systemd/system/multi-user.target.wants",
        "usr",
        "usr/bin",
        "usr/bin/env",
        "usr/lib",
        "usr/lib/systemd",
        "usr/lib/systemd/libsystemd-shared-252.so",
        "usr/local",
        "usr/local/bin",
        "var",
        "var/lib",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    assert_eq!(left, expected);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let p = e.path();
        out.push(p.clone());
        if e.file_type().expect("type").is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

#[test]
fn install_sh_writes_a_server_and_handles_arches() {
    if !is_root() {
        return; // install_sh_writes_an_agent_onto_a_board_root checks the refusal
    }
    let f = Fixture::new();
    // x86_64 with systemd 255: server, both binaries, back-off drop-in, hardening with
    // --no-pods.
    let root = f.root("box", X86_64, Some(255));
    let r = root.to_str().expect("path");
    let out = f.install(&[
        "server",
        "--root",
        r,
        "--listen",
        "0.0.0.0:7443",
        "--tls-san",
        "skiff.lan",
        "--tls-san",
        "10.0.0.1",
        "--no-pods",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    for bin in ["skiff", "skiff-agent"] {
        let p = root.join("usr/local/bin").join(bin);
        assert_eq!(mode(&p), 0o755);
        assert!(std::fs::read_to_string(&p)
            .expect("bin")
            .contains(&format!("{bin}-x86_64-unknown-linux-musl")));
    }
    let conf = root.join("etc/skiff/server.toml");
    assert_eq!(mode(&conf), 0o600);
    let settings = api::config::load(&conf).expect("config");
    // Every key is a flag of `skiff server`.
    use clap::CommandFactory;
    let server_cmd = skiff_control::cli::Cli::command()
        .find_subcommand("server")
        .cloned()
        .expect("server subcommand");
    api::config::apply(server_cmd, &conf, &settings).expect("keys are server flags");
    let get = |k: &str| {
        settings
            .iter()
            .find(|s| s.key == k)
            .map(|s| s.values.clone())
            .unwrap_or_default()
    };
    assert_eq!(get("listen"), ["0.0.0.0:7443"]);
    assert_eq!(get("tls-san"), ["skiff.lan", "10.0.0.1"]);
    assert_eq!(get("disable-agent"), ["true"]);
    assert_eq!(get("data-dir"), ["/var/lib/skiff/server"]);
    let units = root.join("etc/systemd/system");
    assert_eq!(
        mode(&units.join("skiff-server.service.d/hardening.conf")),
        0o644
    );
    assert_eq!(
        mode(&units.join("skiff-server.service.d/backoff.conf")),
        0o644
    );
    assert_eq!(
        std::fs::read_link(units.join("multi-user.target.wants/skiff-server.service"))
            .expect("wants"),
        Path::new("/etc/systemd/system/skiff-server.service")
    );
    // upgrade replaces the binaries with the dist's (checksums checked again).
    std::fs::write(root.join("usr/local/bin/skiff"), "old").expect("write");
    let out = f.install(&["upgrade", "--root", r]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read_to_string(root.join("usr/local/bin/skiff"))
        .expect("bin")
        .contains("x86_64"));

    // 32-bit ARM: the server without pods; no agent.
    let arm = f.root("arm", ARM, None);
    let a = arm.to_str().expect("path");
    let out = f.install(&["server", "--root", a]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read_to_string(arm.join("usr/local/bin/skiff"))
        .expect("bin")
        .contains("armv7-unknown-linux-gnueabihf"));
    assert!(!arm.join("usr/local/bin/skiff-agent").exists());
    let settings = api::config::load(&arm.join("etc/skiff/server.toml")).expect("config");
    assert!(settings
        .iter()
        .any(|s| s.key == "disable-agent" && s.values == ["true"]));
    let out = f.install(&[
        "agent",
        "--root",
        a,
        "--server",
        "https://x:6443",
        "--token",
        "t",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("does not run on 32-bit ARM"),
        "{}",
        text(&out)
    );
    // --arch overrides what the root says.
    let out = f.install(&[
        "agent",
        "--root",
        a,
        "--arch",
        "aarch64",
        "--server",
        "https://x:6443",
        "--token",
        "t",
    ]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn install_sh_refuses_clearly() {
    let f = Fixture::new();
    let root = f.root("r", AARCH64, None);
    let r = root.to_str().expect("path");
    let mips = f.root("mips", 0x08, None);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![], "missing command"),
        (vec!["bogus"], "unknown command 'bogus'"),
        (
            vec!["agent", "--root", r, "--token", "t"],
            "missing --server URL",
        ),
        (
            vec!["agent", "--root", r, "--server", "https://x:6443"],
            "missing --token TOKEN",
        ),
        (
            vec!["agent", "--root", r, "--server", "http://x", "--token", "t"],
            "must be an https:// URL",
        ),
        (
            vec!["server", "--root", r, "--listen"],
            "--listen needs a value",
        ),
        (
            vec!["server", "--root", r, "--frobnicate"],
            "unknown option '--frobnicate'",
        ),
        (
            vec!["server", "--root", mips.to_str().expect("path")],
            "unknown architecture",
        ),
        (
            vec!["server", "--root", r, "--arch", "riscv64"],
            "unknown architecture 'riscv64'",
        ),
    ];
    for (args, want) in cases {
        let out = f.install(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let t = text(&out);
        // Argument errors come before the root check; the arch is checked as root.
        if is_root() || !want.contains("architecture") {
            assert!(t.contains(want), "{args:?}: wanted {want:?} in {t}");
        }
    }
    if is_root() {
        // A binary that does not match SHA256SUMS is refused.
        std::fs::write(
            f.dist().join("skiff-agent-aarch64-unknown-linux-musl"),
            "tampered",
        )
        .expect("write");
        let out = f.install(&[
            "agent",
            "--root",
            r,
            "--server",
            "https://x:6443",
            "--token",
            "t",
        ]);
        assert!(!out.status.success());
        assert!(
            text(&out).contains("does not match its checksum"),
            "{}",
            text(&out)
        );
        assert!(!root.join("usr/local/bin/skiff-agent").exists());
        // Not root: refused before anything is written.
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash"])
            .arg(repo().join("systemd/install.sh"))
            .args(["server", "--root", r])
            .output()
            .expect("setpriv");
        assert!(!out.status.success());
        assert!(text(&out).contains("must run as root"), "{}", text(&out));
    }
}

/// The server's config file sits between flags/environment and the defaults, and the
/// server tells systemd when it is ready and when it stops.
#[test]
fn server_config_file_and_sd_notify() {
    use std::os::unix::net::UnixDatagram;
    let dir = tempfile::tempdir().expect("temp dir");
    let file_addr = opsutil::free_addr();
    let env_addr = opsutil::free_addr();
    let conf = dir.path().join("server.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"{file_addr}\"\nevent-window = 50\nstore-cache-mib = 2\n\
             tls-san = [\"skiff.test\"]\n"
        ),
    )
    .expect("write config");
    let socket = dir.path().join("notify");
    let notify = UnixDatagram::bind(&socket).expect("notify socket");
    notify
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");

    // The file's listen address is used (the test helper's --listen is dropped here)...
    let data = dir.path().join("a");
    let mut cmd = Command::new(opsutil::skiff_bin());
    cmd.arg("server")
        .arg("--config")
        .arg(&conf)
        .arg("--data-dir")
        .arg(&data)
        .arg("--disable-agent")
        .env("SKIFF_LOG", "warn")
        .env("NOTIFY_SOCKET", &socket)
        .env_remove("SKIFF_LISTEN");
    let mut child = cmd.spawn().expect("skiff server");
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY=1 from the server");
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.starts_with("READY=1\n"), "{msg}");
    assert!(
        std::net::TcpStream::connect(file_addr).is_ok(),
        "listening on the file's address"
    );
    let cert = std::fs::read_to_string(data.join("pki/server.crt")).expect("cert");
    assert!(!cert.is_empty());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let n = notify.recv(&mut buf).expect("STOPPING=1 from the server");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(child.wait().expect("wait").success());

    // ...the environment beats the file, and a flag beats both.
    let s = opsutil::Server::start_cmd(&dir.path().join("b"), env_addr, |c| {
        c.env("SKIFF_CONFIG", &conf);
        // The helper passes --listen: that is the flag beating the file.
    });
    assert!(std::net::TcpStream::connect(env_addr).is_ok());
    drop(s);
    let env_addr2 = opsutil::free_addr();
    let mut child = Command::new(opsutil::skiff_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path().join("c"))
        .arg("--disable-agent")
        .env("SKIFF_CONFIG", &conf)
        .env("SKIFF_LISTEN", env_addr2.to_string())
        .env("SKIFF_LOG", "warn")
        .env("NOTIFY_SOCKET", &socket)
        .spawn()
        .expect("skiff server");
    notify.recv(&mut buf).expect("READY=1");
    assert!(
        std::net::TcpStream::connect(env_addr2).is_ok(),
        "SKIFF_LISTEN wins over the file"
    );
    let _ = child.kill();
    let _ = child.wait();

    // An unknown key is refused in one line naming it.
    std::fs::write(&conf, "listen = \"127.0.0.1:1\"\nlisen = \"x\"\n").expect("write");
    let out = Command::new(opsutil::skiff_bin())
        .arg("server")
        .arg("--config")
        .arg(&conf)
        .output()
        .expect("skiff server");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown key \"lisen\""), "{err}");
}

#[test]
fn help_documents_every_flag_with_its_environment_twin() {
    let out = Command::new(opsutil::skiff_bin())
        .args(["server", "--help"])
        .output()
        .expect("skiff server --help");
    check_env_twins(&String::from_utf8_lossy(&out.stdout), "SKIFF_");
    let agent = opsutil::skiff_bin().with_file_name("skiff-agent");
    if agent.exists() {
        let out = Command::new(&agent)
            .arg("--help")
            .output()
            .expect("skiff-agent --help");
        check_env_twins(&String::from_utf8_lossy(&out.stdout), "SKIFF_AGENT_");
    }
    let out = Command::new(opsutil::skiff_bin())
        .args(["version", "--client"])
        .output()
        .expect("skiff version");
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(
        v.starts_with(&format!(
            "Client Version: v{} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{v}"
    );
    assert!(v.contains("target "), "{v}");
}

/// Every flag of `help` but the client's global ones, help/version and the agent's node
/// simulator (a benchmarking tool, `--simulate`/`--sim-*`) shows its `[env: PREFIX...]`.
fn check_env_twins(help: &str, prefix: &str) {
    // Every flag's block (its line and the indented description under it) mentions its
    // [env: SKIFF_...] twin.
    let mut blocks: Vec<String> = Vec::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        if line.trim_start().starts_with('-') && indent <= 6 {
            blocks.push(line.to_string());
        } else if let Some(b) = blocks.last_mut() {
            b.push_str(line);
        }
    }
    for b in &blocks {
        let flag = b.trim_start();
        if [
            "--help",
            "--kubeconfig",
            "--context",
            "-n, --namespace",
            "-h, --help",
            "-V, --version",
            "--simulate",
            "--sim-",
            "--kubeconfig",
        ]
        .iter()
        .any(|f| flag.starts_with(f))
        {
            continue;
        }
        assert!(
            b.contains(&format!("[env: {prefix}")),
            "no environment twin in: {b}"
        );
    }
    assert!(blocks.len() >= 10, "{help}");
}

/// Runs scripts/setup.sh with Debian's own /usr/bin/python3 first on PATH (a stock Debian 12,
/// whose python3 refuses a global pip install) and a new virtual environment: it must create
/// the environment, install the Python client and pytest into it, and print its python.
#[test]
fn setup_installs_the_python_tools_with_debian_python() {
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "Debian's python3 is part of every Debian 12"
    );
    let home = tempfile::tempdir().expect("temp dir");
    let venv = home.path().join("pyenv");
    let path = format!(
        "/usr/bin:/bin:/usr/sbin:/sbin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(repo().join("scripts/setup.sh"))
        .arg("--python")
        .env("PATH", &path)
        .env("SKIFF_PYENV", &venv)
        .output()
        .expect("run setup.sh");
    assert!(out.status.success(), "{}", text(&out));
    let python = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        Path::new(&python),
        venv.join("bin/python"),
        "{}",
        text(&out)
    );
    let check = Command::new(&python)
        .args([
            "-c",
            "import kubernetes, pytest, sys; print(sys.base_prefix)",
        ])
        .output()
        .expect("run the environment's python");
    assert!(check.status.success(), "{}", text(&check));
    assert_eq!(
        String::from_utf8_lossy(&check.stdout).trim(),
        "/usr",
        "the environment is built on Debian's python3"
    );
    // A second run finds everything in place and installs nothing.
    let again = Command::new(repo().join("scripts/setup.sh"))
        .arg("--python")
        .env("PATH", &path)
        .env("SKIFF_PYENV", &venv)
        .output()
        .expect("run setup.sh again");
    assert!(again.status.success(), "{}", text(&again));
    assert!(!text(&again).contains("installing"), "{}", text(&again));
}

/// Without a Rust toolchain on PATH (or with Debian 12's own, which is too old), setup.sh says
/// what to install and how, and fails.
#[test]
fn setup_explains_a_missing_rust_toolchain() {
    let out = Command::new("/bin/bash")
        .arg(repo().join("scripts/setup.sh"))
        .env("PATH", "/usr/bin:/bin")
        .env_remove("CARGO_HOME")
        .env_remove("RUSTUP_HOME")
        .output()
        .expect("run setup.sh");
    assert!(!out.status.success(), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("rustup") && msg.contains("1."), "{msg}");
}
