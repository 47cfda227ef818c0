//! A network call judged where it stops (the ptrace backend): the
//! caller's other threads are held first (`Stop::hold_still`), its
//! socket's transport is read from `/proc` (`tracee::netproc`), the
//! destinations are read from its memory and judged exactly as a call made
//! for the tree is (`judge`: the policy, the per-tree decisions, the
//! `connect` events, `network_rules`' TCP ports, approvals), and the call
//! is then let through as made, or refused with the rule's errno. No
//! socket is taken and no call is made for the tree, so neither
//! `pidfd_getfd` nor a way to put fds into it is needed (gVisor has
//! neither).
//!
//! Why the destination judged is the one the kernel uses: from the stop
//! until the call has returned, no thread of the caller's process runs
//! (held), no other process shares its memory or fd table (the filter
//! refuses `CLONE_VM` without `CLONE_THREAD|CLONE_VFORK` and `CLONE_FILES`
//! without `CLONE_THREAD`), none can write it (`ptrace`,
//! `process_vm_writev` and `/proc/PID/mem` writes are refused to trees),
//! and a connect's or a sendto's sockaddr is copied where only the tracer
//! writes, the call pointed at the copy (`Stop::pin`: the pinned region,
//! `tracee::pin`). Where it is not (a `sendmsg`'s or `sendmmsg`'s headers;
//! a process without the region) the bytes that decide the destination
//! (each sockaddr, and a message header's name and length) must not lie
//! in a shared mapping or a file's pages (`vma`), and a caller with a
//! Linux AIO ring (whose completions the kernel writes whenever they come)
//! is refused. So the bytes read are the bytes the kernel reads, and the fd
//! is the socket told.
//!
//! The socket's transport: sockfs names it where it can; gVisor's cannot,
//! and its `/proc/net` tables list every socket but UDP over IPv6 (its
//! `udp6` is empty). A socket in no table, asked to send to an inet
//! address, is judged as UDP: the filter lets inet sockets be TCP or UDP
//! only, TCP of both families and UDP over IPv4 are listed, and a socket of
//! another family refuses an inet address (a packet socket the policy's
//! `socket_families` allows is let through unjudged under user-notify; here
//! it is judged as UDP, which is stricter). A Unix socket, or one sockfs
//! names otherwise, is let through held (its fd cannot change meanwhile).
//!
//! DNS (`dns: stub`): a query to any resolver goes to agentsh's stub. The
//! stub's address is written into the pinned copy where there is one;
//! else over the caller's own sockaddr (in its family and
//! length) while its threads are held, checked by reading the call again,
//! and the caller's bytes are put back at the call's syscall-exit stop,
//! before anything of the process runs (`Stop::proceed_then`): the caller
//! never sees the stub's address, the kernel never sees the caller's. The
//! stub knows a tree's socket by its local address: a send is told to it
//! first (the socket must have a local address by then: bound, or
//! connected, as glibc's and musl's resolvers do), a connect once it has
//! returned (the connect gives the socket its address; nothing has been
//! sent yet, and the caller is still stopped).
//!
//! A `sendmmsg` batch with one refused destination is refused whole (the
//! batch cannot be cut short without changing the caller's registers).
//! A destination an operator must approve holds the call; approved, the
//! call runs again from its start and is judged anew in the caller's
//! memory as it is then (the others ran meanwhile).
//!
//! What this does not watch: data sent without a destination (`write`,
//! `send`) goes where a judged `connect` pointed the socket; a blocking
//! call keeps the caller's other threads stopped until it returns (a
//! connect to an address that never answers holds them for its timeout;
//! a blocking send whose progress needs another thread of the same
//! process, a socketpair between its threads with a full buffer, waits
//! for good).
//!
//! Failure modes: a transport `/proc` cannot tell, memory that cannot be
//! read or may change, a socket that must be told to the stub but has no
//! local address (a DNS send from an unbound socket; a UDP-over-IPv6 DNS
//! socket under gVisor, whose address no table shows), a stub address the
//! caller's sockaddr cannot say, or bytes that cannot be written or did not
//! read back as written: refused with EACCES, audited
//! `egress_unenforceable` with the reason.

use super::call::{Call, EgressTree};
use super::copy::{copy_names, Copied, Copy};
use super::held::{hold, Then};
use super::judge::judge_all;
use super::sockaddr::{parse_destination, sockaddr_over, Parsed};
use super::stub::{register_after, register_at, Registered};
use super::unjudged::refuse;
use crate::policy::egress::{Egress, Protocol};
use crate::tracee::netproc::{self, Transport};
use agentsh_proto::netabi::NetCall;

