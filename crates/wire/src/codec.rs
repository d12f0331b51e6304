//! The one binary format for message payloads.
//!
//! Everything that turns a message into bytes goes through [`encode`] and
//! [`decode`]; no other module names the format, so it can be swapped here
//! alone.
//!
//! The format is `postcard` 1.x: its wire format is specified and has been
//! stable since 1.0, it is compact (varints, no field names), and it is
//! maintained. `bincode` was the other candidate and is ruled out: 1.x is
//! unmaintained (RUSTSEC-2025-0141) and 3.0.0 on the registry is a
//! deliberate compile-error tombstone.
//!
//! Decoding untrusted bytes is safe here: postcard checks every length
//! against the remaining input, and serde caps up-front allocation for
//! sequences, so a forged length cannot make us allocate it.

use serde::{de::DeserializeOwned, Serialize};

/// Why a payload could not be encoded or decoded.
///
/// Carries the format's message as text so that the format's own error
/// type does not leak into the public API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The value cannot be represented (e.g. a map with an unsized key).
    #[error("cannot encode payload: {0}")]
    Encode(String),
    /// The bytes are not a valid encoding of the expected type.
    #[error("cannot decode payload: {0}")]
    Decode(String),
    /// A valid value was followed by bytes that belong to nothing.
    #[error("payload has {0} trailing bytes after the message")]
    TrailingBytes(usize),
}

/// Encodes `v` as a payload.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, CodecError> {
    postcard::to_stdvec(v).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a value from the start of `bytes`, ignoring what follows: the
/// fuzz drivers' decoder (`sim::bytes`), which lets arbitrary input reach
/// the cores' handlers. Frames are decoded with [`decode`], which refuses
/// trailing bytes.
pub fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    postcard::take_from_bytes(bytes).map(|(v, _)| v).map_err(|e| CodecError::Decode(e.to_string()))
}

/// Decodes a payload that must consist of exactly one `T`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (v, rest) = postcard::take_from_bytes(bytes).map_err(|e| CodecError::Decode(e.to_string()))?;
    if rest.is_empty() {
        Ok(v)
    } else {
        Err(CodecError::TrailingBytes(rest.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct S {
        a: u32,
        b: String,
        c: Vec<u8>,
    }

    #[test]
    fn round_trips() {
        let v = S { a: 300, b: "hi".into(), c: vec![1, 2, 3] };
        assert_eq!(decode::<S>(&encode(&v).unwrap()).unwrap(), v);
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut bytes = encode(&7u32).unwrap();
        bytes.push(0);
        assert_eq!(decode::<u32>(&bytes), Err(CodecError::TrailingBytes(1)));
    }

    #[test]
    fn short_input_is_an_error() {
        let bytes = encode(&S { a: 1, b: "hello".into(), c: vec![] }).unwrap();
        assert!(matches!(decode::<S>(&bytes[..bytes.len() - 2]), Err(CodecError::Decode(_))));
    }

    #[test]
    fn forged_length_does_not_allocate_it() {
        // A Vec<u8> claiming u32::MAX elements, followed by nothing.
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(matches!(decode::<Vec<u8>>(&bytes), Err(CodecError::Decode(_))));
        assert!(matches!(decode::<Vec<u64>>(&bytes), Err(CodecError::Decode(_))));
    }
}
