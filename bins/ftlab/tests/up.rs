//! `ftlab up`: a cluster comes up, answers, and goes away on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn up_starts_a_cluster_prints_endpoints_and_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ftlab"))
        .args(["up", "hbringd", "-n", "3", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut metrics, mut printed) = (Vec::new(), Vec::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        printed.push(line.clone());
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
            metrics.push(url.trim_start_matches("http://").trim_end_matches("/metrics").to_string());
        }
        if line.starts_with("Ctrl-C") {
            break;
        }
    }
    assert_eq!(metrics.len(), 3);
    for m in &metrics {
        let text = ftlab::scrape(m.parse().unwrap()).unwrap();
        assert!(text.contains("hbring_build_info"), "{text}");
    }
    let sd = std::fs::read_to_string(dir.path().join("targets.json")).unwrap();
    assert!(sd.contains(&metrics[0]) && sd.contains("\"job\": \"hbringd\""), "{sd}");
    // The Prometheus command it printed runs a config that reads this
    // directory's targets file.
    let canon = dir.path().canonicalize().unwrap();
    let prom = canon.join("prometheus.yml");
    let want = format!(
        "prometheus --config.file={} --storage.tsdb.path={}",
        prom.display(),
        canon.join("prometheus").display()
    );
    assert!(printed.iter().any(|l| l.contains(&want)), "no `{want}` in:\n{}", printed.join("\n"));
    let yml = std::fs::read_to_string(&prom).unwrap();
    assert!(yml.contains(&format!("- \"{}\"", canon.join("targets.json").display())), "{yml}");
    if let Ok(check) = Command::new("promtool").arg("check").arg("config").arg(&prom).output() {
        assert!(check.status.success(), "promtool: {}{}", text(&check.stdout), text(&check.stderr));
        let said = text(&check.stdout) + &text(&check.stderr);
        assert!(!said.contains("does not exist"), "{said}");
    }
    assert!(dir.path().join("node1.toml").exists());

    Command::new("kill").arg("-INT").arg(child.id().to_string()).status().unwrap();
    let ok = ftlab::wait_until(Duration::from_secs(10), || matches!(child.try_wait(), Ok(Some(_))));
    assert!(ok, "ftlab up did not stop on SIGINT");
    assert!(child.wait().unwrap().success());
    // Its nodes are gone: their metrics ports no longer answer.
    for m in &metrics {
        assert!(ftlab::scrape(m.parse().unwrap()).is_err(), "{m} still answers");
    }
}

/// A running `ftlab up`, SIGKILLed when dropped (its guard then kills the
/// nodes), with what it printed at start.
struct Up {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    /// The directory it printed.
    dir: std::path::PathBuf,
    /// (id, pid, metrics address) of each node, from its table.
    nodes: Vec<(u32, u32, std::net::SocketAddr)>,
}

