//! A destination whose egress rule has `http:`: the connect is made to
//! agentsh's HTTP proxy instead (on the tree's own socket), and the socket's
//! local address is booked with what was judged before the connect is
//! made, so the proxy knows the connection when it arrives. The tree's
//! proxy settings play no part; connecting by address changes nothing.
//!
//! A call judged where it stops (the ptrace backend where the socket
//! cannot be taken: gVisor) has the proxy's address written over its own
//! sockaddr (`in_place`) and is booked once the connect has returned, by
//! the local address `/proc` shows; the proxy waits a moment for a
//! booking that is not there yet.
//!
//! Failure modes: a proxy that cannot start, a sockaddr that cannot name
//! it, a socket that cannot be given an address or whose address cannot
//! be read, a send naming a destination on TCP (fast open): refused with
//! the reason (`egress_unenforceable`).

use super::call::Call;
use super::copy::Copied;
use super::sockaddr::sockaddr_of;
use super::state::DestKey;
use super::stub::{bound_local, Unbound};
use crate::policy::egress::{Egress, Protocol};
use crate::supervisor::http_proxy::{Booking, HttpProxy};
use agentsh_proto::netabi::NetCall;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Why a connect cannot be made to the proxy.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Unproxied(String);

/// A connect to be made to the proxy, once its socket is known.
pub(super) struct ToProxy {
    pub(super) proxy: Arc<dyn HttpProxy>,
    pub(super) booking: Booking,
}

/// Whether `rule` has `http:` for this destination: then the message's
/// destination becomes the proxy's address (`Ok(Some)`); `Err`: why it
/// cannot be.
pub(super) fn to_proxy(
    k: &Call,
    policy: &Egress,
    key: DestKey,
    rule: &str,
    host: Option<String>,
    domain: i32,
    m: &mut Copied,
) -> Result<Option<ToProxy>, Unproxied> {
    let Some(r) = policy.rules.iter().find(|r| r.name == rule) else {
        return Ok(None);
    };
    let Some(http) = r.http.clone() else {
        return Ok(None);
    };
    if key.protocol != Protocol::Tcp {
        return Ok(None);
    }
    if k.call != NetCall::Connect {
        return Err(Unproxied(format!(
            "{} naming a destination whose egress rule {rule:?} has http: (TCP fast open): \
             only a connect can be sent to agentsh's HTTP proxy; connect first",
            k.call.name()
        )));
    }
    let proxy = k.ctx.proxy().map_err(|e| {
        Unproxied(format!(
            "egress rule {rule:?} has http:, but agentsh's HTTP proxy is not running: {e}"
        ))
    })?;
    let to = proxy.addr_for(domain);
    m.addr = sockaddr_of(to, domain).ok_or_else(|| {
        Unproxied(format!(
            "agentsh's HTTP proxy ({to}) cannot be named on this socket"
        ))
    })?;
    Ok(Some(ToProxy {
        booking: Booking {
            session_id: k.tree.session_id.clone(),
            pid: k.c.tid,
            dest: SocketAddr::new(key.ip, key.port),
            host,
            rule: rule.to_string(),
            hosts: r.hosts.clone(),
            http,
        },
        proxy,
    }))
}

impl ToProxy {
    /// Books the socket's local address (bound first where it has none).
    ///
    /// # Errors
    /// The socket's address cannot be read or given.
    pub(super) fn book(self, sock: &OwnedFd) -> Result<(), Unproxied> {
        let local = bound_local(sock).map_err(|e| {
            Unproxied(match e {
                Unbound::Name(e) => format!("getsockname: {e}"),
                Unbound::NoWildcard => "no wildcard address for the socket's family".into(),
                Unbound::Bind(e) => format!("cannot bind the socket before the connect: {e}"),
            })
        })?;
        self.proxy.book(local, self.booking);
        Ok(())
    }
}

impl ToProxy {
    /// The booking of a connect judged where it stops (its socket cannot
    /// be taken): made once the connect has given the socket its address,
    /// read from `/proc` (the proxy waits a moment for a booking).
    pub(super) fn after(self, tid: u32, fd: i32) -> AfterConnect {
        AfterConnect { to: self, tid, fd }
    }
}

/// A connect redirected in place, booked once it has returned.
pub(super) struct AfterConnect {
    to: ToProxy,
    tid: u32,
    fd: i32,
}

impl AfterConnect {
    /// Books the socket by the address `/proc` shows now; the caller's
    /// answer, where it must change (a connect that cannot be booked is
    /// refused: the proxy would close it).
    pub(super) fn done(self, returned: i64) -> Option<i64> {
        if returned != 0 && returned != -i64::from(libc::EINPROGRESS) {
            return None;
        }
        let (tid, fd) = (self.tid, self.fd);
        let seen = crate::tracee::with_owner(tid, || crate::tracee::netproc::transport_of(tid, fd));
        match seen {
            Ok(Some(s)) => match s.local.filter(|a| a.port() != 0) {
                Some(local) => {
                    self.to.proxy.book(local, self.to.booking);
                    None
                }
                None => {
                    tracing::error!(
                        tid,
                        fd,
                        "a connect to the HTTP proxy has no local address to book"
                    );
                    Some(-i64::from(libc::EACCES))
                }
            },
            other => {
                tracing::error!(
                    tid,
                    fd,
                    "a connect to the HTTP proxy cannot be booked: {other:?}"
                );
                Some(-i64::from(libc::EACCES))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::http::Http;
    use crate::policy::Decision;
    use crate::supervisor::http_proxy::recording::RecordingProxy;

    fn to(proxy: &Arc<RecordingProxy>) -> ToProxy {
        ToProxy {
            proxy: proxy.clone(),
            booking: Booking {
                session_id: "s".into(),
                pid: 4242,
                dest: SocketAddr::from(([192, 0, 2, 1], 443)),
                host: Some("api.example.com".into()),
                rule: "api".into(),
                hosts: Vec::new(),
                http: Arc::new(Http {
                    default: Decision::Deny,
                    rules: Vec::new(),
                    inject: Vec::new(),
                }),
            },
        }
    }

    #[test]
    fn a_connect_sent_to_the_proxy_is_booked_by_its_sockets_address() {
        let proxy = Arc::new(RecordingProxy::default());
        let sock = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback socket");
        let local = sock.local_addr().expect("its address");
        to(&proxy).book(&OwnedFd::from(sock)).expect("booked");
        assert_eq!(proxy.bookings(), [(local, "api".to_string())]);
    }

    #[test]
    fn a_connect_whose_socket_has_no_address_is_not_booked() {
        let proxy = Arc::new(RecordingProxy::default());
        let not_a_socket = std::fs::File::open("/dev/null").expect("/dev/null");
        let Err(e) = to(&proxy).book(&OwnedFd::from(not_a_socket)) else {
            panic!("a file was booked as a socket");
        };
        assert!(e.to_string().starts_with("getsockname: "), "{e}");
        assert!(proxy.bookings().is_empty());
    }
}
