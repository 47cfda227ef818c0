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

use super::pattern::ProgramName;
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
            "busybox" | "toybox" => Wrapper::MultiCall,
            _ if is_dynamic_loader(stem) => Wrapper::DynamicLoader,
            _ => return None,
        };
        Some(wrapper)
    }
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

/// The options a wrapper accepts, GNU getopt_long style.
struct OptionSpec {
    /// Short options without an argument.
    flags: &'static str,
    /// Short options with a required argument.
    with_arg: &'static str,
    long_flags: &'static [&'static str],
    long_with_arg: &'static [&'static str],
    /// Long options with an optional argument (`--x` or `--x=V`, never `--x V`).
    long_optional: &'static [&'static str],
}

/// One parsed option: its name (`'u'` as `"u"`, or the long name) and value.
#[derive(Debug, PartialEq, Eq)]
struct Opt {
    name: String,
    value: Option<String>,
}

impl Opt {
    fn is(&self, short: char, long: &str) -> bool {
        let mut buf = [0u8; 4];
        self.name == *short.encode_utf8(&mut buf) || self.name == long
    }
}

/// A getopt that stops at the first operand (`+` mode).
struct Getopt<'s> {
    spec: &'s OptionSpec,
    args: VecDeque<String>,
    /// The rest of a short-option cluster (`-iu` after `-i`).
    cluster: Option<String>,
    done: bool,
}

impl<'s> Getopt<'s> {
    fn new(spec: &'s OptionSpec, args: VecDeque<String>) -> Getopt<'s> {
        Getopt {
            spec,
            args,
            cluster: None,
            done: false,
        }
    }

    /// The next whole argument, if we are between options (for syntaxes
    /// getopt does not know, like `nice -10`).
    fn peek_whole(&self) -> Option<&str> {
        if self.cluster.is_some() || self.done {
            return None;
        }
        self.args.front().map(String::as_str)
    }

    fn skip_whole(&mut self) {
        self.args.pop_front();
    }

    /// Put words back in front (`env -S`).
    fn push_front(&mut self, words: Vec<String>) {
        for w in words.into_iter().rev() {
            self.args.push_front(w);
        }
    }

    /// The next option, or `None` at the first operand or after `--`.
    fn next(&mut self) -> Result<Option<Opt>, Unparsable> {
        if let Some(rest) = self.cluster.take() {
            return self.short(rest).map(Some);
        }
        if self.done {
            return Ok(None);
        }
        let Some(arg) = self.args.front() else {
            return Ok(None);
        };
        if arg == "--" {
            self.args.pop_front();
            self.done = true;
            return Ok(None);
        }
        if let Some(long) = arg.strip_prefix("--") {
            let long = long.to_string();
            self.args.pop_front();
            return self.long(&long).map(Some);
        }
        if arg.len() > 1 && arg.starts_with('-') {
            let rest = arg[1..].to_string();
            self.args.pop_front();
            return self.short(rest).map(Some);
        }
        self.done = true;
        Ok(None)
    }

    fn short(&mut self, cluster: String) -> Result<Opt, Unparsable> {
        let mut chars = cluster.chars();
        let Some(c) = chars.next() else {
            return Err(Unparsable("empty option `-`".into()));
        };
        let rest: String = chars.collect();
        if self.spec.flags.contains(c) {
            if !rest.is_empty() {
                self.cluster = Some(rest);
            }
            return Ok(Opt {
                name: c.to_string(),
                value: None,
            });
        }
        if self.spec.with_arg.contains(c) {
            let value = if rest.is_empty() {
                self.args
                    .pop_front()
                    .ok_or_else(|| Unparsable(format!("option `-{c}` needs an argument")))?
            } else {
                rest
            };
            return Ok(Opt {
                name: c.to_string(),
                value: Some(value),
            });
        }
        Err(Unparsable(format!("unknown option `-{c}`")))
    }

    fn long(&mut self, text: &str) -> Result<Opt, Unparsable> {
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (text, None),
        };
        let spec = self.spec;
        if spec.long_flags.contains(&name) {
            if inline.is_some() {
                return Err(Unparsable(format!("option `--{name}` takes no argument")));
            }
            return Ok(Opt {
                name: name.into(),
                value: None,
            });
        }
        if spec.long_with_arg.contains(&name) {
            let value = match inline {
                Some(v) => v,
                None => self
                    .args
                    .pop_front()
                    .ok_or_else(|| Unparsable(format!("option `--{name}` needs an argument")))?,
            };
            return Ok(Opt {
                name: name.into(),
                value: Some(value),
            });
        }
        if spec.long_optional.contains(&name) {
            return Ok(Opt {
                name: name.into(),
                value: inline,
            });
        }
        Err(Unparsable(format!("unknown option `--{name}`")))
    }

