//! ringd's peer messages (ringd.md): the heartbeat ring's, ring repair's,
//! the token's, the lease's, the census's and the lookup's.

use std::collections::BTreeMap;

use api::ring::Outcome;
use durable::promise::{Refusal, Values};
use ftcore::{message_kinds, Incarnation, NodeId};
use hbring::HbMsg;
use serde::{Deserialize, Serialize};

/// Most recent token-service results a token carries (`request_id →
/// outcome`), for idempotent retries.
pub const MAX_RESULTS: usize = 128;

/// The longest output a token keeps in a stored result (a retry of a
/// command service gets at most this much of its output back).
pub const MAX_STORED_OUTPUT: usize = 256;

/// The ring's token (ringd.md, Token).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Token {
    /// Raised only by a regeneration (a census a majority promised).
    pub epoch: u64,
    /// Raised at every pass, and for every token service run after the
    /// first in one visit: (epoch, seq) is the fence.
    pub seq: u64,
    /// The replica it came from (TokenRelease goes there).
    pub from: NodeId,
    /// The life of the successor it was passed to (0: not passed, or that
    /// life not yet heard from). A replica drops a token addressed to
    /// another of its lives, as that life's connections would have
    /// closed in a restart: a rejoined replica has forgotten whom its old
    /// life suspected, and must not take a token held in the network
    /// since then (ringd.md: from the moment D suspects P, D ignores P).
    pub to_life: Incarnation,
    /// The shared state token services mutate.
    pub state: BTreeMap<String, String>,
    /// Recent results of token services, oldest first (bounded by
    /// [`MAX_RESULTS`]).
    pub results: Vec<(u64, Outcome)>,
    /// Passes since a token service last ran (0: its sender ran one, has
    /// one queued, or was told of one by `Wanted`). An owner with nothing queued holds the token for
    /// `token_min_hold_ms` only once it has gone N passes without running
    /// anything: an idle ring does not spin it, a busy one is not slowed
    /// by it.
    pub quiet: u32,
}

/// Short, for traces and logs: the state and results are summarised.
impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Token {{ epoch: {}, seq: {}, from: {}, state: {} keys, results: {}, quiet: {} }}",
            self.epoch,
            self.seq,
            self.from,
            self.state.len(),
            self.results.len(),
            self.quiet
        )
    }
}

impl Token {
    /// A new token of `epoch` (seq 0) carrying `state` and `results`.
    pub fn regenerated(epoch: u64, from: NodeId, base: Option<&Token>) -> Token {
        Token {
            epoch,
            seq: 0,
            from,
            to_life: Incarnation(0),
            state: base.map(|t| t.state.clone()).unwrap_or_default(),
            results: base.map(|t| t.results.clone()).unwrap_or_default(),
            // A new token goes round once at once, to find whoever waited
            // while it was lost.
            quiet: 0,
        }
    }

    /// (epoch, seq): compared as a pair.
    pub fn id(&self) -> (u64, u64) {
        (self.epoch, self.seq)
    }

    /// The stored outcome of `request_id`, if this token ran it.
    pub fn result_of(&self, request_id: u64) -> Option<&Outcome> {
        self.results.iter().rev().find(|(id, _)| *id == request_id).map(|(_, o)| o)
    }

    /// Records an outcome (its output cut to [`MAX_STORED_OUTPUT`] bytes),
    /// dropping the oldest beyond [`MAX_RESULTS`].
    pub fn record(&mut self, request_id: u64, mut outcome: Outcome) {
        if let Ok(r) = outcome.as_mut() {
            if r.output.len() > MAX_STORED_OUTPUT {
                let mut cut = MAX_STORED_OUTPUT;
                while !r.output.is_char_boundary(cut) {
                    cut -= 1;
                }
                r.output.truncate(cut);
            }
        }
        if self.results.len() >= MAX_RESULTS {
            let _ = self.results.remove(0);
        }
        self.results.push((request_id, outcome));
    }
}

/// Ring repair's `IAmNewNext`: the detector `origin` lost its predecessor
/// `failed` (that life).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NewNext {
    /// The failed predecessor.
    pub failed: NodeId,
    /// Its life.
    pub failed_inc: Incarnation,
    /// The detector.
    pub origin: NodeId,
    /// The detector's recovery id.
    pub recovery: u64,
    /// The newest (epoch, seq) the detector accepted.
    pub seen: (u64, u64),
    /// Hops so far (dropped at N).
    pub hops: u32,
}

