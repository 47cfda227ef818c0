//! The recipes of `docs/sdk-cookbook.md`, read from the page itself, and a
//! namespace laid out the way the package lays agentsh out, to run them in.
//!
//! A recipe is the fenced block that follows an HTML comment
//! `<!-- recipe: NAME -->` in the cookbook, so a test runs exactly what the
//! page tells users to run and the two cannot drift: editing a block changes
//! what the test runs; removing its marker fails the test.
//!
//! [`Installed`] is a private mount namespace ([`Namespace`], with writable
//! overlays over `/usr`, `/etc`, `/var/log`, `/var/lib` and a private `/run`)
//! holding the three binaries in `/usr/bin` and `/etc/agentsh` from the
//! repository, so the cookbook's commands (`agentsh ...`, default config,
//! default socket) run unchanged.
//!
//! Failure modes: a recipe that is missing, or a block that is not what the
//! caller expects, panics with what was looked for.

use crate::ns::Namespace;
use crate::server::bin;
use std::path::{Path, PathBuf};

fn page(doc: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(doc);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The fenced block after `<!-- recipe: NAME -->` in the cookbook, without
/// its fences.
pub fn recipe(name: &str) -> String {
    recipe_in("docs/sdk-cookbook.md", name)
}

/// The fenced block after `<!-- recipe: NAME -->` in `doc` (a path from
/// the repository's top), without its fences.
pub fn recipe_in(doc: &str, name: &str) -> String {
    let page = page(doc);
    let marker = format!("<!-- recipe: {name} -->");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("{doc} has no {marker}"));
    let rest = &page[at + marker.len()..];
    let open = rest
        .find("```")
        .unwrap_or_else(|| panic!("no fenced block after {marker}"));
    let body = &rest[open + 3..];
    let body = &body[body.find('\n').map_or(0, |i| i + 1)..];
    let close = body
        .find("```")
        .unwrap_or_else(|| panic!("unclosed block after {marker}"));
    body[..close].to_string()
}

/// The one non-empty line of a one-command recipe.
pub fn one_line(name: &str) -> String {
    let r = recipe(name);
    let lines: Vec<&str> = r.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 1, "recipe {name} is not one line: {r:?}");
    lines[0].to_string()
}

/// The JSON array of a Dockerfile instruction (`ENTRYPOINT`, `CMD`) in
/// recipe `name`.
pub fn dockerfile_array(name: &str, keyword: &str) -> Vec<String> {
    let r = recipe(name);
    let line = r
        .lines()
        .find_map(|l| l.trim().strip_prefix(keyword))
        .unwrap_or_else(|| panic!("recipe {name} has no {keyword}: {r}"));
    serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("recipe {name}: {keyword} is not exec form: {e}: {line}"))
}

/// The `agentsh ...` commands of recipe `name`'s `RUN` lines (continuation
/// lines joined, split at `&&`), as argv.
pub fn agentsh_run_commands(name: &str) -> Vec<Vec<String>> {
    let r = recipe(name).replace("\\\n", " ");
    r.lines()
        .filter_map(|l| l.trim().strip_prefix("RUN "))
        .flat_map(|cmds| cmds.split("&&").map(str::trim).map(str::to_string))
        .filter(|c| c.starts_with("agentsh "))
        .map(|c| c.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// A Dockerfile recipe's `RUN` commands, whole (continuation lines
/// joined), in order; panics unless its `COPY` lines copy exactly agentsh's
/// three binaries to `/usr/bin/` (what a test image holds).
pub fn dockerfile_runs(name: &str) -> Vec<String> {
    let r = recipe(name).replace("\\\n", " ");
    for l in r.lines().filter(|l| l.trim().starts_with("COPY ")) {
        assert_eq!(
            l.split_whitespace().collect::<Vec<_>>(),
            [
                "COPY",
                "agentsh",
                "agentsh-unixwrap",
                "agentsh-shell-shim",
                "/usr/bin/"
            ],
            "recipe {name}: a COPY the test image does not make"
        );
    }
    r.lines()
        .filter_map(|l| l.trim().strip_prefix("RUN "))
        .map(|c| c.trim().to_string())
        .collect()
}

/// A namespace with agentsh installed where the package installs it.
pub struct Installed {
    pub ns: Namespace,
}

impl Installed {
    /// Installs the binaries in `/usr/bin` and the repository's
    /// `etc/agentsh` in `/etc/agentsh` (root-owned, as packaged).
    pub fn new() -> Installed {
        let ns = Namespace::with_overlays(&["/var/log", "/var/lib"]);
        for b in ["agentsh", "agentsh-unixwrap", "agentsh-shell-shim"] {
            let to = ns.path(&format!("/usr/bin/{b}"));
            std::fs::copy(bin(b), &to).unwrap_or_else(|e| panic!("install {b}: {e}"));
        }
        let etc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../etc/agentsh");
        copy_tree(&etc, &ns.path("/etc/agentsh"));
        Installed { ns }
    }

    /// Runs `argv` (a recipe's command) as root inside; panics unless it
    /// succeeds.
    pub fn run_ok(&self, argv: &[String]) {
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = self
            .ns
            .run(&args, &[("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")]);
        assert!(
            out.status.success(),
            "{argv:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The default audit log's events.
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.ns.path("/var/log/agentsh/audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Where `p` (inside) is from outside.
    pub fn path(&self, p: &str) -> PathBuf {
        self.ns.path(p)
    }
}

impl Default for Installed {
    fn default() -> Self {
        Installed::new()
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("mkdir {}: {e}", to.display()));
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display())) {
        let e = e.unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest)
                .unwrap_or_else(|err| panic!("copy {}: {err}", e.path().display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookbooks_recipes_are_found() {
        assert_eq!(
            one_line("e2b-start"),
            "agentsh entrypoint -- sleep infinity"
        );
        assert_eq!(
            dockerfile_array("daytona-entrypoint", "ENTRYPOINT"),
            ["agentsh", "entrypoint", "--"]
        );
        assert_eq!(
            agentsh_run_commands("e2b-image"),
            vec![vec![
                "agentsh",
                "shim",
                "install",
                "--bash",
                "--programs",
                "sdk"
            ]]
        );
    }
}
