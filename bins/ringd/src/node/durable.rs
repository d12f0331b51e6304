//! What a replica stores ([`RdDurable`]).

use ::durable::promise::Promises;
use serde::{Deserialize, Serialize};

/// What a replica keeps on disk: its promises (epochs in use, promised,
/// proposed; fresh-node recovery). Token state lives only in copies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RdDurable {
    /// The promise component's stored part (`None`: never written).
    pub promises: Option<Promises>,
}
