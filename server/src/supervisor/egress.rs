//! Egress: every destination a tree names is judged on a copy the
//! supervisor made once, and the call is then performed on the tree's
//! behalf, never continued where another thread could rewrite the address
//! after the decision.
//!
//! The filter hands over `connect`, `sendto` with a destination, `sendmsg`
//! and `sendmmsg` (policy `egress:`). For each: the caller's socket is taken
//! with `pidfd_getfd` (the same open socket, not a copy of its state); a
//! socket that is not inet or inet6 (a Unix socket: the kernel resolves its
//! path in the caller's view, with the caller's credentials, which the
//! supervisor must not lend) is let through (CONTINUE). For an inet socket
//! the address, and for sends the data and control messages, are read once
//! into the supervisor's memory; each destination is judged
//! (`policy::egress::judge_destination`); an allowed call is made by the supervisor on
//! the taken socket with that copy, and its result is the caller's answer.
//! A blocking socket's call is made on a thread of its own and answered from
//! there, so the tree's other syscalls are not held up behind a slow
//! connect. Each destination is judged once per tree (and audited once, as
//! a `connect` event); later calls to it reuse the decision.
//!
//! What this does not watch: data sent without a destination (`write`,
//! `send`) on a socket whose destination was judged, which is the point
//! (the TCP data path costs nothing); and a Unix socket swapped in for an
//! inet one between the decision and the kernel's lookup of the fd under a
//! CONTINUE, by a thread sharing the caller's fd table (the inet socket's
//! own `connect` is then not judged): see docs/security-model.md.
//!
//! Where `pidfd_getfd` is refused (Docker's default profile without
//! CAP_SYS_PTRACE), the socket is found from `/proc` (`netproc`): an inet
//! `connect` is judged and made on a socket of the supervisor's own, which
//! is then put in place of the caller's at the same fd number
//! (`SECCOMP_IOCTL_NOTIF_ADDFD`, user-notify only) before the answer; a Unix
//! socket is let through as above, its fd compared by inode; a send naming
//! a destination is refused (it needs the socket itself).
//!
//! Failure modes: a socket that can be reached neither way (the ptrace
//! backend without `pidfd_getfd`, a socket bound before a replaced
//! connect), memory that cannot be read, a message layout this does not
//! handle (control messages of a 32-bit caller): refused with EACCES and
//! audited with the reason (`egress_unenforceable`, naming the destination
//! the caller's memory held). Never a CONTINUE for an inet destination,
//! unless the operator chose `egress.compat: allow_unjudged`: then a call
//! that cannot be judged runs as made, audited `rule: allow_unjudged`. More than [`BLOCKING_MAX`]
//! blocking calls of one tree at once: EAGAIN (logged), so a tree cannot
//! spend the server's threads.

use super::seam::{ExecStop, Holder};
use super::state::{DestKey, TreeState};
use super::{SupervisorContext, Tree};
use crate::audit::{ConnectEvent, EventBody, Passage, Refusal};
use crate::config::EgressCompat;
use crate::dns::{Querier, TreeNames};
use crate::policy::egress::{self, Destination, Egress, Protocol};
use crate::policy::Decision;
use agentsh_proto::netabi::{NetCall, Width};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The most a sockaddr may be (`sizeof(struct sockaddr_storage)`).
const SOCKADDR_MAX: usize = 128;
/// The most bytes one send copies: more is sent as a short write on a
/// stream socket, and refused (EMSGSIZE) on a datagram socket, where no
/// datagram is that large.
const SEND_MAX: usize = 1 << 20;
/// The most iovec entries (`UIO_MAXIOV`) and messages (`UIO_MAXIOV`) a call
/// may name, as the kernel allows.
const IOV_MAX: usize = 1024;
/// The most control-message bytes copied.
const CONTROL_MAX: usize = 64 * 1024;
/// The most blocking calls of one tree made at once (each on a thread).
const BLOCKING_MAX: usize = 256;

/// One send or connect, copied out of the caller.
struct Copied {
    /// The destination's sockaddr bytes (empty: none named).
    addr: Vec<u8>,
    /// The data (sends only).
    data: Vec<u8>,
    /// Control messages (native layout), for `sendmsg`.
    control: Vec<u8>,
    flags: i32,
    /// The caller asked for more than [`SEND_MAX`] bytes.
    clipped: bool,
    /// `sendmmsg`: where this message's `msg_len` is in the caller's
    /// memory (the kernel writes the bytes sent there; so does the
    /// supervisor when it sends for the caller).
    len_at: Option<(u32, u64)>,
}

/// An answer value: the call's result or `-errno`.
type Answer = i64;

