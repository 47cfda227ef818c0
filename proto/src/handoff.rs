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
//!
//! The ptrace backend has no fd to carry: unixwrap sends [`TRACE_ME_BYTE`]
//! alone, the relay sends [`TRACE_MAGIC`] and the pid alone, and the server
//! answers only once it has seized the wrapper (`PTRACE_SEIZE`), so nothing
//! of the tree runs untraced.
//!
//! The shim, which takes unixwrap's steps in its own process, sends the
//! second message itself, on a connection it made before anything was
//! installed; the server's [`Ack`] may then carry the tree's Landlock
//! ruleset, built ahead, in SCM_RIGHTS (only on that connection, only when
//! the wrap-init request asked for it).

/// First byte of a relay -> server handoff message.
pub const HANDOFF_MAGIC: u8 = 0xA7;
/// Length of the relay -> server handoff payload.
pub const HANDOFF_LEN: usize = 5;
/// Payload byte of the unixwrap -> relay datagram.
pub const WRAPPER_FD_BYTE: u8 = b'N';
/// Payload byte of the unixwrap -> relay datagram asking to be traced (no fd).
pub const TRACE_ME_BYTE: u8 = b'T';
/// First byte of a relay -> server "seize this pid" message (no fd).
pub const TRACE_MAGIC: u8 = 0xA8;

/// A relay -> server message, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// The notify fd of the wrapper with this pid (the fd rides in SCM_RIGHTS).
    Notify(u32),
    /// Seize the wrapper with this pid (ptrace backend; no fd).
    Trace(u32),
}

impl Handoff {
    /// The wrapper's pid.
    pub fn pid(self) -> u32 {
        match self {
            Handoff::Notify(pid) | Handoff::Trace(pid) => pid,
        }
    }

    /// What it hands over: a notify fd, or the wrapper to be seized.
    pub fn trap(self) -> crate::wire::Trap {
        match self {
            Handoff::Notify(_) => crate::wire::Trap::UserNotif,
            Handoff::Trace(_) => crate::wire::Trap::Tracer,
        }
    }

    /// How it is named in a refusal.
    pub fn what(self) -> &'static str {
        match self {
            Handoff::Notify(_) => "notify-fd",
            Handoff::Trace(_) => "trace-me",
        }
    }
}

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

/// Encodes the relay -> server "seize this pid" payload.
pub fn encode_trace(wrapper_pid: u32) -> [u8; HANDOFF_LEN] {
    let p = wrapper_pid.to_le_bytes();
    [TRACE_MAGIC, p[0], p[1], p[2], p[3]]
}

/// Decodes the relay -> server payload; `None` if it is not exactly a handoff.
pub fn decode_handoff(buf: &[u8]) -> Option<Handoff> {
    match buf {
        [HANDOFF_MAGIC, a, b, c, d] => Some(Handoff::Notify(u32::from_le_bytes([*a, *b, *c, *d]))),
        [TRACE_MAGIC, a, b, c, d] => Some(Handoff::Trace(u32::from_le_bytes([*a, *b, *c, *d]))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoff_round_trips() {
        assert_eq!(
            decode_handoff(&encode_handoff(4242)),
            Some(Handoff::Notify(4242))
        );
        assert_eq!(decode_handoff(&encode_trace(7)), Some(Handoff::Trace(7)));
    }

    #[test]
    fn handoff_rejects_wrong_magic_or_length() {
        assert_eq!(decode_handoff(&[0xA6, 1, 0, 0, 0]), None);
        assert_eq!(decode_handoff(&[0xA7, 1, 0, 0]), None);
        assert_eq!(decode_handoff(&[0xA7, 1, 0, 0, 0, 0]), None);
        assert_eq!(decode_handoff(&[0xA8, 1, 0, 0]), None);
    }

    #[test]
    fn only_one_is_accepted() {
        assert_eq!(Ack::from_byte(1), Ack::Accepted);
        for b in [0u8, 2, 0xff] {
            assert_eq!(Ack::from_byte(b), Ack::Refused);
        }
    }
}
