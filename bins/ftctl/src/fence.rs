//! `ftctl fence check --file PATH FENCE`: the resource's half of fencing
//! (docs/fencing.md). A lock holder's fence only helps if the resource
//! refuses an older one; this keeps, in a file, the largest fence accepted
//! so far and accepts FENCE only if it is larger.
//!
//! The record is one line: the fence in decimal (no sign, no leading
//! zeros) and a newline, so `cat` shows it and a shell reads it. A missing
//! or empty file records no fence. Anything else is refused, unchanged: in
//! particular a number without its newline, which is what a truncated
//! record would look like (and would read as a smaller fence).
//!
//! One check runs at a time per PATH: an exclusive `flock` on `PATH.lock`
//! (created if missing, never deleted, so every checker locks the same
//! inode) is held across read, compare and write. A new record is written
//! to `PATH.tmp`, fsynced, renamed over PATH, and the directory fsynced:
//! after exit 0 the fence is recorded durably, and a crash at any point
//! leaves the old record or the new one, never a mix.
//!
//! The decision ([`decide`]) and the parsing ([`parse_record`],
//! [`parse_fence`]) are pure; [`check`] does the file work around them.

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};

use crate::exit;

/// What to do with a fence, given the largest one recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The fence is larger than every recorded one: record it (exit 0).
    Record,
    /// The fence is not larger than `recorded`: refuse it, change nothing
    /// (exit 65).
    Stale { recorded: u128 },
}

/// The decision for `fence` against the largest recorded fence (`None`:
/// no record yet, any fence is accepted).
pub fn decide(recorded: Option<u128>, fence: u128) -> Decision {
    match recorded {
        Some(recorded) if fence <= recorded => Decision::Stale { recorded },
        _ => Decision::Record,
    }
}

/// The message (after `ftctl: `) for a refused `fence`.
pub fn stale_message(fence: u128, recorded: u128, path: &Path) -> String {
    format!("stale fence {fence} ≤ {recorded} (the largest recorded in {}); nothing changed", path.display())
}

/// The longest record: the 39 digits of `u128::MAX` and a newline.
pub const MAX_RECORD_LEN: usize = 40;

/// Why some text is not a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadNumber {
    /// No digits at all.
    Empty,
    /// A byte that is not a decimal digit (a sign, a space, a letter).
    NotDigit { offset: usize, byte: u8 },
    /// A `0` before other digits.
    LeadingZero,
    /// Above `u128::MAX`.
    TooLarge,
}

impl fmt::Display for BadNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BadNumber::Empty => write!(f, "it is empty"),
            BadNumber::NotDigit { offset, byte } if byte.is_ascii_graphic() => {
                write!(f, "{:?} (byte 0x{byte:02x}) at offset {offset} is not a decimal digit", byte as char)
            }
            BadNumber::NotDigit { offset, byte } => {
                write!(f, "byte 0x{byte:02x} at offset {offset} is not a decimal digit")
            }
            BadNumber::LeadingZero => write!(f, "it has a leading zero"),
            BadNumber::TooLarge => write!(f, "it is larger than the largest fence, 2^128 - 1 = {}", u128::MAX),
        }
    }
}

/// A fence written as `FTCOORD_FENCE` is: decimal digits, no sign, no
/// leading zeros, at most `u128::MAX`.
pub fn parse_fence(text: &[u8]) -> Result<u128, BadNumber> {
    if text.is_empty() {
        return Err(BadNumber::Empty);
    }
    if let Some(offset) = text.iter().position(|b| !b.is_ascii_digit()) {
        return Err(BadNumber::NotDigit { offset, byte: text[offset] });
    }
    if text.len() > 1 && text[0] == b'0' {
        return Err(BadNumber::LeadingZero);
    }
    text.iter().try_fold(0u128, |n, &d| n.checked_mul(10)?.checked_add(u128::from(d - b'0'))).ok_or(BadNumber::TooLarge)
}