fn errno_of(e: &io::Error) -> i64 {
    -i64::from(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Handles one trapped network call of `c.tid` (see the module doc).
#[allow(clippy::too_many_arguments)]
pub fn handle(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    call: NetCall,
    width: Width,
    c: &super::seam::Caught,
    stop: &dyn ExecStop,
    holder: impl FnOnce() -> Holder,
) {
    let refuse = |reason: String| {
        record_unenforceable(ctx, tree, c, call, width, reason);
        let _ = stop.refuse(libc::EACCES);
    };
    let Some(policy) = tree.rules.policy.egress() else {
        return refuse(format!(
            "{} reached the supervisor but the policy has no egress section",
            call.name()
        ));
    };
    let fd = c.args[0] as i32;
    let mut holder = Some(holder);
    let (found, domain, protocol) = match find_socket(c.tid, fd, call, stop) {
        Found::Answer(v) => {
            let _ = stop.answer(v);
            return;
        }
        Found::Gone => return,
        Found::Unix(same) => {
            // Not a destination this judges (see the module doc): let it
            // through only where the fd cannot be swapped meanwhile.
            let unjudged = ctx.egress_compat == EgressCompat::AllowUnjudged;
            return let_through(tree, st, c.tid, call, fd, same, stop, unjudged, refuse);
        }
        // A raw or other socket, where the policy allows every destination
        // (the filter refuses them otherwise): nothing to judge.
        Found::Other(_) if policy.allows_everything() => {
            let _ = stop.proceed();
            return;
        }
        Found::Other(why) => return refuse(why),
        Found::Unreachable(why) if policy.allows_everything() => {
            // Nothing to enforce: every destination is allowed. The call
            // runs as the caller made it, audited from its memory.
            return let_unjudged(
                ctx,
                tree,
                st,
                call,
                width,
                c,
                stop,
                &why,
                Unjudged::AllAllowed,
            );
        }
        Found::Unreachable(why) if ctx.egress_compat == EgressCompat::AllowUnjudged => {
            // The operator chose to run what cannot be judged here.
            return let_unjudged(ctx, tree, st, call, width, c, stop, &why, Unjudged::Compat);
        }
        Found::Unreachable(why) => return refuse(why),
        Found::Inet(Socket::Remote { .. }, ..) if policy.allows_everything() => {
            // As above: nothing to enforce, so no socket of ours either.
            let why = "pidfd_getfd is refused here, so the caller's socket cannot be taken";
            return let_unjudged(
                ctx,
                tree,
                st,
                call,
                width,
                c,
                stop,
                why,
                Unjudged::AllAllowed,
            );
        }
        Found::Inet(Socket::Remote { .. }, ..)
            if call != NetCall::Connect && ctx.egress_compat == EgressCompat::AllowUnjudged =>
        {
            // A send naming a destination needs the socket itself; the
            // operator chose to run what cannot be judged here.
            let why = "pidfd_getfd is refused here, and a send naming a destination needs the \
                       caller's socket";
            return let_unjudged(ctx, tree, st, call, width, c, stop, why, Unjudged::Compat);
        }
        Found::Inet(found, domain, protocol) => (found, domain, protocol),
    };
    let mut messages = match copy_call(c, call, width) {
        Ok(m) => m,
        Err(Copy::Answer(v)) => {
            let _ = stop.answer(v);
            return;
        }
        Err(Copy::Refuse(why)) => return refuse(why),
    };
    let Judged {
        allowed,
        refusal,
        to_stub,
        approve,
    } = judge_all(
        ctx,
        tree,
        st,
        policy,
        c,
        call,
        protocol,
        domain,
        &mut messages,
    );
    if allowed == 0 {
        let _ = stop.refuse(refusal.unwrap_or(libc::EACCES));
        return;
    }
    let messages: Vec<Copied> = messages.into_iter().take(allowed).collect();
    let blocking = !found.nonblocking(&messages);
    let target = match found {
        Socket::Taken(sock) => Target::Taken(sock),
        Socket::Remote { cloexec, nonblock } => {
            // pidfd_getfd is refused here: a connect is made on a socket of
            // the supervisor's own, put in place of the caller's once made.
            if call != NetCall::Connect {
                return refuse(format!(
                    "{} naming a destination on a socket the supervisor cannot take \
                     (pidfd_getfd is refused here): only connect can be made for the tree \
                     without it (connect the socket first, then send)",
                    call.name()
                ));
            }
            let ours = match new_socket(domain, protocol, nonblock) {
                Ok(s) => s,
                Err(e) => return refuse(format!("cannot make a socket for the tree: {e}")),
            };
            let Some(held) = holder.take().map(|h| h()) else {
                return refuse("no way to answer the call".into());
            };
            Target::Replace {
                ours,
                at: fd,
                cloexec,
                held,
            }
        }
    };
    if to_stub {
        // The stub knows the tree by the socket's address: registered
        // before anything can reach it.
        if let Err(why) = register_querier(ctx, tree, st, target.sock(), protocol, c.tid) {
            return refuse(why);
        }
    }
    let answer_with = match &target {
        Target::Replace { held, .. } => Some(held.clone()),
        Target::Taken(_) => None,
    };
    let mut holder = move || answer_with.clone().or_else(|| holder.take().map(|h| h()));
    let perform = move || target.perform(call, protocol, &messages);
    if let Some((key, rule, host)) = approve {
        // Held for an operator (`approve`): the call is made only once
        // approved, by the approval's waiter; approved once, the
        // destination is allowed for the rest of the tree.
        let approved = st.egress_approved.clone();
        let Some(held) = holder() else {
            return refuse("no way to answer the call".into());
        };
        ctx.approvals.clone().hold_connect(
            held,
            super::HeldConnect {
                session_id: tree.session_id.clone(),
                tid: c.tid,
                syscall: call.name(),
                host,
                ip: key.ip,
                port: key.port,
                protocol: key.protocol.as_str(),
                rule,
                perform: Box::new(move || {
                    approved
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(key);
                    perform()
                }),
            },
        );
        return;
    }
    if blocking {
        // One thread per blocking call, at most [`BLOCKING_MAX`] per tree at
        // once: a tree cannot spend the server's threads (a thousand
        // connects to an address that never answers would otherwise be a
        // thousand threads for two minutes).
        let in_flight = st.egress_blocking.clone();
        if in_flight.fetch_add(1, Ordering::SeqCst) >= BLOCKING_MAX {
            in_flight.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(
                session = %tree.session_id, pid = c.tid,
                "{BLOCKING_MAX} blocking network calls of this tree already in flight: EAGAIN"
            );
            let _ = stop.answer(-i64::from(libc::EAGAIN));
            return;
        }
        let Some(held) = holder() else {
            in_flight.fetch_sub(1, Ordering::SeqCst);
            return refuse("no way to answer the call".into());
        };
        let done = in_flight.clone();
        let spawned = std::thread::Builder::new()
            .name("agentsh-egress".into())
            .spawn(move || {
                let v = perform();
                done.fetch_sub(1, Ordering::SeqCst);
                held.answer_value(v);
            });
        if let Err(e) = spawned {
            // The call was not made: say so, never leave it waiting.
            in_flight.fetch_sub(1, Ordering::SeqCst);
            tracing::error!("cannot start a thread for a blocking network call: {e}");
            let _ = stop.answer(-i64::from(libc::EAGAIN));
        }
    } else {
        let _ = stop.answer(perform());
    }
}

/// The caller's socket, as far as the supervisor can reach it.
enum Socket {
    /// Taken with `pidfd_getfd`: the same open socket.
    Taken(OwnedFd),
    /// Known only from `/proc` (pidfd_getfd is refused here).
    Remote { cloexec: bool, nonblock: bool },
}

impl Socket {
    /// Whether the call returns at once: the socket is non-blocking, or
    /// every message asks for `MSG_DONTWAIT`.
    fn nonblocking(&self, messages: &[Copied]) -> bool {
        let fl_nonblock = match self {
            Socket::Taken(sock) => {
                // SAFETY: F_GETFL takes no pointer.
                let fl = unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) };
                fl >= 0 && fl & libc::O_NONBLOCK != 0
            }
            Socket::Remote { nonblock, .. } => *nonblock,
        };
        fl_nonblock
            || (!messages.is_empty() && messages.iter().all(|m| m.flags & libc::MSG_DONTWAIT != 0))
    }
}

