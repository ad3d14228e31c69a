//! Records the git commit and the target triple for `skiff version`, `/version` and
//! `skiff-agent --version` (the build script of both crates: `build = "../build/version.rs"`)
//! (`SKIFF_GIT_COMMIT`, `SKIFF_TARGET`). Outside a git checkout the commit is "unknown";
//! `SKIFF_GIT_COMMIT` in the build environment overrides it (builds from a source tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

// The agent's build script; the server's (build/control.rs) calls `record` from its own.
#[allow(dead_code)]
fn main() {
    record();
}

pub fn record() {
    println!("cargo:rerun-if-env-changed=SKIFF_GIT_COMMIT");
    let commit = std::env::var("SKIFF_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=10", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SKIFF_GIT_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=SKIFF_TARGET={target}");
    // Rebuild when HEAD moves: HEAD itself (a branch switch) and the branch's ref (a commit).
    // Only existing files: cargo reruns a build script whose watched file is missing.
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-changed=../build/version.rs");
}