    /// Parse every option, calling `on` for each; return the operands.
    fn run(
        mut self,
        mut on: impl FnMut(&Opt) -> Result<(), Unparsable>,
    ) -> Result<VecDeque<String>, Unparsable> {
        while let Some(opt) = self.next()? {
            on(&opt)?;
        }
        Ok(self.args)
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

/// `busybox APPLET [ARG]...`, or any name linked to it (`wget` -> busybox).
fn multi_call(argv: &[String]) -> Result<Unwrapped, Unparsable> {
    let Some(argv0) = argv.first() else {
        return Ok(Unwrapped::NoPayload);
    };
    let applet = ProgramName::payload(argv0).stem();
    if !(applet.starts_with("busybox") || applet.starts_with("toybox")) {
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
        Some(applet) => Ok(Unwrapped::Payload {
            program: applet.to_string(),
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
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// Expected outcome, written compactly: `Some("prog a b")` = payload
    /// with that argv, `None` = no payload, `Err(fragment)` = unparsable.
    type Want = Result<Option<&'static str>, &'static str>;

    fn check(wrapper: Wrapper, argv: Vec<String>, want: &Want) {
        let got = unwrap(wrapper, &argv);
        match (want, got) {
            (Ok(None), Ok(Unwrapped::NoPayload)) => {}
            (Ok(Some(p)), Ok(Unwrapped::Payload { program, argv: got })) => {
                let want_argv = words(p);
                assert_eq!(got, want_argv, "{argv:?}");
                assert_eq!(program, want_argv[0], "{argv:?}");
            }
            (Err(fragment), Err(Unparsable(why))) => {
                assert!(why.contains(fragment), "{argv:?}: {why}");
            }
            (want, got) => panic!("{argv:?}: want {want:?}, got {got:?}"),
        }
    }

    #[test]
    fn wrappers_yield_their_payload() {
        use Wrapper::*;
        let cases: &[(Wrapper, &str, Want)] = &[
            // env
            (Env, "env curl -s x", Ok(Some("curl -s x"))),
            (Env, "env", Ok(None)),
            (Env, "env -i curl", Ok(Some("curl"))),
            (Env, "env - curl", Ok(Some("curl"))),
            (Env, "env -u HOME -i A=1 B=2 curl x", Ok(Some("curl x"))),
            (Env, "env -uHOME curl", Ok(Some("curl"))),
            (Env, "env -iu HOME curl", Ok(Some("curl"))),
            (Env, "env --unset=HOME --unset PATH curl", Ok(Some("curl"))),
            (Env, "env -C /tmp curl", Ok(Some("curl"))),
            (Env, "env --chdir=/tmp -0 -v curl", Ok(Some("curl"))),
            (
                Env,
                "env --ignore-signal --default-signal=INT curl",
                Ok(Some("curl")),
            ),
            (Env, "env -- A=1 curl", Ok(Some("curl"))),
            (Env, "env -- -i", Ok(Some("-i"))),
            (Env, "env A=1", Ok(None)),
            (Env, "env -x curl", Err("unknown option `-x`")),
            (
                Env,
                "env --frobnicate curl",
                Err("unknown option `--frobnicate`"),
            ),
            (Env, "env --unse=X curl", Err("unknown option `--unse`")),
            (Env, "env -u", Err("needs an argument")),
            (Env, "env --null=1 curl", Err("takes no argument")),
            (Env, "env nice curl", Ok(Some("nice curl"))),
            // nice
            (Nice, "nice curl", Ok(Some("curl"))),
            (Nice, "nice", Ok(None)),
            (Nice, "nice -n 5 curl", Ok(Some("curl"))),
            (Nice, "nice -n5 curl", Ok(Some("curl"))),
            (Nice, "nice -10 curl", Ok(Some("curl"))),
            (Nice, "nice --10 curl", Ok(Some("curl"))),
            (Nice, "nice -+3 -n 2 curl", Ok(Some("curl"))),
            (Nice, "nice --adjustment=3 curl", Ok(Some("curl"))),
            (Nice, "nice --adjustment 3 curl", Ok(Some("curl"))),
            (Nice, "nice -- curl", Ok(Some("curl"))),
            (Nice, "nice -x curl", Err("unknown option")),
            // ionice
            (Ionice, "ionice -c 3 curl", Ok(Some("curl"))),
            (Ionice, "ionice -c2 -n7 -t curl x", Ok(Some("curl x"))),
            (Ionice, "ionice --class idle curl", Ok(Some("curl"))),
            (Ionice, "ionice -p 42", Ok(None)),
            (Ionice, "ionice -c 3 -p 42 43", Ok(None)),
            (Ionice, "ionice --pid=42", Ok(None)),
            (Ionice, "ionice -u 1000", Ok(None)),
            (Ionice, "ionice", Ok(None)),
            (Ionice, "ionice -z curl", Err("unknown option")),
            // nohup
            (Nohup, "nohup curl x", Ok(Some("curl x"))),
            (Nohup, "nohup -- curl", Ok(Some("curl"))),
            (Nohup, "nohup -n curl", Err("unknown option")),
            // timeout
            (Timeout, "timeout 5 curl x", Ok(Some("curl x"))),
            (Timeout, "timeout -s KILL -k 1 5s curl", Ok(Some("curl"))),
            (Timeout, "timeout -sKILL 5 curl", Ok(Some("curl"))),
            (
                Timeout,
                "timeout --signal=TERM --kill-after=2 --preserve-status --foreground -v 5 curl",
                Ok(Some("curl")),
            ),
            (Timeout, "timeout 5", Ok(None)),
            (Timeout, "timeout", Ok(None)),
            (Timeout, "timeout -- 5 curl", Ok(Some("curl"))),
            (Timeout, "timeout -x 5 curl", Err("unknown option")),
            (Timeout, "timeout -s", Err("needs an argument")),
            // stdbuf
            (Stdbuf, "stdbuf -oL -e 0 curl", Ok(Some("curl"))),
            (Stdbuf, "stdbuf --output=L -i 0 curl", Ok(Some("curl"))),
            (Stdbuf, "stdbuf -x curl", Err("unknown option")),
            // setsid
            (Setsid, "setsid -f curl", Ok(Some("curl"))),
            (Setsid, "setsid -cfw curl", Ok(Some("curl"))),
            (Setsid, "setsid --wait --ctty curl", Ok(Some("curl"))),
            (Setsid, "setsid -n curl", Err("unknown option")),
            // chrt
            (Chrt, "chrt 5 curl", Ok(Some("curl"))),
            (Chrt, "chrt -f 10 curl x", Ok(Some("curl x"))),
            (Chrt, "chrt --other curl", Ok(Some("curl"))),
            (
                Chrt,
                "chrt -d -T 1000 -P 2000 -D 2000 0 curl",
                Ok(Some("curl")),
            ),
            (Chrt, "chrt -p 42", Ok(None)),
            (Chrt, "chrt -f -p 10 42", Ok(None)),
            (Chrt, "chrt -m", Ok(None)),
            (Chrt, "chrt -z 1 curl", Err("unknown option")),
            // taskset
            (Taskset, "taskset 0x3 curl", Ok(Some("curl"))),
            (Taskset, "taskset -c 0,1 curl x", Ok(Some("curl x"))),
            (Taskset, "taskset -p 42", Ok(None)),
            (Taskset, "taskset -pc 0 42", Ok(None)),
            (Taskset, "taskset 0x3", Ok(None)),
            (Taskset, "taskset -x 1 curl", Err("unknown option")),
            // time
            (Time, "time curl", Ok(Some("curl"))),
            (Time, "time -v -o /tmp/t -f %e curl", Ok(Some("curl"))),
            (Time, "time --format=%e --append curl", Ok(Some("curl"))),
            (Time, "time -Z curl", Err("unknown option")),
            // multi-call binaries
            (MultiCall, "busybox wget x", Ok(Some("wget x"))),
            (MultiCall, "wget x", Ok(Some("wget x"))),
            (MultiCall, "toybox nc", Ok(Some("nc"))),
            (MultiCall, "busybox", Ok(None)),
            (MultiCall, "busybox --list", Ok(None)),
            (MultiCall, "busybox --bogus", Err("unknown option")),
            // dynamic loader
            (
                DynamicLoader,
                "/lib64/ld-linux-x86-64.so.2 /usr/bin/curl x",
                Ok(Some("/usr/bin/curl x")),
            ),
            (
                DynamicLoader,
                "ld.so --library-path /l --preload /p.so --inhibit-cache /usr/bin/curl",
                Ok(Some("/usr/bin/curl")),
            ),
            (
                DynamicLoader,
                "ld.so --audit a.so --inhibit-rpath x --glibc-hwcaps-mask y --verify curl",
                Ok(Some("curl")),
            ),
            (DynamicLoader, "ld.so --list ./a.out", Ok(Some("./a.out"))),
            (DynamicLoader, "ld.so --help", Ok(None)),
            (DynamicLoader, "ld.so", Ok(None)),
            (DynamicLoader, "ld.so --preload", Err("needs an argument")),
            (
                DynamicLoader,
                "ld.so --bogus /usr/bin/curl",
                Err("unknown option"),
            ),
            (
                DynamicLoader,
                "ld.so -- /usr/bin/curl",
                Err("unknown option"),
            ),
        ];
        for (wrapper, argv, want) in cases {
            check(*wrapper, words(argv), want);
        }
    }

    #[test]
    fn env_split_string_is_parsed_in_place() {
        let sv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cases: &[(Vec<String>, Want)] = &[
            // A shebang `#!/usr/bin/env -S python3 -u` arrives as one word.
            (
                sv(&["env", "-S python3 -u", "/w/s.py"]),
                Ok(Some("python3 -u /w/s.py")),
            ),
            (sv(&["env", "-S", "curl -s", "x"]), Ok(Some("curl -s x"))),
            (sv(&["env", "--split-string=-i A=1 curl"]), Ok(Some("curl"))),
            (sv(&["env", "-S", "-u HOME curl"]), Ok(Some("curl"))),
            (sv(&["env", "-S", "  "]), Ok(None)),
            (
                sv(&["env", "-S", "'cu''rl' \"-s\" # comment"]),
                Ok(Some("curl -s")),
            ),
            (sv(&["env", "-iS", "curl"]), Ok(Some("curl"))),
            (sv(&["env", "-S", "${X}"]), Err("variable expansion")),
            (sv(&["env", "-S", "curl \"$X\""]), Err("variable expansion")),
            (sv(&["env", "-S", "sh 'a\\b'"]), Err("escapes")),
            (sv(&["env", "-S", "cu\\rl"]), Err("escapes")),
            (sv(&["env", "-S", "'curl"]), Err("unterminated")),
            (sv(&["env", "-S", "-q curl"]), Err("unknown option `-q`")),
        ];
        for (argv, want) in cases {
            check(Wrapper::Env, argv.clone(), want);
        }
        // A word with a space from -S stays one word.
        let got = unwrap(Wrapper::Env, &sv(&["env", "-S", "sh -c 'echo hi'"])).unwrap();
        assert_eq!(
            got,
            Unwrapped::Payload {
                program: "sh".into(),
                argv: sv(&["sh", "-c", "echo hi"])
            }
        );
        // `$` is literal inside single quotes.
        let got = unwrap(Wrapper::Env, &sv(&["env", "-S", "sh -c 'echo $0' a"])).unwrap();
        assert_eq!(
            got,
            Unwrapped::Payload {
                program: "sh".into(),
                argv: sv(&["sh", "-c", "echo $0", "a"])
            }
        );
    }

    #[test]
    fn multi_call_applet_from_argv0_path() {
        assert_eq!(
            unwrap(Wrapper::MultiCall, &words("/bin/wget x")).unwrap(),
            Unwrapped::Payload {
                program: "wget".into(),
                argv: words("/bin/wget x"),
            }
        );
    }

    #[test]
    fn loader_argv0_replaces_payload_argv0() {
        let argv: Vec<String> = words("ld.so --argv0 wget /bin/busybox x");
        assert_eq!(
            unwrap(Wrapper::DynamicLoader, &argv).unwrap(),
            Unwrapped::Payload {
                program: "/bin/busybox".into(),
                argv: words("wget x"),
            }
        );
    }

    #[test]
    fn wrappers_are_recognised_by_basename() {
        let cases: &[(&str, Option<Wrapper>)] = &[
            ("/usr/bin/env", Some(Wrapper::Env)),
            ("env", Some(Wrapper::Env)),
            ("/usr/bin/env.real", Some(Wrapper::Env)),
            ("/usr/bin/nice", Some(Wrapper::Nice)),
            ("/usr/bin/ionice", Some(Wrapper::Ionice)),
            ("/usr/bin/nohup", Some(Wrapper::Nohup)),
            ("/usr/bin/timeout", Some(Wrapper::Timeout)),
            ("/usr/bin/stdbuf", Some(Wrapper::Stdbuf)),
            ("/usr/bin/setsid", Some(Wrapper::Setsid)),
            ("/usr/bin/chrt", Some(Wrapper::Chrt)),
            ("/usr/bin/taskset", Some(Wrapper::Taskset)),
            ("/usr/bin/time", Some(Wrapper::Time)),
            ("/bin/busybox", Some(Wrapper::MultiCall)),
            ("/lib64/ld-linux-x86-64.so.2", Some(Wrapper::DynamicLoader)),
            ("/lib/ld-linux-aarch64.so.1", Some(Wrapper::DynamicLoader)),
            ("/lib/ld-musl-x86_64.so.1", Some(Wrapper::DynamicLoader)),
            (
                "/lib/x86_64-linux-gnu/ld-2.31.so",
                Some(Wrapper::DynamicLoader),
            ),
            ("/lib64/ld64.so.2", Some(Wrapper::DynamicLoader)),
            ("/usr/bin/ld", None),
            ("/usr/bin/ld.gold", None),
            ("/usr/bin/envsubst", None),
            ("/usr/bin/curl", None),
        ];
        for (name, want) in cases {
            assert_eq!(Wrapper::of(&ProgramName::payload(name)), *want, "{name}");
        }
    }
}
