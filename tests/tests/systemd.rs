//! The systemd units in `config/systemd/` (interfaces.md, systemd): each
//! passes `systemd-analyze verify` installed as on a host (the built daemon
//! at `/usr/bin/<daemon>` of a scratch root), has the directives the spec
//! requires, names the state directory its example config uses, and keeps
//! its hardening (`systemd-analyze security`).
//!
//! These tests need `systemd-analyze` (the `systemd` package) and fail,
//! saying so, without it.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ftcoord_tests::{bin, run_once};

const DAEMONS: [&str; 5] = ["ringd", "ntmutexd", "tokenwatchd", "electd", "hbringd"];

/// Highest accepted `systemd-analyze security` exposure (0 best, 10 worst);
/// the units score 1.2 with systemd 252 (docs/operations.md, "Exposure").
const MAX_EXPOSURE: f64 = 2.0;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn unit_path(daemon: &str) -> PathBuf {
    repo().join("config/systemd").join(format!("{daemon}.service"))
}

fn unit_text(daemon: &str) -> String {
    let path = unit_path(daemon);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `systemd-analyze ARGS`, or a panic saying how to get it.
fn systemd_analyze(args: &[&str]) -> Output {
    match Command::new("systemd-analyze").args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "systemd-analyze is not installed: these tests check the units in config/systemd with it; \
             install systemd (e.g. `apt-get install systemd`)"
        ),
        Err(e) => panic!("cannot run systemd-analyze: {e}"),
    }
}

fn output_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `(section, key, value)` for every assignment of a unit file, in order.
fn directives(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("not an assignment: {line}"));
        out.push((section.clone(), key.trim().to_owned(), value.trim().to_owned()));
    }
    out
}

/// The values `key` is given in `[Service]`, in order.
fn service<'a>(all: &'a [(String, String, String)], key: &str) -> Vec<&'a str> {
    all.iter().filter(|(s, k, _)| s == "Service" && k == key).map(|(_, _, v)| v.as_str()).collect()
}

/// The one value `key` is given in `[Service]`.
fn only<'a>(all: &'a [(String, String, String)], daemon: &str, key: &str) -> &'a str {
    match service(all, key)[..] {
        [value] => value,
        ref other => panic!("{daemon}.service: expected one {key}=, found {other:?}"),
    }
}

/// A scratch root with the host's own units (for the targets the units are
/// ordered against), the built daemons at `usr/bin/<daemon>` and the units
/// at `etc/systemd/system/<daemon>.service`, as a host has them installed.
fn scratch_root() -> tempfile::TempDir {
    // Beside target/, so that the binaries can be hard links instead of copies.
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let host_units = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .map(Path::new)
        .find(|d| d.join("sysinit.target").exists())
        .expect("the host's systemd units (sysinit.target in /usr/lib/systemd/system): install systemd");
    let units = root.path().join("usr/lib/systemd/system");
    std::fs::create_dir_all(&units).unwrap();
    for entry in std::fs::read_dir(host_units).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        let to = units.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &to).unwrap();
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &to).unwrap();
        }
    }
    let usr_bin = root.path().join("usr/bin");
    let etc_units = root.path().join("etc/systemd/system");
    std::fs::create_dir_all(&usr_bin).unwrap();
    std::fs::create_dir_all(&etc_units).unwrap();
    for daemon in DAEMONS {
        let built = bin(daemon).unwrap();
        let to = usr_bin.join(daemon);
        if std::fs::hard_link(&built, &to).is_err() {
            std::fs::copy(&built, &to).unwrap();
        }
        std::fs::copy(unit_path(daemon), etc_units.join(format!("{daemon}.service"))).unwrap();
    }
    root
}

