//! The install manifest: what `install` created, so `uninstall` removes exactly that.
//!
//! Failure modes: a line that is none of those `install` writes makes the
//! manifest [`Damaged`]; the installer then refuses and asks for a restore by
//! hand rather than guess what to remove.

/// A manifest line that is none of those `install` writes.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: unexpected {text:?}")]
pub(super) struct Damaged {
    pub(super) line: usize,
    pub(super) text: String,
}

/// What `install` recorded, one entry per line of the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Manifest {
    /// Directories created, in creation order (inside the root).
    pub(super) created_dirs: Vec<String>,
    /// shim.conf was written by install (removed on uninstall if unchanged).
    pub(super) created_conf: bool,
    /// The admin's shell (`/usr/lib/agentsh/admin-shell`) was installed.
    pub(super) admin_shell: bool,
    /// Shells installed (`sh`, `bash`).
    pub(super) shells: Vec<String>,
    /// Programs installed (`--programs`), each by its own file's path.
    pub(super) programs: Vec<String>,
    /// Local diversions added: (diverted path, divert-to).
    pub(super) diversions: Vec<(String, String)>,
    /// Package diversions replaced: (path, package, divert-to), restored on uninstall.
    pub(super) prior_diversions: Vec<(String, String, String)>,
}

impl Manifest {
    pub(super) fn render(&self) -> String {
        let mut s = String::from(
            "# Written by `agentsh shim install`; read by `agentsh shim uninstall`. Do not edit.\n",
        );
        for d in &self.created_dirs {
            s += &format!("created-dir {d}\n");
        }
        if self.created_conf {
            s += "created-conf\n";
        }
        if self.admin_shell {
            s += "admin-shell\n";
        }
        for sh in &self.shells {
            s += &format!("shell {sh}\n");
        }
        for p in &self.programs {
            s += &format!("program {p}\n");
        }
        for (p, to) in &self.diversions {
            s += &format!("diversion {p} {to}\n");
        }
        for (p, pkg, to) in &self.prior_diversions {
            s += &format!("prior-diversion {p} {pkg} {to}\n");
        }
        s
    }

    pub(super) fn parse(text: &str) -> Result<Manifest, Damaged> {
        let mut m = Manifest::default();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["created-dir", d] => m.created_dirs.push(d.to_string()),
                ["created-conf"] => m.created_conf = true,
                ["admin-shell"] => m.admin_shell = true,
                ["shell", s] if *s == "sh" || *s == "bash" => m.shells.push(s.to_string()),
                ["program", p] if p.starts_with('/') && !p.ends_with('/') => {
                    m.programs.push(p.to_string());
                }
                ["diversion", p, to] => m.diversions.push((p.to_string(), to.to_string())),
                ["prior-diversion", p, pkg, to] => {
                    m.prior_diversions
                        .push((p.to_string(), pkg.to_string(), to.to_string()));
                }
                _ => {
                    return Err(Damaged {
                        line: i + 1,
                        text: line.to_string(),
                    })
                }
            }
        }
        Ok(m)
    }
}
