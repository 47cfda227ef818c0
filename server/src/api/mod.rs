//! The API: HTTP/1.1 on the Unix SOCK_SEQPACKET socket (`server.socket`,
//! always) and, for operators who need it, on TCP (`server.http.addr`).
//!
//! Routes: `GET /healthz`, `GET /api/v1/status` (what `agentsh detect`
//! says of this host), `POST /api/v1/sessions`, `GET /api/v1/sessions`,
//! `POST /api/v1/sessions/{id}/wrap-init`, `GET /api/v1/sessions/{id}/events
//! [?after=N&wait=SECS]`, `GET /api/v1/approvals[?after=SEQ&wait=SECS]`,
//! `POST /api/v1/approvals/{id}`, `POST /api/v1/policy/reload`.
//!
//! Who may call what (see `peer` for how peers are identified):
//!
//! | route | Unix peer | TCP peer |
//! |---|---|---|
//! | `/healthz` | anyone | anyone |
//! | wrap-init | any uid, for itself | only with `server.http.wrap_init: true`, identified through `/proc` |
//! | everything else | uid 0 (the operator) | the operator token |
//!
//! No route serves a process of a supervised tree: it cannot create the
//! socket type the API listens on, and if it somehow connected, the lineage
//! check refuses it before a byte is read.
//!
//! The transport is async (tokio + hyper): a long-poll is a parked future,
//! not a thread, so no number of long-polls, event streams or slow clients
//! can make wrap-init wait; blocking work (wrap-init's ruleset compile, the
//! `/proc` scans) runs on the blocking pool. Module layout: `state` (the
//! [`Api`] every handler shares), `serve` (the accept loops), `peer` (who
//! is asking), `routes` (the handlers; `sessions` and `wrap_init` have
//! rooms of their own, and wrap-init's checks come first, in `admission`), `answer` (JSON answers, errors, request bodies).
//! Below the API: the SEQPACKET sockets (`transport`), the per-peer limits
//! (`limits`) and whether the server is ready (`readiness`).
//!
//! Failure modes: errors are JSON `{"error": "..."}` with a 4xx/5xx status;
//! a listener that fails is logged and the server exits non-zero (a server
//! without its socket would leave `auto` shims refusing, which is safe, but
//! an operator must see it).

mod admission;
mod answer;
pub(crate) mod credentials;
pub mod peer;
pub mod reload;
pub mod routes;
mod serve;
mod sessions;
mod state;
mod wrap_init;

pub use serve::{serve_tcp, serve_unix};
pub use state::{Api, ConfigLoader};