impl Up {
    fn start(args: &[&str]) -> Up {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ftlab"))
            .arg("up")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut dir, mut nodes, mut seen) = (None, Vec::new(), Vec::new());
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("starting ") {
                let d = rest.split_once(" in ").unwrap().1.rsplit_once(" (").unwrap().0;
                dir = Some(std::path::PathBuf::from(d));
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if let (Some(id), Some(url)) =
                (words.first().and_then(|w| w.parse::<u32>().ok()), words.iter().find(|w| w.starts_with("http://")))
            {
                let addr = url.trim_start_matches("http://").trim_end_matches("/metrics").parse().unwrap();
                nodes.push((id, words[1].parse().unwrap(), addr));
            }
            let last = line.starts_with("Ctrl-C");
            seen.push(line);
            if last {
                return Up { child, lines, dir: dir.expect("no directory printed"), nodes };
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("ftlab up {args:?} stopped before it was up; it printed:\n{}", seen.join("\n"));
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` (`-TERM`…) to ftlab up itself.
    fn signal(&self, sig: &str) {
        assert!(Command::new("kill").arg(sig).arg(self.pid().to_string()).status().unwrap().success());
    }

    /// Waits for ftlab up to exit and returns its status and what it printed
    /// after the start.
    fn wait(&mut self) -> (std::process::ExitStatus, String) {
        let ok = ftlab::wait_until(Duration::from_secs(30), || matches!(self.child.try_wait(), Ok(Some(_))));
        assert!(ok, "ftlab up did not exit");
        let rest: Vec<String> = self.lines.by_ref().map(Result::unwrap).collect();
        (self.child.wait().unwrap(), rest.join("\n"))
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` exists and is not a zombie (one not reaped yet is
/// dead all the same).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()), Some('Z' | 'X')),
        Err(_) => false,
    }
}

fn answers(metrics: std::net::SocketAddr) -> bool {
    ftlab::scrape(metrics).is_ok_and(|t| t.contains("hbring_build_info"))
}

fn ftlab_cmd(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ftlab")).args(args).arg("--dir").arg(dir).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn kill_and_restart_act_on_exactly_one_node_and_print_pids() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut up = Up::start(&["hbringd", "-n", "3", "--dir", d]);
    assert_eq!(up.dir, dir.path().canonicalize().unwrap());
    assert_eq!(up.nodes.iter().map(|n| n.0).collect::<Vec<_>>(), [1, 2, 3]);
    for &(_, pid, m) in &up.nodes {
        assert!(alive(pid), "pid {pid} printed but not running");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(text(&cmdline).contains("hbringd"), "pid {pid} is not a node: {}", text(&cmdline));
        assert!(answers(m));
    }
    let (_, pid2, m2) = up.nodes[1];

    // A second `ftlab up` on the same directory is refused and changes nothing.
    let second = Command::new(env!("CARGO_BIN_EXE_ftlab")).args(["up", "hbringd", "-n", "3", "--dir", d]).output();
    let second = second.unwrap();
    assert!(!second.status.success());
    assert!(text(&second.stderr).contains("already runs"), "{}", text(&second.stderr));

    let out = ftlab_cmd(&["kill", "7"], dir.path());
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no node 7") && text(&out.stderr).contains("1 to 3"), "{}", text(&out.stderr));

    let out = ftlab_cmd(&["kill", "2"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("pid {pid2}")), "{}", text(&out.stdout));
    assert!(ftlab::wait_until(Duration::from_secs(5), || !alive(pid2)), "node 2 (pid {pid2}) still runs");
    assert!(ftlab::scrape(m2).is_err(), "node 2's metrics still answer");
    for &(id, pid, m) in [up.nodes[0], up.nodes[2]].iter() {
        assert!(alive(pid), "node {id} (pid {pid}) died with node 2");
        assert!(answers(m), "node {id} no longer answers");
    }
    assert!(alive(up.pid()), "ftlab up died");

    // Killing it again says it is not running.
    let out = ftlab_cmd(&["kill", "2"], dir.path());
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not running"), "{}", text(&out.stderr));

    let out = ftlab_cmd(&["restart", "2"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let new: u32 = stdout
        .split_once("pid ")
        .map(|(_, r)| r.chars().take_while(char::is_ascii_digit).collect::<String>())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no new pid in {stdout:?}"));
    assert_ne!(new, pid2);
    assert!(alive(new));
    assert!(text(&std::fs::read(format!("/proc/{new}/cmdline")).unwrap()).contains("node2.toml"));
    assert!(ftlab::wait_until(Duration::from_secs(10), || answers(m2)), "restarted node 2 does not answer");
    for &(_, pid, _) in &up.nodes {
        assert!(pid == pid2 || alive(pid));
    }

    up.signal("-INT");
    let (status, rest) = up.wait();
    assert!(status.success());
    assert!(rest.contains(&dir.path().canonicalize().unwrap().join("node2.log").display().to_string()), "{rest}");
    for &(_, pid, m) in &up.nodes {
        assert!(!alive(pid) && ftlab::scrape(m).is_err());
    }
    assert!(!alive(new));
    // The control socket is gone with it.
    let out = ftlab_cmd(&["restart", "1"], dir.path());
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no `ftlab up` runs on"), "{}", text(&out.stderr));
}

#[test]
fn sigterm_and_sighup_stop_up_and_all_its_nodes() {
    let scratch = tempfile::tempdir().unwrap();
    // SIGTERM on a given directory; SIGHUP on the temporary one `up` makes.
    for sig in ["-TERM", "-HUP"] {
        let mut up = if sig == "-TERM" {
            Up::start(&["hbringd", "-n", "2", "--dir", scratch.path().to_str().unwrap()])
        } else {
            Up::start(&["hbringd", "-n", "2"])
        };
        let dir = up.dir.clone();
        assert_eq!(up.nodes.len(), 2);
        for &(_, pid, m) in &up.nodes {
            assert!(alive(pid) && answers(m));
        }
        up.signal(sig);
        let (status, rest) = up.wait();
        assert!(status.success(), "{sig}: {status}");
        for &(id, pid, m) in &up.nodes {
            assert!(!alive(pid), "{sig}: node {id} (pid {pid}) still runs");
            assert!(ftlab::scrape(m).is_err(), "{sig}: node {id} still answers");
        }
        // The directory and its logs are kept, and where they are is printed.
        let log = dir.join("node1.log");
        assert!(rest.contains(&log.display().to_string()), "{sig}: {rest}");
        assert!(log.is_file() && dir.join("node2.log").is_file());
        assert!(!dir.join("ftlab.sock").exists());
        if sig == "-HUP" {
            assert!(!dir.starts_with(scratch.path()));
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn stopping_signals_every_node_at_once() {
    // One after the other, each node waited about a second (its links to
    // the peers stopped before it) and five took 4 to 6 s; all at once,
    // they take as long as one of them.
    let dir = tempfile::tempdir().unwrap();
    let mut up = Up::start(&["hbringd", "-n", "5", "--dir", dir.path().to_str().unwrap()]);
    assert!(up.nodes.iter().all(|&(_, pid, m)| alive(pid) && answers(m)));
    let asked = std::time::Instant::now();
    up.signal("-INT");
    let (status, rest) = up.wait();
    let took = asked.elapsed();
    assert!(status.success(), "{rest}");
    assert!(!rest.contains("SIGKILLed"), "{rest}");
    for &(id, pid, _) in &up.nodes {
        assert!(!alive(pid), "node {id} (pid {pid}) still runs");
    }
    assert!(took < Duration::from_millis(2500), "stopping 5 nodes took {took:?}");
}

#[test]
fn sigkill_of_up_takes_its_nodes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut up = Up::start(&["hbringd", "-n", "3", "--dir", dir.path().to_str().unwrap()]);
    for &(_, pid, m) in &up.nodes {
        assert!(alive(pid) && answers(m));
    }
    up.signal("-KILL");
    let _ = up.wait();
    for &(id, pid, m) in &up.nodes {
        assert!(ftlab::wait_until(Duration::from_secs(5), || !alive(pid)), "node {id} (pid {pid}) outlived ftlab");
        assert!(ftlab::scrape(m).is_err(), "node {id} still answers");
    }
    // Its socket is left behind; kill says the cluster is gone, and a new
    // `up` on the same directory takes over.
    let out = ftlab_cmd(&["kill", "1"], dir.path());
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no `ftlab up` runs on"), "{}", text(&out.stderr));
    let mut again = Up::start(&["hbringd", "-n", "3", "--dir", dir.path().to_str().unwrap()]);
    assert!(again.nodes.iter().all(|&(_, pid, m)| alive(pid) && answers(m)));
    again.signal("-INT");
    assert!(again.wait().0.success());
}

#[test]
fn up_again_on_a_directory_keeps_the_ports_its_configs_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut first = Up::start(&["hbringd", "-n", "3", "--dir", d]);
    let configs = |ids: &[u32]| -> Vec<String> {
        ids.iter().map(|id| std::fs::read_to_string(dir.path().join(format!("node{id}.toml"))).unwrap()).collect()
    };
    let (before, targets) = (configs(&[1, 2, 3]), std::fs::read_to_string(dir.path().join("targets.json")).unwrap());
    first.signal("-INT");
    assert!(first.wait().0.success());

    let mut again = Up::start(&["hbringd", "-n", "3", "--dir", d]);
    assert_eq!(
        again.nodes.iter().map(|n| n.2).collect::<Vec<_>>(),
        first.nodes.iter().map(|n| n.2).collect::<Vec<_>>()
    );
    assert!(again.nodes.iter().all(|&(_, pid, m)| alive(pid) && answers(m)));
    // The configs (every peer's address) and the Prometheus targets are as
    // they were.
    assert_eq!(configs(&[1, 2, 3]), before);
    assert_eq!(std::fs::read_to_string(dir.path().join("targets.json")).unwrap(), targets);
    again.signal("-INT");
    assert!(again.wait().0.success());

    // A bigger cluster in the same directory: nodes 1 to 3 keep theirs.
    let mut bigger = Up::start(&["hbringd", "-n", "4", "--dir", d]);
    assert_eq!(
        bigger.nodes[..3].iter().map(|n| n.2).collect::<Vec<_>>(),
        first.nodes.iter().map(|n| n.2).collect::<Vec<_>>()
    );
    assert!(!first.nodes.iter().any(|n| n.2 == bigger.nodes[3].2));
    bigger.signal("-INT");
    assert!(bigger.wait().0.success());
}

#[test]
fn unknown_daemons_and_absent_clusters_fail_clearly() {
    // A usage error: exit status 2, and the daemons it could have been.
    for args in [&["up", "nosuchd"][..], &["up", "etcd", "--dir", "/nonexistent/x"], &["chaos", "etcd"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_ftlab")).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains(&format!("unknown daemon {}", args[1])), "{err}");
        for d in ftlab::DAEMONS {
            assert!(err.contains(d), "{err}");
        }
    }
    let help = Command::new(env!("CARGO_BIN_EXE_ftlab")).args(["up", "--help"]).output().unwrap();
    for d in ftlab::DAEMONS {
        assert!(text(&help.stdout).contains(d), "{}", text(&help.stdout));
    }

    let empty = tempfile::tempdir().unwrap();
    for op in ["kill", "restart"] {
        let out = ftlab_cmd(&[op, "1"], empty.path());
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(err.contains("no `ftlab up` runs on") && err.contains(&empty.path().display().to_string()), "{err}");
    }
    // A socket left by an `ftlab up` that died.
    drop(std::os::unix::net::UnixListener::bind(empty.path().join("ftlab.sock")).unwrap());
    let out = ftlab_cmd(&["kill", "1"], empty.path());
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("left from one that died"), "{}", text(&out.stderr));
}

#[test]
fn sigint_while_the_nodes_start_stops_the_cluster_cleanly() {
    // Ctrl-C the instant `up` says it starts: before the fix the signal's
    // default action killed ftlab (the guard then SIGKILLed the nodes) when
    // it came before the loop that handles it; now it is caught from the
    // start, the cluster comes up, and stops as on any Ctrl-C.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ftlab"))
        .args(["up", "hbringd", "-n", "3", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("starting "), "{first}");
    assert!(Command::new("kill").arg("-INT").arg(child.id().to_string()).status().unwrap().success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}; it printed:\n{first}\n{}", rest.join("\n"));
    assert!(rest.iter().any(|l| l == "stopping (SIGINT)…"), "{}", rest.join("\n"));
}
