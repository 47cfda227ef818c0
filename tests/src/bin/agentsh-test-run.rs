//! `agentsh-test-run --server unix:PATH [--session ID] [--wrapper PATH]
//! [--wrap-init-only] -- CMD [ARGS...]`
//!
//! Runs one command under agentsh supervision exactly the way the shell
//! shim does — it calls the shim library's own `supervise` (wrap-init over
//! the Unix socket as this very process, the relay helper, unixwrap exec'd
//! in place so CMD keeps this pid) — without installing anything as
//! `/bin/sh`. The test harness (`agentsh_tests::relay`) spawns it, as
//! whatever uid a test asks for. `--wrap-init-only` prints the wrap-init
//! answer as JSON and exits, for tests of the notify-socket handoff.
//!
//! Exit status: CMD's, or 126 with one line `agentsh-test-run: ...` on
//! stderr when supervision could not be installed.

use agentsh_proto::shimconf::{Mode, Server, ShimConf};
use std::ffi::CString;

fn usage() -> ! {
    eprintln!(
        "usage: agentsh-test-run --server unix:PATH [--session ID] [--wrapper PATH] \
         [--wrap-init-only] -- CMD [ARGS...]"
    );
    std::process::exit(2);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut conf = ShimConf {
        mode: Mode::On,
        ..ShimConf::default()
    };
    let mut only_wrap_init = false;
    let mut cmd: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--server" => {
                let v = args.next().unwrap_or_default();
                conf.server = Server::parse(&v).unwrap_or_else(|| usage());
            }
            "--session" => conf.session = args.next().unwrap_or_else(|| usage()),
            "--wrapper" => conf.wrapper = Some(args.next().unwrap_or_else(|| usage())),
            "--wrap-init-only" => only_wrap_init = true,
            "--" => {
                cmd = args.by_ref().collect();
                break;
            }
            _ => usage(),
        }
    }
    if cmd.is_empty() {
        usage();
    }
    if only_wrap_init {
        let req = agentsh_proto::WrapInitRequest {
            agent_command: cmd[0].clone(),
            agent_args: cmd[1..].to_vec(),
            // SAFETY: geteuid cannot fail.
            caller_uid: unsafe { libc::geteuid() },
            env_names: Vec::new(),
            env_url_passwords: Vec::new(),
            ruleset_ahead: false,
        };
        match agentsh_shell_shim::wrapinit::call(&conf, &req) {
            Ok(r) => println!("{}", serde_json::to_string(&r).unwrap_or_default()),
            Err(e) => {
                eprintln!("agentsh-test-run: {e}");
                std::process::exit(126);
            }
        }
        return;
    }
    let cargs: Vec<CString> = cmd
        .iter()
        .map(|a| CString::new(a.as_str()).unwrap_or_else(|_| usage()))
        .collect();
    let argv: Vec<&std::ffi::CStr> = cargs.iter().map(std::ffi::CString::as_c_str).collect();
    let target = agentsh_shell_shim::Target {
        real: &cmd[0],
        public: &cmd[0],
        argv0: argv[0],
        argv: &argv,
    };
    // Returns only if supervision could not be installed.
    let failure = agentsh_shell_shim::supervise(&target, &conf, Mode::On);
    eprintln!("agentsh-test-run: {failure}");
    std::process::exit(126);
}
