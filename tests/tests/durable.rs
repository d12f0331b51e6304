//! Durable state with real processes: every start numbers a newer life and
//! stores it (even when the wall clock is behind the stored number), the
//! state directory belongs to one process, and a directory or state file
//! that cannot be used stops the daemon with the documented exit status and
//! a message naming the key or the file.
//!
//! The tests run one at a time (a process-wide lock), as the ntmutexd suite
//! does: a 2-core machine running several clusters at once could stall a
//! daemon past `suspect_after_ms`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use durable::store::StateDir;
use ftcoord_tests::{bin, run_once, wait_until, Cluster};
use lockservice::{LockReply, LockRequest};
use runtime::state::NodeState;

const TIMING: &str = "t_msg_ms = 20\n[timing]\nheartbeat_ms = 50\nsuspect_after_ms = 250\n";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn status(c: &Cluster, id: u32) -> Option<client::StatusReport> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    rt.block_on(c.status::<LockRequest, LockReply>(id)).ok()
}

fn incarnation(c: &Cluster, id: u32) -> u64 {
    status(c, id).unwrap_or_else(|| panic!("node {id} answers status; log:\n{}", c.log(id))).incarnation.0
}

/// The incarnation node `viewer` believes `peer` has, if it sees it up.
fn seen_incarnation(c: &Cluster, viewer: u32, peer: u32) -> Option<u64> {
    let s = status(c, viewer)?;
    s.peers.iter().find(|p| p.id.0 == peer && p.up).map(|p| p.incarnation.0)
}

