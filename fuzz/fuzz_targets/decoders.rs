//! What every core target shares: the daemons' own decoders for
//! `sim::bytes::drive` (their wire codec, leniently: a value from the start
//! of a payload, so that arbitrary bytes reach the handlers).

/// The decoders of core `$node`: its real message, request and stored-state
/// types, through `wire::codec`.
macro_rules! decoders {
    ($node:ty) => {
        sim::bytes::Decoders::<$node> {
            msg: |b| wire::codec::decode_prefix(b).ok(),
            request: |b| wire::codec::decode_prefix(b).ok(),
            durable: |b| wire::codec::decode_prefix(b).ok(),
        }
    };
}
pub(crate) use decoders;
