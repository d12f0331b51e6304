//! Lock names (named-locks.md, "Names on the wire"): the one validation of
//! a name, used by ftctl, the client library and every daemon's decoder.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The most bytes a lock name may have.
pub const MAX_NAME_LEN: usize = 128;

/// What an election's lock name starts with (elections.md, "Names"): `:`
/// is outside the user alphabet, so no user lock is an election and the
/// two never contend.
pub const ELECTION_PREFIX: &str = "elect:";

/// A validated lock name: 1–128 bytes of `[A-Za-z0-9._/-]`, or the empty
/// name of the unnamed lock (which no user input produces: [`LockName::parse`]
/// refuses it). Decoding a frame validates the name the same way, so a
/// peer or client frame with an invalid name is malformed and changes
/// nothing.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LockName(Box<str>);

/// Why a name was refused.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NameError {
    /// No bytes.
    Empty,
    /// More than [`MAX_NAME_LEN`] bytes.
    TooLong(usize),
    /// A byte outside `[A-Za-z0-9._/-]`, at this offset.
    BadByte {
        /// The byte.
        byte: u8,
        /// Its offset.
        at: usize,
    },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => write!(f, "invalid lock name: it is empty"),
            NameError::TooLong(n) => write!(f, "invalid lock name: {n} bytes, the most is {MAX_NAME_LEN}"),
            NameError::BadByte { byte, at } => write!(
                f,
                "invalid lock name: byte {byte:#04x} at offset {at}; a name is 1-{MAX_NAME_LEN} bytes of A-Z a-z 0-9 . _ / -"
            ),
        }
    }
}

impl std::error::Error for NameError {}

fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-')
}

impl LockName {
    /// The unnamed lock (what `ftctl lock` without a name asks for).
    pub fn unnamed() -> Self {
        LockName::default()
    }

    /// A name a user gave: 1–128 bytes of `[A-Za-z0-9._/-]`.
    pub fn parse(s: &str) -> Result<Self, NameError> {
        if s.is_empty() {
            return Err(NameError::Empty);
        }
        Self::check(s)?;
        Ok(LockName(s.into()))
    }

    /// Whether this is the unnamed lock.
    pub fn is_unnamed(&self) -> bool {
        self.0.is_empty()
    }

    /// The name as given (empty for the unnamed lock).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lock of election `name` (a user name): `elect:NAME`.
    pub fn election(name: &LockName) -> LockName {
        LockName(format!("{ELECTION_PREFIX}{}", name.0).into_boxed_str())
    }

    /// The election this lock is, if it is one (its NAME).
    pub fn election_name(&self) -> Option<LockName> {
        self.0.strip_prefix(ELECTION_PREFIX).map(|n| LockName(n.into()))
    }

    /// Whether this is an election's lock.
    pub fn is_election(&self) -> bool {
        self.0.starts_with(ELECTION_PREFIX)
    }

    fn check(s: &str) -> Result<(), NameError> {
        if s.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong(s.len()));
        }
        match s.bytes().enumerate().find(|(_, b)| !allowed(*b)) {
            Some((at, byte)) => Err(NameError::BadByte { byte, at }),
            None => Ok(()),
        }
    }
}

impl TryFrom<String> for LockName {
    type Error = NameError;

    /// Decoding: a valid name, the empty (unnamed) one, or an election's
    /// (`elect:` and a valid, non-empty name).
    fn try_from(s: String) -> Result<Self, NameError> {
        match s.strip_prefix(ELECTION_PREFIX) {
            Some("") => return Err(NameError::Empty),
            Some(rest) => Self::check(rest)?,
            None => Self::check(&s)?,
        }
        Ok(LockName(s.into_boxed_str()))
    }
}

impl From<LockName> for String {
    fn from(n: LockName) -> String {
        n.0.into_string()
    }
}

impl fmt::Display for LockName {
    /// The name, or `(unnamed)` for the unnamed lock.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unnamed() {
            f.write_str("(unnamed)")
        } else {
            f.write_str(&self.0)
        }
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elections_have_a_name_space_of_their_own() {
        let web = LockName::parse("web").unwrap();
        let e = LockName::election(&web);
        assert_eq!(e.as_str(), "elect:web");
        assert!(e.is_election() && !web.is_election());
        assert_eq!(e.election_name(), Some(web.clone()));
        assert_eq!(web.election_name(), None);
        // No user name is an election's: `:` is outside the alphabet.
        assert!(LockName::parse("elect:web").is_err());
        // The decoder takes exactly `elect:` and a valid, non-empty name.
        assert_eq!(LockName::try_from("elect:web".to_string()), Ok(e));
        assert_eq!(LockName::try_from("elect:".to_string()), Err(NameError::Empty));
        assert!(LockName::try_from("elect:a:b".to_string()).is_err());
        assert!(LockName::try_from("elect:elect:a".to_string()).is_err());
        assert!(LockName::try_from(format!("elect:{}", "x".repeat(129))).is_err());
        assert!(LockName::try_from(format!("elect:{}", "x".repeat(128))).is_ok());
        assert!(LockName::try_from("Elect:a".to_string()).is_err());
    }

    #[test]
    fn parse_accepts_the_set_and_refuses_the_rest() {
        assert_eq!(LockName::parse("db/migrate-2026.11_a").unwrap().as_str(), "db/migrate-2026.11_a");
        assert_eq!(LockName::parse(&"x".repeat(128)).unwrap().as_str().len(), 128);
        assert_eq!(LockName::parse(""), Err(NameError::Empty));
        assert_eq!(LockName::parse(&"x".repeat(129)), Err(NameError::TooLong(129)));
        assert_eq!(LockName::parse("a b"), Err(NameError::BadByte { byte: b' ', at: 1 }));
        assert_eq!(LockName::parse("ab\0"), Err(NameError::BadByte { byte: 0, at: 2 }));
        assert_eq!(LockName::parse("é"), Err(NameError::BadByte { byte: 0xc3, at: 0 }));
        assert_eq!(
            LockName::parse("a:b").unwrap_err().to_string(),
            "invalid lock name: byte 0x3a at offset 1; a name is 1-128 bytes of A-Z a-z 0-9 . _ / -"
        );
    }

    #[test]
    fn decoding_allows_the_unnamed_lock_and_nothing_invalid() {
        assert!(LockName::try_from(String::new()).unwrap().is_unnamed());
        assert_eq!(LockName::try_from("a\0".to_string()), Err(NameError::BadByte { byte: 0, at: 1 }));
        assert_eq!(LockName::unnamed().to_string(), "(unnamed)");
    }
}
