//! ringd's (safety) rules: one variant per rule, each with the design
//! section it comes from (docs/ringd.md) and the scenario that fails
//! without it: a test of `tests/safety.rs`, or, for the three liveness
//! rules of the heal, of `tests/sim.rs` (docs/safety-rules.md is checked
//! against this table by `the_rule_table_matches_the_scenarios_and_the_docs`).

ftcore::rules! {
    /// ringd's (safety) rules.
    pub enum RdRule {
        /// Token services start and run only until `t + lease·(1−ρ)` of the
        /// latest renewal a majority acked; a command's supervisor deadline
        /// is the lease's end.
        MajorityLease {
            switch: "no_lease",
            spec: "docs/ringd.md, Majority lease",
            scenario: "majority_lease_is_needed",
        },
        /// A census is answered `Busy` by an owner and by a replica that
        /// acked a `HolderAlive` within `lease·(1+ρ)` (its own census too).
        CensusBusyBesideAnOwner {
            switch: "census_ignores_owner",
            spec: "docs/ringd.md, Design review: no regeneration beside an owner",
            scenario: "census_busy_beside_an_owner_is_needed",
        },
        /// A token is regenerated only by a census a majority promised.
        CensusNeedsAMajority {
            switch: "census_without_majority",
            spec: "docs/ringd.md, Regeneration",
            scenario: "census_majority_is_needed",
        },
        /// Epochs are stored (promises, epochs in use) before the TokenAck
        /// or the promise that depends on them leaves: a restart keeps them.
        StoredEpochs {
            switch: "no_stored_epochs",
            spec: "docs/ringd.md, Token",
            scenario: "stored_epochs_are_needed",
        },
        /// A token service's result is answered only once the successor
        /// acked the token carrying it.
        AnswerAfterAck {
            switch: "answer_before_ack",
            spec: "docs/ringd.md, Acknowledged results and retries",
            scenario: "answer_after_ack_is_needed",
        },
        /// The copy a detector receives only supplies state to a census: it
        /// never makes `copy.epoch + 1` itself.
        CopyOnlySuppliesACensus {
            switch: "regenerate_from_copy",
            spec: "docs/ringd.md, At D",
            scenario: "copy_only_supplies_state_to_a_census_is_needed",
        },
        /// `seen` and tokens are compared as the pair (epoch, seq).
        SeenAsAPair {
            switch: "seen_by_seq",
            spec: "docs/ringd.md, IAmNewNext",
            scenario: "seen_as_a_pair_is_needed",
        },
        /// A frozen copy is kept (released) on its `TokenRelease`, for
        /// censuses: discarded only when a newer token is accepted.
        ReleasedCopyKept {
            switch: "drop_released_copy",
            spec: "docs/ringd.md, Token",
            scenario: "released_copy_kept_is_needed",
        },
        /// A replica answering an `IAmNewNext` hands the detector its copy
        /// only if newer than the detector's `seen` (breaks no scenario
        /// switched off: the detector checks it again).
        CopyNewerThanSeen {
            switch: "copy_regardless_of_seen",
            spec: "docs/ringd.md, IAmNewNext",
            scenario: "masked_rules_copy_newer_than_seen_breaks_no_scenario",
        },
        /// The detector acts on an `IAmNewPrevious` or a `Copy` only for its
        /// pending recovery `r`.
        ActsOnlyForPendingRecovery {
            switch: "any_recovery_id",
            spec: "docs/ringd.md, At D",
            scenario: "acts_only_for_pending_recovery_is_needed",
        },
        /// A census not complete by its deadline `suspect_after·(1−ρ)` is
        /// abandoned: answers that arrive later count for nothing (masked
        /// by the majority lease).
        CensusDeadline {
            switch: "census_past_deadline",
            spec: "docs/ringd.md, Regeneration",
            scenario: "census_deadline_masked_by_majority_lease",
        },
        /// A census regenerates only once every member of its origin's ring
        /// view answered (the newest copy may be at any), not on a
        /// majority's promises alone.
        CensusWaitsForEveryMember {
            switch: "census_majority_only",
            spec: "docs/ringd.md, Regeneration",
            scenario: "census_waits_for_every_member_is_needed",
        },
        /// An owner or sender told `Stale` at or above its token's epoch
        /// stops owning (masked by the census's `Busy` beside an owner).
        StaleStopsOwning {
            switch: "ignore_stale",
            spec: "docs/ringd.md, Superseded",
            scenario: "stale_rule_masked_by_census_busy",
        },
        /// A replica that accepts a newer token while owning one kills its
        /// running token service (unreachable while the majority lease and
        /// the census's `Busy` hold).
        SupersededKillsItsJob {
            switch: "keep_job_when_superseded",
            spec: "docs/ringd.md, Superseded",
            scenario: "superseded_kill_unreachable_while_leases_and_census_busy_hold",
        },
        /// A token or `HolderAlive` of an epoch below the replica's
        /// threshold is answered `Stale`, never accepted or acked (masked
        /// by the life rule and by the census's `Busy`).
        LowerEpochsRefused {
            switch: "accept_lower_epochs",
            spec: "docs/ringd.md, Token",
            scenario: "lower_epochs_refused_masked_by_life_rule_and_census_busy",
        },
        /// seq never wraps: an owner whose next seq would pass `u64::MAX`
        /// runs nothing more, keeps its token only as a copy and censuses.
        SeqNeverWraps {
            switch: "wrap_seq",
            spec: "docs/ringd.md, Fence",
            scenario: "seq_overflow_census_is_needed",
        },
        /// A token names its receiver's life; one addressed to another life
        /// of this replica is dropped.
        TokensForTheReceiversLifeOnly {
            switch: "accept_tokens_for_other_lives",
            spec: "docs/ringd.md, Liveness and ring repair",
            scenario: "tokens_for_the_receivers_life_only_is_needed",
        },
        /// A replica whose ring is a minority starts no census (liveness:
        /// its own promise would refuse the majority's token on the heal).
        NoCensusInAMinority {
            switch: "census_in_minority",
            spec: "docs/ringd.md, Regeneration",
            scenario: "each_rule_of_the_heal_is_needed",
        },
        /// A new life's token-lost deadline starts with it (liveness: an
        /// overdue one would census at once on rejoining).
        LostDeadlineStartsWithTheLife {
            switch: "keep_lost_deadline_on_rejoin",
            spec: "docs/ringd.md, At D",
            scenario: "each_rule_of_the_heal_is_needed",
        },
        /// A replica whose ring is a minority yields to (rejoins beside) a
        /// live peer it holds dead instead of excluding it (`hbring`;
        /// liveness: else the healed replica makes the owner rejoin and drop
        /// the token).
        MinorityYields {
            switch: "no_minority_yield",
            spec: "docs/ringd.md, Liveness and ring repair",
            scenario: "each_rule_of_the_heal_is_needed",
        },
    }
}