/// FENCE on the command line (clap's value parser): an error exits 2.
pub fn parse_arg(text: &str) -> Result<u128, String> {
    parse_fence(text.as_bytes())
        .map_err(|e| format!("not a fence (decimal digits without sign or leading zeros, below 2^128): {e}"))
}

/// Why a file's content is not a fence record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRecord {
    /// Longer than any record ([`MAX_RECORD_LEN`] bytes).
    TooLong,
    /// The number is not followed by a newline.
    NoNewline,
    /// More than one line.
    SeveralLines,
    /// The line is not a fence.
    Number(BadNumber),
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRecord::TooLong => write!(f, "it is longer than any record ({MAX_RECORD_LEN} bytes at most)"),
            BadRecord::NoNewline => write!(f, "the number is not followed by a newline (a truncated record?)"),
            BadRecord::SeveralLines => write!(f, "it has more than one line"),
            BadRecord::Number(e) => write!(f, "its line is not a fence: {e}"),
        }
    }
}

/// The fence a record's `content` holds: `None` for an empty file, else
/// one line, the fence as [`parse_fence`] reads it, and a newline.
pub fn parse_record(content: &[u8]) -> Result<Option<u128>, BadRecord> {
    if content.is_empty() {
        return Ok(None);
    }
    if content.len() > MAX_RECORD_LEN {
        return Err(BadRecord::TooLong);
    }
    let Some(line) = content.strip_suffix(b"\n") else {
        return Err(if content.contains(&b'\n') { BadRecord::SeveralLines } else { BadRecord::NoNewline });
    };
    if line.contains(&b'\n') {
        return Err(BadRecord::SeveralLines);
    }
    parse_fence(line).map(Some).map_err(BadRecord::Number)
}

/// A record's content for `fence`.
pub fn format_record(fence: u128) -> String {
    format!("{fence}\n")
}

/// Runs `ftctl fence check`: prints any error, returns the exit status.
pub fn run(path: &Path, fence: u128) -> u8 {
    match check(path, fence) {
        Ok(Decision::Record) => exit::OK,
        Ok(Decision::Stale { recorded }) => {
            eprintln!("ftctl: {}", stale_message(fence, recorded, path));
            exit::STALE_FENCE
        }
        Err(e) => {
            eprintln!("ftctl: {e}");
            exit::ERROR
        }
    }
}

/// Where a record's files are: the record, its lock file, its temporary
/// file, and the directory holding them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub record: PathBuf,
    pub lock: PathBuf,
    pub tmp: PathBuf,
    pub dir: PathBuf,
}

/// The files of the record at `path`: `PATH.lock` and `PATH.tmp` beside it.
pub fn paths(path: &Path) -> Result<Paths, String> {
    let not_a_file = || format!("--file {}: names no file (it is empty, ends in /, or is . or ..)", path.display());
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(not_a_file());
    }
    let name = path.file_name().ok_or_else(not_a_file)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let beside = |suffix: &str| {
        let mut n = OsString::from(name);
        n.push(suffix);
        dir.join(n)
    };
    Ok(Paths { record: path.to_path_buf(), lock: beside(".lock"), tmp: beside(".tmp"), dir })
}

/// What a path is, in words, for one that is not a regular file.
fn kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, t: std::fs::FileType) -> String {
    let why = if t.is_symlink() {
        " (name the file itself: the record is replaced by a rename, which would replace the link)"
    } else {
        ""
    };
    format!("{} is {}, not a fence record{why}; nothing changed", path.display(), kind(t))
}

/// Checks `fence` against the record at `path` and records it if it is
/// larger, all under the record's lock.
pub fn check(path: &Path, fence: u128) -> Result<Decision, String> {
    let p = paths(path)?;
    // Before creating the lock file: a PATH that can never be a record
    // (a directory, a link) is refused without leaving anything behind.
    match std::fs::symlink_metadata(&p.record) {
        Ok(m) if !m.file_type().is_file() => return Err(not_regular(&p.record, m.file_type())),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot look up {}: {e}", p.record.display())),
    }
    let lock = open_lock(&p)?;
    loop {
        match rustix::fs::flock(&lock, FlockOperation::LockExclusive) {
            Ok(()) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("cannot lock {}: {}", p.lock.display(), io::Error::from(e))),
        }
    }
    // The lock is released when `lock` is closed, on return (or exit).
    let (recorded, old) = read_record(&p.record)?;
    let decision = decide(recorded, fence);
    if decision == Decision::Record {
        write_record(&p, fence, old.as_ref())?;
    }
    drop(lock);
    Ok(decision)
}

