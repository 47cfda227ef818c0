//! The dynamic loader as a wrapper: `ld.so PROG` maps PROG without an
//! execve of its own, so its payload is the only thing the policy can judge.
//!
//! Failure modes: an option the loader does not know, or a program named
//! without a `/` (looked up in a library path the tree controls), is
//! [`Unparsable`].

use super::payload::{Unparsable, Unwrapped};
use std::collections::VecDeque;

pub(super) fn is_dynamic_loader(base: &str) -> bool {
    base == "ld.so"
        || base.starts_with("ld64.so")
        || (base.starts_with("ld-") && base.contains(".so"))
}

/// `ld.so [OPTION]... PROGRAM [ARG]...` (glibc and musl). The loader takes
/// option values as separate words and knows no `--`.
pub(super) fn dynamic_loader(mut args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    let mut argv0 = None;
    while let Some(arg) = args.pop_front() {
        match arg.as_str() {
            "--list" | "--verify" | "--inhibit-cache" => {}
            "--help" | "--version" | "--list-tunables" | "--list-diagnostics" => {
                return Ok(Unwrapped::NoPayload)
            }
            "--library-path"
            | "--inhibit-rpath"
            | "--audit"
            | "--preload"
            | "--argv0"
            | "--glibc-hwcaps-prepend"
            | "--glibc-hwcaps-mask" => {
                let value = args
                    .pop_front()
                    .ok_or_else(|| Unparsable(format!("option `{arg}` needs an argument")))?;
                if arg == "--argv0" {
                    argv0 = Some(value);
                }
            }
            other if other.starts_with('-') => {
                return Err(Unparsable(format!(
                    "unknown option `{other}` of the dynamic loader"
                )))
            }
            // Without a `/` the loader looks the name up in its library
            // path (`--library-path`, LD_LIBRARY_PATH, its cache), which
            // the tree can point anywhere: no file can be judged.
            _ if !arg.contains('/') => {
                return Err(Unparsable(format!(
                    "program `{arg}` is named without a `/`: the loader would look for it in its \
                     library path"
                )))
            }
            _ => {
                let mut argv = vec![argv0.unwrap_or_else(|| arg.clone())];
                argv.extend(args);
                return Ok(Unwrapped::Payload { program: arg, argv });
            }
        }
    }
    Ok(Unwrapped::NoPayload)
}
