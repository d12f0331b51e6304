//! Peer authentication: the cluster key, frame MACs and the UDP replay
//! window.
//!
//! A [`ClusterKey`] is 32 secret bytes shared by every member, read from a
//! key file (like corosync's `authkey`: raw or hex, mode 0600 or stricter).
//! When a key is configured every peer frame carries a 32-byte tag,
//! `blake3::keyed_hash(key, challenge || header || payload)`, where the
//! 16-byte challenge is the acceptor's per-connection nonce on TCP and all
//! zeroes on UDP. Frames are then replay-proof: on TCP because the
//! challenge is fresh per connection and the sequence number must advance
//! by exactly one; on UDP through a per-sender [`ReplayWindow`].

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use membership::Incarnation;

/// Length of a MAC tag.
pub const TAG_LEN: usize = 32;
/// Length of a replay challenge (nonce).
pub const CHALLENGE_LEN: usize = 16;

/// The shared secret that authenticates peer frames.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey([u8; 32]);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str("ClusterKey(..)")
    }
}

/// Why a key file was refused. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file cannot be read (missing, no permission, a directory, ...).
    #[error("cannot read cluster key file {path}: {source}")]
    Unreadable {
        /// The key file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Group or others may read or write the file.
    #[error("cluster key file {path} has mode {mode:04o}; it must not be accessible by group or others (chmod 600)")]
    Permissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The path is a symbolic link (not followed: a key file is named
    /// directly).
    #[error("cluster key file {path} is a symbolic link; name the file itself")]
    Symlink {
        /// The key file.
        path: PathBuf,
    },
    /// Owned by another user than the daemon's (or root).
    #[error(
        "cluster key file {path} is owned by uid {owner}; it must be owned by this daemon's user (uid {me}) or root"
    )]
    Owner {
        /// The key file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The daemon's effective uid.
        me: u32,
    },
    /// Neither 32 raw bytes nor 64 hex digits.
    #[error("cluster key file {path} holds {len} bytes; expected 32 raw bytes or 64 hex digits")]
    Format {
        /// The key file.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
}

impl ClusterKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        ClusterKey(bytes)
    }

    /// Reads a key file: exactly 32 raw bytes, or 64 hex digits with an
    /// optional trailing newline. The file is opened once, without
    /// following a symbolic link, and checked through that descriptor
    /// (`fstat`: a regular file, owned by this user or root, not
    /// accessible by group or others) before it is read from it, so the
    /// file checked is the file read.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, KeyError> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let path = path.as_ref();
        let unreadable = |source| KeyError::Unreadable { path: path.to_owned(), source };
        let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
        let file = std::fs::OpenOptions::new().read(true).custom_flags(nofollow).open(path).map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                KeyError::Symlink { path: path.to_owned() }
            } else {
                unreadable(e)
            }
        })?;
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(unreadable(std::io::Error::other("not a regular file")));
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(KeyError::Owner { path: path.to_owned(), owner: meta.uid(), me });
        }
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions { path: path.to_owned(), mode: mode & 0o7777 });
        }
        // Longer than any valid key is enough to say it is not one.
        let mut bytes = Vec::with_capacity(67);
        file.take(4096).read_to_end(&mut bytes).map_err(unreadable)?;
        Self::parse(&bytes).ok_or(KeyError::Format { path: path.to_owned(), len: bytes.len() })
    }

    /// Parses key file contents (raw or hex).
    fn parse(bytes: &[u8]) -> Option<Self> {
        if let Ok(raw) = <[u8; 32]>::try_from(bytes) {
            return Some(ClusterKey(raw));
        }
        let text = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (out, pair) in key.iter_mut().zip(text.chunks_exact(2)) {
            *out = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
        }
        Some(ClusterKey(key))
    }

    /// The MAC tag of a frame: keyed BLAKE3 over challenge, header and
    /// payload.
    pub fn tag(&self, challenge: &[u8; CHALLENGE_LEN], header: &[u8], payload: &[u8]) -> [u8; TAG_LEN] {
        self.hash(challenge, header, payload).into()
    }

    /// Whether `tag` is the MAC of this frame. Constant time.
    pub fn verify(&self, challenge: &[u8; CHALLENGE_LEN], header: &[u8], payload: &[u8], tag: &[u8; TAG_LEN]) -> bool {
        // blake3::Hash's PartialEq compares in constant time.
        self.hash(challenge, header, payload) == blake3::Hash::from_bytes(*tag)
    }

    fn hash(&self, challenge: &[u8; CHALLENGE_LEN], header: &[u8], payload: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(challenge);
        h.update(header);
        h.update(payload);
        h.finalize()
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Why the replay window refused a datagram.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// From a life of the sender older than one already seen.
    #[error("stale incarnation: expected {expected} or newer, got {got}")]
    OldIncarnation {
        /// The newest life seen.
        expected: Incarnation,
        /// The datagram's life.
        got: Incarnation,
    },
    /// This (incarnation, seq) was already accepted.
    #[error("duplicate seq {seq} in {inc}")]
    Duplicate {
        /// The life.
        inc: Incarnation,
        /// The repeated sequence number.
        seq: u64,
    },
    /// Too far behind the newest seq to tell whether it was seen.
    #[error("seq {seq} is older than the replay window (newest {highest}, window {})", ReplayWindow::WIDTH)]
    TooOld {
        /// The datagram's sequence number.
        seq: u64,
        /// The newest sequence number accepted.
        highest: u64,
    },
}

