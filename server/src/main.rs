//! `agentsh`: the server and its admin CLI (see `agentsh::cli`).

fn main() -> std::process::ExitCode {
    agentsh::cli::main()
}
