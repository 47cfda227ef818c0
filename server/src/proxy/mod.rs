//! agentsh's HTTP proxy for egress rules with `http:`: every request to
//! those destinations is judged by method and path, refused with a 403
//! that says why, held for an operator, or sent on with the headers the
//! rule injects (credentials the tree never holds).
//!
//! The tree does not choose to use it: a connect the egress family allows
//! by a rule with `http:` is made by the supervisor to this proxy's
//! loopback address instead (on the tree's own socket), after booking the
//! socket's local address with what was judged (the original destination,
//! the name, the rule, the session). The proxy takes the booking when the
//! connection arrives (once; a connection nobody booked is closed), so
//! `HTTP_PROXY`, `NO_PROXY` and connecting by IP change nothing.
//!
//! TLS (a first byte of 0x16) is terminated with a certificate agentsh's
//! CA signs for the name the client asks (SNI), after the upstream at the
//! original destination has shown a certificate for that name that the
//! system's store (and `egress.upstream_roots`) trusts; ALPN offers the
//! client only what the upstream chose (h2 or http/1.1). Plain HTTP is
//! HTTP/1.1. Rooms: `ca` (the CA and its leaves), `book` (bookings),
//! `serve` (one connection), `upstream` (the connection onwards),
//! `request` (one request), `hold` (a request held for an operator),
//! `state` (what the rooms share), `run` (the start, and the server's cell).
//!
//! Failure modes: a CA or listener that cannot be had: the proxy does not
//! start and every connect that needs it is refused (`egress_unenforceable`,
//! with the reason). A name the rule does not name (SNI or Host), an
//! upstream that cannot be reached or whose certificate is not trusted:
//! the client gets a 403 or 502 whose body says why (never a connection
//! to an unverified upstream). A client that does not trust agentsh's CA
//! fails its own handshake (closed, never open).

mod book;
pub mod ca;
mod hold;
mod redact;
mod request;
mod run;
mod serve;
mod state;
#[cfg(test)]
mod tests;
mod upstream;

pub use run::{ProxyCell, ProxySetup};
pub use state::{Proxy, ProxyError};
