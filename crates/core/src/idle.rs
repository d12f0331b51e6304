//! The idle hold of a token ring (tokenwatchd and ringd).
//!
//! A process with nobody waiting holds the token `token_min_hold` before
//! passing it on, so that an idle ring does not spin it (and the CPU). It
//! holds it only once the token has gone a whole lap without serving anyone
//! — the token carries `quiet`, its hops since it last served, 0 when its
//! sender served — so a busy ring is not slowed by the processes whose
//! clients are not asking; and not when a peer has said it wants the token
//! (`Wanted`, sent by a process whose first client starts waiting), so a
//! client at an idle ring waits a few hops, not the holds. A process sends
//! `Wanted` unless the token served there when it last left: that token is
//! on a lap with no idle hold anywhere before it is back.
//!
//! No (safety) rule rests on the hold: every bound that counts holds
//! (`token_lost_after`, `bypass_after`) counts them as at most
//! `token_min_hold`, which a shorter hold keeps.

use std::time::Duration;

use timer::Instant;

/// One process's side of the idle hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdleHold {
    /// `token_min_hold`.
    min_hold: Duration,
    /// When a peer last said it wants the token.
    wanted_at: Option<Instant>,
    /// The `quiet` of the last token passed on from here (this life).
    passed_quiet: Option<u32>,
}

impl IdleHold {
    /// A process that has passed no token on and heard no `Wanted`.
    pub fn new(min_hold: Duration) -> IdleHold {
        IdleHold { min_hold, wanted_at: None, passed_quiet: None }
    }

    /// How long a visit that began at `since`, of a token `quiet` hops
    /// since it last served, holds it with nobody waiting here on a ring
    /// of `lap` live processes: `token_min_hold` once the token has gone a
    /// whole lap without serving and no peer said it wants it since
    /// `token_min_hold` before the visit; else nothing.
    pub fn hold(&self, lap: usize, since: Instant, quiet: u32) -> Duration {
        let lap = u32::try_from(lap).unwrap_or(u32::MAX);
        if quiet >= lap && !self.wanted_during(since) {
            self.min_hold
        } else {
            Duration::ZERO
        }
    }

    /// The `quiet` the token carries on from a visit that began at
    /// `since`, which it reached `quiet` hops since it last served: 0 when
    /// it `served` here (or someone waits here) or a peer wanted it, else
    /// one more.
    pub fn pass(&mut self, since: Instant, quiet: u32, served: bool) -> u32 {
        let quiet = if served || self.wanted_during(since) { 0 } else { quiet.saturating_add(1) };
        self.passed_quiet = Some(quiet);
        quiet
    }

    /// A peer said it wants the token.
    pub fn on_wanted(&mut self, now: Instant) {
        self.wanted_at = Some(now);
    }

    /// Whether a process whose first client starts waiting now tells its
    /// peers `Wanted`: not while `holding` the token, not when nothing is
    /// ever held, and not when the token served here when it last left.
    pub fn should_want(&self, holding: bool) -> bool {
        !holding && !self.min_hold.is_zero() && self.passed_quiet != Some(0)
    }

    /// Whether a peer said it wants the token during a visit that began
    /// at `since`, or less than `token_min_hold` before.
    fn wanted_during(&self, since: Instant) -> bool {
        self.wanted_at.is_some_and(|at| at + self.min_hold > since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn at(ms: u64) -> Instant {
        Instant::from_millis(1_000 + ms)
    }

    #[test]
    fn an_idle_token_is_held_only_after_a_whole_lap_without_service() {
        let h = IdleHold::new(10 * MS);
        assert_eq!(h.hold(5, at(0), 4), Duration::ZERO);
        assert_eq!(h.hold(5, at(0), 5), 10 * MS);
    }

    #[test]
    fn a_token_carries_quiet_zero_from_a_visit_that_served_else_one_more() {
        let mut h = IdleHold::new(10 * MS);
        assert_eq!(h.pass(at(0), 7, true), 0);
        assert_eq!(h.pass(at(0), 7, false), 8);
        assert_eq!(h.pass(at(0), u32::MAX, false), u32::MAX);
    }

    #[test]
    fn wanted_ends_the_hold_of_a_visit_under_way_or_beginning_within_min_hold() {
        let mut h = IdleHold::new(10 * MS);
        h.on_wanted(at(20));
        // A visit under way since before the Wanted, and one that began
        // less than min_hold after it: not held, and passed on as serving.
        assert_eq!(h.hold(5, at(15), 9), Duration::ZERO);
        assert_eq!(h.hold(5, at(29), 9), Duration::ZERO);
        assert_eq!(h.pass(at(29), 9, false), 0);
        // A visit beginning min_hold after it: held as before.
        assert_eq!(h.hold(5, at(30), 9), 10 * MS);
        assert_eq!(h.pass(at(30), 9, false), 10);
    }

    #[test]
    fn wanted_is_sent_unless_holding_never_holding_or_the_token_served_here_last() {
        let mut h = IdleHold::new(10 * MS);
        // Nothing passed on yet: the token may be held idle anywhere.
        assert!(h.should_want(false));
        assert!(!h.should_want(true));
        h.pass(at(0), 3, true);
        assert!(!h.should_want(false), "it served here: on a fast lap back");
        h.pass(at(0), 3, false);
        assert!(h.should_want(false));
        assert!(!IdleHold::new(Duration::ZERO).should_want(false), "no hold, nothing to end");
    }
}
