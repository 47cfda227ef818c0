//! dpkg-divert, pointed at the root's database: the local diversions that keep package upgrades off the shim.

use super::*;
use std::process::Command;

/// dpkg-divert, pointed at the root's database.
pub(super) struct Dpkg {
    pub(super) root: PathBuf,
}

impl Dpkg {
    /// `Some` when the root has a dpkg database and dpkg-divert exists; says why not otherwise.
    pub(super) fn detect(root: &Path, out: &mut dyn Write) -> Option<Dpkg> {
        let admindir = in_root(root, "/var/lib/dpkg/status").ok()?;
        if !admindir.is_file() {
            writeln!(out, "no dpkg database in this root: no diversions needed").ok();
            return None;
        }
        match Command::new("dpkg-divert").arg("--version").output() {
            Ok(o) if o.status.success() => Some(Dpkg {
                root: root.to_path_buf(),
            }),
            _ => {
                writeln!(
                    out,
                    "warning: a dpkg database exists but dpkg-divert cannot be run: no diversion added, \
                     so a package upgrade may re-link /bin/sh (run `agentsh shim install` again after upgrades)"
                )
                .ok();
                None
            }
        }
    }

    pub(super) fn run(&self, args: &[&str]) -> Result<String, InstallError> {
        let mut cmd = Command::new("dpkg-divert");
        if self.root != Path::new("/") {
            cmd.arg("--root").arg(&self.root);
        }
        cmd.args(args);
        let o = cmd.output().map_err(io_err("running dpkg-divert"))?;
        if !o.status.success() {
            return Err(InstallError::Dpkg {
                args: args.join(" "),
                message: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// The path dpkg knows the file by: the one already diverted, else the
    /// one a package owns, else the first candidate. (On usr-merged Debian,
    /// packages may ship either `/bin/N` or `/usr/bin/N`.)
    pub(super) fn known_path(&self, candidates: &[String]) -> Result<String, InstallError> {
        for c in candidates {
            if !self.run(&["--listpackage", c])?.is_empty() {
                return Ok(c.clone());
            }
        }
        for c in candidates {
            let mut q = Command::new("dpkg-query");
            if self.root != Path::new("/") {
                q.arg("--root").arg(&self.root);
            }
            if q.args(["--search", c])
                .output()
                .is_ok_and(|o| o.status.success())
            {
                return Ok(c.clone());
            }
        }
        Ok(candidates.first().cloned().unwrap_or_default())
    }

    pub(super) fn divert(
        &self,
        paths: &ShellPaths,
        m: &mut Manifest,
        out: &mut dyn Write,
    ) -> Result<(), InstallError> {
        let path = self.known_path(&paths.dpkg_candidates())?;
        let to = format!("{path}.real");
        let diverter = self.run(&["--listpackage", &path])?;
        if diverter == "LOCAL" {
            let current = self.run(&["--truename", &path])?;
            if current == to {
                writeln!(out, "dpkg: local diversion {path} -> {to} already present").ok();
                if !m.diversions.iter().any(|(p, _)| *p == path) {
                    m.diversions.push((path, to));
                }
                return Ok(());
            }
            return Err(InstallError::Refused(format!(
                "a local dpkg diversion of {path} to {current} exists; remove it \
                 (`dpkg-divert --local --no-rename --remove {path}`) or restore {} first",
                paths.shown
            )));
        }
        if !diverter.is_empty() {
            let prior_to = self.run(&["--truename", &path])?;
            self.run(&["--package", &diverter, "--no-rename", "--remove", &path])?;
            m.prior_diversions
                .push((path.clone(), diverter.clone(), prior_to.clone()));
            writeln!(
                out,
                "dpkg: replaced the diversion {path} -> {prior_to} by {diverter} (restored on uninstall)"
            )
            .ok();
        }
        self.run(&["--local", "--no-rename", "--divert", &to, "--add", &path])?;
        m.diversions.push((path.clone(), to.clone()));
        writeln!(out, "dpkg: local diversion {path} -> {to}").ok();
        Ok(())
    }

    pub(super) fn undivert(&self, m: &Manifest, out: &mut dyn Write) -> Result<(), InstallError> {
        for (path, to) in &m.diversions {
            if self.run(&["--listpackage", path])? == "LOCAL" {
                self.run(&["--local", "--no-rename", "--divert", to, "--remove", path])?;
                writeln!(out, "dpkg: removed the local diversion {path} -> {to}").ok();
            }
        }
        for (path, pkg, to) in &m.prior_diversions {
            if self.run(&["--listpackage", path])?.is_empty() {
                self.run(&[
                    "--package",
                    pkg,
                    "--no-rename",
                    "--divert",
                    to,
                    "--add",
                    path,
                ])?;
                writeln!(out, "dpkg: restored the diversion {path} -> {to} by {pkg}").ok();
            }
        }
        Ok(())
    }
}