/// What the call is made on.
enum Target {
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
    fn sock(&self) -> &OwnedFd {
        match self {
            Target::Taken(s) | Target::Replace { ours: s, .. } => s,
        }
    }

    /// Makes the call; for a replacement, installs the socket in the
    /// caller (a failed install is the call's failure: the caller's fd
    /// stays its own, unconnected socket).
    fn perform(&self, call: NetCall, protocol: Protocol, messages: &[Copied]) -> Answer {
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

/// What [`find_socket`] found at the caller's fd.
enum Found {
    /// Answer the caller with this (the fd is not an open socket).
    Answer(Answer),
    /// The call no longer waits.
    Gone,
    /// A Unix socket, and how to check later that the fd still is it.
    Unix(Box<dyn Fn() -> Result<bool, String>>),
    /// An inet socket of another type (raw): why it cannot be judged.
    Other(String),
    /// A socket that cannot be reached at all: why.
    Unreachable(String),
    /// An inet socket: its domain and transport.
    Inet(Socket, i32, Protocol),
}

/// Finds the socket at the caller's fd `fd`: taken with `pidfd_getfd`, or,
/// where that is refused, known from `/proc` (its inode in the caller's
/// fd table, its family and type in the caller's network namespace).
fn find_socket(tid: u32, fd: i32, call: NetCall, stop: &dyn ExecStop) -> Found {
    match take_socket(tid, fd) {
        Ok(sock) => {
            // The pid could have been reused between the notification and
            // the pidfd: the socket counts only if the call still waits.
            if !stop.still_waiting() {
                return Found::Gone;
            }
            let domain = match sockopt(&sock, libc::SO_DOMAIN) {
                Ok(d) => d,
                Err(e) => return Found::Answer(errno_of(&e)),
            };
            if domain != libc::AF_INET && domain != libc::AF_INET6 {
                let sock = std::sync::Arc::new(sock);
                return Found::Unix(Box::new(move || {
                    take_socket(tid, fd)
                        .map(|now| same_file(&now, &sock))
                        .map_err(|_| "not taken".to_string())
                }));
            }
            match sockopt(&sock, libc::SO_TYPE) {
                Ok(libc::SOCK_STREAM) => Found::Inet(Socket::Taken(sock), domain, Protocol::Tcp),
                Ok(libc::SOCK_DGRAM) => Found::Inet(Socket::Taken(sock), domain, Protocol::Udp),
                Ok(t) => Found::Other(format!(
                    "an inet socket of type {t} (the filter allows stream and datagram only)"
                )),
                Err(e) => Found::Unreachable(format!("socket type unreadable: {e}")),
            }
        }
        Err(Taken::Answer(v)) => Found::Answer(v),
        Err(Taken::Refuse(why)) => {
            if stop.verifies_every_exec() {
                // The ptrace backend cannot put a socket into the caller.
                return Found::Unreachable(why);
            }
            // Read as the owner of the caller's /proc entries where this
            // server has no CAP_SYS_PTRACE (as its memory is).
            let seen =
                crate::tracee::access::with_owner(tid, || super::netproc::socket_of(tid, fd));
            match seen {
                Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                    Found::Answer(-i64::from(libc::EBADF))
                }
                Err(e) => Found::Unreachable(format!("{why}; and /proc does not say: {e}")),
                Ok(None) => Found::Answer(-i64::from(libc::ENOTSOCK)),
                Ok(Some(s)) => {
                    if !stop.still_waiting() {
                        return Found::Gone;
                    }
                    match s.kind {
                        super::netproc::Kind::Unix => {
                            let ino = s.inode;
                            Found::Unix(Box::new(move || {
                                crate::tracee::access::with_owner(tid, || {
                                    super::netproc::inode_at(tid, fd)
                                })
                                .map(|now| now == Some(ino))
                                .map_err(|e| e.to_string())
                            }))
                        }
                        super::netproc::Kind::Inet {
                            domain,
                            udp,
                            bound,
                            state,
                        } => {
                            // A connect again on a TCP socket connected (or
                            // connecting) already: what the kernel says.
                            if call == NetCall::Connect && !udp && state == 1 {
                                return Found::Answer(-i64::from(libc::EISCONN));
                            }
                            if call == NetCall::Connect && !udp && state == 2 {
                                return Found::Answer(-i64::from(libc::EALREADY));
                            }
                            if bound {
                                return Found::Unreachable(format!(
                                    "{why}; and the socket is bound to a local address, which \
                                     a socket of the supervisor's own cannot take over"
                                ));
                            }
                            let protocol = if udp { Protocol::Udp } else { Protocol::Tcp };
                            Found::Inet(
                                Socket::Remote {
                                    cloexec: s.cloexec,
                                    nonblock: s.nonblock,
                                },
                                domain,
                                protocol,
                            )
                        }
                        super::netproc::Kind::Unknown => Found::Unreachable(format!(
                            "{why}; and the socket (inode {}) is neither TCP, UDP nor Unix \
                             (its sockprotoname)",
                            s.inode
                        )),
                    }
                }
            }
        }
    }
}

/// A fresh socket like the caller's.
fn new_socket(domain: i32, protocol: Protocol, nonblock: bool) -> io::Result<OwnedFd> {
    let ty = match protocol {
        Protocol::Udp => libc::SOCK_DGRAM,
        _ => libc::SOCK_STREAM,
    } | libc::SOCK_CLOEXEC
        | if nonblock { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain integers.
    let fd = unsafe { libc::socket(domain, ty, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Lets a call on a socket this does not judge (a Unix socket) run
/// (CONTINUE), where no other thread can put an inet socket at the same fd
/// number between this check and the kernel's lookup of the fd: the fd
/// table is shared only by the threads of the caller's process (the filter
/// refuses `clone` with `CLONE_FILES` and without `CLONE_THREAD`). A lone
/// thread: at once. Several: the other threads are frozen (ptrace, so no
/// `SIGCONT` ends it), the call let through once they hold, and all let go
/// once the caller has stopped too, i.e. its call is over (or was
/// interrupted, and comes back through the filter). A thread that cannot be
/// frozen within the deadline, or the ptrace backend (whose tracees' stops
/// are its own): refused.
#[allow(clippy::too_many_arguments)]
fn let_through(
    tree: &Tree,
    ts: &mut TreeState,
    tid: u32,
    call: NetCall,
    fd: i32,
    still_same: impl Fn() -> Result<bool, String>,
    stop: &dyn ExecStop,
    unjudged_allowed: bool,
    refuse: impl Fn(String),
) {
    let Ok(st) = crate::tracee::proc_stat(tid) else {
        let _ = stop.answer(-i64::from(libc::ESRCH));
        return;
    };
    if st.num_threads <= 1 {
        let _ = stop.proceed();
        return;
    }
    if stop.verifies_every_exec() {
        if unjudged_allowed {
            // egress.compat: allow_unjudged (the operator's choice, said at
            // start): what cannot be checked here runs.
            tracing::debug!(
                session = %tree.session_id, pid = tid,
                "{} on a Unix socket from a threaded process let through unchecked \
                 (egress.compat: allow_unjudged)",
                call.name()
            );
            let _ = stop.proceed();
            return;
        }
        return refuse(format!(
            "{} on a Unix socket (fd {fd}) from a process of {} threads under the ptrace \
             backend: another thread could swap an inet socket in at that fd after the check",
            call.name(),
            st.num_threads
        ));
    }
    let tgid = match crate::tracee::tgid_of(tid, &st) {
        Ok(t) => t,
        Err(e) => return refuse(format!("the caller's process is unknown: {e}")),
    };
    // Once the others are stopped, the fd must still be the socket checked:
    // before the stop they were free to swap it.
    let go = || match still_same() {
        Ok(true) => stop.proceed(),
        Ok(false) => Err(io::Error::other(format!(
            "fd {fd} changed to another file while the call was checked"
        ))),
        Err(e) => Err(io::Error::other(format!(
            "fd {fd} could not be read again: {e}"
        ))),
    };
    match stopped_while(tgid, tid, ts, go) {
        Ok(()) => {}
        Err(why) => {
            tracing::info!(session = %tree.session_id, pid = tid, "{why}");
            refuse(why);
        }
    }
}

/// Whether two fds are the same open socket (socket inodes are unique).
fn same_file(a: &OwnedFd, b: &OwnedFd) -> bool {
    let stat = |f: &OwnedFd| {
        // SAFETY: fstat writes one struct stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and a valid out pointer.
        (unsafe { libc::fstat(f.as_raw_fd(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    };
    matches!((stat(a), stat(b)), (Some(x), Some(y)) if x == y)
}

/// How long a caller let through may take to come back from its call
/// while its process's other threads are held.
const CALLER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Freezes every thread of process `tgid` but `tid` (`PTRACE_SEIZE` and
/// `PTRACE_INTERRUPT`, as the exec race guard does: unlike a `SIGSTOP`, no
/// `SIGCONT` from another process of the tree can end it), runs `go` once
/// they hold, then stops `tid` too on its way back from its call (so the
/// kernel has looked its fd up) and lets them all go.
fn stopped_while(
    tgid: u32,
    tid: u32,
    st: &mut TreeState,
    go: impl FnOnce() -> io::Result<()>,
) -> Result<(), String> {
    use super::ptrace as pt;
    let members = super::sharing::Members {
        procs: vec![tgid],
        tasks: threads(tgid)?
            .into_iter()
            .filter(|&t| t != tid)
            .map(|t| (t, tgid))
            .collect(),
    };
    let caller = crate::tracee::StatFile::open(tid)
        .map_err(|e| format!("the caller's stat is unreadable: {e}"))?;
    let frozen = super::sharing::freeze(
        tgid,
        tid,
        &caller,
        members,
        &mut st.lingering,
        &mut st.files,
    )
    .map_err(|why| {
        format!("cannot stop the caller's other threads for a Unix-socket call: {why}")
    })?;
    // Seized before the answer (seizing changes nothing the caller sees);
    // interrupted after it, so it stops once its call has run. Not seized:
    // there would be no knowing when the others may run again, so no.
    let seized = st.lingering.take(tid) || pt::seize(tid, 0).is_ok();
    if !seized {
        frozen.release(&mut st.lingering, std::time::Duration::from_millis(50));
        return Err("cannot watch the caller through its Unix-socket call (PTRACE_SEIZE)".into());
    }
    let went = go();
    let _ = pt::interrupt(tid);
    let mut detached = false;
    if went.is_ok() {
        // Until the caller is back from its call (the kernel looked its fd
        // up as the call began), the others stay held: a caller not yet run
        // on a busy machine must not find them running.
        match pt::wait_one(tid, std::time::Instant::now() + CALLER_DEADLINE) {
            Some(pt::Event::Gone) => detached = true,
            // A signal-delivery stop's signal is passed on at the detach.
            Some(ev) => detached = pt::detach(tid, ev.detach_signal()).is_ok(),
            None => tracing::warn!(
                tid,
                "a Unix-socket call let through has not returned within {CALLER_DEADLINE:?}: \
                 the process's other threads run again"
            ),
        }
    }
    if !detached {
        // It stops once back in user space (the interrupt is pending), and
        // is let go then.
        st.lingering.add(tid);
    }
    frozen.release(&mut st.lingering, std::time::Duration::from_millis(50));
    went.map_err(|e| format!("the call could not be let through: {e}"))
}

/// The thread ids of process `tgid`.
fn threads(tgid: u32) -> Result<Vec<u32>, String> {
    let dir = std::fs::read_dir(format!("/proc/{tgid}/task"))
        .map_err(|e| format!("the caller's threads are unreadable: {e}"))?;
    Ok(dir
        .flatten()
        .filter_map(|t| t.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect())
}

/// What judging a call's destinations came to.
struct Judged {
    /// How many messages (from the first) may be sent.
    allowed: usize,
    refusal: Option<i32>,
    /// A destination is the DNS stub (the socket must be registered).
    to_stub: bool,
    /// The one destination an operator must approve first.
    approve: Option<(DestKey, String, Option<String>)>,
}

/// Judges every destination of `messages` (rewriting DNS ones to the
/// stub), in order, stopping at the first refused one.
#[allow(clippy::too_many_arguments)]
fn judge_all(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    policy: &Egress,
    c: &super::seam::Caught,
    call: NetCall,
    protocol: Protocol,
    domain: i32,
    messages: &mut [Copied],
) -> Judged {
    // Judge every destination first: one denied destination in a sendmmsg
    // ends the batch there, as a failed send would.
    let mut allowed = 0;
    let mut refusal = None;
    let mut to_stub = false;
    let single = messages.len() == 1;
    let mut approve: Option<(DestKey, String, Option<String>)> = None;
    for m in messages.iter_mut() {
        if m.addr.is_empty() {
            allowed += 1;
            continue;
        }
        match parse_sockaddr(&m.addr) {
            Parsed::Unspec => {
                allowed += 1;
                continue;
            }
            Parsed::Other => {
                // The kernel refuses it on this socket (EAFNOSUPPORT or
                // EINVAL): performing it gives the caller that answer.
                allowed += 1;
                continue;
            }
            Parsed::Inet(ip, port) if port == 53 && tree.rules.stub(ctx).is_some() => {
                // DNS (`dns: stub`): the stub answers every query of the
                // tree, whatever resolver it names.
                let stub = tree.rules.stub(ctx).map(|d| d.addr).expect("checked");
                let key = DestKey {
                    ip: egress::canonical(ip),
                    port,
                    protocol,
                };
                if SocketAddr::new(key.ip, port) != stub {
                    match sockaddr_of(stub, domain) {
                        Some(a) => m.addr = a,
                        None => {
                            refusal = Some(libc::EACCES);
                            break;
                        }
                    }
                }
                if !st.egress_seen.contains_key(&key) {
                    let message = (SocketAddr::new(key.ip, port) != stub)
                        .then(|| format!("sent to agentsh's DNS stub at {stub} instead"));
                    record(
                        ctx,
                        tree,
                        c.tid,
                        call,
                        Some(key),
                        None,
                        Passage::DnsStub.rule(),
                        Decision::Allow,
                        message,
                    );
                    remember(
                        st,
                        key,
                        Decision::Allow,
                        Passage::DnsStub.rule(),
                        Vec::new(),
                    );
                }
                to_stub = true;
                allowed += 1;
            }
            Parsed::Inet(ip, port) if port == 53 && policy.dns == egress::DnsMode::Stub => {
                // The stub is not running (the server's start log says why):
                // DNS is refused, never sent around it.
                let key = DestKey {
                    ip: egress::canonical(ip),
                    port,
                    protocol,
                };
                if !st.egress_seen.contains_key(&key) {
                    record(
                        ctx,
                        tree,
                        c.tid,
                        call,
                        Some(key),
                        None,
                        Refusal::DnsStubDown.rule(),
                        Decision::Deny,
                        Some(
                            "agentsh's DNS stub is not running (see the server's log): DNS \
                             is refused"
                                .into(),
                        ),
                    );
                    remember(
                        st,
                        key,
                        Decision::Deny,
                        Refusal::DnsStubDown.rule(),
                        Vec::new(),
                    );
                }
                refusal = Some(libc::EACCES);
                break;
            }
            Parsed::Inet(ip, port) => {
                let key = DestKey {
                    ip: egress::canonical(ip),
                    port,
                    protocol,
                };
                let (decision, rule, host) = decide(ctx, tree, st, policy, c.tid, call, key);
                if decision == Decision::Approve {
                    if single {
                        approve = Some((key, rule, host));
                        allowed += 1;
                        continue;
                    }
                    record(
                        ctx,
                        tree,
                        c.tid,
                        call,
                        Some(key),
                        host,
                        &rule,
                        Decision::Deny,
                        Some(
                            "a destination that needs approval, in a sendmmsg batch: refused \
                             (approvals are asked one call at a time)"
                                .into(),
                        ),
                    );
                    refusal = Some(libc::EACCES);
                    break;
                }
                if decision != Decision::Allow {
                    refusal = Some(libc::EACCES);
                    break;
                }
                allowed += 1;
            }
        }
    }
    Judged {
        allowed,
        refusal,
        to_stub,
        approve,
    }
}

/// Why a call this host cannot judge runs anyway.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unjudged {
    /// The policy allows every destination: nothing to enforce.
    AllAllowed,
    /// `egress.compat: allow_unjudged`: the operator's choice.
    Compat,
}

/// Lets a call run that this host cannot judge (`why`), under a policy
/// that allows every destination or where the operator chose
/// `egress.compat: allow_unjudged`: audited once per destination and tree,
/// from the caller's memory (which the caller could change: the record is
/// of what it named, not a decision that needed it).
#[allow(clippy::too_many_arguments)]
fn let_unjudged(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    call: NetCall,
    width: Width,
    c: &super::seam::Caught,
    stop: &dyn ExecStop,
    why: &str,
    because: Unjudged,
) {
    let (rule, message) = match because {
        Unjudged::AllAllowed => (
            crate::policy::RULE_DEFAULT,
            format!(
                "not judged here ({why}): the policy allows every destination, so the call \
                 ran as made"
            ),
        ),
        Unjudged::Compat => (
            Passage::AllowUnjudged.rule(),
            format!(
                "not judged here ({why}): egress.compat is allow_unjudged, so the call ran as \
                 made (not enforced)"
            ),
        ),
    };
    if let Ok(messages) = copy_call(c, call, width) {
        for m in &messages {
            let Parsed::Inet(ip, port) = parse_sockaddr(&m.addr) else {
                continue;
            };
            // The socket's type cannot be read here: keyed as TCP.
            let key = DestKey {
                ip: egress::canonical(ip),
                port,
                protocol: Protocol::Tcp,
            };
            if st.egress_seen.contains_key(&key) {
                continue;
            }
            remember(st, key, Decision::Allow, rule, Vec::new());
            ctx.audit.record(
                &tree.session_id,
                EventBody::Connect(ConnectEvent {
                    pid: c.tid,
                    syscall: call.name().to_string(),
                    host: None,
                    ip: Some(key.ip.to_string()),
                    port: Some(port),
                    protocol: None,
                    rule: rule.into(),
                    decision: Decision::Allow,
                    message: Some(message.clone()),
                    effective_action: None,
                    approval_id: None,
                    approval_outcome: None,
                    approver: None,
                    reason: None,
                }),
            );
        }
    }
    let _ = stop.proceed();
}

/// A judged destination's decision, from the tree's cache or judged now
/// (and audited: one event per destination per tree).
#[allow(clippy::too_many_arguments)]
fn decide(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    policy: &Egress,
    tid: u32,
    call: NetCall,
    key: DestKey,
) -> (Decision, String, Option<String>) {
    let names = tree_names(st, tree).names_of(key.ip);
    if let Some((d, rule, then)) = st.egress_seen.get(&key) {
        if *then == names {
            return (*d, rule.clone(), None);
        }
    }
    // Landlock's TCP floor (`network_rules` connect ports) does not see a
    // connect the supervisor makes for the tree, so it is kept here too.
    if key.protocol == Protocol::Tcp && !tcp_floor_open(tree, key.port) {
        let message = format!(
            "port {} is not among network_rules' connect ports (the floor every connect \
             keeps, egress or not)",
            key.port
        );
        let rule = Refusal::NetworkRules.rule().to_string();
        record(
            ctx,
            tree,
            tid,
            call,
            Some(key),
            None,
            &rule,
            Decision::Deny,
            Some(message),
        );
        remember(st, key, Decision::Deny, &rule, names);
        return (Decision::Deny, rule, None);
    }
    let v = egress::judge_destination(
        policy,
        &Destination {
            ip: key.ip,
            port: key.port,
            protocol: key.protocol,
            names: &names,
        },
    );
    // The name that matched a hosts rule, else the first the tree resolved.
    let host = policy
        .rules
        .iter()
        .find(|r| r.name == v.rule)
        .and_then(|r| names.iter().find(|n| r.hosts.iter().any(|h| h.matches(n))))
        .or(names.first())
        .cloned();
    if v.decision == Decision::Approve {
        // Approved once for this tree: allowed from then on (the approval
        // was the event). Otherwise the caller holds it; the approval
        // records it when it ends.
        let approved = st
            .egress_approved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&key);
        if approved {
            remember(st, key, Decision::Allow, &v.rule, names);
            return (Decision::Allow, v.rule, host);
        }
        return (Decision::Approve, v.rule, host);
    }
    record(
        ctx,
        tree,
        tid,
        call,
        Some(key),
        host.clone(),
        &v.rule,
        v.decision,
        None,
    );
    remember(st, key, v.decision, &v.rule, names);
    (v.decision, v.rule, host)
}

/// The tree's resolved names (made on first use).
fn tree_names(st: &mut TreeState, tree: &Tree) -> Arc<TreeNames> {
    st.names
        .get_or_insert_with(|| TreeNames::new(&tree.session_id, tree.rules.policy.clone()))
        .clone()
}

/// Tells the stub that `sock` is this tree's: binds it first where it has
/// no address yet (the kernel would pick one only as the call leaves).
fn register_querier(
    ctx: &SupervisorContext,
    tree: &Tree,
    st: &mut TreeState,
    sock: &OwnedFd,
    protocol: Protocol,
    tid: u32,
) -> Result<(), String> {
    let Some(stub) = tree.rules.stub(ctx) else {
        return Ok(());
    };
    let mut local = local_addr(sock).map_err(|e| format!("getsockname: {e}"))?;
    if local.port() == 0 {
        let any = sockaddr_of(SocketAddr::new(local.ip(), 0), domain_of(&local))
            .ok_or("no wildcard address for the socket's family")?;
        // SAFETY: `any` is a sockaddr of its length.
        let rc = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                any.as_ptr().cast(),
                any.len() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // Bound meanwhile by the tree itself: read it again.
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(format!("cannot bind the socket before the query: {e}"));
            }
        }
        local = local_addr(sock).map_err(|e| format!("getsockname: {e}"))?;
    }
    stub.book.register(
        protocol == Protocol::Tcp,
        local,
        Querier {
            tree: tree_names(st, tree),
            pid: tid,
        },
    );
    Ok(())
}

fn domain_of(a: &SocketAddr) -> i32 {
    if a.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    }
}

/// The socket's own address.
fn local_addr(sock: &OwnedFd) -> io::Result<SocketAddr> {
    let mut b = [0u8; SOCKADDR_MAX];
    let mut len = SOCKADDR_MAX as libc::socklen_t;
    // SAFETY: getsockname writes at most `len` bytes into `b`.
    let rc = unsafe { libc::getsockname(sock.as_raw_fd(), b.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    match parse_sockaddr(&b[..(len as usize).min(SOCKADDR_MAX)]) {
        Parsed::Inet(ip, port) => Ok(SocketAddr::new(ip, port)),
        _ => Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT)),
    }
}

/// `a` as a sockaddr for a socket of `domain` (an IPv4 address on an inet6
/// socket: its mapped form). Pure.
fn sockaddr_of(a: SocketAddr, domain: i32) -> Option<Vec<u8>> {
    let port = a.port().to_be_bytes();
    match (domain, a.ip()) {
        (libc::AF_INET, IpAddr::V4(v4)) => {
            let mut b = vec![0u8; 16];
            b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&port);
            b[4..8].copy_from_slice(&v4.octets());
            Some(b)
        }
        (libc::AF_INET6, ip) => {
            let v6 = match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let mut b = vec![0u8; 28];
            b[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&port);
            b[8..24].copy_from_slice(&v6.octets());
            Some(b)
        }
        _ => None,
    }
}

fn remember(st: &mut TreeState, key: DestKey, decision: Decision, rule: &str, names: Vec<String>) {
    if st.egress_seen.len() >= 4096 {
        st.egress_seen.clear();
    }
    st.egress_seen
        .insert(key, (decision, rule.to_string(), names));
}

/// Whether `network_rules` leave TCP port `port` open for connects (a
/// policy whose connect ports cannot be computed was refused at load, so
/// an error here is a closed port).
fn tcp_floor_open(tree: &Tree, port: u16) -> bool {
    use crate::policy::semantics;
    use crate::policy::NetworkDirection;
    match semantics::tcp_ports(tree.rules.policy.network_rules(), NetworkDirection::Connect) {
        Ok(None) => true,
        Ok(Some(ports)) => ports.contains(&port),
        Err(_) => false,
    }
}

#[allow(clippy::too_many_arguments)]
fn record(
    ctx: &SupervisorContext,
    tree: &Tree,
    tid: u32,
    call: NetCall,
    key: Option<DestKey>,
    host: Option<String>,
    rule: &str,
    decision: Decision,
    message: Option<String>,
) {
    if decision != Decision::Allow {
        tracing::info!(
            session = %tree.session_id, pid = tid, syscall = call.name(), rule,
            dest = ?key, "egress refused"
        );
    }
    ctx.audit.record(
        &tree.session_id,
        EventBody::Connect(ConnectEvent {
            pid: tid,
            syscall: call.name().to_string(),
            host,
            ip: key.map(|k| k.ip.to_string()),
            port: key.map(|k| k.port),
            protocol: key.map(|k| k.protocol.as_str().to_string()),
            rule: rule.to_string(),
            decision,
            message,
            effective_action: None,
            approval_id: None,
            approval_outcome: None,
            approver: None,
            reason: None,
        }),
    );
}

/// Audits a call refused because it cannot be judged here, naming the
/// destination the caller's memory held (a record of what it named, read
/// after the decision, which did not need it; none where it cannot be
/// read). The socket's transport is not known here: no `protocol`.
fn record_unenforceable(
    ctx: &SupervisorContext,
    tree: &Tree,
    c: &super::seam::Caught,
    call: NetCall,
    width: Width,
    reason: String,
) {
    let named = copy_call(c, call, width).ok().and_then(|m| {
        m.iter().find_map(|m| match parse_sockaddr(&m.addr) {
            Parsed::Inet(ip, port) => Some((egress::canonical(ip), port)),
            _ => None,
        })
    });
    tracing::info!(
        session = %tree.session_id, pid = c.tid, syscall = call.name(),
        dest = ?named, "egress refused: {reason}"
    );
    ctx.audit.record(
        &tree.session_id,
        EventBody::Connect(ConnectEvent {
            pid: c.tid,
            syscall: call.name().to_string(),
            host: None,
            ip: named.map(|(ip, _)| ip.to_string()),
            port: named.map(|(_, port)| port),
            protocol: None,
            rule: Refusal::EgressUnenforceable.rule().into(),
            decision: Decision::Deny,
            message: Some(reason),
            effective_action: None,
            approval_id: None,
            approval_outcome: None,
            approver: None,
            reason: None,
        }),
    );
}

enum Taken {
    /// Answer the caller with this (its fd is not a socket, or not open).
    Answer(Answer),
    Refuse(String),
}

/// The caller's `fd`, taken from thread `tid`'s fd table.
fn take_socket(tid: u32, fd: i32) -> Result<OwnedFd, Taken> {
    if fd < 0 {
        return Err(Taken::Answer(-i64::from(libc::EBADF)));
    }
    let _owner = crate::tracee::as_owner(tid);
    crate::tracee::pidfd::get_fd(tid, fd).map_err(|e| match e {
        crate::tracee::pidfd::GetFd::Open(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            Taken::Answer(-i64::from(libc::ESRCH))
        }
        crate::tracee::pidfd::GetFd::Open(e) => Taken::Refuse(format!("pidfd_open({tid}): {e}")),
        crate::tracee::pidfd::GetFd::Get(e) => match e.raw_os_error() {
            Some(libc::EBADF) => Taken::Answer(-i64::from(libc::EBADF)),
            Some(libc::ESRCH) => Taken::Answer(-i64::from(libc::ESRCH)),
            _ => Taken::Refuse(format!(
                "cannot take the caller's socket (pidfd_getfd: {e}); without it the destination \
                 could change after the decision"
            )),
        },
    })
}

fn sockopt(sock: &OwnedFd, opt: libc::c_int) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

enum Parsed {
    Inet(IpAddr, u16),
    /// `AF_UNSPEC`: a datagram socket's destination dissolved.
    Unspec,
    /// Another family, or too short: the kernel refuses it.
    Other,
}

/// A sockaddr's destination. Pure.
fn parse_sockaddr(b: &[u8]) -> Parsed {
    if b.len() < 2 {
        return Parsed::Other;
    }
    let family = i32::from(u16::from_ne_bytes([b[0], b[1]]));
    match family {
        libc::AF_UNSPEC => Parsed::Unspec,
        libc::AF_INET if b.len() >= 8 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            Parsed::Inet(IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])), port)
        }
        libc::AF_INET6 if b.len() >= 24 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            Parsed::Inet(IpAddr::V6(Ipv6Addr::from(a)), port)
        }
        _ => Parsed::Other,
    }
}

