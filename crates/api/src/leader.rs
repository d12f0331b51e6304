//! The leader watch's wire type: a connection that only asks for status
//! (`ftctl leader`, `client::leader::LeaderWatch`) speaks
//! `ClientRequest<Never>` and `ClientResponse<Never>`.

use ftcore::Message;

/// A request or reply type with no values, for connections that only ask
/// for status.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Never {}

impl Message for Never {
    fn kind(&self) -> u16 {
        match *self {}
    }

    fn kind_name(_: u16) -> Option<&'static str> {
        None
    }
}
