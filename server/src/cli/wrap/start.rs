//! Runs `agentsh wrap`: the checks every way shares (not nested, CMD found,
//! options that agree, a valid session id), then which way: a server named
//! with `--server`, root's server where one answers, or a standalone
//! server of wrap's own.
//!
//! Failure modes: nested in a supervised tree: 126; CMD not found: 127;
//! options that disagree or a bad session id: 2; the rest is the chosen
//! way's.

use super::args::Wrap;
use super::command::{resolve, say};
use super::server_mode::exec_under;
use super::standalone::standalone;
use std::path::Path;
use std::time::Duration;

/// Runs `agentsh wrap`; returns the exit status.
pub fn run(mut w: Wrap) -> i32 {
    if let Some(name) = w.agent.clone() {
        match super::profiles::profile(&name) {
            Ok(p) => {
                if !w.quiet {
                    say(&format!(
                        "--agent {}: allows {} on port 443, keeps {} in its environment",
                        p.name,
                        p.hosts.join(" "),
                        p.keep_env.join(" ")
                    ));
                }
                w.allow_hosts
                    .extend(p.hosts.iter().map(ToString::to_string));
                w.keep_env
                    .extend(p.keep_env.iter().map(ToString::to_string));
            }
            Err(e) => {
                say(&e.to_string());
                return 2;
            }
        }
    }
    if agentsh_proto::marker::agentsh_filter_present() {
        say(
            "this process already runs under agentsh's supervision (a supervised tree): wrap \
             is not nested; run the command directly, it is supervised already",
        );
        return agentsh_proto::exit::REFUSED;
    }
    let Some(program) = w.command.first() else {
        say("no command given: agentsh wrap [OPTIONS] -- CMD [ARGS...]");
        return 2;
    };
    let Some(real) = resolve(program) else {
        say(&format!("{}: command not found", program.to_string_lossy()));
        return agentsh_proto::exit::NOT_FOUND;
    };
    if !w.allow_hosts.is_empty() && w.server.is_some() && !w.own_server {
        say("--allow-host changes the policy of wrap's own server; with --server, the server's policy decides (add the rule there)");
        return 2;
    }
    if !w.keep_env.is_empty() && w.server.is_some() && !w.own_server {
        say("--keep-env changes the policy of wrap's own server; with --server, the server's policy decides (add the name to its env.keep)");
        return 2;
    }
    let session = w.session.clone().unwrap_or_else(new_session_id);
    if !crate::session::valid_id(&session) {
        say(&format!(
            "--session {session:?}: use letters, digits, '-', '_' and '.' only"
        ));
        return 2;
    }
    match (
        &w.server,
        w.standalone || w.server.is_none() && !root_server_answers(),
    ) {
        (Some(s), _) => match s.strip_prefix("unix:") {
            Some(path) => exec_under(&w, &session, Path::new(path), &real),
            None => {
                say(&format!(
                    "--server {s:?}: give the server's API socket as unix:/PATH"
                ));
                2
            }
        },
        (None, false) => exec_under(
            &w,
            &session,
            Path::new(agentsh_proto::shimconf::DEFAULT_SOCKET),
            &real,
        ),
        (None, true) => standalone(&w, &session),
    }
}

fn new_session_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("wrap-{secs}-{}", std::process::id())
}

/// Whether a root server answers at the default socket (then wrap uses it).
fn root_server_answers() -> bool {
    use std::os::unix::fs::MetadataExt;
    let sock = Path::new(agentsh_proto::shimconf::DEFAULT_SOCKET);
    std::fs::symlink_metadata(sock).is_ok_and(|m| m.uid() == 0)
        && crate::cli::client::Client::new(&format!("unix:{}", sock.display()), None)
            .map(|c| c.with_timeout(Duration::from_secs(2)))
            .and_then(|c| c.call("GET", "/healthz", None, false))
            .is_ok_and(|(status, _)| status == 200)
}