/// Judges the call in the caller's memory, its other threads held, and
/// lets it through as made or refuses it (see the module's doc).
pub(super) fn judge_in_place(k: &Call, st: &mut EgressTree, policy: &Egress, pinned: bool) {
    let (tid, fd) = (k.c.tid, k.c.args[0] as i32);
    let seen = match crate::tracee::with_owner(tid, || netproc::transport_of(tid, fd)) {
        Ok(Some(s)) => s,
        Ok(None) => return answer(k, -i64::from(libc::ENOTSOCK)),
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
            return answer(k, -i64::from(libc::EBADF))
        }
        Err(e) => return refuse(k, format!("the socket at fd {fd} cannot be told: {e}")),
    };
    let mut messages = match copy_names(k.c, k.call, k.width) {
        Ok(m) => m,
        Err(Copy::Answer(v)) => return answer(k, v),
        Err(Copy::Refuse(why)) => return refuse(k, why),
    };
    let names_inet = messages
        .iter()
        .any(|m| matches!(parse_destination(&m.addr, k.call), Parsed::Inet(..)));
    let (protocol, domain) = match seen.transport {
        Transport::Tcp(d) => (Protocol::Tcp, d),
        Transport::Udp(d) => (Protocol::Udp, d),
        // Not a destination egress judges (the kernel resolves a Unix
        // path in the caller's view); the fd stays this socket until the
        // kernel has looked it up: the caller's threads are held.
        Transport::Unix | Transport::Other => return proceed(k, None),
        // No inet destination named: nothing to judge, whatever it is.
        Transport::Unlisted if !names_inet => return proceed(k, None),
        // UDP over IPv6, by elimination (see the module's doc).
        Transport::Unlisted => (Protocol::Udp, libc::AF_INET6),
    };
    // A connect's or a sendto's one sockaddr is copied where only the
    // tracer writes (the kernel reads the copy); else where it lies is
    // checked.
    let pin = pinned_arg(k, &messages, pinned);
    if pin.is_none() {
        if let Err(why) = places_stay(k, &messages) {
            return refuse(k, why.to_string());
        }
    }
    let originals: Vec<Vec<u8>> = messages.iter().map(|m| m.addr.clone()).collect();
    let judged = judge_all(k, st, policy, protocol, domain, &mut messages);
    if judged.allowed < messages.len() {
        let _ = k.stop.refuse(judged.refusal.unwrap_or(libc::EACCES));
        return;
    }
    if let Some(approve) = judged.approve {
        return hold(k, st, approve, k.stop.defer(), Then::Again);
    }
    if let Some(p) = judged.to_proxy {
        let to = p.proxy.addr_for(domain);
        let after = After::Proxy(p.after(k.c.tid, k.c.args[0] as i32));
        return redirect(
            k,
            to,
            "agentsh's HTTP proxy",
            &messages,
            &originals,
            after,
            pin,
        );
    }
    if judged.to_stub {
        return to_stub(k, st, &seen, protocol, &messages, &originals, pin);
    }
    proceed(k, pin.map(|i| (i, originals[0].as_slice())));
}

/// The argument whose sockaddr is copied for the kernel (`pinned`: the
/// backend can): a connect's or a sendto's, when it names one.
fn pinned_arg(k: &Call, messages: &[Copied], pinned: bool) -> Option<usize> {
    let arg = match k.call {
        NetCall::Connect => 1,
        NetCall::Sendto => 4,
        _ => return None,
    };
    let [one] = messages else {
        return None;
    };
    (pinned && !one.addr.is_empty() && one.addr_at == k.c.args[arg]).then_some(arg)
}

fn answer(k: &Call, v: i64) {
    let _ = k.stop.answer(v);
}

/// Lets the call run as made (with its sockaddr copied where only the
/// tracer writes, `pin`). The caller's threads are held until it returns;
/// nothing judged can change before the kernel reads it (see the module's
/// doc).
fn proceed(k: &Call, pin: Option<(usize, &[u8])>) {
    if let Some(p) = pin {
        if let Err(e) = k.stop.pin(&[p]) {
            return refuse(
                k,
                format!("the judged destination cannot be copied for the kernel: {e}"),
            );
        }
    }
    if let Err(e) = k.stop.proceed() {
        tracing::debug!(tid = k.c.tid, "call not let through (gone?): {e}");
    }
}

/// Why the bytes that decide a call's destinations may change after the
/// check (the call is refused with it).
#[derive(Debug, thiserror::Error)]
enum Unsteady {
    #[error("/proc/{0}/status: no Tgid")]
    NoTgid(u32),
    #[error("the caller's memory map cannot be read: {0}")]
    Maps(std::io::Error),
    #[error("the call's destination at {addr:#x}: {error}")]
    Unmapped { addr: u64, error: std::io::Error },
    #[error("the call's destination at {addr:#x} lies in {why}")]
    Writable { addr: u64, why: String },
    #[error("the caller has a Linux AIO ring: the kernel may write its memory after the check")]
    Aio,
}

