//! Finding where a value sits in the policy text, for error messages.
//!
//! serde_yaml_ng reports locations for syntax and schema errors only; a bad
//! regex or a duplicate rule name is found after parsing. This module looks
//! the value up in the text: the top-level section, then the rule by its
//! `name:` (the n-th occurrence for duplicates), then the field inside that
//! rule, then the value in its plain, single- or double-quoted spelling.
//! It is best effort (block scalars, anchors and odd layouts may defeat it):
//! when the value is not found it falls back to the field, then the rule's
//! name line; the error message itself always names the rule.

use super::error::Location;

pub(crate) struct Source<'a> {
    lines: Vec<&'a str>,
}

/// A span of lines (0-based, end exclusive).
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

impl<'a> Source<'a> {
    pub fn new(text: &'a str) -> Source<'a> {
        Source {
            lines: text.lines().collect(),
        }
    }

    fn location(&self, line: usize, byte: usize) -> Location {
        let column = self.lines[line][..byte].chars().count() + 1;
        Location {
            line: line + 1,
            column,
        }
    }

    /// The lines of a top-level key's value (`key:` at column 0 up to the
    /// next top-level key), and the line of the key itself.
    fn section(&self, key: &str) -> Option<(usize, Span)> {
        let key_line = self
            .lines
            .iter()
            .position(|l| top_level_key(l) == Some(key))?;
        let end = (key_line + 1..self.lines.len())
            .find(|&i| top_level_key(self.lines[i]).is_some())
            .unwrap_or(self.lines.len());
        Some((
            key_line,
            Span {
                start: key_line,
                end,
            },
        ))
    }

    /// Where a top-level key is.
    pub fn key(&self, key: &str) -> Option<Location> {
        let (line, _) = self.section(key)?;
        Some(self.location(line, 0))
    }

    /// The `occurrence`-th (0-based) `name: NAME` inside `section`.
    fn name_line(&self, span: Span, name: &str, occurrence: usize) -> Option<(usize, usize)> {
        let mut seen = 0;
        for i in span.start..span.end {
            if let Some(pos) = find_field_value(self.lines[i], "name", name) {
                if seen == occurrence {
                    return Some((i, pos));
                }
                seen += 1;
            }
        }
        None
    }

    /// The lines of the list item that holds the line `line`: back to its
    /// `-`, forward to the next `-` at the same indentation.
    fn item_around(&self, span: Span, line: usize) -> Span {
        let indent_of = |l: &str| l.len() - l.trim_start().len();
        let name_indent = indent_of(self.lines[line]);
        // The item's `-` is on the name line itself, or above it, less indented.
        let start = (span.start..=line).rev().find(|&i| {
            let l = self.lines[i];
            l.trim_start().starts_with('-') && (i == line || indent_of(l) < name_indent)
        });
        let Some(start) = start else {
            return Span {
                start: line,
                end: span.end,
            };
        };
        let dash_col = indent_of(self.lines[start]);
        let end = (line + 1..span.end)
            .find(|&i| {
                let l = self.lines[i];
                let t = l.trim_start();
                !t.is_empty() && !t.starts_with('#') && indent_of(l) <= dash_col
            })
            .unwrap_or(span.end);
        Span { start, end }
    }

    /// The location of a rule's `name:` value in `section`.
    pub fn rule(&self, section: &str, name: &str, occurrence: usize) -> Option<Location> {
        let (_, span) = self.section(section)?;
        let (line, pos) = self.name_line(span, name, occurrence)?;
        Some(self.location(line, pos))
    }

    /// The location of `value` in `field` of the rule named `name` (its
    /// `occurrence`-th definition) in `section`; falls back to the field,
    /// then to the rule's name.
    pub fn rule_value(
        &self,
        section: &str,
        name: &str,
        occurrence: usize,
        field: &str,
        value: Option<&str>,
    ) -> Option<Location> {
        let (_, span) = self.section(section)?;
        let (name_line, name_pos) = self.name_line(span, name, occurrence)?;
        let item = self.item_around(span, name_line);
        self.value_in(item, field, value)
            .or_else(|| Some(self.location(name_line, name_pos)))
    }

    /// The location of `value` under a top-level key (for `internal_bypass`)
    /// or under `section.field` (for `syscalls.block`).
    pub fn section_value(
        &self,
        section: &str,
        field: Option<&str>,
        value: &str,
    ) -> Option<Location> {
        let (key_line, span) = self.section(section)?;
        match field {
            Some(field) => self.value_in(span, field, Some(value)),
            None => self.find_value(span, key_line, 0, value),
        }
        .or_else(|| Some(self.location(key_line, 0)))
    }

    /// Find `field:` in `span`, then `value` after it.
    fn value_in(&self, span: Span, field: &str, value: Option<&str>) -> Option<Location> {
        for i in span.start..span.end {
            if let Some(pos) = find_key(self.lines[i], field) {
                let Some(value) = value else {
                    return Some(self.location(i, pos));
                };
                return self
                    .find_value(span, i, pos, value)
                    .or_else(|| Some(self.location(i, pos)));
            }
        }
        None
    }

    /// The first spelling of `value` at or after (`line`, `byte`) in `span`.
    fn find_value(&self, span: Span, line: usize, byte: usize, value: &str) -> Option<Location> {
        let spellings = spellings(value);
        for i in line..span.end {
            let text = self.lines[i];
            let from = if i == line { byte } else { 0 };
            let found = spellings
                .iter()
                .filter_map(|(s, bare)| find_token(text, from, s, *bare))
                .min();
            if let Some(pos) = found {
                return Some(self.location(i, pos));
            }
        }
        None
    }
}

/// `Some(key)` when the line is `key:` (or `key: value`) at column 0.
fn top_level_key(line: &str) -> Option<&str> {
    let first = line.chars().next()?;
    if first.is_whitespace() || first == '#' || first == '-' {
        return None;
    }
    let (key, _) = line.split_once(':')?;
    Some(key.trim().trim_matches(|c| c == '"' || c == '\''))
}

/// `Option::is_none_or`, which is newer than the workspace's minimum Rust.
fn none_or(c: Option<char>, f: impl Fn(char) -> bool) -> bool {
    match c {
        None => true,
        Some(c) => f(c),
    }
}

fn is_key_boundary(c: char) -> bool {
    c.is_whitespace() || matches!(c, '{' | ',' | '-')
}

/// The byte offset of `field` used as a mapping key in `line`.
fn find_key(line: &str, field: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(rel) = line[from..].find(field) {
        let pos = from + rel;
        let before_ok = none_or(line[..pos].chars().next_back(), is_key_boundary);
        let after = line[pos + field.len()..].trim_start();
        if before_ok && after.starts_with(':') {
            return Some(pos);
        }
        from = pos + field.len();
    }
    None
}

/// The byte offset of `value` written as the value of `field:` in `line`.
fn find_field_value(line: &str, field: &str, value: &str) -> Option<usize> {
    let key = find_key(line, field)?;
    let colon = key + field.len() + line[key + field.len()..].find(':')?;
    spellings(value)
        .iter()
        .filter_map(|(s, bare)| find_token(line, colon + 1, s, *bare))
        .filter(|&pos| line[colon + 1..pos].trim().is_empty())
        .min()
}

/// How a scalar may be written: plain, single-quoted, double-quoted.
fn spellings(value: &str) -> Vec<(String, bool)> {
    let single = format!("'{}'", value.replace('\'', "''"));
    let double = format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""));
    vec![(value.to_string(), true), (single, false), (double, false)]
}

