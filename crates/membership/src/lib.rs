//! Who is in the cluster: node ids, incarnations, the configured ring order
//! and each node's live view of it.
//!
//! A [`Membership`] is fixed at start from configuration; a [`RingView`] is
//! one node's belief about which members are alive and in which life
//! ([`Incarnation`]), from which it derives its live successor and
//! predecessor. Views merge by taking, per node, the greater of two
//! [`Liveness`] values, so any two nodes that have seen the same reports
//! agree, in whatever order the reports arrived.
//!
//! Pure data: no I/O, no clock. Depends only on serde.
#![forbid(unsafe_code)]

mod ids;
mod lives;
mod view;

pub use ids::{Incarnation, NodeId};
pub use lives::Lives;
pub use view::{Liveness, Member, Membership, MembershipError, Observation, RingView, Status};