/// `systemd-analyze verify` reports an unknown directive or a value it
/// cannot parse as a warning and still exits 0, so any output is a failure.
#[test]
fn every_unit_passes_systemd_analyze_verify() {
    let root = scratch_root();
    let root_arg = format!("--root={}", root.path().display());
    for daemon in DAEMONS {
        let unit = format!("/etc/systemd/system/{daemon}.service");
        let out = systemd_analyze(&["verify", &root_arg, "--recursive-errors=no", "--man=no", &unit]);
        let said = output_text(&out);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "systemd-analyze verify {daemon}.service ({}): {said}",
            out.status
        );
    }
    // The check is real: without the binary the same unit fails.
    std::fs::remove_file(root.path().join("usr/bin/hbringd")).unwrap();
    let out = systemd_analyze(&["verify", &root_arg, "--recursive-errors=no", "/etc/systemd/system/hbringd.service"]);
    assert!(!out.status.success(), "verify passed without /usr/bin/hbringd: {}", output_text(&out));
    assert!(output_text(&out).contains("/usr/bin/hbringd"), "{}", output_text(&out));
}

#[test]
fn every_unit_has_the_required_directives() {
    for daemon in DAEMONS {
        let all = directives(&unit_text(daemon));
        let one = |key: &str| only(&all, daemon, key);
        assert_eq!(one("Type"), "notify", "{daemon}");
        assert_eq!(one("NotifyAccess"), "main", "{daemon}");
        assert_eq!(one("ExecStart"), format!("/usr/bin/{daemon} --config /etc/ftcoord/{daemon}.toml"), "{daemon}");
        assert_eq!(one("Restart"), "on-failure", "{daemon}");
        assert_eq!(one("SyslogIdentifier"), daemon);
        let watchdog = one("WatchdogSec");
        let secs: u64 = watchdog.strip_suffix('s').unwrap_or(watchdog).parse().unwrap_or(0);
        assert!(secs >= 2, "{daemon}: WatchdogSec={watchdog}: expected whole seconds, at least 2");
        assert_eq!(one("StateDirectory"), format!("ftcoord/{daemon}"), "{daemon}");
        assert_eq!(one("DynamicUser"), "yes", "{daemon}");
        assert_eq!(one("User"), "ftcoord", "{daemon}");
        for (key, value) in [
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("PrivateDevices", "yes"),
            ("CapabilityBoundingSet", ""),
            ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
            ("MemoryDenyWriteExecute", "yes"),
            ("UMask", "0077"),
        ] {
            assert_eq!(one(key), value, "{daemon}: {key}=");
        }
        // ringd's command services fork, exec and kill: the filter must allow it.
        assert_eq!(service(&all, "SystemCallFilter").first(), Some(&"@system-service"), "{daemon}");
        assert!(all.iter().any(|(s, k, v)| s == "Install" && k == "WantedBy" && v == "multi-user.target"), "{daemon}");
    }
}

/// The state directory systemd makes is the one the example config names,
/// and the example config is valid (`--check-config`).
#[test]
fn example_configs_name_the_units_state_directory() {
    for daemon in DAEMONS {
        let config = repo().join(format!("config/{daemon}.example.toml"));
        let config = config.to_str().unwrap();
        let (code, stdout, stderr) = run_once(daemon, &["--config", config, "--check-config"], &[]).unwrap();
        assert_eq!(code, 0, "{daemon} --check-config {config}: {stderr}");
        let dir = service(&directives(&unit_text(daemon)), "StateDirectory")[0].to_owned();
        let want = format!("state_dir = \"/var/lib/{dir}\"");
        assert!(stdout.lines().any(|l| l == want), "{daemon}: the effective config lacks {want}: {stdout}");
    }
}

#[test]
fn every_unit_keeps_its_exposure_low() {
    let root = scratch_root();
    let root_arg = format!("--root={}", root.path().display());
    for daemon in DAEMONS {
        let unit = format!("/etc/systemd/system/{daemon}.service");
        let out = systemd_analyze(&["security", "--offline=true", &root_arg, "--no-pager", &unit]);
        let said = output_text(&out);
        let exposure: f64 = said
            .lines()
            .find_map(|l| l.split_once("Overall exposure level for ").map(|(_, rest)| rest))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|score| score.parse().ok())
            .unwrap_or_else(|| panic!("no overall exposure for {daemon}.service: {said}"));
        assert!(exposure <= MAX_EXPOSURE, "{daemon}.service: exposure {exposure} > {MAX_EXPOSURE}: {said}");
    }
}
