//! `agentsh man --dir DIR`: agentsh.1 and one page per subcommand, made
//! from the same clap definitions as `--help`.
//!
//! Failure modes: a page that cannot be rendered or written, or a directory
//! that cannot be made, is a [`ManError`] naming it (`agentsh: ...`, exit 1).

use super::command::Cli;
use crate::config::CONFIG_HELP;
use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// A man page that could not be written.
#[derive(Debug, thiserror::Error)]
pub(super) enum ManError {
    #[error("cannot render {page}: {source}")]
    Render {
        page: String,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// `agentsh man --dir DIR`: agentsh.1 plus agentsh-SUB[-SUB].1 for every subcommand.
pub(super) fn write_man_pages(dir: &Path) -> Result<(), ManError> {
    fn walk(cmd: clap::Command, name: String, dir: &Path) -> Result<(), ManError> {
        let cmd = cmd.name(name.clone());
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .render(&mut buf)
            .map_err(|source| ManError::Render {
                page: format!("{name}.1"),
                source,
            })?;
        std::fs::write(&path, buf).map_err(|source| ManError::Write {
            path: path.clone(),
            source,
        })?;
        for sub in cmd.get_subcommands() {
            // `help` is not a page of its own, nor is a hidden command.
            if sub.get_name() == "help" || sub.is_hide_set() {
                continue;
            }
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), dir)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir).map_err(|source| ManError::Dir {
        dir: dir.to_path_buf(),
        source,
    })?;
    // Without the `help` subcommands: SEE ALSO would name pages that are
    // not shipped (agentsh-help(1)).
    fn no_help(cmd: clap::Command) -> clap::Command {
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        names
            .into_iter()
            .fold(cmd.disable_help_subcommand(true), |c, n| {
                c.mut_subcommand(n, no_help)
            })
    }
    // The server's config keys as paragraphs: the terminal's table (keys,
    // defaults and text in columns) is wider than a man page (80 columns).
    let mut cmd = no_help(Cli::command()).mut_subcommand("server", |s| {
        s.after_help(config_help_paragraphs(CONFIG_HELP))
    });
    cmd.build();
    walk(cmd, "agentsh".into(), dir)
}

/// `CONFIG_HELP` (a table: key, default, text wrapped in a column) as one
/// paragraph per key, "KEY (default: VALUE): TEXT", for a page a man reader
/// fills to its width. Pure.
fn config_help_paragraphs(table: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in table.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match indent {
            // A key's first line: key, default, text, two spaces or more apart.
            2 => {
                let mut cols = text.splitn(2, "  ");
                let key = cols.next().unwrap_or("").trim();
                let rest = cols.next().unwrap_or("").trim_start();
                let (default, what) = match rest.split_once("  ") {
                    Some((d, w)) => (d.trim(), w.trim()),
                    None => (rest.trim(), ""),
                };
                out.push(format!("{key} (default: {default}): {what}"));
            }
            // The text's next line.
            i if i > 2 => match out.last_mut() {
                Some(p) => {
                    p.push(' ');
                    p.push_str(text);
                }
                None => out.push(text.to_string()),
            },
            _ => out.push(text.to_string()),
        }
    }
    out.join("\n\n")
}
