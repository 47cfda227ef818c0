//! Which wrapper a program is (by its name), and what the wrapper invoked
//! with an argv will run: the dispatch to each wrapper's parser.
//!
//! Failure modes: a program of no known name is no wrapper (`None`); a
//! wrapper's arguments that cannot be parsed are [`Unparsable`].

use super::loader::{dynamic_loader, is_dynamic_loader};
use super::multi_call::{is_multi_call_name, multi_call};
use super::payload::{Unparsable, Unwrapped};
use super::tools::{
    chrt, env, ionice, nice, simple, taskset, timeout, NOHUP, SETSID, STDBUF, TIME,
};
use crate::policy::pattern::ProgramName;
use std::collections::VecDeque;

/// The wrappers we can see through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrapper {
    Env,
    Nice,
    Ionice,
    Nohup,
    Timeout,
    Stdbuf,
    Setsid,
    Chrt,
    Taskset,
    /// GNU `time` (the program, not the shell keyword).
    Time,
    /// A multi-call binary (`busybox`, `toybox`): the applet is argv[0]'s
    /// basename, or argv[1] when invoked under its own name.
    MultiCall,
    /// `ld-linux-x86-64.so.2`, `ld-2.31.so`, `ld-musl-*.so.1`, `ld64.so.2`, `ld.so`.
    DynamicLoader,
}

impl Wrapper {
    /// Recognise a wrapper by the program's basename (`.real` ignored).
    pub fn of(program: &ProgramName<'_>) -> Option<Wrapper> {
        let stem = program.stem();
        let wrapper = match stem {
            "env" => Wrapper::Env,
            "nice" => Wrapper::Nice,
            "ionice" => Wrapper::Ionice,
            "nohup" => Wrapper::Nohup,
            "timeout" => Wrapper::Timeout,
            "stdbuf" => Wrapper::Stdbuf,
            "setsid" => Wrapper::Setsid,
            "chrt" => Wrapper::Chrt,
            "taskset" => Wrapper::Taskset,
            "time" => Wrapper::Time,
            _ if is_multi_call_name(stem) => Wrapper::MultiCall,
            _ if is_dynamic_loader(stem) => Wrapper::DynamicLoader,
            _ => return None,
        };
        Some(wrapper)
    }
}

/// Whether the program at `path` is a dynamic loader, by its name.
pub(crate) fn names_a_loader(path: &str) -> bool {
    Wrapper::of(&ProgramName::exec(path)) == Some(Wrapper::DynamicLoader)
}

/// What the wrapper invoked with `argv` (argv[0] first) will run.
pub(crate) fn unwrap(wrapper: Wrapper, argv: &[String]) -> Result<Unwrapped, Unparsable> {
    let args: VecDeque<String> = argv.iter().skip(1).cloned().collect();
    match wrapper {
        Wrapper::Env => env(args),
        Wrapper::Nice => nice(args),
        Wrapper::Ionice => ionice(args),
        Wrapper::Nohup => simple(&NOHUP, args),
        Wrapper::Timeout => timeout(args),
        Wrapper::Stdbuf => simple(&STDBUF, args),
        Wrapper::Setsid => simple(&SETSID, args),
        Wrapper::Chrt => chrt(args),
        Wrapper::Taskset => taskset(args),
        Wrapper::Time => simple(&TIME, args),
        Wrapper::MultiCall => multi_call(argv),
        Wrapper::DynamicLoader => dynamic_loader(args),
    }
}

/// Where the multi-call binaries are installed: always in the identity
/// index, so a copy under any name is still one of them (a renamed busybox
/// still picks its applet by argv[0]).
const MULTI_CALL_PATHS: [&str; 6] = [
    "/usr/bin/busybox",
    "/bin/busybox",
    "/usr/sbin/busybox",
    "/sbin/busybox",
    "/usr/bin/toybox",
    "/bin/toybox",
];

/// Where each architecture's dynamic loaders are installed (glibc's in its
/// usual places, musl's), by the name `std::env::consts::ARCH` gives it. An
/// x86_64 kernel runs i386 programs too, so i386's loader is x86_64's.
const LOADER_PATHS: [(&str, &[&str]); 2] = [
    (
        "x86_64",
        &[
            "/lib64/ld-linux-x86-64.so.2",
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            "/usr/lib/ld-linux-x86-64.so.2",
            "/lib/ld-musl-x86_64.so.1",
            "/lib/ld-linux.so.2",
        ],
    ),
    (
        "aarch64",
        &[
            "/lib/ld-linux-aarch64.so.1",
            "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
            "/usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
            "/lib/ld-musl-aarch64.so.1",
        ],
    ),
];

/// What the identity index holds whatever the rules name, on a machine of
/// `arch`: the multi-call binaries and that architecture's dynamic loaders
/// (a renamed loader still loads). Another architecture's loader cannot run
/// there, so its directories are neither indexed nor watched; a loader is
/// still recognised by its name on any architecture (`Wrapper::of`).
pub(crate) fn always_indexed_on(arch: &str) -> impl Iterator<Item = &'static str> + '_ {
    MULTI_CALL_PATHS.into_iter().chain(
        LOADER_PATHS
            .iter()
            .filter(move |(a, _)| *a == arch)
            .flat_map(|(_, paths)| paths.iter().copied()),
    )
}

/// [`always_indexed_on`] this build's architecture.
pub(crate) fn always_indexed() -> impl Iterator<Item = &'static str> {
    always_indexed_on(std::env::consts::ARCH)
}
