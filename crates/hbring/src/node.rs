//! The heartbeat ring as a complete protocol core (`hbringd`).

use ftcore::{
    ClientId, Context, Incarnation, JoinState, NodeId, Outbox, OutputOf, PeerView, Protocol, StatusReport, Then,
};
use membership::{MembershipError, Status};
use timer::Instant;

use crate::{HbConfig, HbEvent, HbMsg, HbReply, HbRequest, HbRing};

/// A node that runs only the heartbeat ring.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbNode {
    ring: HbRing,
    out: Outbox<HbMsg, HbReply, HbEvent>,
    left: bool,
}

impl HbNode {
    /// The ring component.
    pub fn ring(&self) -> &HbRing {
        &self.ring
    }
}

impl Protocol for HbNode {
    type Msg = HbMsg;
    type Request = HbRequest;
    type Reply = HbReply;
    type Event = HbEvent;
    type Config = HbConfig;
    type Durable = ();
    type Error = MembershipError;

    /// Node `ctx.me` of `ctx.membership`: the ring, with every other member
    /// presumed alive.
    fn start(ctx: Context<HbConfig, ()>) -> Result<Self, MembershipError> {
        let mut out = Outbox::default();
        let ring = HbRing::new(ctx.config, &ctx.membership, ctx.me, ctx.incarnation, ctx.now, &mut out)?;
        Ok(HbNode { ring, out, left: false })
    }

    fn on_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: HbMsg) -> Then {
        self.ring.handle_message(now, from, inc, msg, &mut self.out);
        Then::Done
    }

    fn on_request(&mut self, _now: Instant, client: ClientId, req: HbRequest) -> Then {
        match req {
            HbRequest::Ring => {
                let view = self.ring.view();
                let alive = view
                    .alive_from_me()
                    .into_iter()
                    .map(|id| (id, view.liveness(id).map(|l| l.incarnation).unwrap_or_default()))
                    .collect();
                self.out.reply(client, HbReply::Ring { alive });
            }
        }
        Then::Done
    }

    fn on_client_gone(&mut self, _now: Instant, client: ClientId) -> Then {
        self.out.retain(|o| !matches!(o, ftcore::Output::Reply { client: c, .. } if *c == client));
        Then::Done
    }

    fn on_peer_unreachable(&mut self, now: Instant, peer: NodeId) -> Then {
        self.ring.peer_unreachable(now, peer, &mut self.out);
        Then::Done
    }

    fn on_link_lost(&mut self, _now: Instant, _peer: NodeId) -> Then {
        // Heartbeats are periodic and idempotent: the next one repairs a
        // lost one, and a peer that stays unreachable is suspected by
        // silence, as the detector already does.
        Then::Done
    }

    fn join_state(&self) -> JoinState {
        if self.ring.joined() {
            JoinState::Joined
        } else {
            JoinState::Joining { answered: 0, of: 1 }
        }
    }

    fn on_timeout(&mut self, now: Instant) -> Then {
        self.ring.handle_timeout(now, &mut self.out);
        Then::Done
    }

    fn on_shutdown(&mut self, _now: Instant) -> Then {
        // Nothing to hand on: peers detect the departure by silence.
        self.left = true;
        Then::Done
    }

    fn is_left(&self) -> bool {
        self.left
    }

    fn poll_output(&mut self) -> Option<OutputOf<Self>> {
        self.out.pop()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.ring.poll_timeout()
    }

    fn incarnation(&self) -> Incarnation {
        self.ring.incarnation()
    }

    fn peer_view(&self, peer: NodeId) -> PeerView {
        match self.ring.view().liveness(peer) {
            Some(l) => PeerView { up: l.status == Status::Alive, incarnation: l.incarnation },
            None => PeerView { up: false, incarnation: Incarnation(0) },
        }
    }

    fn status(&self) -> StatusReport {
        let view = self.ring.view();
        let fmt = |x: Option<NodeId>| x.map_or("none".to_string(), |n| n.0.to_string());
        StatusReport {
            daemon: "hbringd".into(),
            node: view.me(),
            incarnation: view.my_incarnation(),
            role: if view.alive_count() == 1 { "alone".into() } else { "member".into() },
            peers: Vec::new(),
            details: vec![
                ("successor".into(), fmt(view.successor())),
                ("predecessor".into(), fmt(view.predecessor())),
                ("alive".into(), view.alive_count().to_string()),
            ],
        }
    }
}
