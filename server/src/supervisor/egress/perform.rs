//! Making a judged call for the tree: on the socket taken from it (the
//! same open socket), or on a socket of the supervisor's own put in place
//! of the caller's once connected; with the copies judged, never the
//! caller's memory.
//!
//! Failure modes: the call's own failure is the caller's answer (`-errno`);
//! a replacement socket that cannot be put in place fails the call (the
//! caller's fd stays its own, unconnected socket).

use super::call::{errno_of, Answer};
use super::copy::Copied;
use crate::policy::egress::Protocol;
use crate::supervisor::seam::Holder;
use agentsh_proto::netabi::NetCall;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// What the call is made on.
pub(super) enum Target {
    Taken(OwnedFd),
    /// A socket of ours, put into the caller at fd `at` once its connect
    /// has been made (or started), before the answer.
    Replace {
        ours: OwnedFd,
        at: i32,
        cloexec: bool,
        held: Holder,
    },
}

impl Target {
    pub(super) fn sock(&self) -> &OwnedFd {
        match self {
            Target::Taken(s) | Target::Replace { ours: s, .. } => s,
        }
    }

    /// Makes the call; for a replacement, installs the socket in the
    /// caller (a failed install is the call's failure: the caller's fd
    /// stays its own, unconnected socket).
    pub(super) fn perform(&self, call: NetCall, protocol: Protocol, messages: &[Copied]) -> Answer {
        let v = perform(self.sock(), call, protocol, messages);
        if let Target::Replace {
            ours,
            at,
            cloexec,
            held,
        } = self
        {
            if v >= 0 || v == -i64::from(libc::EINPROGRESS) {
                if let Err(e) = held.install_fd(ours, *at, *cloexec) {
                    tracing::info!(
                        fd = at,
                        "the connected socket could not be put in place: {e}"
                    );
                    return errno_of(&e);
                }
            }
        }
        v
    }
}

/// Makes the call on the taken socket with the copies; its answer value.
fn perform(sock: &OwnedFd, call: NetCall, protocol: Protocol, messages: &[Copied]) -> Answer {
    let datagram = protocol == Protocol::Udp;
    let fd = sock.as_raw_fd();
    let ret = |rc: isize| -> Answer {
        if rc < 0 {
            errno_of(&io::Error::last_os_error())
        } else {
            rc as i64
        }
    };
    match call {
        NetCall::Connect => {
            let m = &messages[0];
            // SAFETY: the address is our own buffer of the length given.
            let rc = unsafe {
                libc::connect(fd, m.addr.as_ptr().cast(), m.addr.len() as libc::socklen_t)
            };
            ret(rc as isize)
        }
        NetCall::Sendto | NetCall::Sendmsg => send_one(fd, datagram, &messages[0], &ret),
        NetCall::Sendmmsg => {
            let mut sent = 0i64;
            for m in messages {
                let r = send_one(fd, datagram, m, &ret);
                if r < 0 {
                    return if sent > 0 { sent } else { r };
                }
                // What the kernel would have written: the bytes sent, in
                // the message's msg_len (glibc's resolver checks it).
                if let Some((tid, at)) = m.len_at {
                    if let Err(e) = crate::tracee::write_bytes(tid, at, &(r as u32).to_ne_bytes()) {
                        tracing::debug!(tid, "sendmmsg: msg_len not written back: {e}");
                        return if sent > 0 { sent } else { errno_of(&e) };
                    }
                }
                sent += 1;
            }
            sent
        }
    }
}

fn send_one(fd: RawFd, datagram: bool, m: &Copied, ret: &dyn Fn(isize) -> Answer) -> Answer {
    if m.clipped && datagram {
        return -i64::from(libc::EMSGSIZE);
    }
    let mut iov = libc::iovec {
        iov_base: m.data.as_ptr() as *mut libc::c_void,
        iov_len: m.data.len(),
    };
    // SAFETY: zeroed msghdr is valid; every pointer set below is into our
    // own buffers, alive for the call.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    if !m.addr.is_empty() {
        h.msg_name = m.addr.as_ptr() as *mut libc::c_void;
        h.msg_namelen = m.addr.len() as libc::socklen_t;
    }
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    if !m.control.is_empty() {
        h.msg_control = m.control.as_ptr() as *mut libc::c_void;
        h.msg_controllen = m.control.len() as _;
    }
    // MSG_NOSIGNAL: a broken pipe is the caller's EPIPE, not our SIGPIPE.
    // SAFETY: `h` is a valid msghdr (above).
    let rc = unsafe { libc::sendmsg(fd, &h, m.flags | libc::MSG_NOSIGNAL) };
    ret(rc)
}
