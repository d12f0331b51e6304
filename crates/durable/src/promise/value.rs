//! Proposal values: u64 `round·2¹⁰ + slot`, so that two proposers never
//! propose the same value (foundation.md, Durable state).

/// Bits of a value that hold the proposer's slot.
pub const SLOT_BITS: u32 = 10;
/// Number of slots, hence the most configured nodes a slotted cluster has.
pub const SLOTS: u64 = 1 << SLOT_BITS;
/// The highest round a value can carry. Values stay below 2⁶³, so that
/// every stored value fits the state file's integers (TOML's are signed
/// 64-bit): a peer's value above that is absurd and refused, never stored
/// (a node that could not store a promise would have to stop).
pub const MAX_ROUND: u64 = (i64::MAX as u64) >> SLOT_BITS;

/// `round·2¹⁰ + slot`, or `None` if the slot or the round is out of range.
pub fn encode(round: u64, slot: u16) -> Option<u64> {
    if u64::from(slot) >= SLOTS || round > MAX_ROUND {
        return None;
    }
    Some((round << SLOT_BITS) | u64::from(slot))
}

/// The round of a value.
pub fn round_of(value: u64) -> u64 {
    value >> SLOT_BITS
}

/// The slot (proposer) of a value.
pub fn slot_of(value: u64) -> u16 {
    // Masked to 10 bits, so it always fits.
    u16::try_from(value & (SLOTS - 1)).unwrap_or(u16::MAX)
}

/// The smallest value in `slot` strictly above `floor`; `None` if that
/// would overflow (the proposer must then stop, never wrap).
pub fn next_above(floor: u64, slot: u16) -> Option<u64> {
    let round = round_of(floor);
    let here = encode(round, slot)?;
    if here > floor {
        Some(here)
    } else {
        encode(round.checked_add(1)?, slot)
    }
}

/// Whether a peer-supplied value leaves room above it for every slot.
/// A value that does not is absurd: refused, never adopted, since adopting
/// it would leave nobody a proposal above it.
pub fn is_sane(value: u64) -> bool {
    round_of(value) < MAX_ROUND
}
