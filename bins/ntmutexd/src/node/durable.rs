//! What a site stores ([`NtDurable`]).

use ::durable::promise::Promises;
use serde::{Deserialize, Serialize};

/// What a site keeps on disk: its promises (threshold, floor, the highest
/// epoch in use, fresh-node recovery), stored before anything that depends
/// on them is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NtDurable {
    /// The promise component's stored part (`None`: never written).
    pub promises: Option<Promises>,
}
