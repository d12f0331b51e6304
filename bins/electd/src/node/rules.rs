//! electd's (safety) rules, one per switch that turns it off in a mutation
//! test (`ftcore/mutations`; docs/safety-rules.md, "electd"). Each names
//! the design section it comes from and the scenario of
//! `tests/safety.rs` that shows it needed (a `…_masked_by_…` test for a
//! rule another rule covers).

ftcore::rules! {
    /// electd's (safety) rules (electd.md).
    pub enum ElRule {
        /// Failover gap: a new coordinator grants nothing for
        /// `(lease + grant_ttl)·(1+ρ) + hop_timeout` after taking office.
        FailoverGap {
            switch: "no_failover_gap",
            spec: "docs/electd.md, Coordinator: FIFO access service",
            scenario: "failover_gap_is_needed",
        },
        /// Quorum lease: a coordinator grants and renews only under
        /// `h + lease·(1−ρ)` (h: its latest heartbeat a majority acked), and
        /// steps down once it has lacked a quorum for `suspect_after`.
        QuorumLease {
            switch: "no_quorum_lease",
            spec: "docs/electd.md, Heartbeats and the quorum lease",
            scenario: "quorum_lease_is_needed",
        },
        /// On `Granted` the holder renews at once and grants its client only
        /// once that renewal is acked: its lease runs from the acked
        /// renewal's send time, never from a (possibly late) `Granted`.
        LeaseFromAckedRenewal {
            switch: "lease_from_granted",
            spec: "docs/electd.md, Coordinator: FIFO access service",
            scenario: "lease_from_renewal_is_needed",
        },
        /// (+) Pre-vote: a term starts only after a majority's yes.
        PreVote {
            switch: "no_prevote",
            spec: "docs/electd.md, (safety) Terms, votes and the quorum lease",
            scenario: "prevote_is_needed",
        },
        /// Terms, votes and promises are stored before anything that
        /// depends on them is sent.
        StoredTerms {
            switch: "no_stored_terms",
            spec: "docs/electd.md, (safety) Terms, votes and the quorum lease",
            scenario: "stored_terms_are_needed",
        },
        /// One vote per term, and whom a process follows in a term (stored
        /// with its vote) never changes within it.
        OneVotePerTerm {
            switch: "vote_again",
            spec: "docs/electd.md, (safety) Terms, votes and the quorum lease",
            scenario: "one_vote_per_term_is_needed",
        },
        /// A lower-term message is neither acted on nor acked but answered
        /// `StaleTerm` (no lower-term heartbeat is acked).
        StaleTermAnswered {
            switch: "ack_lower_terms",
            spec: "docs/electd.md, (safety) Terms, votes and the quorum lease",
            scenario: "stale_term_is_needed",
        },
        /// `relay`: a process that receives a term-t message before it
        /// started term t joins as active (sends its own id first).
        LateJoinersActive {
            switch: "late_joiners_relay",
            spec: "docs/electd.md, Election algorithm 1 — relay",
            scenario: "late_joiners_active_is_needed",
        },
        /// Per-hop acks: an election hop unacked within `hop_timeout` skips
        /// the successor (`ring`) or aborts the term (`relay`).
        HopAcks {
            switch: "no_hop_acks",
            spec: "docs/electd.md, Election algorithm 2 — alive-list ring",
            scenario: "hop_acks_are_needed",
        },
        /// A process never takes office at or below the term it loaded at
        /// start (its grant counter is not stored): it starts a new term.
        NoOfficeAtTheLoadedTerm {
            switch: "resume_loaded_office",
            spec: "docs/electd.md, Heartbeats and the quorum lease",
            scenario: "no_office_at_the_loaded_term_is_needed",
        },
        /// The grant counter never wraps: past `u64::MAX` the coordinator
        /// grants nothing more in the term and starts term + 1.
        CounterNeverWraps {
            switch: "wrap_counter",
            spec: "docs/electd.md, Coordinator: FIFO access service",
            scenario: "counter_overflow_rule_is_needed",
        },
        /// A coordinator that sees a higher term steps down at once.
        StepDownAtAHigherTerm {
            switch: "no_step_down",
            spec: "docs/electd.md, (safety) Terms, votes and the quorum lease",
            scenario: "step_down_is_needed",
        },
        /// `ring`: an Election that comes back names a coordinator only if
        /// a majority of the configured processes voted in it (masked by
        /// the pre-vote and the heartbeat quorum).
        MajorityOfVoters {
            switch: "no_majority",
            spec: "docs/electd.md, Election algorithm 2 — alive-list ring",
            scenario: "majority_of_voters_masked_by_prevote_and_heartbeat_quorum",
        },
        /// Office and the quorum lease come from a majority's heartbeat
        /// acks, never from the heartbeats a coordinator sends.
        HeartbeatQuorum {
            switch: "self_quorum",
            spec: "docs/electd.md, Heartbeats and the quorum lease",
            scenario: "heartbeat_quorum_is_needed",
        },
        /// Election deadline: a result back, or a quorum heard, after
        /// `election_timeout·(1−ρ)` from joining the term names nobody and
        /// takes no office (masked by the quorum lease).
        ElectionDeadline {
            switch: "no_election_deadline",
            spec: "docs/electd.md, Heartbeats and the quorum lease",
            scenario: "election_deadline_masked_by_quorum_lease",
        },
        /// Only a grant confirmed by an acked renewal is re-registered with
        /// a new coordinator; an unconfirmed one is given back and its
        /// request goes to the new coordinator with its place.
        ConfirmedGrantsReregistered {
            switch: "reregister_unconfirmed",
            spec: "docs/electd.md, Coordinator: FIFO access service",
            scenario: "unconfirmed_grants_not_reregistered_is_needed",
        },
        /// A new coordinator renews an adopted grant only once `lease·(1+ρ)`
        /// has passed since it took office (masked by the `grant_ttl`
        /// bound).
        AdoptedRenewalWaits {
            switch: "renew_adopted_at_once",
            spec: "docs/electd.md, Coordinator: FIFO access service",
            scenario: "adopted_renewal_wait_masked_by_grant_ttl_bound",
        },
        /// `ElConfig::validate` refuses a `grant_ttl` below
        /// `3·(lease + suspect_after)`: the bound that masks
        /// `AdoptedRenewalWaits`.
        GrantTtlBound {
            switch: "short_grant_ttl",
            spec: "docs/electd.md, Coordinator: FIFO access service",
            scenario: "adopted_renewal_wait_masked_by_grant_ttl_bound",
        },
        /// A second result of the term reaching its coordinator in office
        /// (a second `Elected` lap) makes no new office: the queue and the
        /// grant counter are kept (masked by the failover gap).
        OneOfficePerTerm {
            switch: "reelect_in_office",
            spec: "docs/electd.md, Heartbeats and the quorum lease",
            scenario: "second_elected_lap_guard_masked_by_failover_gap",
        },
        /// One grant counter per office, shared by every lock name: a
        /// name forgotten when idle and asked for again in the same office
        /// gets a fence above all earlier ones (nothing per name is stored).
        OfficeWideCounter {
            switch: "counter_per_name",
            spec: "docs/electd.md, Coordinator: FIFO access service",
            scenario: "office_wide_counter_is_needed",
        },
    }
}
