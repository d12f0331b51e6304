// The build script of ftctl and of every daemon (each one's build.rs is
// `include!` of this file): sets FTCOORD_VERSION, for `--version`, to the
// package version and the git commit the build was made from,
// `0.1.0 (git 1a2b3c4)` (the commit checked out: changes not committed
// are not told), or just `0.1.0` where git or the repository is absent (a
// source tarball).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let full = match git(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => format!("{version} (git {commit})"),
        None => version,
    };
    println!("cargo:rustc-env=FTCOORD_VERSION={full}");
    println!("cargo:rerun-if-changed=build.rs");
    // A new commit or checkout moves HEAD or the branch it points at.
    if let Some(dir) = git(&["rev-parse", "--git-common-dir"]) {
        let dir = Path::new(&dir);
        let head_dir = git(&["rev-parse", "--git-dir"]).unwrap_or_else(|| dir.display().to_string());
        println!("cargo:rerun-if-changed={}", Path::new(&head_dir).join("HEAD").display());
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", dir.join(branch).display());
        }
        println!("cargo:rerun-if-changed={}", dir.join("packed-refs").display());
    }
}
