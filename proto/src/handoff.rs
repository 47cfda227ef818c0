//! Framing of the notify-fd handoff.
//!
//! Two hops carry the seccomp notify fd:
//!
//! 1. unixwrap -> relay helper, over the SOCK_SEQPACKET socketpair (unixwrap's
//!    fd 3): one datagram of one byte [`WRAPPER_FD_BYTE`] carrying the fd in
//!    SCM_RIGHTS. The relay answers with one [`Ack`] byte.
//! 2. relay helper -> server, over the per-wrap-init unix socket
//!    (`notify_socket`): one message [`HANDOFF_MAGIC`], the wrapper's pid as
//!    u32 little-endian, and the fd in SCM_RIGHTS. The server answers one
//!    [`Ack`] byte.

/// First byte of a relay -> server handoff message.
pub const HANDOFF_MAGIC: u8 = 0xA7;
/// Length of the relay -> server handoff payload.
pub const HANDOFF_LEN: usize = 5;
/// Payload byte of the unixwrap -> relay datagram.
pub const WRAPPER_FD_BYTE: u8 = b'N';

/// The one-byte answer of the server (to the relay) and of the relay (to unixwrap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The server took the notify fd and supervises the tree.
    Accepted,
    /// The server refused the fd; the tree must not run.
    Refused,
}

impl Ack {
    /// The byte on the wire.
    pub const fn to_byte(self) -> u8 {
        match self {
            Ack::Accepted => 1,
            Ack::Refused => 0,
        }
    }

    /// Any byte other than 1 is a refusal: fail closed.
    pub const fn from_byte(b: u8) -> Ack {
        if b == 1 {
            Ack::Accepted
        } else {
            Ack::Refused
        }
    }
}

/// Encodes the relay -> server payload.
pub fn encode_handoff(wrapper_pid: u32) -> [u8; HANDOFF_LEN] {
    let p = wrapper_pid.to_le_bytes();
    [HANDOFF_MAGIC, p[0], p[1], p[2], p[3]]
}

/// Decodes the relay -> server payload; `None` if it is not exactly a handoff.
pub fn decode_handoff(buf: &[u8]) -> Option<u32> {
    match buf {
        [HANDOFF_MAGIC, a, b, c, d] => Some(u32::from_le_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoff_round_trips() {
        assert_eq!(decode_handoff(&encode_handoff(4242)), Some(4242));
    }

    #[test]
    fn handoff_rejects_wrong_magic_or_length() {
        assert_eq!(decode_handoff(&[0xA6, 1, 0, 0, 0]), None);
        assert_eq!(decode_handoff(&[0xA7, 1, 0, 0]), None);
        assert_eq!(decode_handoff(&[0xA7, 1, 0, 0, 0, 0]), None);
    }

    #[test]
    fn only_one_is_accepted() {
        assert_eq!(Ack::from_byte(1), Ack::Accepted);
        for b in [0u8, 2, 0xff] {
            assert_eq!(Ack::from_byte(b), Ack::Refused);
        }
    }
}
