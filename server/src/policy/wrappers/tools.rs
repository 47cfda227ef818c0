//! The wrappers whose options GNU getopt parses (`env`, `nice`, `ionice`,
//! `nohup`, `timeout`, `stdbuf`, `setsid`, `chrt`, `taskset`, `time`): each
//! one's option spec and what it runs.
//!
//! Failure modes: an option a tool's spec does not list, a missing option
//! value, or an `env -S` string that cannot be split is [`Unparsable`]
//! (never a guess at which word is the payload).

use super::getopt::{Getopt, OptionSpec};
use super::payload::{payload, Unparsable, Unwrapped};
use std::collections::VecDeque;

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
pub(super) fn env(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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
pub(super) fn nice(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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
pub(super) fn ionice(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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

pub(super) const NOHUP: OptionSpec = OptionSpec {
    flags: "",
    with_arg: "",
    long_flags: HELP_VERSION,
    long_with_arg: &[],
    long_optional: &[],
};

pub(super) const STDBUF: OptionSpec = OptionSpec {
    flags: "",
    with_arg: "ioe",
    long_flags: HELP_VERSION,
    long_with_arg: &["input", "output", "error"],
    long_optional: &[],
};

pub(super) const SETSID: OptionSpec = OptionSpec {
    flags: "cfwhV",
    with_arg: "",
    long_flags: &["ctty", "fork", "wait", "help", "version"],
    long_with_arg: &[],
    long_optional: &[],
};

pub(super) const TIME: OptionSpec = OptionSpec {
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
pub(super) fn simple(spec: &OptionSpec, args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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
pub(super) fn timeout(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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
pub(super) fn chrt(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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
pub(super) fn taskset(args: VecDeque<String>) -> Result<Unwrapped, Unparsable> {
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