/// Opens (creating it if missing) the record's lock file.
fn open_lock(p: &Paths) -> Result<File, String> {
    match OpenOptions::new().append(true).create(true).open(&p.lock) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound && !p.dir.exists() => Err(format!(
            "cannot create the lock file {}: the directory {} does not exist",
            p.lock.display(),
            p.dir.display()
        )),
        Err(e) => Err(format!("cannot create or open the lock file {}: {e}", p.lock.display())),
    }
}

/// The fence recorded at `path` (`None`: no file, or an empty one) and
/// the record's metadata (`None`: no file).
fn read_record(path: &Path) -> Result<(Option<u128>, Option<std::fs::Metadata>), String> {
    // O_NOFOLLOW: a link is refused, not read through; O_NONBLOCK: a FIFO
    // does not block the open (it is refused below).
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok((None, None)),
        Err(rustix::io::Errno::LOOP) => {
            return Err(format!(
                "{} is a symbolic link, not a fence record (name the file itself: the record is replaced by a \
                 rename, which would replace the link); nothing changed",
                path.display()
            ))
        }
        Err(e) => return Err(format!("cannot open {}: {}; nothing changed", path.display(), io::Error::from(e))),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(|e| format!("cannot look up {}: {e}; nothing changed", path.display()))?;
    if !meta.file_type().is_file() {
        return Err(not_regular(path, meta.file_type()));
    }
    let mut content = Vec::with_capacity(MAX_RECORD_LEN + 1);
    file.take(MAX_RECORD_LEN as u64 + 1)
        .read_to_end(&mut content)
        .map_err(|e| format!("cannot read {}: {e}; nothing changed", path.display()))?;
    let recorded = parse_record(&content).map_err(|e| {
        format!(
            "{} is not a fence record (one decimal number and a newline, as ftctl fence check writes): {e}; \
             nothing changed",
            path.display()
        )
    })?;
    Ok((recorded, Some(meta)))
}

