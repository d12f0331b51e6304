//! The node's `state_dir` and its state file (foundation.md, Durable state).
//!
//! [`StateDir::open`] creates the directory if it is missing (mode 0700) and
//! takes an exclusive `flock` on its `lock` file with std's
//! [`File::try_lock`], held for as long as the [`StateDir`] lives: a
//! directory belongs to one process. The holder writes its PID into the lock
//! file so that a second process can name it.
//!
//! Each daemon keeps one small state file, `<daemon>.state`, which
//! [`StateDir::store`] replaces atomically (a temp file in the same
//! directory, written, fsynced, renamed over the old file, then the
//! directory fsynced) and [`StateDir::load`] reads back. A missing file is a
//! fresh node (`Ok(None)`); anything else that is not a complete file
//! written by this daemon in a format this build reads is an error, never a
//! silent reset.
//!
//! # The file format
//!
//! ```text
//! # ftcoord-state version=1 daemon=ntmutexd bytes=112 blake3=3b0c…(64 hex digits)
//! # Written atomically by ntmutexd; the header's checksum guards everything below it.
//! incarnation = 1718000000000
//! ```
//!
//! The first line is the header: a format version, the daemon that wrote
//! the file, the length of the body (everything after the first newline) in
//! bytes and the unkeyed BLAKE3 hash of the body. The body is TOML, the
//! serialized value. Why this shape:
//!
//! - **TOML body**: an operator debugging a node can read it with `cat`, and
//!   the whole file, header included (a comment), is valid TOML. `toml` and
//!   serde are already what the config loader uses; the file holds a
//!   handful of counters, so the parse cost does not matter. The price:
//!   TOML integers are 64-bit signed, so a `u64` above `i64::MAX` cannot be
//!   stored and [`StateDir::store`] refuses it ([`StoreError::Encode`])
//!   rather than writing something else; no counter gets there in practice
//!   (wall-clock milliseconds reach 2⁶³ in 292 million years).
//! - **Length and checksum**: the rename makes a torn write impossible on a
//!   POSIX file system that honours fsync, but not a bad disk, a copy that
//!   stopped half way or a hand edit. The length tells a truncated file
//!   apart from a corrupted one in the error; BLAKE3 (already used by
//!   `wire`) catches the rest. It is not a MAC: the directory is 0700.
//!   To edit a file by hand on purpose, recompute both:
//!   `tail -n +2 FILE | wc -c` and `tail -n +2 FILE | b3sum`.
//! - **Daemon name**: two daemons pointed at one directory by mistake are
//!   stopped by the lock; a file copied from another daemon's directory is
//!   stopped by the name.
//! - **Version**: a file written by a newer build (which may hold values
//!   this build would drop on its next write) is refused by number, with a
//!   clear error, before anything else is parsed.
//!
//! Used by the drivers (`runtime`); cores never touch files.

use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The state-file format this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// The first word of every state file.
const MAGIC: &str = "# ftcoord-state";

/// Name of the lock file inside the directory.
const LOCK_FILE: &str = "lock";

/// Why the state directory or its file cannot be used. Each variant says
/// which exit status fits; [`StoreError::exit_status`] gives it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory cannot be created, opened, locked or written in: a config problem (exit 2).
    #[error("key 'state_dir': cannot {action} {}: {source}", path.display())]
    Dir {
        /// The directory (or the file in it) that failed.
        path: PathBuf,
        /// What was being done: "create", "open the lock file in", ….
        action: &'static str,
        /// The operating system's answer.
        source: io::Error,
    },
    /// Another process (or another open in this one) holds the directory (exit 1).
    #[error("state_dir {} is in use by another process ({}); a state directory belongs to one node", path.display(), pid_text(*.pid))]
    Locked {
        /// The directory.
        path: PathBuf,
        /// The holder's PID from the lock file, if it could be read.
        pid: Option<u32>,
    },
    /// The state file exists but cannot be read (exit 1).
    #[error("cannot read state file {}: {source}", path.display())]
    Read {
        /// The state file.
        path: PathBuf,
        /// The operating system's answer.
        source: io::Error,
    },
    /// The state file is truncated, corrupted or not a state file (exit 1).
    #[error("state file {} is corrupt: {problem} (refusing to start rather than forget promises; restore it, or remove it to start as a fresh node)", path.display())]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The state file was written by a newer build in a format this one cannot read (exit 1).
    #[error("state file {} has format version {found}; this build reads up to version {supported}: run the newer build", path.display())]
    FutureVersion {
        /// The state file.
        path: PathBuf,
        /// The version in its header.
        found: u64,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The state file belongs to another daemon (exit 1).
    #[error("state file {} was written by {found}, not {expected}: each daemon needs its own state_dir", path.display())]
    WrongDaemon {
        /// The state file.
        path: PathBuf,
        /// The daemon named in its header.
        found: String,
        /// This daemon.
        expected: String,
    },
    /// The value cannot be written as TOML (e.g. an integer above `i64::MAX`) (exit 1).
    #[error("cannot encode the state for {}: {message}", path.display())]
    Encode {
        /// The state file.
        path: PathBuf,
        /// The serializer's complaint.
        message: String,
    },
    /// Writing, syncing or renaming the new state file failed (exit 1).
    #[error("cannot write state file {}: {source}", path.display())]
    Write {
        /// The state file.
        path: PathBuf,
        /// The operating system's answer.
        source: io::Error,
    },
    /// The stored incarnation is `u64::MAX`: no later life can be numbered (exit 1).
    #[error("the stored incarnation is {stored}: no later incarnation exists")]
    IncarnationExhausted {
        /// The stored incarnation.
        stored: u64,
    },
    /// The daemon name is not a short name of `[a-z0-9_-]` (a bug in the caller) (exit 1).
    #[error("invalid daemon name {0:?} for a state file")]
    InvalidDaemonName(String),
}

