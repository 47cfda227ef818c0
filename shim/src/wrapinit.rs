//! `POST {server}/api/v1/sessions/{session}/wrap-init`.
//!
//! The server address and session come from shim.conf only. The HTTP client
//! ignores proxy variables (`HTTP_PROXY`, `ALL_PROXY`, ...): they come from the
//! environment, and a proxy that answers wrap-init could name any wrapper.
//! Timeouts are short (connect 1 s, whole call 5 s) because every shell in the
//! container waits on them.

use crate::decide::InstallFailure;
use agentsh_proto::{WrapInitRequest, WrapInitResponse};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const TOTAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Calls wrap-init; `Ok` only for a response that asks for a kernel install.
///
/// # Errors
/// Every way the server can fail or decline, as an [`InstallFailure`].
pub fn call(
    server: &str,
    session: &str,
    req: &WrapInitRequest,
) -> Result<WrapInitResponse, InstallFailure> {
    let config = ureq::Agent::config_builder()
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_global(Some(TOTAL_TIMEOUT))
        // 128 KiB each by default, zeroed on every shell; a wrap-init
        // request is < 1 KiB and the answer's body is streamed through.
        .input_buffer_size(16 * 1024)
        .output_buffer_size(4 * 1024)
        .build();
    let agent = ureq::Agent::with_parts(config, DefaultConnector::new(), LiteralFirst);
    let url = format!("{server}/api/v1/sessions/{session}/wrap-init");
    let mut resp = agent
        .post(&url)
        .send_json(req)
        .map_err(|e| InstallFailure::Unreachable(format!("{url}: {e}")))?;
    let status = resp.status().as_u16();
    if !(200..300).contains(&status) {
        return Err(InstallFailure::Status(status));
    }
    let body: WrapInitResponse = resp
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_json()
        .map_err(|e| InstallFailure::BadResponse(e.to_string()))?;
    validate(body)
}

/// The server is almost always an IP literal on loopback: use it as is.
/// ureq's resolver would start a thread to bound the lookup's time even for
/// a literal (≈ 0.1–0.5 ms on every shell); names still go through it.
#[derive(Debug)]
struct LiteralFirst;

impl Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        if let Some(addr) = literal_addr(uri) {
            let mut v = self.empty();
            v.push(addr);
            return Ok(v);
        }
        DefaultResolver::default().resolve(uri, config, timeout)
    }
}

/// `http://IP:PORT/...` or `http://[IPv6]:PORT/...` (port defaulting to 80).
fn literal_addr(uri: &ureq::http::Uri) -> Option<SocketAddr> {
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let auth = uri.authority()?;
    let host = auth.host().trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = host.parse().ok()?;
    Some(SocketAddr::new(ip, auth.port_u16().unwrap_or(80)))
}

/// An empty `wrapper_binary` or `notify_socket` means "no kernel install";
/// a relative wrapper path is refused (it would resolve against the caller's cwd).
fn validate(r: WrapInitResponse) -> Result<WrapInitResponse, InstallFailure> {
    if r.wrapper_binary.is_empty() || r.notify_socket.is_empty() {
        return Err(InstallFailure::NoKernelInstall);
    }
    if !r.wrapper_binary.starts_with('/') {
        return Err(InstallFailure::BadResponse(format!(
            "wrapper_binary {:?} is not an absolute path",
            r.wrapper_binary
        )));
    }
    if r.notify_socket.len() >= 108 || r.notify_socket.contains('\0') {
        return Err(InstallFailure::BadResponse(format!(
            "notify_socket {:?} is not a usable unix socket path",
            r.notify_socket
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsh_proto::SeccompConfig;

    fn resp(w: &str, s: &str) -> WrapInitResponse {
        WrapInitResponse {
            wrapper_binary: w.into(),
            notify_socket: s.into(),
            seccomp_config: SeccompConfig::default(),
            wrapper_env: Default::default(),
        }
    }

    #[test]
    fn empty_fields_mean_no_kernel_install() {
        assert_eq!(
            validate(resp("", "/run/x.sock")),
            Err(InstallFailure::NoKernelInstall)
        );
        assert_eq!(
            validate(resp("/usr/bin/agentsh-unixwrap", "")),
            Err(InstallFailure::NoKernelInstall)
        );
        assert!(validate(resp("/usr/bin/agentsh-unixwrap", "/run/x.sock")).is_ok());
    }

    #[test]
    fn relative_wrapper_and_overlong_socket_are_refused() {
        assert!(validate(resp("agentsh-unixwrap", "/run/x.sock")).is_err());
        let long = format!("/{}", "x".repeat(120));
        assert!(validate(resp("/w", &long)).is_err());
    }

    #[test]
    fn ip_literals_skip_the_resolver_names_do_not() {
        let u = |s: &str| s.parse::<ureq::http::Uri>().unwrap();
        assert_eq!(
            literal_addr(&u("http://127.0.0.1:18080/api")),
            Some("127.0.0.1:18080".parse().unwrap())
        );
        assert_eq!(
            literal_addr(&u("http://[::1]:9/x")),
            Some("[::1]:9".parse().unwrap())
        );
        assert_eq!(
            literal_addr(&u("http://10.0.0.2/x")),
            Some("10.0.0.2:80".parse().unwrap())
        );
        assert_eq!(literal_addr(&u("http://localhost:18080/x")), None);
        assert_eq!(literal_addr(&u("https://127.0.0.1/x")), None);
    }

    #[test]
    fn unreachable_server_is_reported_quickly() {
        // Port 1 on loopback: nothing listens there.
        let t = std::time::Instant::now();
        let req = WrapInitRequest {
            agent_command: "/bin/sh".into(),
            agent_args: vec![],
            caller_uid: 0,
        };
        match call("http://127.0.0.1:1", "default", &req) {
            Err(InstallFailure::Unreachable(_)) => {}
            other => panic!("{other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