/// Anti-replay state for one sender (RFC 4303-style sliding window):
/// accepts each `(incarnation, seq)` at most once, refuses older lives and
/// sequence numbers more than [`WIDTH`](Self::WIDTH) behind the newest.
/// A newer incarnation resets the window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// `(incarnation, highest seq, seen bitmap)`; bit `i` of the bitmap is
    /// set when `highest - i` has been accepted.
    state: Option<(Incarnation, u64, u64)>,
}

impl ReplayWindow {
    /// How many sequence numbers behind the newest are still tracked.
    pub const WIDTH: u64 = 64;

    /// An empty window. Sequence numbers start at 1 in every life: a new
    /// life's window accepts 1 to [`WIDTH`](Self::WIDTH) and anything
    /// higher, never 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts and records `(inc, seq)`, or says why it is a replay.
    pub fn check(&mut self, inc: Incarnation, seq: u64) -> Result<(), ReplayError> {
        match self.state {
            Some((known, _, _)) if inc < known => {
                return Err(ReplayError::OldIncarnation { expected: known, got: inc });
            }
            Some((known, _, _)) if inc == known => {}
            // A first or newer life: numbering starts over, with 0 taken.
            _ => self.state = Some((inc, 0, 1)),
        }
        let Some((_, highest, bitmap)) = &mut self.state else { unreachable!("set above") };
        if seq > *highest {
            let shift = seq - *highest;
            *bitmap = if shift >= Self::WIDTH { 0 } else { *bitmap << shift };
            *bitmap |= 1;
            *highest = seq;
            return Ok(());
        }
        let behind = *highest - seq;
        if behind >= Self::WIDTH {
            return Err(ReplayError::TooOld { seq, highest: *highest });
        }
        if *bitmap & (1 << behind) != 0 {
            return Err(ReplayError::Duplicate { inc, seq });
        }
        *bitmap |= 1 << behind;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh path under the system temp dir.
    fn temp_path(name: &str) -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        std::env::temp_dir().join(format!("wire-auth-{}-{n}-{name}", std::process::id()))
    }