fn pid_text(pid: Option<u32>) -> String {
    pid.map_or_else(|| "pid unknown".to_owned(), |p| format!("pid {p}"))
}

impl StoreError {
    /// The exit status that fits: 2 for a directory that cannot be used
    /// (a config problem naming `state_dir`), 1 for everything else.
    pub fn exit_status(&self) -> u8 {
        if self.is_config_problem() {
            2
        } else {
            1
        }
    }

    /// Whether this is a configuration problem (the `state_dir` key).
    pub fn is_config_problem(&self) -> bool {
        matches!(self, StoreError::Dir { .. })
    }
}

/// A node's state directory, locked for this value's life.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    daemon: String,
    /// Holds the `flock`; closing it (on drop) releases the directory.
    _lock: File,
}

impl StateDir {
    /// Creates `path` if it is missing (mode 0700), locks it for `daemon`
    /// (a short lower-case name such as "ntmutexd"), writes this process's
    /// PID into the lock file, checks that files can be created in it, and
    /// removes temp files an interrupted [`store`](Self::store) left behind.
    pub fn open(path: impl AsRef<Path>, daemon: &str) -> Result<StateDir, StoreError> {
        let path = path.as_ref().to_path_buf();
        let name_ok = !daemon.is_empty()
            && daemon.len() <= 64
            && daemon.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(StoreError::InvalidDaemonName(daemon.to_owned()));
        }
        let dir_err = |action, source| StoreError::Dir { path: path.clone(), action, source };
        DirBuilder::new().recursive(true).mode(0o700).create(&path).map_err(|e| dir_err("create", e))?;

