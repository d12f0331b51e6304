//! ClientCodec (the local client API's tokio codec) on an arbitrary byte
//! stream: decode until it needs more bytes or refuses, then end the
//! stream; and the frame body decoder on its own.
#![no_main]

mod msg;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use msg::FuzzMsg;
use tokio_util::codec::Decoder;
use wire::ClientCodec;

fuzz_target!(|data: &[u8]| {
    let mut codec = ClientCodec::<FuzzMsg, FuzzMsg>::new(4096);
    let mut src = BytesMut::from(data);
    loop {
        match codec.decode(&mut src) {
            Ok(Some(_)) => continue,
            Ok(None) => {
                let _ = codec.decode_eof(&mut src);
                break;
            }
            Err(_) => break,
        }
    }
    // A length claim above the 4096-byte cap never gets memory reserved
    // (a buffer may grow at most to twice what a legal frame needs).
    assert!(src.capacity() <= 2 * data.len().max(4 + 4096));
    let _ = ClientCodec::<FuzzMsg, FuzzMsg>::decode_body(data);
});