/// A replica's answer to a census.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CensusAnswer {
    /// Promised `proposed`, stored; here is the newest copy it has (owned,
    /// frozen or released), if any.
    Promise {
        /// Its newest copy.
        copy: Option<Box<Token>>,
    },
    /// Refused: it owns the token or acked a HolderAlive within the lease
    /// (`Busy`), `proposed` is not above its threshold (`Promised`, the
    /// spec's `Stale`), or another of the promise component's refusals.
    Refused(Refusal),
}

/// A message between ringd replicas.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Msg {
    /// The heartbeat ring (failure detection, view, `Excluded`, rejoin).
    Hb(HbMsg),
    /// Start-up handshake of a fresh node (foundation.md `Hello`).
    Hello {
        /// Echoed.
        nonce: u64,
    },
    /// The answer to `Hello`: the stored promise values (`None` while the
    /// answerer is itself unrecovered).
    HelloAck {
        /// The Hello's nonce.
        nonce: u64,
        /// Its stored values.
        values: Option<Values>,
    },
    /// Ring repair: the detector lost its predecessor; travels the ring to
    /// whoever pointed at it.
    IAmNewNext(NewNext),
    /// "I am your predecessor now" (to the detector), with the sender's ring.
    IAmNewPrevious {
        /// The recovery it answers.
        recovery: u64,
        /// The sender's live members in ring order.
        members: Vec<NodeId>,
    },
    /// A frozen or unacknowledged copy handed to the detector of its
    /// recovery (it only supplies state to a census).
    Copy {
        /// The recovery.
        recovery: u64,
        /// The copy.
        token: Box<Token>,
    },
    /// The token, to the successor (resent until TokenAck).
    Token(Box<Token>),
    /// Receipt of a token.
    TokenAck {
        /// Its epoch.
        epoch: u64,
        /// Its seq.
        seq: u64,
    },
    /// The receiver's forward of this token was acked: its frozen copy
    /// may be released.
    TokenRelease {
        /// Epoch.
        epoch: u64,
        /// Seq.
        seq: u64,
    },
    /// Refused: the refuser knows `epoch` (higher, or the recovered max).
    Stale {
        /// The value to go above.
        epoch: u64,
    },
    /// The owner's lease renewal (to every configured replica).
    HolderAlive {
        /// The token's epoch.
        epoch: u64,
        /// Identifies this renewal.
        nonce: u64,
    },
    /// A renewal acked: the acker answers no census for `lease·(1+ρ)`.
    HolderAliveAck {
        /// The renewal's epoch.
        epoch: u64,
        /// The renewal's nonce.
        nonce: u64,
    },
    /// A regeneration proposal, to every configured replica.
    Census {
        /// The proposed epoch.
        proposed: u64,
    },
    /// The answer to a census.
    CensusReply {
        /// The census's epoch.
        proposed: u64,
        /// The answer.
        answer: CensusAnswer,
    },
    /// A token service was queued at the sender, and the token ran none
    /// there when it last left (`ftcore::idle`): an owner holding the
    /// token idle passes it on at once, marked as serving (`quiet` 0), so
    /// that none on the way holds it either. A hint: lost, the token comes
    /// after the idle holds as without it.
    Wanted,
    /// A lookup's lap.
    Find {
        /// The client's id (at the origin).
        request_id: u64,
        /// Which lap of the origin's lookup.
        lap: u32,
        /// Hops so far (dropped at N).
        hops: u32,
        /// Who started it.
        origin: NodeId,
        /// The least-loaded replica so far.
        best: NodeId,
        /// Its load.
        best_load: u32,
        /// Its client address (the lookup's answer).
        best_addr: String,
    },
}

message_kinds!(Msg {
    Hb => "hb",
    Hello => "hello",
    HelloAck => "hello_ack",
    IAmNewNext => "i_am_new_next",
    IAmNewPrevious => "i_am_new_previous",
    Copy => "copy",
    Token => "token",
    TokenAck => "token_ack",
    TokenRelease => "token_release",
    Stale => "stale",
    HolderAlive => "holder_alive",
    HolderAliveAck => "holder_alive_ack",
    Census => "census",
    CensusReply => "census_reply",
    Find => "find",
    Wanted => "wanted",
});

impl From<HbMsg> for Msg {
    fn from(m: HbMsg) -> Self {
        Msg::Hb(m)
    }
}
