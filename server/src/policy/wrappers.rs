//! Wrappers: programs that run another program named in their arguments
//! (`env`, `nice`, `timeout`, the dynamic loader, ...). The policy judges the
//! payload as well as the wrapper, so `env curl` cannot slip past a rule on
//! `curl`; for the dynamic loader this is the only check there is, because
//! `ld.so PROG` maps PROG without an execve of its own.
//!
//! Each wrapper's options are parsed the way the real tool parses them
//! (GNU getopt with `+`: options stop at the first operand; short options
//! cluster; `--` ends options; long options only spelt in full). An option
//! we do not know is an error, not a guess: guessing whether it takes an
//! argument could make us judge the wrong word as the payload. The caller
//! turns that error into a fail-closed verdict.

mod getopt;

use super::pattern::ProgramName;
use getopt::{Getopt, OptionSpec};
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

fn is_dynamic_loader(base: &str) -> bool {
    base == "ld.so"
        || base.starts_with("ld64.so")
        || (base.starts_with("ld-") && base.contains(".so"))
}

/// What a wrapper will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unwrapped {
    /// Nothing: it only reports or acts on other processes (`nice`, `ionice -p 42`).
    NoPayload,
    Payload {
        /// The program as the wrapper will look it up (a path or a bare name).
        program: String,
        /// Its argv, argv[0] first.
        argv: Vec<String>,
    },
}

/// Why a wrapper's arguments could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unparsable(pub String);

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

/// The payload from the operands left after options.
fn payload(operands: VecDeque<String>) -> Unwrapped {
    let argv: Vec<String> = operands.into();
    match argv.first() {
        Some(program) => Unwrapped::Payload {
            program: program.clone(),
            argv,
        },
        None => Unwrapped::NoPayload,
    }
}

const HELP_VERSION: &[&str] = &["help", "version"];

const ENV: OptionSpec = OptionSpec {
    flags: "0iv",
    with_arg: "uCS",
    long_flags: &[
        "ignore-environment",
        "null",
        "debug",
        "list-signal-handling",
        "help",
        "version",
    ],
    long_with_arg: &["unset", "chdir", "split-string"],
    long_optional: &["block-signal", "default-signal", "ignore-signal"],
};

/// `env [OPTION]... [-] [NAME=VALUE]... [COMMAND [ARG]...]`; `-S STRING`
/// splits STRING into words that are parsed in its place (options,
/// assignments and the command may all be in it, as in a shebang line).
fn env(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    let mut getopt = Getopt::new(&ENV, args);
    while let Some(opt) = getopt.next()? {
        if opt.is('S', "split-string") {
            let words = split_string(opt.value.as_deref().unwrap_or_default())?;
            getopt.push_front(words);
        }
    }
    let mut operands = getopt.args;
    if operands.front().map(String::as_str) == Some("-") {
        operands.pop_front();
    }
    while operands.front().is_some_and(|a| a.contains('=')) {
        operands.pop_front();
    }
    Ok(payload(operands))
}

/// Split an `env -S` string into words. Whitespace separates words; single
/// and double quotes group; a `#` starting a word comments out the rest.
/// Backslash escapes and `$` outside single quotes (`${VAR}` expansion) are
/// refused: what they produce depends on the environment or on escape rules
/// we would have to reproduce exactly, so the payload would not be knowable.
fn split_string(s: &str) -> Result<Vec<String>, Unparsable> {
    let refuse = |c: char| {
        Unparsable(format!(
            "`env -S` string {s:?} uses `{c}` (escapes and variable expansion are not supported)"
        ))
    };
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' | '$' => return Err(refuse(c)),
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some('\\') => return Err(refuse('\\')),
                        Some('$') if c == '"' => return Err(refuse('$')),
                        Some(other) => w.push(other),
                        None => {
                            return Err(Unparsable(format!(
                                "`env -S` string {s:?} has an unterminated {c} quote"
                            )))
                        }
                    }
                }
            }
            '#' if word.is_none() => break,
            c if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

const NICE: OptionSpec = OptionSpec {
    flags: "",
    with_arg: "n",
    long_flags: HELP_VERSION,
    long_with_arg: &["adjustment"],
    long_optional: &[],
};

/// `nice [-n N | -N | --adjustment=N] [COMMAND [ARG]...]`.
fn nice(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    let mut getopt = Getopt::new(&NICE, args);
    loop {
        // The historical `-N`, `--N`, `-+N` (checked before getopt, as nice does).
        if let Some(arg) = getopt.peek_whole() {
            let bytes = arg.as_bytes();
            let digit_at = if matches!(bytes.get(1), Some(b'-' | b'+')) {
                2
            } else {
                1
            };
            if bytes.first() == Some(&b'-') && bytes.get(digit_at).is_some_and(u8::is_ascii_digit) {
                getopt.skip_whole();
                continue;
            }
        }
        if getopt.next()?.is_none() {
            break;
        }
    }
    Ok(payload(getopt.args))
}

const IONICE: OptionSpec = OptionSpec {
    flags: "thV",
    with_arg: "cnpPu",
    long_flags: &["ignore", "help", "version"],
    long_with_arg: &["class", "classdata", "pid", "pgid", "uid"],
    long_optional: &[],
};