        let lock_path = path.join(LOCK_FILE);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| StoreError::Dir { path: lock_path.clone(), action: "open the lock file", source: e })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(StoreError::Locked { pid: holder_pid(&mut lock), path }),
            Err(TryLockError::Error(e)) => {
                return Err(StoreError::Dir { path: lock_path, action: "lock (flock)", source: e })
            }
        }
        let write_pid = |f: &mut File| -> io::Result<()> {
            f.set_len(0)?;
            f.rewind()?;
            f.write_all(format!("{}\n", std::process::id()).as_bytes())
        };
        write_pid(&mut lock).map_err(|e| StoreError::Dir {
            path: lock_path,
            action: "write the PID into",
            source: e,
        })?;

        // The lock file may predate a chmod: prove that new files can be made.
        tempfile::Builder::new().prefix(".probe.").tempfile_in(&path).map_err(|e| dir_err("create files in", e))?;

        let dir = StateDir { path, daemon: daemon.to_owned(), _lock: lock };
        dir.remove_stale_temp_files();
        Ok(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The daemon's state file, `<state_dir>/<daemon>.state`.
    pub fn state_file(&self) -> PathBuf {
        self.path.join(format!("{}.state", self.daemon))
    }

    /// Reads the state file: `Ok(None)` when there is none (a fresh node),
    /// the value when it is whole and ours, an error otherwise.
    pub fn load<T: DeserializeOwned>(&self) -> Result<Option<T>, StoreError> {
        let path = self.state_file();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::Read { path, source: e }),
        };
        let body = check(&bytes, &self.daemon).map_err(|c| c.into_error(path.clone(), &self.daemon))?;
        toml::from_str(body)
            .map(Some)
            .map_err(|e| StoreError::Corrupt { path, problem: format!("the body does not parse: {}", e.message()) })
    }

    /// Replaces the state file with `value`, atomically: a temp file in the
    /// directory, written and fsynced, renamed over the state file, then the
    /// directory fsynced. When this returns `Ok` the value survives a crash;
    /// when it fails the old file is still whole.
    pub fn store<T: Serialize>(&self, value: &T) -> Result<(), StoreError> {
        let path = self.state_file();
        let body = format!(
            "# Written atomically by {}; the header's checksum guards everything below it.\n{}",
            self.daemon,
            toml::to_string(value).map_err(|e| StoreError::Encode { path: path.clone(), message: e.to_string() })?
        );
        let contents = format!("{}\n{body}", header(&self.daemon, body.as_bytes()));
        let write_err = |source| StoreError::Write { path: path.clone(), source };
        let mut tmp = tempfile::Builder::new()
            .prefix(&self.temp_prefix())
            .suffix(".tmp")
            .tempfile_in(&self.path)
            .map_err(write_err)?;
        tmp.write_all(contents.as_bytes()).map_err(write_err)?;
        tmp.as_file().sync_all().map_err(write_err)?;
        tmp.persist(&path).map_err(|e| write_err(e.error))?;
        File::open(&self.path).and_then(|d| d.sync_all()).map_err(write_err)
    }

    /// Prefix of this daemon's temp files: hidden, and named after the file.
    fn temp_prefix(&self) -> String {
        format!(".{}.state.", self.daemon)
    }

    /// Best effort: a leftover temp file is harmless, only untidy.
    fn remove_stale_temp_files(&self) {
        let prefix = self.temp_prefix();
        let Ok(entries) = std::fs::read_dir(&self.path) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if (name.starts_with(&prefix) && name.ends_with(".tmp")) || name.starts_with(".probe.") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The holder's PID from the lock file. The holder writes it just after
/// locking, so an empty file is read again a few times.
fn holder_pid(lock: &mut File) -> Option<u32> {
    for attempt in 0..5 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut text = String::new();
        if lock.rewind().is_ok() && lock.read_to_string(&mut text).is_ok() {
            if let Ok(pid) = text.trim().parse() {
                return Some(pid);
            }
        }
    }
    None
}

/// The header line (without its newline) for `body`.
fn header(daemon: &str, body: &[u8]) -> String {
    format!("{MAGIC} version={FORMAT_VERSION} daemon={daemon} bytes={} blake3={}", body.len(), blake3::hash(body))
}

/// What [`check`] found wrong, before the path is known.
enum Problem {
    Corrupt(String),
    Future(u64),
    WrongDaemon(String),
}

impl Problem {
    fn into_error(self, path: PathBuf, daemon: &str) -> StoreError {
        match self {
            Problem::Corrupt(problem) => StoreError::Corrupt { path, problem },
            Problem::Future(found) => StoreError::FutureVersion { path, found, supported: FORMAT_VERSION },
            Problem::WrongDaemon(found) => StoreError::WrongDaemon { path, found, expected: daemon.to_owned() },
        }
    }
}

