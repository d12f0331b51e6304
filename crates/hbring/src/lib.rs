//! The heartbeat-ring failure detector, as a sans-IO core.
//!
//! Members form a ring in configured order. Every node heartbeats its live
//! successor and watches its predecessor (heartbeats) and its successor
//! (acks); silence for `suspect_after` marks the neighbour dead, the change
//! travels the ring once, and the node before the dead one starts
//! heartbeating the node after it: the ring repairs itself. Restarts and
//! wrongly excluded nodes come back as new incarnations.
//!
//! [`HbRing`] is the component that `ringd` embeds (it routes
//! [`HbMsg`]s through their own message enums and call
//! [`HbRing::on_contact`] for every other message). [`HbNode`] wraps it as a
//! complete [`ftcore::Protocol`], run by the `hbringd` daemon, the
//! simulator tests, and the real-process tests.
//!
//! May depend on: `ftcore`, `timer`, `membership`. Used by: `hbringd`, `runtime` (its metrics), and
//! the daemon that embeds the ring (ringd).
#![forbid(unsafe_code)]

pub mod metrics;
mod msg;
mod node;
mod ring;

pub use msg::{HbEvent, HbMsg, HbReply, HbRequest};
pub use node::HbNode;
pub use ring::{Contact, HbConfig, HbOut, HbRing};
