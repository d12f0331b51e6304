//! The envelope header every peer frame starts with.
//!
//! Fixed size ([`HEADER_LEN`] = 32 bytes), big-endian, encoded by hand (not
//! through serde) so that it can be checked before anything else about a
//! frame is trusted, and so that its layout never depends on the payload
//! codec:
//!
//! | offset | size | field         | notes                                        |
//! |-------:|-----:|---------------|----------------------------------------------|
//! |      0 |    4 | magic         | `b"FTCD"`                                    |
//! |      4 |    1 | version       | [`VERSION`]                                  |
//! |      5 |    1 | flags         | bit 0: a MAC tag follows the payload         |
//! |      6 |    4 | cluster       | must equal the receiver's cluster id         |
//! |     10 |    4 | sender        | [`NodeId`]                                   |
//! |     14 |    8 | incarnation   | [`Incarnation`] of the sender                |
//! |     22 |    8 | seq           | TCP: per-connection frame counter from 0; UDP: per (destination, both lives) from 1, 0 for Hello/HelloAck |
//! |     30 |    2 | kind          | the message's [`ftcore::Message::kind`]      |
//!
//! Decoding checks magic, then version, then flags, then cluster, and each
//! error names what was expected and what came.

use membership::{Incarnation, NodeId};

/// First four bytes of every peer frame.
pub const MAGIC: [u8; 4] = *b"FTCD";
/// The wire version this build speaks.
pub const VERSION: u8 = 1;
/// Encoded size of a [`Header`].
pub const HEADER_LEN: usize = 32;
/// Flag bit: a 32-byte MAC tag follows the payload.
pub const FLAG_MAC: u8 = 0b0000_0001;
/// Flag bits version 1 knows; any other bit set is rejected.
const KNOWN_FLAGS: u8 = FLAG_MAC;

/// The decoded envelope header of a peer frame (magic and version are
/// implied: a `Header` value always has this build's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Flag bits ([`FLAG_MAC`]).
    pub flags: u8,
    /// Cluster id.
    pub cluster: u32,
    /// The sending node.
    pub sender: NodeId,
    /// The sender's life.
    pub incarnation: Incarnation,
    /// Replay-guard sequence number.
    pub seq: u64,
    /// Message kind of the payload.
    pub kind: u16,
}

/// Why a header was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("truncated header: expected {HEADER_LEN} bytes, got {got}")]
    Truncated {
        /// Bytes available.
        got: usize,
    },
    /// Not an ftcoord peer frame.
    #[error("bad magic: expected {:?}, got {:?}", Bstr(&MAGIC), Bstr(got))]
    BadMagic {
        /// The first four bytes.
        got: [u8; 4],
    },
    /// A wire version this build does not speak.
    #[error("unsupported wire version: expected {VERSION}, got {got}")]
    Version {
        /// The version byte.
        got: u8,
    },
    /// Flag bits this version does not define.
    #[error("unknown flag bits for wire version {VERSION}: expected only {KNOWN_FLAGS:#04x}, got {got:#04x}")]
    Flags {
        /// The flags byte.
        got: u8,
    },
    /// A frame for another cluster.
    #[error("wrong cluster: expected cluster {expected}, got {got}")]
    Cluster {
        /// This node's cluster.
        expected: u32,
        /// The frame's cluster.
        got: u32,
    },
}

/// Shows bytes as an escaped byte string (`"FTCD"`, `"\x00\xff.."`).
struct Bstr<'a>(&'a [u8]);

impl std::fmt::Debug for Bstr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

impl Header {
    /// Whether a MAC tag follows the payload.
    pub fn has_mac(&self) -> bool {
        self.flags & FLAG_MAC != 0
    }

    /// The 32 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.flags;
        b[6..10].copy_from_slice(&self.cluster.to_be_bytes());
        b[10..14].copy_from_slice(&self.sender.0.to_be_bytes());
        b[14..22].copy_from_slice(&self.incarnation.0.to_be_bytes());
        b[22..30].copy_from_slice(&self.seq.to_be_bytes());
        b[30..32].copy_from_slice(&self.kind.to_be_bytes());
        b
    }

    /// Reads a header from the start of `bytes` (which may hold more: the
    /// payload), checking magic, version, flags and cluster in that order.
    pub fn decode(bytes: &[u8], expected_cluster: u32) -> Result<Header, HeaderError> {
        let Some(b) = bytes.first_chunk::<HEADER_LEN>() else {
            return Err(HeaderError::Truncated { got: bytes.len() });
        };
        let magic = arr::<4>(&b[0..4]);
        if magic != MAGIC {
            return Err(HeaderError::BadMagic { got: magic });
        }
        if b[4] != VERSION {
            return Err(HeaderError::Version { got: b[4] });
        }
        let flags = b[5];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(HeaderError::Flags { got: flags });
        }
        let cluster = u32::from_be_bytes(arr(&b[6..10]));
        if cluster != expected_cluster {
            return Err(HeaderError::Cluster { expected: expected_cluster, got: cluster });
        }
        Ok(Header {
            flags,
            cluster,
            sender: NodeId(u32::from_be_bytes(arr(&b[10..14]))),
            incarnation: Incarnation(u64::from_be_bytes(arr(&b[14..22]))),
            seq: u64::from_be_bytes(arr(&b[22..30])),
            kind: u16::from_be_bytes(arr(&b[30..32])),
        })
    }
}

/// Copies a slice of statically known length into an array.
fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h() -> Header {
        Header {
            flags: FLAG_MAC,
            cluster: 7,
            sender: NodeId(3),
            incarnation: Incarnation(0x0102_0304_0506_0708),
            seq: 42,
            kind: 0x0a0b,
        }
    }

    #[test]
    fn round_trips() {
        let b = h().encode();
        assert_eq!(Header::decode(&b, 7), Ok(h()));
    }

    #[test]
    fn layout_is_big_endian_and_fixed() {
        let b = h().encode();
        assert_eq!(&b[0..4], b"FTCD");
        assert_eq!(b[4], 1);
        assert_eq!(b[5], 1);
        assert_eq!(&b[6..10], &[0, 0, 0, 7]);
        assert_eq!(&b[10..14], &[0, 0, 0, 3]);
        assert_eq!(&b[14..22], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[22..30], &[0, 0, 0, 0, 0, 0, 0, 42]);
        assert_eq!(&b[30..32], &[0x0a, 0x0b]);
    }

    #[test]
    fn checks_in_order_with_precise_errors() {
        let good = h().encode();
        assert_eq!(Header::decode(&good[..31], 7), Err(HeaderError::Truncated { got: 31 }));

        let mut b = good;
        b[0] = b'X';
        b[4] = 9; // a later check also fails; magic is reported first
        let e = Header::decode(&b, 7).unwrap_err();
        assert_eq!(e, HeaderError::BadMagic { got: *b"XTCD" });
        assert_eq!(e.to_string(), "bad magic: expected \"FTCD\", got \"XTCD\"");

        let mut b = good;
        b[4] = 9;
        b[6] = 1;
        let e = Header::decode(&b, 7).unwrap_err();
        assert_eq!(e.to_string(), "unsupported wire version: expected 1, got 9");

        let mut b = good;
        b[5] = 0x81;
        assert_eq!(Header::decode(&b, 7), Err(HeaderError::Flags { got: 0x81 }));

        let e = Header::decode(&good, 9).unwrap_err();
        assert_eq!(e, HeaderError::Cluster { expected: 9, got: 7 });
        assert_eq!(e.to_string(), "wrong cluster: expected cluster 9, got 7");
    }
}