enum Copy {
    Answer(Answer),
    Refuse(String),
}

fn read(tid: u32, addr: u64, len: usize) -> Result<Vec<u8>, Copy> {
    if len == 0 {
        return Ok(Vec::new());
    }
    crate::tracee::read_bytes(tid, addr, len).map_err(|e| match e.raw_os_error() {
        Some(libc::EFAULT) => Copy::Answer(-i64::from(libc::EFAULT)),
        _ => Copy::Refuse(format!("the caller's memory is unreadable: {e}")),
    })
}

fn word(b: &[u8], at: usize, width: Width) -> u64 {
    match width {
        Width::W64 => {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_ne_bytes(w)
        }
        Width::W32 => {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[at..at + 4]);
            u64::from(u32::from_ne_bytes(w))
        }
    }
}

/// The messages of the call, copied (one for `connect`, `sendto`,
/// `sendmsg`; up to `vlen` for `sendmmsg`).
fn copy_call(c: &super::seam::Caught, call: NetCall, width: Width) -> Result<Vec<Copied>, Copy> {
    let a = c.args;
    let addr_len = |len: u64| (len as u32 as usize).min(SOCKADDR_MAX);
    match call {
        NetCall::Connect => Ok(vec![Copied {
            addr: read(c.tid, a[1], addr_len(a[2]))?,
            data: Vec::new(),
            control: Vec::new(),
            flags: 0,
            clipped: false,
            len_at: None,
        }]),
        NetCall::Sendto => {
            let want = a[2] as usize;
            let len = want.min(SEND_MAX);
            Ok(vec![Copied {
                addr: if a[4] == 0 {
                    Vec::new()
                } else {
                    read(c.tid, a[4], addr_len(a[5]))?
                },
                data: read(c.tid, a[1], len)?,
                control: Vec::new(),
                flags: a[3] as i32,
                clipped: want > len,
                len_at: None,
            }])
        }
        NetCall::Sendmsg => Ok(vec![copy_msghdr(c.tid, a[1], a[2] as i32, width)?]),
        NetCall::Sendmmsg => {
            let vlen = (a[2] as u32 as usize).min(IOV_MAX);
            // struct mmsghdr: a msghdr and an unsigned int (padded).
            let stride = match width {
                Width::W64 => 64,
                Width::W32 => 32,
            };
            // msg_len follows the msghdr (56 bytes, or 28 for a 32-bit caller).
            let len_offset: u64 = match width {
                Width::W64 => 56,
                Width::W32 => 28,
            };
            let mut out = Vec::with_capacity(vlen);
            for i in 0..vlen {
                let at = a[1] + (i * stride) as u64;
                let mut m = copy_msghdr(c.tid, at, a[3] as i32, width)?;
                m.len_at = Some((c.tid, at + len_offset));
                out.push(m);
            }
            if out.is_empty() {
                return Err(Copy::Answer(0));
            }
            Ok(out)
        }
    }
}