/// Checks the header of a state file against its body and `daemon`;
/// returns the body.
fn check<'a>(bytes: &'a [u8], daemon: &str) -> Result<&'a str, Problem> {
    let corrupt = |m: &str| Problem::Corrupt(m.to_owned());
    if bytes.is_empty() {
        return Err(corrupt("the file is empty"));
    }
    let Some(newline) = bytes.iter().position(|&b| b == b'\n') else {
        return Err(corrupt("the header line is incomplete (truncated file?)"));
    };
    let (head, body) = (&bytes[..newline], &bytes[newline + 1..]);
    let head = std::str::from_utf8(head).map_err(|_| corrupt("the header is not UTF-8"))?;
    let Some(fields) = head.strip_prefix(MAGIC).filter(|rest| rest.starts_with(' ')) else {
        return Err(corrupt("not an ftcoord state file (no '# ftcoord-state' header)"));
    };
    let field = |key: &str| {
        fields.split_whitespace().find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v))
    };
    // The version first: a newer format may have changed everything after it.
    let version: u64 =
        field("version").and_then(|v| v.parse().ok()).ok_or_else(|| corrupt("the header has no valid version"))?;
    if version > u64::from(FORMAT_VERSION) {
        return Err(Problem::Future(version));
    }
    if version == 0 {
        return Err(corrupt("the header names version 0"));
    }
    let found = field("daemon").ok_or_else(|| corrupt("the header names no daemon"))?;
    if found != daemon {
        return Err(Problem::WrongDaemon(found.to_owned()));
    }
    let len: usize =
        field("bytes").and_then(|v| v.parse().ok()).ok_or_else(|| corrupt("the header has no valid length"))?;
    let sum = field("blake3")
        .and_then(|v| blake3::Hash::from_hex(v).ok())
        .ok_or_else(|| corrupt("the header has no valid blake3 checksum"))?;
    if body.len() < len {
        return Err(Problem::Corrupt(format!("truncated: the body has {} of its {len} bytes", body.len())));
    }
    if body.len() > len {
        return Err(Problem::Corrupt(format!("the body has {} bytes, the header says {len}", body.len())));
    }
    // `Hash`'s equality is constant-time; not that it matters here.
    if blake3::hash(body) != sum {
        return Err(corrupt("checksum mismatch: the body was changed or damaged after it was written"));
    }
    std::str::from_utf8(body).map_err(|_| corrupt("the body is not UTF-8"))
}

