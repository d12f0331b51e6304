//! The stored part of the promise component: what goes into the daemon's
//! state file.

use serde::{Deserialize, Serialize};

/// The promise values a node keeps in its state file. Only the component
/// changes them; the daemon writes a snapshot whenever
/// [`PromiseNode::take_dirty`](super::PromiseNode::take_dirty) returns one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Promises {
    /// Highest value promised to another proposer or seen in use.
    threshold: u64,
    /// Highest value stored, promised or proposed: the next proposal goes above.
    floor: u64,
    /// Own live proposal, kept apart: a restart abandons it unless used.
    own: Option<u64>,
    /// Highest value seen in use (ntmutexd's `max_epoch`).
    in_use: u64,
    /// False on a fresh node (new disk) until recovery has run.
    recovered: bool,
    /// What recovery found; tokens at or below it are refused for ever.
    recovered_max: u64,
    /// (safety) The longest window, in microseconds, for which any life of
    /// this node may have bound itself: `max(W, lease)` of every config it
    /// ran with. A restart waits at least this long (times (1+ρ)) before it
    /// promises, so lowering `lease_ms` or W and restarting cannot cut
    /// short a binding the previous life gave. Files written before this
    /// field read as 0 (the configured window then rules).
    #[serde(default)]
    binding_us: u64,
}

/// The three values a node answers in `HelloAck` (`None` there while it is
/// unrecovered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Values {
    /// Highest value seen in use.
    pub in_use: u64,
    /// The threshold (promised to another or seen in use).
    pub threshold: u64,
    /// The floor (highest stored, promised or proposed).
    pub floor: u64,
}

impl Values {
    /// The largest of the three.
    pub fn max(&self) -> u64 {
        self.in_use.max(self.threshold).max(self.floor)
    }
}

impl Promises {
    /// A node whose state file is missing: a new disk, unrecovered.
    pub fn fresh() -> Self {
        Promises { threshold: 0, floor: 0, own: None, in_use: 0, recovered: false, recovered_max: 0, binding_us: 0 }
    }

    /// The state recovery stores when the highest value it heard is `max`
    /// (a new cluster recovers at 0; tests and simulators start from it).
    pub fn recovered_with(max: u64) -> Self {
        Promises {
            threshold: max,
            floor: max,
            own: None,
            in_use: 0,
            recovered: true,
            recovered_max: max,
            binding_us: 0,
        }
    }

    /// `self` with its binding window raised to `window`, as a life with
    /// that window stores it at start (tests and simulators build expected
    /// state files with it).
    pub fn bound(mut self, window: std::time::Duration) -> Self {
        self.bind(window);
        self
    }

    /// Highest value promised to another proposer or seen in use.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// Highest value stored, promised or proposed.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// The own proposal that was live when this was written.
    pub fn own(&self) -> Option<u64> {
        self.own
    }

    /// Highest value seen in use.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// Whether this node has recovered (false only on a fresh disk).
    pub fn recovered(&self) -> bool {
        self.recovered
    }

    /// The maximum recovery found (0 if the node never recovered a wiped disk).
    pub fn recovered_max(&self) -> u64 {
        self.recovered_max
    }

    /// The values to answer a `Hello` with; `None` while unrecovered.
    pub fn values(&self) -> Option<Values> {
        self.recovered.then_some(Values { in_use: self.in_use, threshold: self.threshold, floor: self.floor })
    }

    /// As loaded at start: the own proposal is abandoned (it was never
    /// used, or it would be in `in_use`), and the floor covers everything so
    /// that a hand-edited or old file cannot lower the next proposal.
    pub(super) fn loaded(mut self) -> Self {
        let own = self.own.take().unwrap_or(0);
        self.floor = self.floor.max(self.threshold).max(self.in_use).max(self.recovered_max).max(own);
        self
    }

    /// The longest binding window any life of this node used.
    pub fn binding(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.binding_us)
    }

    /// Raises the stored binding window to `window`; whether it rose (then
    /// it must be stored before this life acks or promises anything).
    pub(super) fn bind(&mut self, window: std::time::Duration) -> bool {
        let us = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
        if us > self.binding_us {
            self.binding_us = us;
            true
        } else {
            false
        }
    }

    pub(super) fn promise(&mut self, value: u64) {
        self.threshold = self.threshold.max(value);
        self.floor = self.floor.max(value);
    }

    pub(super) fn see_in_use(&mut self, value: u64) {
        self.in_use = self.in_use.max(value);
        self.promise(value);
    }

    pub(super) fn raise_floor(&mut self, value: u64) {
        self.floor = self.floor.max(value);
    }

    pub(super) fn set_own(&mut self, own: Option<u64>) {
        if let Some(v) = own {
            self.raise_floor(v);
        }
        self.own = own;
    }

    pub(super) fn recover(&mut self, max: u64, in_use: u64) {
        let max = max.max(self.floor);
        self.threshold = self.threshold.max(max);
        self.floor = max;
        self.in_use = self.in_use.max(in_use);
        self.recovered = true;
        self.recovered_max = max;
    }
}
