//! tokenwatchd's (safety) rules: one variant per rule, each with the design
//! section it comes from and the scenario of `tests/safety.rs` that fails
//! without it (docs/safety-rules.md is checked against this table).

ftcore::rules! {
    /// tokenwatchd's (safety) rules.
    pub enum TwRule {
        /// The token passing counter (tpc) is stored: a restart resumes from
        /// it, never from 0.
        DurableTpc {
            switch: "tpc_not_stored",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "durable_tpc_is_needed",
        },
        /// The epoch adopted from a token, promised to a Claim or proposed
        /// is stored with tpc before anything that uses it is sent.
        DurableEpoch {
            switch: "epoch_not_stored",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "durable_epoch_is_needed",
        },
        /// tpc never wraps: a holder whose tpc would pass `u64::MAX` grants
        /// nothing more, drops the token and claims.
        TpcNeverWraps {
            switch: "wrap_tpc",
            spec: "docs/tokenwatchd.md, Fence",
            scenario: "tpc_never_wraps_is_needed",
        },
        /// With `tpc_reserve`: a restart resumes from the top of its last
        /// stored block, at or above every count used before.
        ReserveResumesAboveItsBlock {
            switch: "reserve_resumes_at_block_start",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "a_reserve_resumes_above_its_block_is_needed",
        },
        /// With `tpc_reserve`: while unsure of its last block, a process
        /// renews with the count below the block (liveness).
        RenewBelowTheUnsureBlock {
            switch: "renew_with_stored_top",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "renewals_below_the_unsure_block_are_needed",
        },
        /// With `tpc_reserve`: a token in the unsure block is answered
        /// `Stale`, not dropped in silence (liveness).
        UnsureTokensAnsweredStale {
            switch: "drop_unsure_tokens",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "unsure_tokens_answered_stale_is_needed",
        },
        /// A failed Claim is tried again after its own window, not only once
        /// the token counts as lost (liveness).
        FailedClaimsRetriedAfterTheirWindow {
            switch: "failed_claim_waits_for_lost_token",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "failed_claims_retried_after_their_window_is_needed",
        },
        /// An ACK never changes the receiver's tpc.
        AcksNeverChangeTpc {
            switch: "ack_raises_tpc",
            spec: "docs/tokenwatchd.md, Algorithm",
            scenario: "acks_never_changing_tpc_is_needed",
        },
        /// A silent successor is bypassed by a Claim (a new epoch through
        /// the promise round), never by handing the same epoch's token on.
        BypassByAClaim {
            switch: "bypass_by_count",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "bypass_by_a_claim_is_needed",
        },
        /// A process with no successor does not keep the token.
        NoMinorityHolder {
            switch: "minority_holder",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "minority_holder_unreachable_while_claims_need_a_majority",
        },
        /// A Claim back without a majority of adopters makes no token.
        ClaimsNeedAMajority {
            switch: "claim_without_majority",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "claims_need_a_majority",
        },
        /// A process that holds the token answers a Claim `Busy`.
        ClaimBusyWhileHolding {
            switch: "claim_ignores_holder",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "claim_busy_while_holding_masked_by_newer_token_and_lease_window",
        },
        /// A process awaiting the confirmation of a hand-off answers a Claim
        /// `Busy`.
        ClaimBusyWhileAwaiting {
            switch: "claim_ignores_awaiting",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "claim_busy_while_awaiting_masked_by_stale_renewal_refusal",
        },
        /// A process that accepted a token newer than the Claim's `seen`
        /// within `token_lost_after` answers it `Busy`.
        ClaimBusyForANewerToken {
            switch: "claim_ignores_newer_token",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "claim_busy_for_a_newer_token_masked_by_lease_window",
        },
        /// A Claim not back by its deadline `W·(1−ρ)` is abandoned.
        ClaimDeadline {
            switch: "claim_past_deadline",
            spec: "docs/foundation.md, Durable state",
            scenario: "claim_deadline_masked_by_stale_renewal_refusal",
        },
        /// A token of an epoch below the stored one is refused.
        StaleEpochsRefused {
            switch: "accept_old_epochs",
            spec: "docs/tokenwatchd.md, Crashes",
            scenario: "stale_epochs_are_refused_is_needed",
        },
        /// A claimant proposes only epochs of its own slot, so two claimants
        /// never propose one value.
        EpochSlot {
            switch: "no_epoch_slot",
            spec: "docs/foundation.md, Durable state",
            scenario: "ties_refused_masked_by_epoch_slot",
        },
        /// Ties are refused (the promise component's `TiesRefused`).
        TiesRefused {
            switch: "accept_ties",
            spec: "docs/foundation.md, Durable state",
            scenario: "ties_refused_masked_by_epoch_slot",
        },
        /// A promise refuses higher proposals of others for `W·(1+ρ)`.
        PromiseWindow {
            switch: "no_promise_window",
            spec: "docs/foundation.md, Durable state",
            scenario: "promise_window_masked_by_epoch_slot_and_tie_refusal",
        },
        /// A (re)started process promises, adopts and proposes nothing for
        /// `max(W, lease)·(1+ρ)` (the promise component's `RestartWindow`).
        RestartWindow {
            switch: "no_restart_window",
            spec: "docs/foundation.md, Durable state",
            scenario: "restart_window_is_needed",
        },
        /// A holder grants only within `lease·(1−ρ)` of a renewal a majority
        /// acked.
        GrantsUnderLeases {
            switch: "no_leases",
            spec: "docs/reliability.md, Pauses and leases",
            scenario: "grants_need_the_lease",
        },
        /// A lease ack refuses other claimants for `lease·(1+ρ)` (`Busy`).
        LeaseAckBindsTheAcker {
            switch: "no_lease_window",
            spec: "docs/reliability.md, Pauses and leases",
            scenario: "lease_acks_refuse_other_claimants_is_needed",
        },
        /// A renewal below the threshold is refused (`LeaseRefused`).
        StaleRenewalsRefused {
            switch: "ack_stale_renewals",
            spec: "docs/reliability.md, Pauses and leases",
            scenario: "renewals_below_the_threshold_are_refused_is_needed",
        },
        /// A waiting process's renewal is acked only while a holder's was
        /// acked recently (liveness).
        WaitersAckedOnlyBehindAHolder {
            switch: "ack_every_waiter",
            spec: "docs/reliability.md, Pauses and leases",
            scenario: "waiting_renewals_acked_only_behind_a_holder_is_needed",
        },
        /// An unrecovered fresh node acks no renewal.
        UnrecoveredNodesAckNoRenewal {
            switch: "unrecovered_acks",
            spec: "docs/reliability.md, Pauses and leases",
            scenario: "unrecovered_nodes_ack_no_renewal_is_needed",
        },
        /// A client's lease ends with the token's visit (`max_hold`).
        ClientLeasesEndWithTheVisit {
            switch: "lease_past_visit",
            spec: "docs/reliability.md, Pauses and leases",
            scenario: "client_leases_end_with_the_visit_is_needed",
        },
    }
}
