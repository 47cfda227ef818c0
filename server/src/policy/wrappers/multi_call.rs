//! Multi-call binaries (`busybox`, `toybox`): every applet is one file,
//! chosen by argv[0] or, under the binary's own name, by argv[1].
//!
//! Failure modes: an argv[0] that names no applet, or an option of the
//! binary itself it does not take before an applet, is [`Unparsable`].

use super::payload::{Unparsable, Unwrapped};

/// Multi-call binaries: every applet is one file, chosen by argv[0].
const MULTI_CALL: [&str; 2] = ["busybox", "toybox"];

/// Whether a file's base name is a multi-call binary's own name.
pub(crate) fn is_multi_call_name(base: &str) -> bool {
    MULTI_CALL.iter().any(|m| base.starts_with(m))
}

/// The applet a multi-call binary runs for `name`, by busybox's own rule
/// (`appletlib.c`): one leading `-` (a login shell's argv[0]) is dropped,
/// then the last path component. `exec -a -wget busybox` runs `wget`.
fn applet_of(name: &str) -> &str {
    let name = name.strip_prefix('-').unwrap_or(name);
    name.rsplit('/').next().unwrap_or(name)
}

/// `busybox APPLET [ARG]...`, or any name linked to it (`wget` -> busybox).
pub(super) fn multi_call(argv: &[String]) -> Result<Unwrapped, Unparsable> {
    multi_call_with(argv, &[])
}

/// [`multi_call`] for a binary whose own names are busybox's, toybox's and
/// `own` (the policy's `multi_call` list): under one of them argv[1] is the
/// applet, under any other name argv[0] is.
pub(crate) fn multi_call_with(argv: &[String], own: &[String]) -> Result<Unwrapped, Unparsable> {
    let Some(argv0) = argv.first() else {
        return Ok(Unwrapped::NoPayload);
    };
    let applet = applet_of(argv0);
    if applet.is_empty() {
        return Err(Unparsable(format!(
            "argv[0] {argv0:?} names no applet of a multi-call binary"
        )));
    }
    if !(is_multi_call_name(applet) || own.iter().any(|o| o == applet)) {
        // Invoked under an applet's name: argv[0] picks the applet.
        return Ok(Unwrapped::Payload {
            program: applet.to_string(),
            argv: argv.to_vec(),
        });
    }
    match argv.get(1).map(String::as_str) {
        None => Ok(Unwrapped::NoPayload),
        Some("--list" | "--list-full" | "--help" | "--version" | "--install") => {
            Ok(Unwrapped::NoPayload)
        }
        Some(other) if other.starts_with('-') => Err(Unparsable(format!(
            "unknown option `{other}` of a multi-call binary"
        ))),
        // `busybox /any/path/wget` runs the applet of the last component.
        Some(applet) => Ok(Unwrapped::Payload {
            program: applet_of(applet).to_string(),
            argv: argv[1..].to_vec(),
        }),
    }
}