/// `ionice [-c C] [-n N] [-t] COMMAND...`, or `ionice ... -p PID...` (no command).
fn ionice(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    let mut targets_processes = false;
    let operands = Getopt::new(&IONICE, args).run(|opt| {
        if opt.is('p', "pid") || opt.is('P', "pgid") || opt.is('u', "uid") {
            targets_processes = true;
        }
        Ok(())
    })?;
    if targets_processes {
        return Ok(Unwrapped::NoPayload);
    }
    Ok(payload(operands))
}

const NOHUP: OptionSpec = OptionSpec {
    flags: "",
    with_arg: "",
    long_flags: HELP_VERSION,
    long_with_arg: &[],
    long_optional: &[],
};

const STDBUF: OptionSpec = OptionSpec {
    flags: "",
    with_arg: "ioe",
    long_flags: HELP_VERSION,
    long_with_arg: &["input", "output", "error"],
    long_optional: &[],
};

const SETSID: OptionSpec = OptionSpec {
    flags: "cfwhV",
    with_arg: "",
    long_flags: &["ctty", "fork", "wait", "help", "version"],
    long_with_arg: &[],
    long_optional: &[],
};

const TIME: OptionSpec = OptionSpec {
    flags: "apqvV",
    with_arg: "fo",
    long_flags: &[
        "append",
        "portability",
        "quiet",
        "verbose",
        "help",
        "version",
    ],
    long_with_arg: &["format", "output"],
    long_optional: &[],
};

/// Options, then the command.
fn simple(spec: &OptionSpec, args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    Ok(payload(Getopt::new(spec, args).run(|_| Ok(()))?))
}

const TIMEOUT: OptionSpec = OptionSpec {
    flags: "fpv",
    with_arg: "ks",
    long_flags: &[
        "foreground",
        "preserve-status",
        "verbose",
        "help",
        "version",
    ],
    long_with_arg: &["kill-after", "signal"],
    long_optional: &[],
};

/// `timeout [OPTION] DURATION COMMAND [ARG]...`.
fn timeout(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    let mut operands = Getopt::new(&TIMEOUT, args).run(|_| Ok(()))?;
    operands.pop_front(); // DURATION
    Ok(payload(operands))
}

const CHRT: OptionSpec = OptionSpec {
    flags: "abdefimoprRvhV",
    with_arg: "TPD",
    long_flags: &[
        "all-tasks",
        "batch",
        "deadline",
        "ext",
        "fifo",
        "idle",
        "other",
        "rr",
        "reset-on-fork",
        "max",
        "pid",
        "verbose",
        "help",
        "version",
    ],
    long_with_arg: &["sched-runtime", "sched-period", "sched-deadline"],
    long_optional: &[],
};

/// `chrt [OPTION] [PRIORITY] COMMAND [ARG]...`, or `chrt -p [PRIORITY] PID`
/// and `chrt -m` (no command). Newer chrt lets PRIORITY be omitted, so a
/// first operand that is not a number is taken as the command.
fn chrt(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    let mut no_command = false;
    let mut operands = Getopt::new(&CHRT, args).run(|opt| {
        if opt.is('p', "pid") || opt.is('m', "max") {
            no_command = true;
        }
        Ok(())
    })?;
    if no_command {
        return Ok(Unwrapped::NoPayload);
    }
    if operands.front().is_some_and(|p| is_integer(p)) {
        operands.pop_front();
    }
    Ok(payload(operands))
}

fn is_integer(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

const TASKSET: OptionSpec = OptionSpec {
    flags: "apchV",
    with_arg: "",
    long_flags: &["all-tasks", "pid", "cpu-list", "help", "version"],
    long_with_arg: &[],
    long_optional: &[],
};

/// `taskset [OPTION] MASK COMMAND [ARG]...`, or `taskset -p [MASK] PID`.
fn taskset(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
    let mut pid_mode = false;
    let mut operands = Getopt::new(&TASKSET, args).run(|opt| {
        if opt.is('p', "pid") {
            pid_mode = true;
        }
        Ok(())
    })?;
    if pid_mode {
        return Ok(Unwrapped::NoPayload);
    }
    operands.pop_front(); // MASK
    Ok(payload(operands))
}

/// Multi-call binaries: every applet is one file, chosen by argv[0].
pub(crate) const MULTI_CALL: [&str; 2] = ["busybox", "toybox"];

/// Where the multi-call binaries and the dynamic loaders are installed: they
/// are always in the identity index, so a copy under any name is still one
/// of them (a renamed loader still loads, a renamed busybox still picks its
/// applet by argv[0]).
pub(crate) const ALWAYS_INDEXED: [&str; 16] = [
    "/usr/bin/busybox",
    "/bin/busybox",
    "/usr/sbin/busybox",
    "/sbin/busybox",
    "/usr/bin/toybox",
    "/bin/toybox",
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
    "/usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
    "/lib/ld-linux.so.2",
    "/lib/ld-musl-x86_64.so.1",
    "/lib/ld-musl-aarch64.so.1",
    "/usr/lib/ld-linux-x86-64.so.2",
];

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
fn multi_call(argv: &[String]) -> Result<Unwrapped, Unparsable> {
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

/// `ld.so [OPTION]... PROGRAM [ARG]...` (glibc and musl). The loader takes
/// option values as separate words and knows no `--`.
fn dynamic_loader(mut args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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

#[cfg(test)]
#[path = "wrappers_tests.rs"]
mod tests;
