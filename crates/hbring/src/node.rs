//! The heartbeat ring as a complete protocol core (`hbringd`).

use ftcore::{ClientId, Context, Incarnation, NodeId, Outbox, OutputOf, PeerStatus, Protocol, StatusReport};
use membership::{MembershipError, Status};
use timer::Instant;

use crate::{HbConfig, HbEvent, HbMsg, HbReply, HbRequest, HbRing};

/// A node that runs only the heartbeat ring.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbNode {
    ring: HbRing,
    addrs: Vec<(NodeId, String)>,
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
        let addrs = ctx.membership.members().iter().map(|m| (m.id, m.addr.to_string())).collect();
        let mut out = Outbox::default();
        let ring = HbRing::new(ctx.config, &ctx.membership, ctx.me, ctx.incarnation, ctx.now, &mut out)?;
        Ok(HbNode { ring, addrs, out, left: false })
    }

    fn handle_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: HbMsg) {
        self.ring.handle_message(now, from, inc, msg, &mut self.out);
    }

    fn handle_request(&mut self, _now: Instant, client: ClientId, req: HbRequest) {
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
    }

    fn handle_client_gone(&mut self, _now: Instant, client: ClientId) {
        self.out.retain(|o| !matches!(o, ftcore::Output::Reply { client: c, .. } if *c == client));
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.ring.handle_timeout(now, &mut self.out);
    }

    fn handle_shutdown(&mut self, _now: Instant) {
        // Nothing to hand on: peers detect the departure by silence.
        self.left = true;
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

    fn status(&self) -> StatusReport {
        let view = self.ring.view();
        let peers = self
            .addrs
            .iter()
            .filter(|(id, _)| *id != view.me())
            .map(|(id, addr)| {
                let l = view.liveness(*id).expect("configured member");
                PeerStatus { id: *id, addr: addr.clone(), up: l.status == Status::Alive, incarnation: l.incarnation }
            })
            .collect();
        let fmt = |x: Option<NodeId>| x.map_or("none".to_string(), |n| n.0.to_string());
        StatusReport {
            daemon: "hbringd".into(),
            node: view.me(),
            incarnation: view.my_incarnation(),
            role: if view.alive_count() == 1 { "alone".into() } else { "member".into() },
            peers,
            details: vec![
                ("successor".into(), fmt(view.successor())),
                ("predecessor".into(), fmt(view.predecessor())),
                ("alive".into(), view.alive_count().to_string()),
            ],
        }
    }
}
