//! docs/fencing.md's examples, run as written (issue 40): the fence file
//! (`ftctl fence check` inside `ftctl lock NAME -- sh -c '…'`) and the
//! SQLite conditional writes, under a real electd cluster's lock, then
//! with a stale fence, which must be refused and change no byte of the
//! fence file, the log or the table.
//!
//! A runnable block in the doc is preceded by `<!-- test: run NAME -->`
//! (run with `sh -c` in a scratch directory) or `<!-- test: save NAME -->`
//! (written there as the executable file NAME); every `sh` block must be
//! one of them. The SQL examples need the `sqlite3` program (the Debian
//! package sqlite3, which .ci/run installs): without it the test fails.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ftcoord_tests::{bin, Cluster};

/// What the test does with a marked block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Run it with `sh -c`.
    Run,
    /// Save it as an executable file.
    Save,
}

/// A marked block: its use and its code.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    used: Use,
    code: String,
}

/// The marked blocks of `doc` by name; an error for a marker not followed
/// by a fenced block, a marked block that is not `sh`, an `sh` block
/// without a marker, a name used twice, or an unclosed block.
fn blocks(doc: &str) -> Result<BTreeMap<String, Block>, String> {
    let mut found = BTreeMap::new();
    let mut marker: Option<(usize, Use, String)> = None;
    let mut lines = doc.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let line_no = i + 1;
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("<!-- test:") {
            let spec = rest.strip_suffix("-->").ok_or(format!("line {line_no}: marker not closed on its line"))?;
            let (used, name) = match spec.split_whitespace().collect::<Vec<_>>()[..] {
                ["run", name] => (Use::Run, name),
                ["save", name] => (Use::Save, name),
                _ => return Err(format!("line {line_no}: marker {trimmed:?} is not `test: run|save NAME`")),
            };
            if let Some((at, ..)) = marker {
                return Err(format!("line {at}: marker not followed by a block"));
            }
            marker = Some((line_no, used, name.to_string()));
        } else if let Some(lang) = trimmed.strip_prefix("```") {
            let mut code = String::new();
            loop {
                let (_, l) = lines.next().ok_or(format!("line {line_no}: block not closed"))?;
                if l.trim() == "```" {
                    break;
                }
                code.push_str(l);
                code.push('\n');
            }
            match marker.take() {
                Some((at, used, name)) => {
                    if lang != "sh" {
                        return Err(format!("line {at}: marked block {name} is {lang:?}, not sh"));
                    }
                    if found.insert(name.clone(), Block { used, code }).is_some() {
                        return Err(format!("line {at}: block name {name} used twice"));
                    }
                }
                None if lang == "sh" => return Err(format!("line {line_no}: sh block without a test marker")),
                None => {}
            }
        } else if !trimmed.is_empty() {
            if let Some((at, ..)) = marker {
                return Err(format!("line {at}: marker not followed by a block"));
            }
        }
    }
    match marker {
        Some((at, ..)) => Err(format!("line {at}: marker not followed by a block")),
        None => Ok(found),
    }
}

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fencing.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `sqlite3` program on PATH; panics (the test fails, never skips)
/// saying how to install it.
fn sqlite3() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("sqlite3"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "sqlite3 is not on PATH: docs/fencing.md's SQL examples need it. Install the Debian package \
                 sqlite3 (apt-get install -y --no-install-recommends sqlite3), which .ci/run does"
            )
        })
}

/// How a block (or a command) ended.
#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Where the examples run: a scratch directory, `ftctl` on PATH, the
/// cluster's address in FTCTL_ADDR.
struct Scratch {
    dir: tempfile::TempDir,
    path_var: std::ffi::OsString,
    addr: String,
}

