//! Time for sans-IO protocol cores: a plain [`Instant`] that cores can store,
//! hash and compare, clocks that produce it (real and simulated), a
//! [`TimerTable`] of named deadlines, failure detectors, lease arithmetic and
//! a seeded random number source.
//!
//! Nothing here reads the operating system's clock except [`RealClock`] (and
//! [`monotonic_now`], its reading for local clients), and
//! nothing draws randomness except from a seed the driver hands in. That is
//! what lets the same core run under tokio and in the deterministic
//! simulator. Depends on nothing of ftcoord's; everything else may depend on
//! it.
#![forbid(unsafe_code)]

mod clock;
mod detector;
mod lease;
mod rng;
mod table;

pub use clock::{monotonic_now, Clock, Instant, RealClock, SimClock};
pub use detector::{stalled, FailureDetector, HeartbeatDetector, PhiAccrualDetector};
pub use lease::Lease;
pub use rng::SeededRng;
pub use table::TimerTable;