/// Records `fence` durably: `PATH.tmp` written, fsynced and renamed over
/// PATH, then the directory fsynced. The new file keeps the old one's
/// permission bits.
fn write_record(p: &Paths, fence: u128, old: Option<&std::fs::Metadata>) -> Result<(), String> {
    // A temporary file left by a run that died: we hold the lock, so no
    // live checker is writing it.
    match std::fs::remove_file(&p.tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot remove the stale {}: {e}; nothing changed", p.tmp.display())),
    }
    let written = (|| -> io::Result<()> {
        let mut tmp = OpenOptions::new().write(true).create_new(true).open(&p.tmp)?;
        if let Some(old) = old {
            tmp.set_permissions(old.permissions())?;
        }
        tmp.write_all(format_record(fence).as_bytes())?;
        tmp.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&p.tmp);
        return Err(format!("cannot write {}: {e}; nothing changed", p.tmp.display()));
    }
    if let Err(e) = std::fs::rename(&p.tmp, &p.record) {
        let _ = std::fs::remove_file(&p.tmp);
        return Err(format!("cannot rename {} to {}: {e}; nothing changed", p.tmp.display(), p.record.display()));
    }
    File::open(&p.dir).and_then(|d| d.sync_all()).map_err(|e| {
        format!(
            "fence {fence} written to {}, but the directory {} could not be fsynced, so it may not survive a \
             crash: {e}",
            p.record.display(),
            p.dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn decide_accepts_only_a_larger_fence() {
        assert_eq!(decide(None, 0), Decision::Record);
        assert_eq!(decide(None, u128::MAX), Decision::Record);
        assert_eq!(decide(Some(7), 8), Decision::Record);
        assert_eq!(decide(Some(7), 7), Decision::Stale { recorded: 7 });
        assert_eq!(decide(Some(7), 6), Decision::Stale { recorded: 7 });
        assert_eq!(decide(Some(0), 0), Decision::Stale { recorded: 0 });
        assert_eq!(decide(Some(u128::MAX), u128::MAX), Decision::Stale { recorded: u128::MAX });
        assert_eq!(decide(Some(u128::MAX - 1), u128::MAX), Decision::Record);
    }

    #[test]
    fn the_stale_message_names_both_fences_and_the_file() {
        assert_eq!(
            stale_message(7, 7, Path::new("/var/lib/app/fence")),
            "stale fence 7 ≤ 7 (the largest recorded in /var/lib/app/fence); nothing changed"
        );
        assert_eq!(
            stale_message(3, 18446744073709551623, Path::new("f")),
            "stale fence 3 ≤ 18446744073709551623 (the largest recorded in f); nothing changed"
        );
    }

    #[test]
    fn fences_are_plain_decimal_u128() {
        assert_eq!(parse_fence(b"0"), Ok(0));
        assert_eq!(parse_fence(b"7"), Ok(7));
        assert_eq!(parse_fence(b"18446744073709551623"), Ok((1 << 64) + 7));
        assert_eq!(parse_fence(u128::MAX.to_string().as_bytes()), Ok(u128::MAX));
        assert_eq!(parse_fence(b"340282366920938463463374607431768211456"), Err(BadNumber::TooLarge));
        assert_eq!(parse_fence(b"9999999999999999999999999999999999999999999"), Err(BadNumber::TooLarge));
        assert_eq!(parse_fence(b""), Err(BadNumber::Empty));
        assert_eq!(parse_fence(b"07"), Err(BadNumber::LeadingZero));
        assert_eq!(parse_fence(b"00"), Err(BadNumber::LeadingZero));
        assert_eq!(parse_fence(b"+7"), Err(BadNumber::NotDigit { offset: 0, byte: b'+' }));
        assert_eq!(parse_fence(b"-1"), Err(BadNumber::NotDigit { offset: 0, byte: b'-' }));
        assert_eq!(parse_fence(b" 7"), Err(BadNumber::NotDigit { offset: 0, byte: b' ' }));
        assert_eq!(parse_fence(b"7 "), Err(BadNumber::NotDigit { offset: 1, byte: b' ' }));
        assert_eq!(parse_fence(b"1e3"), Err(BadNumber::NotDigit { offset: 1, byte: b'e' }));
        assert_eq!(parse_fence("٣".as_bytes()), Err(BadNumber::NotDigit { offset: 0, byte: 0xd9 }));
    }

    #[test]
    fn bad_numbers_say_exactly_what_is_wrong() {
        let text = |e: BadNumber| e.to_string();
        assert_eq!(text(BadNumber::Empty), "it is empty");
        assert_eq!(text(BadNumber::LeadingZero), "it has a leading zero");
        assert_eq!(
            text(BadNumber::NotDigit { offset: 2, byte: b'x' }),
            "'x' (byte 0x78) at offset 2 is not a decimal digit"
        );
        assert_eq!(text(BadNumber::NotDigit { offset: 0, byte: b' ' }), "byte 0x20 at offset 0 is not a decimal digit");
        assert_eq!(
            text(BadNumber::TooLarge),
            "it is larger than the largest fence, 2^128 - 1 = 340282366920938463463374607431768211455"
        );
        assert_eq!(
            parse_arg("x").unwrap_err(),
            "not a fence (decimal digits without sign or leading zeros, below 2^128): 'x' (byte 0x78) at offset 0 \
             is not a decimal digit"
        );
        assert_eq!(parse_arg("42"), Ok(42));
    }

    #[test]
    fn records_are_one_line_or_empty() {
        assert_eq!(parse_record(b""), Ok(None));
        assert_eq!(parse_record(b"0\n"), Ok(Some(0)));
        assert_eq!(parse_record(b"7\n"), Ok(Some(7)));
        let max = format_record(u128::MAX);
        assert_eq!(max.len(), MAX_RECORD_LEN);
        assert_eq!(parse_record(max.as_bytes()), Ok(Some(u128::MAX)));
        for fence in [0, 1, 7, 10, (1 << 64) + 7, u128::MAX] {
            assert_eq!(parse_record(format_record(fence).as_bytes()), Ok(Some(fence)), "{fence}");
        }
    }

    #[test]
    fn anything_else_is_not_a_record() {
        use BadNumber::*;
        use BadRecord::*;
        for (content, expected) in [
            (&b"7"[..], NoNewline),
            (b"\n", Number(Empty)),
            (b"\n\n", SeveralLines),
            (b"7\n\n", SeveralLines),
            (b"7\n8\n", SeveralLines),
            (b"7\n8", SeveralLines),
            (b"7\r\n", Number(NotDigit { offset: 1, byte: b'\r' })),
            (b" 7\n", Number(NotDigit { offset: 0, byte: b' ' })),
            (b"7 \n", Number(NotDigit { offset: 1, byte: b' ' })),
            (b"\t7\n", Number(NotDigit { offset: 0, byte: b'\t' })),
            (b"+7\n", Number(NotDigit { offset: 0, byte: b'+' })),
            (b"007\n", Number(LeadingZero)),
            (b"garbage\n", Number(NotDigit { offset: 0, byte: b'g' })),
            (b"\x00\x00\x00\n", Number(NotDigit { offset: 0, byte: 0 })),
            (b"340282366920938463463374607431768211456\n", Number(TooLarge)),
            (b"3402823669209384634633746074317682114550\n", TooLong),
            (&[b'1'; 4096][..], TooLong),
        ] {
            assert_eq!(parse_record(content), Err(expected), "{:?}", String::from_utf8_lossy(content));
        }
        assert_eq!(BadRecord::NoNewline.to_string(), "the number is not followed by a newline (a truncated record?)");
        assert_eq!(BadRecord::SeveralLines.to_string(), "it has more than one line");
        assert_eq!(BadRecord::TooLong.to_string(), "it is longer than any record (40 bytes at most)");
        assert_eq!(BadRecord::Number(LeadingZero).to_string(), "its line is not a fence: it has a leading zero");
    }

    #[test]
    fn the_lock_and_temporary_files_sit_beside_the_record() {
        let p = paths(Path::new("/var/lib/app/fence")).unwrap();
        assert_eq!(p.lock, Path::new("/var/lib/app/fence.lock"));
        assert_eq!(p.tmp, Path::new("/var/lib/app/fence.tmp"));
        assert_eq!(p.dir, Path::new("/var/lib/app"));
        let p = paths(Path::new("fence")).unwrap();
        assert_eq!((p.lock.as_path(), p.dir.as_path()), (Path::new("./fence.lock"), Path::new(".")));
        for bad in ["", "/", ".", "..", "dir/", "a/.."] {
            let e = paths(Path::new(bad)).unwrap_err();
            assert!(e.contains("names no file"), "{bad:?}: {e}");
        }
    }

    /// `ftctl ARGS` parsed.
    fn parse(args: &[&str]) -> Result<crate::Cli, clap::Error> {
        crate::Cli::try_parse_from(std::iter::once("ftctl").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_takes_a_file_and_a_fence() {
        let cli = parse(&["fence", "check", "--file", "/tmp/f", "18446744073709551623"]).unwrap();
        match cli.command {
            crate::Cmd::Fence { command: crate::FenceCmd::Check { file, fence } } => {
                assert_eq!((file.as_path(), fence), (Path::new("/tmp/f"), (1 << 64) + 7));
            }
            other => panic!("not fence check: {other:?}"),
        }
        for args in [
            &["fence", "check", "--file", "f", "x"][..],
            &["fence", "check", "--file", "f", "-1"],
            &["fence", "check", "--file", "f", "340282366920938463463374607431768211456"],
            &["fence", "check", "--file", "f"],
            &["fence", "check", "7"],
            &["fence"],
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
    }

    #[test]
    fn completions_and_the_man_page_know_fence_check() {
        let mut out = Vec::new();
        crate::completions(clap_complete::Shell::Bash, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("ftctl__subcmd__fence__subcmd__check") && text.contains("--file"), "fence check missing");
        let mut out = Vec::new();
        crate::man(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("ftctl\\-fence"), "the fence page is missing");
    }

    #[test]
    fn a_check_records_only_larger_fences_durably() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fence");
        let read = || std::fs::read_to_string(&path).unwrap();
        assert_eq!(check(&path, 7), Ok(Decision::Record));
        assert_eq!(read(), "7\n");
        assert!(dir.path().join("fence.lock").is_file());
        assert!(!dir.path().join("fence.tmp").exists());
        assert_eq!(check(&path, 7), Ok(Decision::Stale { recorded: 7 }));
        assert_eq!(check(&path, 3), Ok(Decision::Stale { recorded: 7 }));
        assert_eq!(read(), "7\n");
        assert_eq!(check(&path, u128::MAX), Ok(Decision::Record));
        assert_eq!(read(), format!("{}\n", u128::MAX));
        // An empty file is an empty record; a leftover temporary file is
        // replaced.
        std::fs::write(&path, "").unwrap();
        std::fs::write(dir.path().join("fence.tmp"), "junk").unwrap();
        assert_eq!(check(&path, 0), Ok(Decision::Record));
        assert_eq!(read(), "0\n");
        assert!(!dir.path().join("fence.tmp").exists());
    }

    #[test]
    fn a_check_keeps_the_records_permission_bits() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fence");
        std::fs::write(&path, "1\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(check(&path, 2), Ok(Decision::Record));
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
    }

    #[test]
    fn what_is_not_a_record_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fence");
        std::fs::write(&path, "garbage\n").unwrap();
        let e = check(&path, 9).unwrap_err();
        assert_eq!(
            e,
            format!(
                "{} is not a fence record (one decimal number and a newline, as ftctl fence check writes): its line \
                 is not a fence: 'g' (byte 0x67) at offset 0 is not a decimal digit; nothing changed",
                path.display()
            )
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"garbage\n");

        // A directory: refused before the lock file is made.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let e = check(&sub, 9).unwrap_err();
        assert_eq!(e, format!("{} is a directory, not a fence record; nothing changed", sub.display()));
        assert!(!dir.path().join("sub.lock").exists());

        // A link: refused, its target untouched.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = check(&link, 9).unwrap_err();
        assert!(e.starts_with(&format!("{} is a symbolic link, not a fence record", link.display())), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"garbage\n");

        // A missing directory.
        let deep = dir.path().join("nowhere/fence");
        let e = check(&deep, 9).unwrap_err();
        assert_eq!(
            e,
            format!(
                "cannot create the lock file {}/nowhere/fence.lock: the directory {}/nowhere does not exist",
                dir.path().display(),
                dir.path().display()
            )
        );
    }

    #[test]
    fn concurrent_checks_in_one_process_run_one_at_a_time() {
        // flock excludes open file descriptions, so threads exclude each
        // other as processes do.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fence");
        let results: Vec<(u128, Decision)> = std::thread::scope(|s| {
            let handles: Vec<_> = (1..=32u128)
                .map(|f| {
                    let path = &path;
                    s.spawn(move || (f, check(path, f).unwrap()))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "32\n");
        let accepted: Vec<u128> = results.iter().filter(|(_, d)| *d == Decision::Record).map(|(f, _)| *f).collect();
        assert!(accepted.contains(&32), "{results:?}");
        for (f, d) in &results {
            if let Decision::Stale { recorded } = d {
                assert!(recorded >= f && accepted.contains(recorded), "{f}: {d:?} ({results:?})");
            }
        }
    }
}