    fn write(name: &str, bytes: &[u8], mode: u32) -> PathBuf {
        let p = temp_path(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn loads_raw_and_hex() {
        let raw: [u8; 32] = std::array::from_fn(|i| i as u8 * 7);
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let a = write("raw", &raw, 0o600);
        let b = write("hex", hex.as_bytes(), 0o400);
        let c = write("hexnl", format!("{}\n", hex.to_uppercase()).as_bytes(), 0o600);
        let want = ClusterKey::from_bytes(raw);
        assert_eq!(ClusterKey::load(&a).unwrap(), want);
        assert_eq!(ClusterKey::load(&b).unwrap(), want);
        assert_eq!(ClusterKey::load(&c).unwrap(), want);
        for p in [a, b, c] {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn refuses_a_symlink_and_a_directory_even_to_a_good_key() {
        let good = write("target", &[3u8; 32], 0o600);
        let link = temp_path("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let e = ClusterKey::load(&link).unwrap_err();
        assert!(matches!(e, KeyError::Symlink { .. }), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(ClusterKey::load(&good).is_ok());
        let e = ClusterKey::load(std::env::temp_dir()).unwrap_err();
        assert!(matches!(e, KeyError::Unreadable { .. }), "{e}");
        std::fs::remove_file(link).unwrap();
        std::fs::remove_file(good).unwrap();
    }

    #[test]
    fn refuses_bad_files_naming_them() {
        let loose = write("loose", &[1u8; 32], 0o640);
        let e = ClusterKey::load(&loose).unwrap_err();
        assert!(matches!(e, KeyError::Permissions { mode: 0o640, .. }), "{e}");
        assert!(e.to_string().contains(&*loose.to_string_lossy()), "{e}");

        let short = write("short", &[1u8; 31], 0o600);
        assert!(matches!(ClusterKey::load(&short), Err(KeyError::Format { len: 31, .. })));
        let badhex = write("badhex", &[b'g'; 64], 0o600);
        assert!(matches!(ClusterKey::load(&badhex), Err(KeyError::Format { len: 64, .. })));

        let missing = temp_path("missing");
        let e = ClusterKey::load(&missing).unwrap_err();
        assert!(matches!(e, KeyError::Unreadable { .. }));
        assert!(e.to_string().contains(&*missing.to_string_lossy()));
        for p in [loose, short, badhex] {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn debug_hides_the_secret() {
        assert_eq!(format!("{:?}", ClusterKey::from_bytes([0xab; 32])), "ClusterKey(..)");
    }

    #[test]
    fn tag_covers_every_part() {
        let k = ClusterKey::from_bytes([5; 32]);
        let c = [1u8; 16];
        let t = k.tag(&c, b"header", b"payload");
        assert!(k.verify(&c, b"header", b"payload", &t));
        assert!(!k.verify(&[2; 16], b"header", b"payload", &t));
        assert!(!k.verify(&c, b"headex", b"payload", &t));
        assert!(!k.verify(&c, b"header", b"payloae", &t));
        assert!(!ClusterKey::from_bytes([6; 32]).verify(&c, b"header", b"payload", &t));
        let mut bad = t;
        bad[31] ^= 1;
        assert!(!k.verify(&c, b"header", b"payload", &bad));
    }

    #[test]
    fn window_accepts_each_seq_once_from_1() {
        let mut w = ReplayWindow::new();
        let i = Incarnation(5);
        assert_eq!(w.check(i, 0), Err(ReplayError::Duplicate { inc: i, seq: 0 }), "numbering starts at 1");
        assert_eq!(w.check(i, 10), Ok(()));
        assert_eq!(w.check(i, 10), Err(ReplayError::Duplicate { inc: i, seq: 10 }));
        // Out of order within the window is fine, once.
        assert_eq!(w.check(i, 12), Ok(()));
        assert_eq!(w.check(i, 11), Ok(()));
        assert_eq!(w.check(i, 11), Err(ReplayError::Duplicate { inc: i, seq: 11 }));
        // Older than the first seen but inside the window: never seen, accepted.
        assert_eq!(w.check(i, 9), Ok(()));
        assert_eq!(w.check(i, 0), Err(ReplayError::Duplicate { inc: i, seq: 0 }));
    }

    #[test]
    fn window_forgets_beyond_its_width() {
        let mut w = ReplayWindow::new();
        let i = Incarnation(1);
        w.check(i, 1).unwrap();
        w.check(i, 64).unwrap();
        assert_eq!(w.check(i, 1), Err(ReplayError::Duplicate { inc: i, seq: 1 }));
        w.check(i, 65).unwrap();
        assert_eq!(w.check(i, 1), Err(ReplayError::TooOld { seq: 1, highest: 65 }));
        assert_eq!(w.check(i, 2), Ok(()));
        // A big jump clears the bitmap.
        w.check(i, 1000).unwrap();
        assert_eq!(w.check(i, 999), Ok(()));
        assert_eq!(w.check(i, 1000), Err(ReplayError::Duplicate { inc: i, seq: 1000 }));
        assert_eq!(w.check(i, 936), Err(ReplayError::TooOld { seq: 936, highest: 1000 }));
    }

    #[test]
    fn window_follows_incarnations() {
        let mut w = ReplayWindow::new();
        w.check(Incarnation(2), 100).unwrap();
        assert_eq!(
            w.check(Incarnation(1), 500),
            Err(ReplayError::OldIncarnation { expected: Incarnation(2), got: Incarnation(1) })
        );
        // A new life starts over, even at a lower seq.
        assert_eq!(w.check(Incarnation(3), 1), Ok(()));
        assert_eq!(w.check(Incarnation(3), 1), Err(ReplayError::Duplicate { inc: Incarnation(3), seq: 1 }));
        assert!(matches!(w.check(Incarnation(2), 101), Err(ReplayError::OldIncarnation { .. })));
    }
}
