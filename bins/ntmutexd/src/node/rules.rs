//! ntmutexd's (safety) rules as a table: one [`NtRule`] per rule, with the
//! switch that turns it off in a mutation test, the design section it
//! comes from and the scenario (`tests/safety.rs`) that shows it needed.
//! docs/safety-rules.md is the table in prose; scripts/safety-audit.sh
//! reruns it.

ftcore::rules! {
    /// The (safety) rules of ntmutexd (docs/ntmutexd.md, docs/safety-rules.md).
    pub enum NtRule {
        /// A holder that learns of a newer epoch tells its client
        /// `LockLost` as it drops the token.
        HolderToldLockLost {
            switch: "no_lock_lost",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "lock_lost_is_needed",
        },
        /// A site without a position that sets `next` sends it a provisional
        /// `Commit { pos: None, preds: [self] }`.
        ProvisionalCommit {
            switch: "no_provisional_commit",
            spec: "docs/ntmutexd.md, Positions and COMMIT",
            scenario: "provisional_commit_is_needed",
        },
        /// A site that gains or changes its position cascades a fresh
        /// Commit to its `next`.
        CommitCascade {
            switch: "no_commit_cascade",
            spec: "docs/ntmutexd.md, Positions and COMMIT",
            scenario: "commit_cascade_is_needed",
        },
        /// The token is never sent to a suspected `next`: `next` is cleared
        /// and the token kept.
        NoTokenToSuspectedNext {
            switch: "pass_to_suspected_next",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "no_token_to_suspected_next_is_needed",
        },
        /// A request is never forwarded to a suspected `last`: the
        /// requester is answered `DeadEnd` and searches at once.
        NoForwardToSuspectedLast {
            switch: "forward_to_suspected_last",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "no_forward_to_suspected_last_is_needed",
        },
        /// A new life of a running cluster starts with `last` unknown
        /// (answers `DeadEnd`, makes its first request through M3).
        RestartedLastUnknown {
            switch: "restart_knows_last",
            spec: "docs/ntmutexd.md, Base algorithm",
            scenario: "restarted_site_last_unknown_is_needed",
        },
        /// Suspected peers are probed every `4·suspect_after`: a falsely
        /// suspected holder learns the newer epoch from the answer.
        ProbesOfSuspectedPeers {
            switch: "no_probes",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "probes_of_suspected_peers_is_needed",
        },
        /// A proposer proposes only epochs of its own slot
        /// (`round·2¹⁰ + slot`): two proposers never propose equal epochs.
        EpochSlot {
            switch: "no_epoch_slot",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "epoch_slot_masked_by_tie_refusal_and_promise_window",
        },
        /// M3.b: concurrent searchers elect one candidate; the losers ask
        /// the winner.
        M3bElection {
            switch: "no_election",
            spec: "docs/ntmutexd.md, Recovery, by case",
            scenario: "m3b_election_is_needed",
        },
        /// A request forwarded more than 2N times is circling and is
        /// answered `DeadEnd`.
        HopLimit {
            switch: "no_hop_limit",
            spec: "docs/ntmutexd.md, Base algorithm",
            scenario: "hop_limit_masked_by_cycle_checks_and_provisional_timer",
        },
        /// Every M3 takes a fresh request sequence number, so late Commits
        /// of an abandoned chain are answered `Unlink`.
        FreshSeqOnM3 {
            switch: "keep_seq_on_m3",
            spec: "docs/ntmutexd.md, Recovery, by case",
            scenario: "fresh_seq_on_m3_masked_by_cycle_checks",
        },
        /// A waiting site never links its own closest predecessor behind
        /// it, and refuses a Commit from its own `next` or with its own
        /// (id, seq) as origin.
        CycleChecks {
            switch: "no_cycle_checks",
            spec: "docs/ntmutexd.md, (safety) Linking never drops a live successor",
            scenario: "cycle_checks_is_needed",
        },
        /// A liveness rule, not a safety rule: a site without a position
        /// searches on its own after the provisional timer (kept to show
        /// the hop limit's mask).
        ProvisionalTimer {
            switch: "no_provisional_timer",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "hop_limit_masked_by_cycle_checks_and_provisional_timer",
        },
        /// Messages from an older life of a peer are ignored (and answered
        /// `Behind`).
        IncarnationCheck {
            switch: "no_incarnation_check",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "incarnation_check_masked_by_probes",
        },
        /// A joining minority that heard of no running cluster never
        /// bootstraps one: it keeps sending `Hello`.
        NoMinorityBootstrap {
            switch: "minority_bootstrap",
            spec: "docs/ntmutexd.md, Base algorithm",
            scenario: "minority_no_bootstrap_is_needed",
        },
        /// No site starts holding a token: the first token comes from a
        /// search and a majority's promises.
        NoSiteStartsWithToken {
            switch: "root_starts_with_token",
            spec: "docs/ntmutexd.md, Base algorithm",
            scenario: "no_site_starts_with_a_token_is_needed",
        },
        /// A regeneration completes only with the acks of every
        /// non-suspected site and of a majority.
        RegenAcksFromEveryLiveSite {
            switch: "regen_with_majority_only",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "regen_acks_from_every_live_site_is_needed",
        },
        /// A token below the receiver's `max_epoch` (its threshold) is
        /// discarded.
        StaleTokenDiscarded {
            switch: "take_stale_token",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "stale_token_discarded_is_needed",
        },
        /// A search regenerates only if no answer shows a smaller position
        /// or a token.
        RegenOnlyWithoutPositionOrToken {
            switch: "regen_despite_answers",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "regen_only_without_position_or_token_masked_by_holder_nack",
        },
        /// The smaller-position half of the rule above: an answer with a
        /// smaller position (M2; any position under M3) makes the searcher
        /// link behind that site.
        RegenOnlyWithoutSmallerPosition {
            switch: "regen_despite_position",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "regen_only_without_smaller_position_masked_by_holder_nack",
        },
        /// A token holder answers a regeneration `Nack{holder}`.
        HolderNacksRegeneration {
            switch: "no_holder_nack",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "holder_nacks_regeneration_is_needed",
        },
        /// A second token arriving while one is held is never installed.
        SecondTokenRefused {
            switch: "accept_second_token",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "refuse_second_token_is_needed",
        },
        /// A promise is stored before it is acked.
        PromiseStoredBeforeAck {
            switch: "ack_before_store",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "promise_stored_before_ack_is_needed",
        },
        /// An epoch adopted as in use (`max_epoch`) is stored before it is
        /// used or forwarded.
        EpochStoredBeforeUse {
            switch: "no_epoch_store",
            spec: "docs/ntmutexd.md, Durability and leases",
            scenario: "epoch_stored_before_use_masked_by_promise_store",
        },
        /// A recovered fresh node discards a token at or below its
        /// `recovered_max`.
        NoTokenAtRecoveredMax {
            switch: "token_at_recovered_max",
            spec: "docs/ntmutexd.md, Durability and leases",
            scenario: "no_token_at_recovered_max_is_needed",
        },
        /// Grants are leases: a site grants only within `lease·(1−ρ)` of a
        /// renewal a majority acked, and the lease it hands out ends then.
        GrantsUnderLeases {
            switch: "no_leases",
            spec: "docs/reliability.md, Pauses and leases",
            scenario: "grant_leases_is_needed",
        },
        /// A lease ack binds the acker: it promises no other proposer's
        /// regeneration for `lease·(1+ρ)` (`Nack{busy}`).
        LeaseAckBinds {
            switch: "no_lease_window",
            spec: "docs/ntmutexd.md, Durability and leases",
            scenario: "lease_window_is_needed",
        },
        /// A liveness rule: a waiting site's renewal is acked only while
        /// the acker acked a holder's renewal (or held the token) within
        /// `lease·(1+ρ)`.
        WaiterAckedBehindAHolder {
            switch: "ack_every_waiter",
            spec: "docs/ntmutexd.md, Durability and leases",
            scenario: "waiter_acks_behind_a_holder_is_needed",
        },
        /// A renewal below the acker's threshold is refused
        /// (`LeaseRefused { threshold }`).
        StaleRenewalsRefused {
            switch: "ack_stale_renewals",
            spec: "docs/ntmutexd.md, Durability and leases",
            scenario: "stale_renewals_refused_is_needed",
        },
        /// An unrecovered fresh node acks no renewal.
        UnrecoveredAcksNoRenewal {
            switch: "unrecovered_acks",
            spec: "docs/ntmutexd.md, Durability and leases",
            scenario: "unrecovered_no_lease_ack_is_needed",
        },
        /// A proposal equal to the threshold is refused
        /// (`durable::promise`, `PromiseRule::TiesRefused`).
        TiesRefused {
            switch: "accept_ties",
            spec: "docs/foundation.md, Values that order the world",
            scenario: "epoch_slot_masked_by_tie_refusal_and_promise_window",
        },
        /// A site that promised refuses other proposers for
        /// `lease·(1+ρ)` (`promise::Config::promise_window`).
        PromiseWindow {
            switch: "no_promise_window",
            spec: "docs/foundation.md, Promise windows",
            scenario: "promise_window_is_needed",
        },
        /// A (re)started node promises and proposes nothing for the
        /// restart window (`PromiseRule::RestartWindow`).
        RestartWindow {
            switch: "no_restart_window",
            spec: "docs/foundation.md, Restart window",
            scenario: "restart_window_is_needed",
        },
        /// An unrecovered fresh node neither asks for nor accepts a token.
        UnrecoveredTakesNoToken {
            switch: "unrecovered_takes_token",
            spec: "docs/foundation.md, Fresh nodes",
            scenario: "unrecovered_no_token_is_needed",
        },
        /// A site that hears from a site behind its epoch answers it with
        /// the newer epoch (an `AreYouAlive`).
        SenderBehindAnswered {
            switch: "no_behind_answer",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "sender_behind_answered_is_needed",
        },
        /// A holder that finds itself stalled asks every peer for the
        /// epoch in use.
        HolderStallCheck {
            switch: "no_stall_check",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "holder_stall_check_is_needed",
        },
        /// A predecessor counts as alive only while it has a position
        /// smaller than ours (or, provisionally, none), in the liveness
        /// checks and in M1's answers.
        AliveOnlyBeforeUs {
            switch: "alive_at_any_position",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "alive_before_us_masked_by_commit_cascade",
        },
        /// The closest predecessor counts as alive only while its `next` is
        /// us.
        AliveOnlyLinkedToUs {
            switch: "alive_linked_elsewhere",
            spec: "docs/ntmutexd.md, Failure detection",
            scenario: "alive_linked_to_us_is_needed",
        },
        /// Linking never drops a live successor: the message is forwarded
        /// to a live `next` instead.
        LinkKeepsLiveSuccessor {
            switch: "link_drops_successor",
            spec: "docs/ntmutexd.md, (safety) Linking never drops a live successor",
            scenario: "link_keeps_live_successor_is_needed",
        },
        /// A regeneration's acks count only within `lease·(1−ρ)` of
        /// sending `Regenerate`.
        RegenAcksWithinDeadline {
            switch: "late_regen_acks",
            spec: "docs/ntmutexd.md, (safety) Regeneration never creates a second token",
            scenario: "regen_acks_within_deadline_is_needed",
        },
    }
}