impl Scratch {
    fn new(addr: String) -> Scratch {
        let ftctl = bin("ftctl").expect("the ftctl binary (cargo build -p ftctl)");
        let mut dirs = vec![ftctl.parent().unwrap().to_path_buf()];
        dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
        let path_var = std::env::join_paths(dirs).unwrap();
        Scratch { dir: tempfile::tempdir().unwrap(), path_var, addr }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// `sh -c code` there, with `env` added (FTCOORD_* removed otherwise).
    fn sh(&self, code: &str, env: &[(&str, &str)]) -> Ran {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(code)
            .current_dir(self.dir.path())
            .env("PATH", &self.path_var)
            .env("FTCTL_ADDR", &self.addr)
            .env_remove("FTCOORD_FENCE")
            .env_remove("FTCOORD_LOCK_NAME")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run sh");
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs the doc's block `name` (a `run` block).
    fn run(&self, blocks: &BTreeMap<String, Block>, name: &str) -> Ran {
        let b = &blocks[name];
        assert_eq!(b.used, Use::Run, "{name}");
        self.sh(&b.code, &[])
    }

    /// Saves the doc's block `name` (a `save` block) as the executable `name`.
    fn save(&self, blocks: &BTreeMap<String, Block>, name: &str) {
        let b = &blocks[name];
        assert_eq!(b.used, Use::Save, "{name}");
        let path = self.path(name);
        std::fs::write(&path, &b.code).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// `sqlite3 app.db SQL`'s output; panics unless it exits 0.
    fn sql(&self, sqlite3: &Path, sql: &str) -> String {
        let out = Command::new(sqlite3).arg("app.db").arg(sql).current_dir(self.dir.path()).output().unwrap();
        assert!(out.status.success(), "sqlite3 {sql}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The fence a fence file records.
fn record(bytes: &[u8]) -> u128 {
    let text = std::str::from_utf8(bytes).unwrap();
    let digits = text.strip_suffix('\n').unwrap_or_else(|| panic!("no newline: {text:?}"));
    digits.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

#[test]
fn every_shell_example_is_marked_and_found() {
    let blocks = blocks(&doc()).unwrap_or_else(|e| panic!("docs/fencing.md: {e}"));
    let names: Vec<(&str, Use)> = blocks.iter().map(|(n, b)| (n.as_str(), b.used)).collect();
    assert_eq!(
        names,
        [
            ("fence-file", Use::Run),
            ("fence-file-stale", Use::Run),
            ("put-row", Use::Save),
            ("set-row", Use::Save),
            ("sqlite-schema", Use::Run),
            ("sqlite-stale", Use::Run),
            ("sqlite-write", Use::Run),
        ]
    );
    assert!(blocks["fence-file"].code.contains("ftctl lock report -- sh -c '"));
    assert!(blocks["fence-file"].code.contains("ftctl fence check --file report.fence \"$FTCOORD_FENCE\" &&"));
}

#[test]
fn the_block_reader_refuses_what_it_cannot_run() {
    let ok = "x\n<!-- test: run a -->\n\n```sh\necho 1\n```\n```text\nnot run\n```\n<!-- test: save b -->\n```sh\n#!/bin/sh\n```\n";
    let b = blocks(ok).unwrap();
    assert_eq!(b["a"], Block { used: Use::Run, code: "echo 1\n".into() });
    assert_eq!(b["b"], Block { used: Use::Save, code: "#!/bin/sh\n".into() });
    for (doc, error) in [
        ("```sh\necho\n```\n", "line 1: sh block without a test marker"),
        ("<!-- test: run a -->\ntext\n```sh\n```\n", "line 1: marker not followed by a block"),
        ("<!-- test: run a -->\n", "line 1: marker not followed by a block"),
        ("<!-- test: run a -->\n```text\n```\n", "line 1: marked block a is \"text\", not sh"),
        ("<!-- test: go a -->\n", "line 1: marker \"<!-- test: go a -->\" is not `test: run|save NAME`"),
        ("<!-- test: run a -->\n```sh\n```\n<!-- test: run a -->\n```sh\n```\n", "line 4: block name a used twice"),
        ("<!-- test: run a -->\n```sh\necho\n", "line 2: block not closed"),
    ] {
        assert_eq!(blocks(doc), Err(error.to_string()), "{doc:?}");
    }
}

#[test]
fn the_examples_run_under_a_real_lock_and_refuse_a_stale_fence() {
    // First, so that a missing sqlite3 fails the test at once.
    let sqlite3 = sqlite3();
    let blocks = blocks(&doc()).unwrap_or_else(|e| panic!("docs/fencing.md: {e}"));
    let c = Cluster::start("electd", 3, "").expect("an electd cluster (cargo build --workspace --bins)");
    let s = Scratch::new(c.node(2).client.to_string());

    // The fence file: each grant's fence is recorded and the write made.
    let out = s.run(&blocks, "fence-file");
    assert_eq!(out.code, 0, "{out:?}");
    let first = record(&s.read("report.fence"));
    assert!(first >= 1 << 64, "a fence of the first term on: {first}");
    assert_eq!(out.stdout, format!("{first}\n"), "cat report.fence");
    assert_eq!(s.read("report.log"), format!("written under fence {first}\n").as_bytes());

    let out = s.run(&blocks, "fence-file");
    assert_eq!(out.code, 0, "{out:?}");
    let second = record(&s.read("report.fence"));
    assert!(second > first, "{second} after {first}");
    assert_eq!(s.read("report.log"), format!("written under fence {first}\nwritten under fence {second}\n").as_bytes());

    // A stale fence: refused, nothing written.
    let (fence_before, log_before) = (s.read("report.fence"), s.read("report.log"));
    let out = s.run(&blocks, "fence-file-stale");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "exit 65\n", "{out:?}");
    assert_eq!(
        out.stderr,
        format!("ftctl: stale fence 1 ≤ {second} (the largest recorded in report.fence); nothing changed\n")
    );
    assert_eq!(s.read("report.fence"), fence_before, "the fence file changed");
    assert_eq!(s.read("report.log"), log_before, "the stale holder wrote");

    // SQLite: the table, the scripts, two writes under the lock.
    s.save(&blocks, "put-row");
    s.save(&blocks, "set-row");
    let out = s.run(&blocks, "sqlite-schema");
    assert_eq!((out.code, out.stdout.as_str(), out.stderr.as_str()), (0, "", ""), "{out:?}");
    let out = s.run(&blocks, "sqlite-write");
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let row_fence: u128 = out
        .stdout
        .strip_prefix("daily|totals: 43, Bob's run|")
        .and_then(|f| f.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("{out:?}"))
        .parse()
        .unwrap();
    assert!(row_fence > second + 1, "two more grants after {second}: {row_fence}");
    let stored = s.sql(&sqlite3, "SELECT fence FROM resource WHERE id = 'daily'");
    assert_eq!(stored, format!("{row_fence:039}\n"), "39 digits, zero-padded");

    // A stale fence changes no row, through either form.
    let dump = || s.sql(&sqlite3, ".dump");
    let before = dump();
    let out = s.run(&blocks, "sqlite-stale");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, format!("put-row: exit 65\nset-row: exit 65\ndaily|totals: 43, Bob's run|{row_fence}\n"));
    assert_eq!(
        out.stderr,
        "put-row: stale fence 1: daily was written under a fence at least as large; nothing changed\n\
         set-row: not written: no row daily, or stale fence 1 (a fence at least as large wrote it)\n"
    );
    assert_eq!(dump(), before, "a stale write changed the database");

    // Equal is stale too; one fence larger is not.
    let same = row_fence.to_string();
    for script in ["./put-row daily 'again'", "./set-row daily 'again'"] {
        let out = s.sh(script, &[("FTCOORD_FENCE", &same)]);
        assert_eq!(out.code, 65, "{script}: {out:?}");
    }
    assert_eq!(dump(), before, "a write with an equal fence changed the database");
    let next = (row_fence + 1).to_string();
    let out = s.sh("./set-row daily 'next'", &[("FTCOORD_FENCE", &next)]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(s.sql(&sqlite3, "SELECT value, fence FROM resource"), format!("next|{:039}\n", row_fence + 1));

    // put-row creates an absent row; set-row does not.
    let out = s.sh("./set-row weekly 'w'", &[("FTCOORD_FENCE", "5")]);
    assert_eq!(out.code, 65, "{out:?}");
    assert!(out.stderr.contains("no row weekly"), "{out:?}");
    let out = s.sh("./put-row weekly 'w'", &[("FTCOORD_FENCE", "5")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(s.sql(&sqlite3, "SELECT value, fence FROM resource WHERE id = 'weekly'"), format!("w|{:039}\n", 5));

    // A FTCOORD_FENCE that is no fence reaches no SQL.
    let before = dump();
    for fence in ["", "1; DROP TABLE resource", "-1", "1e3"] {
        for script in ["./put-row daily x", "./set-row daily x"] {
            let out = s.sh(script, &[("FTCOORD_FENCE", fence)]);
            assert_eq!(out.code, 2, "{script} {fence:?}: {out:?}");
            assert!(out.stderr.contains("FTCOORD_FENCE is not a fence"), "{out:?}");
        }
    }
    assert_eq!(dump(), before);
}
