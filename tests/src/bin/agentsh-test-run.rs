//! `agentsh-test-run [--server URL] [--session ID] -- CMD [ARGS...]`
//!
//! Runs one command under agentsh supervision the way the shim would (wrap-init,
//! unixwrap, fd relay), without installing anything. Used by the demo and the
//! benchmarks; the shim is the product, this is the harness.

use agentsh_tests::relay::{spawn_wrapped, WrapOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut server = agentsh_proto::shimconf::DEFAULT_SERVER.to_string();
    let mut session = "default".to_string();
    let mut cmd: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--server" => server = args.next().unwrap_or_default(),
            "--session" => session = args.next().unwrap_or_default(),
            "--" => {
                cmd = args.by_ref().collect();
                break;
            }
            "-h" | "--help" => {
                println!("usage: agentsh-test-run [--server URL] [--session ID] -- CMD [ARGS...]");
                return;
            }
            other => {
                eprintln!("agentsh-test-run: unexpected argument {other:?} (see --help)");
                std::process::exit(2);
            }
        }
    }
    if cmd.is_empty() {
        eprintln!("agentsh-test-run: no command given (see --help)");
        std::process::exit(2);
    }
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let opts = WrapOptions {
        inherit_stdio: true,
        ..Default::default()
    };
    let (relay, out) = spawn_wrapped(&server, &session, &cmd, &opts).wait();
    if let Err(e) = relay {
        eprintln!("agentsh-test-run: relay failed: {e}");
    }
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    std::process::exit(code);
}