/// One `struct msghdr` at `at`, with its name, data and control messages.
fn copy_msghdr(tid: u32, at: u64, flags: i32, width: Width) -> Result<Copied, Copy> {
    let (size, w) = match width {
        Width::W64 => (56, 8),
        Width::W32 => (28, 4),
    };
    let h = read(tid, at, size)?;
    // name, namelen, iov, iovlen, control, controllen, flags: pointer-sized
    // except namelen (int, padded on 64-bit) and flags.
    let (name, namelen, iov, iovlen, control, controllen) = match width {
        Width::W64 => (
            word(&h, 0, width),
            u64::from(u32::from_ne_bytes([h[8], h[9], h[10], h[11]])),
            word(&h, 16, width),
            word(&h, 24, width),
            word(&h, 32, width),
            word(&h, 40, width),
        ),
        Width::W32 => (
            word(&h, 0, width),
            word(&h, 4, width),
            word(&h, 8, width),
            word(&h, 12, width),
            word(&h, 16, width),
            word(&h, 20, width),
        ),
    };
    let iovlen = iovlen as usize;
    if iovlen > IOV_MAX {
        return Err(Copy::Answer(-i64::from(libc::EMSGSIZE)));
    }
    let addr = if name == 0 {
        Vec::new()
    } else {
        read(tid, name, (namelen as u32 as usize).min(SOCKADDR_MAX))?
    };
    let vec = read(tid, iov, iovlen * 2 * w)?;
    let mut data = Vec::new();
    let mut clipped = false;
    for i in 0..iovlen {
        let base = word(&vec, i * 2 * w, width);
        let len = word(&vec, i * 2 * w + w, width) as usize;
        let room = SEND_MAX - data.len();
        if len > room {
            clipped = true;
        }
        data.extend(read(tid, base, len.min(room))?);
        if clipped {
            break;
        }
    }
    let controllen = controllen as usize;
    if controllen > 0 && width == Width::W32 {
        return Err(Copy::Refuse(
            "control messages of a 32-bit caller are not handled".into(),
        ));
    }
    let control = read(tid, control, controllen.min(CONTROL_MAX))?;
    Ok(Copied {
        addr,
        data,
        control,
        flags,
        clipped,
        len_at: None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddrs_parse_to_their_destination() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&443u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 1, 2, 3]);
        assert!(
            matches!(parse_sockaddr(&v4), Parsed::Inet(ip, 443) if ip == IpAddr::from([10, 1, 2, 3]))
        );
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&53u16.to_be_bytes());
        v6[23] = 1;
        assert!(
            matches!(parse_sockaddr(&v6), Parsed::Inet(ip, 53) if ip == IpAddr::from(Ipv6Addr::LOCALHOST))
        );
        assert!(matches!(parse_sockaddr(&v6[..20]), Parsed::Other));
        assert!(matches!(parse_sockaddr(&[0, 0]), Parsed::Unspec));
        let unix = (libc::AF_UNIX as u16).to_ne_bytes();
        assert!(matches!(parse_sockaddr(&unix), Parsed::Other));
        assert!(matches!(parse_sockaddr(&[2]), Parsed::Other));
    }
}
