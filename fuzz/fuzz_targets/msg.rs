//! A message type for the frame fuzz targets, with the serde shapes daemon
//! messages use (integers, ids, options, sequences, strings, nested
//! structs). Each daemon adds a target for its own message enum.

use membership::{Incarnation, NodeId};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub node: NodeId,
    pub inc: Incarnation,
    pub alive: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FuzzMsg {
    Ping(u64),
    Token { holder: Option<NodeId>, round: u64, queue: Vec<(NodeId, u32)> },
    Gossip(Vec<Entry>),
    Text(String),
    Stop,
}
ftcore::message_kinds!(FuzzMsg { Ping => "ping", Token => "token", Gossip => "gossip", Text => "text", Stop => "stop" });
