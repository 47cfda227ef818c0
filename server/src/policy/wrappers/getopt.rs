//! A getopt_long that stops at the first operand (GNU `+` mode), for the
//! wrappers' options: short options cluster, `--` ends options, long options
//! only spelt in full, and an option not in the spec is an error, never a guess.

use super::payload::Unparsable;
use std::collections::VecDeque;

/// The options a wrapper accepts, GNU getopt_long style.
pub(super) struct OptionSpec {
    /// Short options without an argument.
    pub(super) flags: &'static str,
    /// Short options with a required argument.
    pub(super) with_arg: &'static str,
    pub(super) long_flags: &'static [&'static str],
    pub(super) long_with_arg: &'static [&'static str],
    /// Long options with an optional argument (`--x` or `--x=V`, never `--x V`).
    pub(super) long_optional: &'static [&'static str],
}

/// One parsed option: its name (`'u'` as `"u"`, or the long name) and value.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Opt {
    pub(super) name: String,
    pub(super) value: Option<String>,
}

impl Opt {
    pub(super) fn is(&self, short: char, long: &str) -> bool {
        let mut buf = [0u8; 4];
        self.name == *short.encode_utf8(&mut buf) || self.name == long
    }
}

/// A getopt that stops at the first operand (`+` mode).
pub(super) struct Getopt<'s> {
    pub(super) spec: &'s OptionSpec,
    pub(super) args: VecDeque<String>,
    /// The rest of a short-option cluster (`-iu` after `-i`).
    pub(super) cluster: Option<String>,
    pub(super) done: bool,
}

impl<'s> Getopt<'s> {
    pub(super) fn new(spec: &'s OptionSpec, args: VecDeque<String>) -> Getopt<'s> {
        Getopt {
            spec,
            args,
            cluster: None,
            done: false,
        }
    }

    /// The next whole argument, if we are between options (for syntaxes
    /// getopt does not know, like `nice -10`).
    pub(super) fn peek_whole(&self) -> Option<&str> {
        if self.cluster.is_some() || self.done {
            return None;
        }
        self.args.front().map(String::as_str)
    }

    pub(super) fn skip_whole(&mut self) {
        self.args.pop_front();
    }

    /// Put words back in front (`env -S`).
    pub(super) fn push_front(&mut self, words: Vec<String>) {
        for w in words.into_iter().rev() {
            self.args.push_front(w);
        }
    }

    /// The next option, or `None` at the first operand or after `--`.
    pub(super) fn next(&mut self) -> Result<Option<Opt>, Unparsable> {
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

    pub(super) fn short(&mut self, cluster: String) -> Result<Opt, Unparsable> {
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

    pub(super) fn long(&mut self, text: &str) -> Result<Opt, Unparsable> {
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
    pub(super) fn run(
        mut self,
        mut on: impl FnMut(&Opt) -> Result<(), Unparsable>,
    ) -> Result<VecDeque<String>, Unparsable> {
        while let Some(opt) = self.next()? {
            on(&opt)?;
        }
        Ok(self.args)
    }
}
