//! Rails: one large payload moved over several connections to a server
//! at once. The server's `Cts` for a rendezvous carries the granting
//! connection's rail token; a `Part` frame on any connection of the same
//! identity names that token, the message id and where its bytes go, and
//! the server reassembles the payload by message id (parts in any order,
//! the same part again harmless) before serving the request once.

use crate::DecodeError;

/// Bytes of a rail token.
pub const RAIL_TOKEN_LEN: usize = 16;

/// Most parts one message may be split into (the server tracks each).
pub const MAX_PARTS: usize = 64;

/// The token naming the connection that granted a rendezvous (a `Cts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RailToken(pub [u8; RAIL_TOKEN_LEN]);

impl RailToken {
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let t: [u8; RAIL_TOKEN_LEN] = b.try_into().map_err(|_| DecodeError::Truncated { need: RAIL_TOKEN_LEN, have: b.len() })?;
        Ok(RailToken(t))
    }
}

/// The body of a `Cts` frame: the granting connection's token, and on a
/// shared-memory connection with a shared area, where in that area the
/// client puts the payload (answered by a `Placed` frame, not `Data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub token: RailToken,
    pub area_at: Option<u64>,
}

impl Grant {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.token.0.to_vec();
        if let Some(at) = self.area_at {
            b.extend_from_slice(&at.to_le_bytes());
        }
        b
    }

    /// An empty body is a grant without token (a server without rails).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        match b.len() {
            0 => Ok(Grant { token: RailToken([0; RAIL_TOKEN_LEN]), area_at: None }),
            RAIL_TOKEN_LEN => Ok(Grant { token: RailToken::decode(b)?, area_at: None }),
            n if n == RAIL_TOKEN_LEN + 8 => {
                let at = u64::from_le_bytes(b[RAIL_TOKEN_LEN..].try_into().expect("8 bytes"));
                Ok(Grant { token: RailToken::decode(&b[..RAIL_TOKEN_LEN])?, area_at: Some(at) })
            }
            n => Err(DecodeError::Truncated { need: RAIL_TOKEN_LEN + 8, have: n }),
        }
    }
}

/// The body of a `Part` frame (its payload is the part's bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartHead {
    /// The connection the message was announced and granted on.
    pub token: RailToken,
    /// Where the part's first byte goes in the message's payload.
    pub offset: u64,
}

impl PartHead {
    pub const LEN: usize = RAIL_TOKEN_LEN + 8;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..RAIL_TOKEN_LEN].copy_from_slice(&self.token.0);
        b[RAIL_TOKEN_LEN..].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() != Self::LEN {
            return Err(DecodeError::Truncated { need: Self::LEN, have: b.len() });
        }
        let token = RailToken::decode(&b[..RAIL_TOKEN_LEN])?;
        let mut o = [0u8; 8];
        o.copy_from_slice(&b[RAIL_TOKEN_LEN..]);
        Ok(PartHead { token, offset: u64::from_le_bytes(o) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_head_round_trips_and_a_wrong_length_is_refused() {
        let h = PartHead { token: RailToken([7; RAIL_TOKEN_LEN]), offset: u64::MAX - 3 };
        assert_eq!(PartHead::decode(&h.encode()).unwrap(), h);
        assert!(PartHead::decode(&h.encode()[..PartHead::LEN - 1]).is_err());
        assert!(RailToken::decode(&[0; RAIL_TOKEN_LEN + 1]).is_err());
    }

    #[test]
    fn a_grant_round_trips_with_and_without_a_place() {
        for g in [Grant { token: RailToken([3; RAIL_TOKEN_LEN]), area_at: None }, Grant { token: RailToken([9; RAIL_TOKEN_LEN]), area_at: Some(u64::MAX) }] {
            assert_eq!(Grant::decode(&g.encode()).unwrap(), g);
        }
        assert_eq!(Grant::decode(&[]).unwrap().area_at, None);
        for n in [1, RAIL_TOKEN_LEN - 1, RAIL_TOKEN_LEN + 1, RAIL_TOKEN_LEN + 7, RAIL_TOKEN_LEN + 9] {
            assert!(Grant::decode(&vec![0; n]).is_err(), "{n} bytes");
        }
    }
}
