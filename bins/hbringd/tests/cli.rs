//! The binary's command line: help, version, and config checking.

use std::process::Command;

fn hbringd(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hbringd")).args(args).output().expect("run hbringd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn help_lists_the_common_flags() {
    let (code, out, _) = hbringd(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--config",
        "--node-id",
        "--listen",
        "--client-listen",
        "--metrics-listen",
        "--log-format",
        "--check-config",
        "--new-cluster",
    ] {
        assert!(out.contains(flag), "--help lacks {flag}:\n{out}");
    }
}

#[test]
fn version_prints_the_crate_version() {
    let (code, out, _) = hbringd(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
}

#[test]
fn missing_node_id_and_peers_exit_2() {
    let (code, _, err) = hbringd(&["--check-config"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("node_id"), "{err}");
}

#[test]
fn flags_override_the_file() {
    let dir = std::env::temp_dir().join(format!("hbringd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "node_id = 1\nstate_dir = \"{}\"\n[[peers]]\nid = 1\naddr = \"127.0.0.1:7101\"\n\
             [[peers]]\nid = 2\naddr = \"127.0.0.1:7102\"\n",
            dir.join("state").display()
        ),
    )
    .unwrap();
    let (code, out, err) = hbringd(&["--config", cfg.to_str().unwrap(), "--node-id", "2", "--check-config"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("node_id = 2"), "{out}");
    assert!(out.contains("listen = \"127.0.0.1:7102\""), "{out}");
    std::fs::remove_dir_all(dir).ok();
}
