//! Cross-process tests live in `tests/`; the harness they use is `ftlab`'s
//! library (the same code `ftlab up` runs clusters with).
#![forbid(unsafe_code)]

pub use ftlab::*;