/// The bytes that decide the call's destinations lie where no other
/// process can write them, and the kernel will not write them either.
fn places_stay(k: &Call, messages: &[Copied]) -> Result<(), Unsteady> {
    let pid = crate::tracee::ProcStatus::read(k.c.tid)
        .ok()
        .and_then(|s| s.number("Tgid"))
        .ok_or(Unsteady::NoTgid(k.c.tid))?;
    let mut maps = crate::tracee::maps::Maps::open(pid).map_err(Unsteady::Maps)?;
    let mut checker = crate::supervisor::vma::Places::new(pid, k.c.tid);
    let places = messages.iter().flat_map(|m| m.places.iter().copied());
    for (at, len) in places.filter(|(_, len)| *len > 0) {
        let last = at.saturating_add(len as u64 - 1);
        for addr in [at, last] {
            let refused = checker
                .refusal_at(&mut maps, addr)
                .map_err(|error| Unsteady::Unmapped { addr, error })?;
            if let Some(why) = refused {
                return Err(Unsteady::Writable { addr, why });
            }
        }
    }
    match crate::tracee::maps::aio_ring(&mut maps) {
        Ok(false) => Ok(()),
        Ok(true) => Err(Unsteady::Aio),
        Err(e) => Err(Unsteady::Maps(e)),
    }
}

/// One sockaddr written over in the caller's memory: where, and the
/// caller's own bytes there.
struct Patch {
    at: u64,
    caller: Vec<u8>,
}

/// DNS under `dns: stub`: the caller's socket told to the stub, the stub's
/// address written over each sockaddr that named another resolver, the
/// call let through, and the caller's bytes put back once it returns.
fn to_stub(
    k: &Call,
    st: &mut EgressTree,
    seen: &netproc::Seen,
    protocol: Protocol,
    messages: &[Copied],
    originals: &[Vec<u8>],
    pin: Option<usize>,
) {
    let Some(stub) = k.tree.rules().stub(k.ctx).cloned() else {
        return refuse(k, "the DNS stub is gone".into());
    };
    let stream = protocol == Protocol::Tcp;
    let registered = if k.call == NetCall::Connect {
        register_after(k, st, &stub, stream, seen)
    } else {
        register_at(k, st, &stub, stream, seen)
    };
    let later = match registered {
        Ok(r) => r,
        Err(why) => return refuse(k, why.to_string()),
    };
    redirect(
        k,
        stub.addr,
        "agentsh's DNS stub",
        messages,
        originals,
        After::Stub(later),
        pin,
    );
}

/// What runs once a redirected call has returned.
enum After {
    Stub(Registered),
    Proxy(super::proxied::AfterConnect),
}

impl After {
    fn done(self, returned: i64) -> Option<i64> {
        match self {
            After::Stub(r) => r.done(returned),
            After::Proxy(p) => p.done(returned),
        }
    }
}

/// Writes `to` over each sockaddr of the call that the judge rewrote (in
/// the caller's family and length), checks the call reads back as
/// written, lets it through, and puts the caller's bytes back once it
/// returns (then `after`).
fn redirect(
    k: &Call,
    to: std::net::SocketAddr,
    what: &str,
    messages: &[Copied],
    originals: &[Vec<u8>],
    after: After,
    pin: Option<usize>,
) {
    let pid = k.c.tid;
    if let Some(arg) = pin {
        return redirect_pinned(k, to, what, &originals[0], after, arg);
    }
    let mut patches: Vec<Patch> = Vec::new();
    let mut expected: Vec<Vec<u8>> = Vec::with_capacity(messages.len());
    for (m, original) in messages.iter().zip(originals) {
        if m.addr == *original {
            expected.push(original.clone());
            continue;
        }
        let Some(over) = sockaddr_over(to, original) else {
            put_back(pid, &patches);
            return refuse(
                k,
                format!(
                    "{what} ({to}) cannot be written in the caller's sockaddr (family and \
                     length as named)"
                ),
            );
        };
        let mut now = original.clone();
        now[..over.len()].copy_from_slice(&over);
        if let Err(e) = write(pid, m.addr_at, &over) {
            put_back(pid, &patches);
            return refuse(
                k,
                format!("{what}'s address cannot be written for the call: {e}"),
            );
        }
        patches.push(Patch {
            at: m.addr_at,
            caller: original[..over.len()].to_vec(),
        });
        expected.push(now);
    }
    // What the kernel will read is what was decided: read the call again
    // (a sockaddr written over a header it overlaps would change it).
    let again = copy_names(k.c, k.call, k.width).ok();
    let same = again.is_some_and(|a| {
        a.len() == expected.len() && a.iter().zip(&expected).all(|(m, e)| m.addr == *e)
    });
    if !same {
        put_back(pid, &patches);
        return refuse(
            k,
            format!(
                "the call does not read back as written with {what}'s address (overlapping \
                 sockaddrs and headers)"
            ),
        );
    }
    let after = Box::new(move |returned: i64| -> Option<i64> {
        put_back(pid, &patches);
        after.done(returned)
    });
    if let Err(e) = k.stop.proceed_then(after) {
        tracing::warn!(tid = pid, "a redirected call could not be let through: {e}");
        let _ = k.stop.refuse(libc::EACCES);
    }
}

