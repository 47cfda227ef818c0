//! The admin CLI's side of the API: `agentsh events`, `approvals`, `ready`.
//!
//! `--server unix:/run/agentsh/api.sock` (the default) talks over the Unix
//! socket, where the server knows the caller from the kernel (`SO_PEERCRED`):
//! operator routes need uid 0. `--server http://HOST:PORT` talks to the
//! optional TCP listener, where every route but `/healthz` needs the
//! operator token, read from the root-only token file.
//!
//! Failure modes: every error says which server, which step and what to do.

use agentsh_proto::http::{self, Request};
use agentsh_proto::shimconf::Server;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default token file (`<state_dir>/approval.token` of the default config).
pub const DEFAULT_TOKEN_FILE: &str = "/var/lib/agentsh/approval.token";
/// The largest answer the CLI reads (a long event list).
const MAX_ANSWER: usize = 256 << 20;

/// Why a call to the server got no answer the caller can use.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--server {0:?}: expected unix:/ABSOLUTE/PATH or http://HOST:PORT")]
    BadServer(String),
    #[error(
        "the TCP API needs the operator token, and {} cannot be read: {source} (run as root, \
         pass --token-file <state_dir>/approval.token, or use the Unix socket)",
        file.display()
    )]
    Token {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    #[error(
        "cannot reach the agentsh server at unix:{}: {source} (is it running? as root?)",
        socket.display()
    )]
    UnreachableUnix {
        socket: PathBuf,
        source: http::Error,
    },
    #[error("cannot reach the agentsh server at {base}: {source}")]
    UnreachableHttp { base: String, source: ureq::Error },
    #[error("reading the answer of {url}: {source}")]
    ReadAnswer { url: String, source: ureq::Error },
    /// An answer other than 200, with the server's error text.
    #[error("{server} {target}: HTTP {status}: {text}")]
    Status {
        server: String,
        target: String,
        status: u16,
        text: String,
    },
}

type Result<T> = std::result::Result<T, ClientError>;

/// A connection target plus, for TCP, where the token is.
pub struct Client {
    server: Server,
    token_file: PathBuf,
    timeout: Duration,
}

impl Client {
    /// `server`: `unix:/path` or `http://host:port`.
    ///
    /// # Errors
    /// Neither form.
    pub fn new(server: &str, token_file: Option<&Path>) -> Result<Client> {
        let server = Server::parse(server.trim())
            .ok_or_else(|| ClientError::BadServer(server.to_string()))?;
        Ok(Client {
            server,
            token_file: token_file.map_or_else(|| DEFAULT_TOKEN_FILE.into(), Path::to_path_buf),
            timeout: Duration::from_secs(10),
        })
    }

    /// How long one exchange may take (long-polls need more than the default).
    pub fn with_timeout(mut self, t: Duration) -> Client {
        self.timeout = t;
        self
    }

    pub fn server(&self) -> String {
        self.server.to_string()
    }

    fn token(&self) -> Result<String> {
        std::fs::read_to_string(&self.token_file)
            .map(|t| t.trim().to_string())
            .map_err(|source| ClientError::Token {
                file: self.token_file.clone(),
                source,
            })
    }

    /// One request; returns the status and the body (JSON `null` when empty
    /// or not JSON, e.g. `/healthz`'s `ok`).
    ///
    /// # Errors
    /// The server cannot be reached or the exchange fails.
    pub fn call(
        &self,
        method: &str,
        target: &str,
        body: Option<&serde_json::Value>,
        with_token: bool,
    ) -> Result<(u16, serde_json::Value)> {
        let bytes = match body {
            Some(b) => serde_json::to_vec(b)?,
            None => Vec::new(),
        };
        let (status, raw) = match &self.server {
            Server::Unix(sock) => {
                let req = Request {
                    method,
                    target,
                    body: &bytes,
                    bearer: None,
                };
                let r = http::call(sock, self.timeout, |_| Ok(()), &req, MAX_ANSWER).map_err(
                    |source| ClientError::UnreachableUnix {
                        socket: sock.clone(),
                        source,
                    },
                )?;
                (r.status, r.body)
            }
            Server::Http(base) => {
                let token = if with_token {
                    Some(self.token()?)
                } else {
                    None
                };
                self.call_http(base, method, target, &bytes, token)?
            }
        };
        let value = serde_json::from_slice(&raw).unwrap_or(serde_json::Value::Null);
        Ok((status, value))
    }

    /// [`Client::call`] over TCP: the status and the raw body.
    fn call_http(
        &self,
        base: &str,
        method: &str,
        target: &str,
        bytes: &[u8],
        token: Option<String>,
    ) -> Result<(u16, Vec<u8>)> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(self.timeout))
            .build()
            .into();
        let url = format!("{base}{target}");
        let auth = token.map(|t| format!("Bearer {t}"));
        let res = match method {
            "GET" => {
                let mut r = agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            "DELETE" => {
                let mut r = agent.delete(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = agent.post(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.content_type("application/json").send(bytes)
            }
        };
        let mut resp = res.map_err(|source| ClientError::UnreachableHttp {
            base: base.to_string(),
            source,
        })?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER as u64)
            .read_to_vec()
            .map_err(|source| ClientError::ReadAnswer { url, source })?;
        Ok((status, body))
    }

    /// A GET that must answer 200 with JSON.
    ///
    /// # Errors
    /// Any other status, with the server's error text.
    pub fn get_json(&self, target: &str) -> Result<serde_json::Value> {
        let (status, v) = self.call("GET", target, None, true)?;
        if status != 200 {
            return Err(ClientError::Status {
                server: self.server.to_string(),
                target: target.to_string(),
                status,
                text: error_text(&v),
            });
        }
        Ok(v)
    }
}

/// The `error` of a JSON error body, or the body itself.
pub fn error_text(body: &serde_json::Value) -> String {
    body.get("error")
        .and_then(|e| e.as_str())
        .map_or_else(|| body.to_string(), str::to_string)
}