/// The incarnation in node `id`'s state file (read as text: the file is TOML).
fn stored_incarnation(c: &Cluster, id: u32) -> u64 {
    let text = std::fs::read_to_string(c.state_dir(id).join("ntmutexd.state")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("incarnation = "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no incarnation in:\n{text}"))
}

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// `ftctl --addr <node id> lock --timeout TIMEOUT -- true`: its exit code and stderr.
fn lock_through(c: &Cluster, id: u32, timeout: &str) -> (i32, String) {
    let out = Command::new(bin("ftctl").unwrap())
        .arg("--addr")
        .arg(c.node(id).client.to_string())
        .args(["lock", "--timeout", timeout, "--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The last line of node `id`'s log that reports the loaded state.
fn last_state_line(c: &Cluster, id: u32) -> String {
    c.log(id).lines().rfind(|l| l.contains("state loaded")).unwrap_or_default().to_string()
}

#[test]
fn restarts_number_newer_lives_even_when_the_clock_is_behind() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    assert!(c.is_new_cluster());
    let first: Vec<u64> = (1..=3).map(|id| incarnation(&c, id)).collect();
    for id in 1..=3u32 {
        assert_eq!(stored_incarnation(&c, id), first[id as usize - 1], "node {id} stored its life before speaking");
        // The first start of a new cluster passes --new-cluster.
        let line = last_state_line(&c, id);
        assert!(line.contains("new_cluster=true") && line.contains("stored=None"), "{line}");
        let lock = std::fs::read_to_string(c.state_dir(id).join("lock")).unwrap();
        assert_eq!(lock.trim(), c.pid(id).unwrap().to_string(), "the lock file names the holder");
    }

    // SIGKILL and restart: a newer life, stored; no --new-cluster this time.
    c.kill(3);
    c.restart(3).unwrap();
    let second = incarnation(&c, 3);
    assert!(second > first[2], "{second} after {}", first[2]);
    assert_eq!(stored_incarnation(&c, 3), second);
    let line = last_state_line(&c, 3);
    assert!(line.contains("new_cluster=false") && line.contains(&format!("stored=Some({})", first[2])), "{line}");
    assert!(
        wait_until(Duration::from_secs(10), || seen_incarnation(&c, 1, 3) == Some(second)),
        "node 1 never saw node 3's new life; log 1:\n{}",
        c.log(1)
    );

    // The wall clock is now far behind the stored life (a clock stepped
    // back, or a life numbered on a host whose clock ran ahead): the next
    // life is stored + 1.
    c.kill(3);
    let ahead = wall_ms() + 365 * 24 * 3600 * 1000;
    {
        let dir = StateDir::open(c.state_dir(3), "ntmutexd").unwrap();
        dir.store(&NodeState::<()> { incarnation: ahead, core: None }).unwrap();
    }
    c.restart(3).unwrap();
    let restarted = Instant::now();
    assert_eq!(incarnation(&c, 3), ahead + 1);
    assert_eq!(stored_incarnation(&c, 3), ahead + 1);
    // It rejoins: the others see the new life, and it serves a lock within
    // a few heartbeats (generous bounds: a shared 2-core machine).
    assert!(
        wait_until(Duration::from_secs(10), || (1..=2).all(|v| seen_incarnation(&c, v, 3) == Some(ahead + 1))),
        "peers never saw node 3's life {}; logs:\n{}\n{}",
        ahead + 1,
        c.log(1),
        c.log(3)
    );
    let (code, stderr) = lock_through(&c, 3, "10s");
    assert_eq!(code, 0, "lock through the restarted node: {stderr}\nlog 3:\n{}", c.log(3));
    let took = restarted.elapsed();
    eprintln!("node 3 restarted with its clock behind: a lock through it {took:?} after it listened");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // And the other nodes still serve too.
    let (code, stderr) = lock_through(&c, 1, "10s");
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_state_dir_belongs_to_one_process() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 2, TIMING).unwrap();
    let config = c.config_path(1).display().to_string();
    // Node 1 again, on its own directory (and ports): refused before it binds
    // anything, naming the holder.
    let (code, _, stderr) = run_once("ntmutexd", &["--config", &config], &[]).unwrap();
    assert_eq!(code, 1, "{stderr}");
    let pid = c.pid(1).unwrap();
    assert!(stderr.contains(&format!("pid {pid}")), "stderr should name pid {pid}: {stderr}");
    assert!(stderr.contains("is in use by another process"), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("address"), "{stderr}");
    // The holder is unharmed.
    assert!(status(&c, 1).is_some());
}

#[test]
fn an_unusable_state_dir_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let peers = "[[peers]]\nid = 1\naddr = \"127.0.0.1:7101\"\n";
    let run_with = |state_dir: &Path| {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, format!("node_id = 1\nstate_dir = \"{}\"\n{peers}", state_dir.display())).unwrap();
        run_once("ntmutexd", &["--config", &path.display().to_string()], &[]).unwrap()
    };
    // Below a regular file: no one, root included, can create it.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let (code, _, stderr) = run_with(&file.join("state"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("key 'state_dir'") && stderr.contains("cannot create"), "{stderr}");

    // A directory without write permission (modes do not stop root).
    use std::os::unix::fs::PermissionsExt;
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
    // As root the daemon would start and run: only try where modes bite.
    if std::fs::write(ro.join("probe"), "x").is_err() {
        let (code, _, stderr) = run_with(&ro);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("key 'state_dir'"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn a_damaged_state_file_exits_1_naming_the_file() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 1, TIMING).unwrap();
    c.kill(1);
    let file = c.state_dir(1).join("ntmutexd.state");
    let text = std::fs::read_to_string(&file).unwrap();
    let config = c.config_path(1).display().to_string();
    let cases = [
        ("a changed body", text.replacen("incarnation = 1", "incarnation = 2", 1), "checksum mismatch"),
        ("a truncated file", text[..text.len() - 4].to_string(), "truncated"),
        ("another daemon's file", text.replacen("daemon=ntmutexd", "daemon=electd", 1), "written by electd"),
        ("a newer format", text.replacen("version=1", "version=9", 1), "format version 9"),
    ];
    for (what, body, needle) in cases {
        std::fs::write(&file, &body).unwrap();
        let (code, _, stderr) = run_once("ntmutexd", &["--config", &config], &[]).unwrap();
        assert_eq!(code, 1, "{what}: {stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{what}: stderr should name the file: {stderr}");
        assert!(stderr.contains(needle), "{what}: stderr should say '{needle}': {stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        // Never reset: the damaged file is still there as it was left.
        assert_eq!(std::fs::read_to_string(&file).unwrap(), body, "{what}");
    }
    // Put back, the node starts again with a newer life.
    std::fs::write(&file, &text).unwrap();
    let before = stored_incarnation(&c, 1);
    c.restart(1).unwrap();
    assert!(incarnation(&c, 1) > before);
}
