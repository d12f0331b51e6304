//! What the core stores ([`TwDurable`]).

use ::durable::promise::Promises;
use serde::{Deserialize, Serialize};

/// What a process keeps on disk, stored before anything that depends on it
/// is sent: its promises (epochs in use, promised, proposed; fresh-node
/// recovery) and its token passing counter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TwDurable {
    /// The promise component's stored part (`None`: never written).
    pub promises: Option<Promises>,
    /// The token passing counter.
    pub tpc: u64,
    /// With a reserve (`tpc_reserve` > 1): the counter in use when `tpc`
    /// was stored ahead of it, the least count the process may have
    /// reached. A restart is unsure of the counts from here to `tpc`.
    /// `None` (also in files written before the reserve existed): `tpc`
    /// is exactly the counter in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpc_from: Option<u64>,
}