/// The byte offset of `token` in `line` at or after `from`; a plain
/// (`bare`) token must stand alone between YAML delimiters.
fn find_token(line: &str, from: usize, token: &str, bare: bool) -> Option<usize> {
    if token.is_empty() || from > line.len() {
        return None;
    }
    let mut start = from;
    while let Some(rel) = line.get(start..)?.find(token) {
        let pos = start + rel;
        if !bare {
            return Some(pos);
        }
        let before = line[..pos].chars().next_back();
        let after = line[pos + token.len()..].chars().next();
        let before_ok = none_or(before, |c| {
            c.is_whitespace() || matches!(c, '[' | ',' | '{' | ':')
        });
        let after_ok = none_or(after, |c| {
            c.is_whitespace() || matches!(c, ',' | ']' | '}' | '#')
        });
        if before_ok && after_ok {
            return Some(pos);
        }
        start = pos + token.len().max(1);
        while !line.is_char_boundary(start) {
            start += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
name: x
default: deny
command_rules:
  - name: first
    commands: [curl, \"/usr/bin/nc*\"]
    args_patterns: ['(a']
    decision: deny
  - commands:
      - wget
    name: second
    decision: allow
  - name: first
    commands: [ls]
    decision: allow
internal_bypass: [\"/usr/bin/agentsh-x\", /usr/lib/y]
syscalls:
  block: [keyctl, 'bad name']
";

    #[test]
    fn finds_values_where_they_are_written() {
        let src = Source::new(TEXT);
        let cases: &[(Option<Location>, (usize, usize))] = &[
            (src.rule("command_rules", "first", 0), (4, 11)),
            (src.rule("command_rules", "first", 1), (12, 11)),
            (src.rule("command_rules", "second", 0), (10, 11)),
            (
                src.rule_value(
                    "command_rules",
                    "first",
                    0,
                    "commands",
                    Some("/usr/bin/nc*"),
                ),
                (5, 22),
            ),
            (
                src.rule_value("command_rules", "first", 0, "args_patterns", Some("(a")),
                (6, 21),
            ),
            (
                src.rule_value("command_rules", "second", 0, "commands", Some("wget")),
                (9, 9),
            ),
            (
                src.rule_value("command_rules", "first", 1, "commands", Some("ls")),
                (13, 16),
            ),
            // Not found: the field, then the name.
            (
                src.rule_value("command_rules", "first", 1, "commands", Some("zz")),
                (13, 5),
            ),
            (
                src.rule_value("command_rules", "first", 1, "context", None),
                (12, 11),
            ),
            (
                src.section_value("internal_bypass", None, "/usr/lib/y"),
                (15, 41),
            ),
            (
                src.section_value("internal_bypass", None, "/usr/bin/agentsh-x"),
                (15, 19),
            ),
            (
                src.section_value("syscalls", Some("block"), "bad name"),
                (17, 19),
            ),
            (src.key("syscalls"), (16, 1)),
        ];
        for (i, (got, (line, column))) in cases.iter().enumerate() {
            assert_eq!(
                *got,
                Some(Location {
                    line: *line,
                    column: *column
                }),
                "case {i}"
            );
        }
        assert_eq!(src.rule("command_rules", "nope", 0), None);
        assert_eq!(src.rule("file_rules", "first", 0), None);
    }

    #[test]
    fn plain_tokens_need_delimiters() {
        assert_eq!(
            find_token("commands: [curlx, curl]", 0, "curl", true),
            Some(18)
        );
        assert_eq!(find_token("- ncat", 0, "nc", true), None);
        assert_eq!(find_token("x: 'it''s'", 0, "'it''s'", false), Some(3));
    }
}