/// The incarnation of a life that starts now: `max(wall_clock_ms, stored +
/// 1)`, so a life is newer than every stored one even when the clock was
/// stepped back, and never 0. Fails only when `stored` is `u64::MAX`.
pub fn next_incarnation(stored: Option<u64>, wall_clock_ms: u64) -> Result<u64, StoreError> {
    let after_stored = match stored {
        None => 1,
        Some(s) => s.checked_add(1).ok_or(StoreError::IncarnationExhausted { stored: s })?,
    };
    Ok(wall_clock_ms.max(after_stored))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde::Deserialize;

    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
    struct State {
        incarnation: u64,
        #[serde(default)]
        epochs: Vec<u64>,
    }

    fn state(incarnation: u64) -> State {
        State { incarnation, epochs: vec![3, 1 << 40] }
    }

    fn open(dir: &tempfile::TempDir) -> StateDir {
        StateDir::open(dir.path().join("s"), "testd").unwrap()
    }

    /// Stores `state(7)`, rewrites the file with `edit`, and returns the load error.
    fn load_after(edit: impl FnOnce(&str) -> Vec<u8>) -> StoreError {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(&tmp);
        dir.store(&state(7)).unwrap();
        let text = std::fs::read_to_string(dir.state_file()).unwrap();
        std::fs::write(dir.state_file(), edit(&text)).unwrap();
        dir.load::<State>().unwrap_err()
    }

    fn corrupt_problem(e: StoreError) -> String {
        match e {
            StoreError::Corrupt { problem, .. } => problem,
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_and_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(&tmp);
        assert_eq!(dir.load::<State>().unwrap(), None);
        dir.store(&state(5)).unwrap();
        assert_eq!(dir.load::<State>().unwrap(), Some(state(5)));
        dir.store(&state(6)).unwrap();
        assert_eq!(dir.load::<State>().unwrap(), Some(state(6)));
        assert_eq!(dir.state_file(), tmp.path().join("s/testd.state"));
        let text = std::fs::read_to_string(dir.state_file()).unwrap();
        assert!(text.starts_with("# ftcoord-state version=1 daemon=testd bytes="), "{text}");
        assert!(text.contains("\nincarnation = 6\n"), "{text}");
        // The whole file, header included, is TOML.
        let parsed: State = toml::from_str(&text).unwrap();
        assert_eq!(parsed, state(6));
        // Only the lock and the state file are left: no temp or probe files.
        let mut names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        assert_eq!(names, ["lock", "testd.state"]);
    }

    #[test]
    fn state_survives_closing_and_reopening() {
        let tmp = tempfile::tempdir().unwrap();
        open(&tmp).store(&state(9)).unwrap();
        assert_eq!(open(&tmp).load::<State>().unwrap(), Some(state(9)));
    }

    #[test]
    fn missing_directory_is_created_0700() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a/b/c");
        let dir = StateDir::open(&path, "testd").unwrap();
        assert_eq!(dir.path(), path);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(dir.load::<State>().unwrap(), None);
    }

    #[test]
    fn corrupt_body_is_a_checksum_mismatch() {
        let e = load_after(|t| t.replace("incarnation = 7", "incarnation = 8").into_bytes());
        assert!(corrupt_problem(e).contains("checksum mismatch"));
    }

    #[test]
    fn bad_checksum_is_detected() {
        let e = load_after(|t| {
            let at = t.find("blake3=").unwrap() + "blake3=".len();
            let flipped = if &t[at..at + 1] == "0" { "1" } else { "0" };
            format!("{}{flipped}{}", &t[..at], &t[at + 1..]).into_bytes()
        });
        assert!(corrupt_problem(e).contains("checksum mismatch"));
        let e = load_after(|t| t.replacen("blake3=", "blake3=zz", 1).into_bytes());
        assert!(corrupt_problem(e).contains("no valid blake3"));
    }

    #[test]
    fn truncated_files_are_named_as_such() {
        let e = load_after(|t| t.as_bytes()[..t.len() - 5].to_vec());
        let p = corrupt_problem(e);
        assert!(p.starts_with("truncated: the body has"), "{p}");
        let e = load_after(|t| t.as_bytes()[..20].to_vec());
        assert!(corrupt_problem(e).contains("header line is incomplete"));
        let e = load_after(|_| Vec::new());
        assert!(corrupt_problem(e).contains("empty"));
        let e = load_after(|t| format!("{t}extra = 1\n").into_bytes());
        assert!(corrupt_problem(e).contains("the header says"));
    }

    #[test]
    fn not_a_state_file() {
        let e = load_after(|_| b"incarnation = 7\n".to_vec());
        assert!(corrupt_problem(e).contains("not an ftcoord state file"));
        let e = load_after(|t| t.replacen("version=1", "version=x", 1).into_bytes());
        assert!(corrupt_problem(e).contains("no valid version"));
        let e = load_after(|t| t.replacen("version=1", "version=0", 1).into_bytes());
        assert!(corrupt_problem(e).contains("version 0"));
        let e = load_after(|t| [&[0xff, 0xfe], t.as_bytes()].concat());
        assert!(corrupt_problem(e).contains("header is not UTF-8"));
    }

    #[test]
    fn a_body_of_the_wrong_shape_is_corrupt() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(&tmp);
        #[derive(Serialize)]
        struct Other {
            incarnation: String,
        }
        dir.store(&Other { incarnation: "x".into() }).unwrap();
        let e = dir.load::<State>().unwrap_err();
        assert!(corrupt_problem(e).contains("does not parse"));
    }

    #[test]
    fn wrong_daemon_and_future_version() {
        let e = load_after(|t| t.replacen("daemon=testd", "daemon=electd", 1).into_bytes());
        assert!(
            matches!(&e, StoreError::WrongDaemon { found, expected, .. } if found == "electd" && expected == "testd"),
            "{e:?}"
        );
        // A newer version is refused by number, whatever follows it.
        let e = load_after(|t| t.replacen("version=1", "version=2", 1).replace("bytes=", "size=").into_bytes());
        assert!(matches!(e, StoreError::FutureVersion { found: 2, supported: 1, .. }), "{e:?}");
        assert!(e.to_string().contains("version 2; this build reads up to version 1"), "{e}");
    }

    #[test]
    fn error_messages_name_the_path_and_exit_status() {
        let e = load_after(|t| t.replace("7", "8").into_bytes());
        let text = e.to_string();
        assert!(text.contains("s/testd.state is corrupt: checksum mismatch"), "{text}");
        assert_eq!(e.exit_status(), 1);
    }

    #[test]
    fn an_interrupted_write_leaves_the_old_state() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(&tmp);
        dir.store(&state(1)).unwrap();
        // A crash after writing the temp file but before the rename: the
        // temp file stays behind, the state file is untouched.
        let mut stray =
            tempfile::Builder::new().prefix(&dir.temp_prefix()).suffix(".tmp").tempfile_in(dir.path()).unwrap();
        stray.write_all(b"# ftcoord-state version=1 daemon=testd bytes=999 blake3=00\nincarna").unwrap();
        let (_, stray_path) = stray.keep().unwrap();
        // And one that was whole but never persisted.
        let whole = tempfile::Builder::new().prefix(&dir.temp_prefix()).suffix(".tmp").tempfile_in(dir.path()).unwrap();
        drop(whole);
        assert_eq!(dir.load::<State>().unwrap(), Some(state(1)));
        drop(dir);
        // The next open cleans up after the crash, and the state is still there.
        let dir = open(&tmp);
        assert!(!stray_path.exists());
        assert_eq!(dir.load::<State>().unwrap(), Some(state(1)));
    }

    #[test]
    fn values_toml_cannot_hold_are_refused_not_written() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(&tmp);
        dir.store(&state(1)).unwrap();
        let e = dir.store(&State { incarnation: u64::MAX, epochs: vec![] }).unwrap_err();
        assert!(matches!(e, StoreError::Encode { .. }), "{e:?}");
        assert_eq!(dir.load::<State>().unwrap(), Some(state(1)));
        let big = State { incarnation: i64::MAX as u64, epochs: vec![] };
        dir.store(&big).unwrap();
        assert_eq!(dir.load::<State>().unwrap(), Some(big));
    }

    #[test]
    fn second_open_is_locked_and_names_the_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let first = open(&tmp);
        // flock belongs to the open file description: a second open in this
        // same process is refused too.
        let e = StateDir::open(tmp.path().join("s"), "testd").unwrap_err();
        match &e {
            StoreError::Locked { pid, path } => {
                assert_eq!(*pid, Some(std::process::id()));
                assert_eq!(path, &tmp.path().join("s"));
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(e.to_string().contains(&format!("pid {}", std::process::id())), "{e}");
        assert_eq!(e.exit_status(), 1);
        // Another daemon on the same directory is refused as well.
        assert!(matches!(StateDir::open(tmp.path().join("s"), "otherd"), Err(StoreError::Locked { .. })));
        drop(first);
        open(&tmp);
    }

    #[test]
    fn unusable_directory_is_a_config_error() {
        let tmp = tempfile::tempdir().unwrap();
        // A file where the directory should be.
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let e = StateDir::open(&file, "testd").unwrap_err();
        assert!(matches!(e, StoreError::Dir { action: "create", .. }), "{e:?}");
        assert_eq!(e.exit_status(), 2);
        assert!(e.to_string().starts_with("key 'state_dir': cannot create"), "{e}");
        // Below a file: refused even to root.
        let e = StateDir::open(file.join("state"), "testd").unwrap_err();
        assert!(matches!(e, StoreError::Dir { action: "create", .. }), "{e:?}");

        // A read-only directory, with and without a lock file from an earlier
        // life (root is not stopped by modes: then only that it does not panic).
        let ro = tmp.path().join("ro");
        StateDir::open(&ro, "testd").unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
        let bites = std::fs::write(ro.join("probe"), "x").is_err(); // not as root
        let r = StateDir::open(&ro, "testd");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700)).unwrap();
        if bites {
            let e = r.unwrap_err();
            assert!(matches!(e, StoreError::Dir { action: "create files in", .. }), "{e:?}");
            assert_eq!(e.exit_status(), 2);
        }
        let fresh = tmp.path().join("ro2");
        std::fs::create_dir(&fresh).unwrap();
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o500)).unwrap();
        let r = StateDir::open(&fresh, "testd");
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o700)).unwrap();
        if bites {
            let e = r.unwrap_err();
            assert!(matches!(e, StoreError::Dir { action: "open the lock file", .. }), "{e:?}");
            assert!(e.to_string().contains("key 'state_dir'"), "{e}");
        }
    }

    #[test]
    fn unreadable_state_file_is_a_read_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(&tmp);
        std::fs::create_dir(dir.state_file()).unwrap(); // a directory cannot be read as a file
        let e = dir.load::<State>().unwrap_err();
        assert!(matches!(e, StoreError::Read { .. }), "{e:?}");
        assert_eq!(e.exit_status(), 1);
    }

    #[test]
    fn daemon_names_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in ["", "a b", "../x", "Caps", "a\nb"] {
            let e = StateDir::open(tmp.path(), bad).unwrap_err();
            assert!(matches!(e, StoreError::InvalidDaemonName(_)), "{bad:?}: {e:?}");
        }
    }

    #[test]
    fn incarnations() {
        assert_eq!(next_incarnation(None, 1_000).unwrap(), 1_000);
        assert_eq!(next_incarnation(None, 0).unwrap(), 1);
        assert_eq!(next_incarnation(Some(5), 1_000).unwrap(), 1_000);
        // A clock stepped back: stored + 1, not the wall clock.
        assert_eq!(next_incarnation(Some(5_000), 1_000).unwrap(), 5_001);
        assert_eq!(next_incarnation(Some(1_000), 1_000).unwrap(), 1_001);
        assert_eq!(next_incarnation(Some(u64::MAX - 1), 0).unwrap(), u64::MAX);
        assert!(matches!(
            next_incarnation(Some(u64::MAX), u64::MAX),
            Err(StoreError::IncarnationExhausted { stored: u64::MAX })
        ));
    }
}