/// [`redirect`] of a connect's or a sendto's one sockaddr: `to` written
/// into the copy the kernel reads (in the caller's family and length); the
/// caller's own bytes are never touched.
fn redirect_pinned(
    k: &Call,
    to: std::net::SocketAddr,
    what: &str,
    original: &[u8],
    after: After,
    arg: usize,
) {
    let Some(over) = sockaddr_over(to, original) else {
        return refuse(
            k,
            format!(
                "{what} ({to}) cannot be written in the caller's sockaddr (family and length as \
                 named)"
            ),
        );
    };
    let mut now = original.to_vec();
    now[..over.len()].copy_from_slice(&over);
    if let Err(e) = k.stop.pin(&[(arg, &now)]) {
        return refuse(
            k,
            format!("{what}'s address cannot be copied for the call: {e}"),
        );
    }
    let after = Box::new(move |returned: i64| -> Option<i64> { after.done(returned) });
    if let Err(e) = k.stop.proceed_then(after) {
        tracing::warn!(
            tid = k.c.tid,
            "a redirected call could not be let through: {e}"
        );
        let _ = k.stop.refuse(libc::EACCES);
    }
}

/// Writes `bytes` at `at` in the memory of `tid` (stopped, a tracee of
/// this thread): `process_vm_writev` where there is one; else, or where the
/// page is read-only (a constant sockaddr), a word at a time through ptrace
/// (gVisor has neither `process_vm_writev` nor a writable `/proc/PID/mem`).
/// Never in the pinned region (EFAULT: the call is refused): only the
/// tracer's copies go there, and it skips the words it knows are there
/// (`pinning`).
fn write(tid: u32, at: u64, bytes: &[u8]) -> std::io::Result<()> {
    if crate::tracee::pin::meets(at, bytes.len() as u64) {
        return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
    }
    crate::tracee::write_bytes(tid, at, bytes)
        .or_else(|_| crate::tracee::poke_bytes(tid, at, bytes))
}

/// Puts the caller's bytes back, the last written first.
fn put_back(pid: u32, patches: &[Patch]) {
    for p in patches.iter().rev() {
        if let Err(e) = write(pid, p.at, &p.caller) {
            tracing::warn!(
                tid = pid,
                at = p.at,
                "a sockaddr could not be put back: {e}"
            );
        }
    }
}

impl Registered {
    /// Once the call has returned: a connect's socket told to the stub by
    /// the address the connect gave it (a failed connect: nothing to
    /// tell). The caller's answer, where it must change.
    fn done(self, returned: i64) -> Option<i64> {
        let Registered::After(later) = self else {
            return None;
        };
        if returned != 0 && returned != -i64::from(libc::EINPROGRESS) {
            return None;
        }
        match later.register() {
            Ok(local) => {
                tracing::trace!(%local, "DNS socket told to the stub");
                None
            }
            Err(why) => {
                // Connected to the stub, which does not know it as the
                // tree's: the caller is told the connect failed.
                tracing::error!("a DNS socket could not be told to the stub: {why}");
                Some(-i64::from(libc::EACCES))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A sockaddr the caller placed in the pinned region is never written
    /// over (the tracer's record of what its slots hold must stay true):
    /// refused before any write is tried, whoever the tracee.
    #[test]
    fn nothing_is_written_over_the_pinned_region() {
        use crate::tracee::pin;
        for at in [pin::BASE, pin::BASE + pin::SIZE - 8, pin::BASE - 4] {
            let e = super::write(u32::MAX, at, &[0u8; 16]).expect_err("refused");
            assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{at:#x}");
        }
        // Elsewhere the write is tried (no such tracee: ESRCH, not EFAULT).
        let e = super::write(u32::MAX, 0x1000, &[0u8; 16]).expect_err("no tracee");
        assert_ne!(e.raw_os_error(), Some(libc::EFAULT));
    }
}
