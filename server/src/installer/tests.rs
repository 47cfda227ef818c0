//! The installer's tests: throwaway roots laid out like Debian.

use super::*;
use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// A throwaway root laid out like usr-merged Debian: /bin -> usr/bin,
/// /usr/bin/sh -> dash, a regular /usr/bin/bash.
struct TestRoot {
    dir: PathBuf,
    shim: PathBuf,
}

impl TestRoot {
    fn new(tag: &str, dpkg: bool) -> TestRoot {
        let base =
            std::env::temp_dir().join(format!("agentsh-shim-install-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let dir = base.join("root");
        fs::create_dir_all(dir.join("usr/bin")).unwrap();
        fs::create_dir_all(dir.join("etc")).unwrap();
        symlink("usr/bin", dir.join("bin")).unwrap();
        fs::write(dir.join("usr/bin/dash"), b"\x7fELF fake dash").unwrap();
        fs::set_permissions(dir.join("usr/bin/dash"), fs::Permissions::from_mode(0o755)).unwrap();
        symlink("dash", dir.join("usr/bin/sh")).unwrap();
        fs::write(dir.join("usr/bin/bash"), b"\x7fELF fake bash").unwrap();
        fs::set_permissions(dir.join("usr/bin/bash"), fs::Permissions::from_mode(0o755)).unwrap();
        if dpkg {
            fs::create_dir_all(dir.join("var/lib/dpkg")).unwrap();
            fs::write(dir.join("var/lib/dpkg/status"), b"").unwrap();
            fs::write(
                dir.join("var/lib/dpkg/diversions"),
                b"/usr/share/man/man1/sh.1.gz\n/usr/share/man/man1/sh.distrib.1.gz\ndash\n/bin/sh\n/bin/sh.distrib\ndash\n",
            )
            .unwrap();
        }
        let shim = base.join("agentsh-shell-shim");
        write_shim(&shim, b"v1");
        TestRoot { dir, shim }
    }

    fn opts(&self, bash: bool) -> InstallOptions {
        InstallOptions {
            root: self.dir.clone(),
            bash,
            programs: Vec::new(),
            shim_binary: self.shim.clone(),
        }
    }

    fn install(&self, bash: bool) -> String {
        let mut out = Vec::new();
        install(&self.opts(bash), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn uninstall(&self) -> String {
        let mut out = Vec::new();
        uninstall(&self.dir, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Every entry: type, mode, owner, content or link target.
    fn snapshot(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        walk(&self.dir, &self.dir, &mut m);
        m
    }

    fn dpkg(&self, args: &[&str]) -> String {
        let o = Command::new("dpkg-divert")
            .arg("--root")
            .arg(&self.dir)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        if let Some(base) = self.dir.parent() {
            let _ = fs::remove_dir_all(base);
        }
    }
}

fn write_shim(p: &Path, version: &[u8]) {
    let mut b = b"\x7fELF fake shim ".to_vec();
    b.extend_from_slice(SHIM_MARKER);
    b.extend_from_slice(version);
    fs::write(p, b).unwrap();
}

fn walk(root: &Path, dir: &Path, m: &mut BTreeMap<String, String>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let md = fs::symlink_metadata(&p).unwrap();
        let head = format!("{:o} {}:{}", md.mode(), md.uid(), md.gid());
        if md.file_type().is_symlink() {
            m.insert(
                rel,
                format!("{head} -> {}", fs::read_link(&p).unwrap().display()),
            );
        } else if md.is_dir() {
            m.insert(rel, format!("{head} dir"));
            walk(root, &p, m);
        } else {
            m.insert(rel, format!("{head} {:?}", fs::read(&p).unwrap()));
        }
    }
}

fn dpkg_available() -> bool {
    Command::new("dpkg-divert")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn install_puts_the_shim_in_place_and_keeps_the_original() {
    let r = TestRoot::new("layout", false);
    let out = r.install(true);
    let bin = r.dir.join("usr/bin");
    assert!(
        contains(&fs::read(bin.join("sh")).unwrap(), SHIM_MARKER),
        "{out}"
    );
    assert!(contains(&fs::read(bin.join("bash")).unwrap(), SHIM_MARKER));
    assert_eq!(
        fs::read_link(bin.join("sh.real")).unwrap(),
        Path::new("dash")
    );
    assert_eq!(
        fs::read(bin.join("bash.real")).unwrap(),
        b"\x7fELF fake bash"
    );
    let shells = r.dir.join("usr/lib/agentsh/shells");
    assert_eq!(
        fs::read_link(shells.join("sh")).unwrap(),
        Path::new("/bin/sh.real")
    );
    assert_eq!(
        fs::read_link(shells.join("bash")).unwrap(),
        Path::new("/bin/bash.real")
    );
    let conf = r.dir.join("etc/agentsh/shim.conf");
    assert_eq!(fs::read_to_string(&conf).unwrap(), DEFAULT_SHIM_CONF);
    assert_eq!(fs::metadata(&conf).unwrap().mode() & 0o7777, 0o644);
    assert!(fs::metadata(bin.join("sh")).unwrap().mode() & 0o111 != 0);
    let st = status(&r.dir).unwrap();
    assert!(st.installed_and_consistent, "{}", st.report);
}

#[test]
fn second_install_is_a_noop_that_says_so() {
    let r = TestRoot::new("idem", false);
    r.install(true);
    let before = r.snapshot();
    let out = r.install(true);
    assert!(out.contains("nothing to do: already installed"), "{out}");
    assert_eq!(r.snapshot(), before);
}

#[test]
fn uninstall_restores_the_root_byte_for_byte() {
    let r = TestRoot::new("restore", false);
    let before = r.snapshot();
    r.install(true);
    assert_ne!(r.snapshot(), before);
    let out = r.uninstall();
    assert_eq!(r.snapshot(), before, "{out}");
    let out = r.uninstall();
    assert!(out.contains("nothing to do"), "{out}");
}

#[test]
fn a_newer_shim_binary_replaces_the_installed_one() {
    let r = TestRoot::new("update", false);
    r.install(false);
    write_shim(&r.shim, b"v2");
    let out = r.install(false);
    assert!(out.contains("updated the shim binary"), "{out}");
    assert_eq!(
        fs::read(r.dir.join("usr/bin/sh")).unwrap(),
        fs::read(&r.shim).unwrap()
    );
    assert_eq!(
        fs::read_link(r.dir.join("usr/bin/sh.real")).unwrap(),
        Path::new("dash")
    );
}

#[test]
fn an_edited_shim_conf_survives_uninstall() {
    let r = TestRoot::new("conf", false);
    r.install(false);
    let conf = r.dir.join("etc/agentsh/shim.conf");
    fs::write(&conf, "shim_install=on\n").unwrap();
    let out = r.uninstall();
    assert!(out.contains("kept /etc/agentsh/shim.conf"), "{out}");
    assert_eq!(fs::read_to_string(&conf).unwrap(), "shim_install=on\n");
}

#[test]
fn refuses_a_binary_that_is_not_the_shim() {
    let r = TestRoot::new("notshim", false);
    fs::write(&r.shim, b"\x7fELF something else").unwrap();
    let mut out = Vec::new();
    let e = install(&r.opts(false), &mut out).unwrap_err().to_string();
    assert!(e.contains("not an agentsh-shell-shim binary"), "{e}");
    assert_eq!(
        fs::read_link(r.dir.join("usr/bin/sh")).unwrap(),
        Path::new("dash")
    );
}

#[test]
fn refuses_when_something_replaced_the_shim_after_install() {
    let r = TestRoot::new("conflict", false);
    r.install(false);
    let sh = r.dir.join("usr/bin/sh");
    fs::remove_file(&sh).unwrap();
    symlink("dash", &sh).unwrap();
    let mut out = Vec::new();
    let e = install(&r.opts(false), &mut out).unwrap_err().to_string();
    assert!(e.contains("not the agentsh shim"), "{e}");
    let e = uninstall(&r.dir, &mut out).unwrap_err().to_string();
    assert!(e.contains("not touching /bin/sh"), "{e}");
    assert!(!status(&r.dir).unwrap().installed_and_consistent);
}

#[test]
fn missing_bash_is_refused_before_anything_changes() {
    let r = TestRoot::new("nobash", false);
    fs::remove_file(r.dir.join("usr/bin/bash")).unwrap();
    let before = r.snapshot();
    let mut out = Vec::new();
    let e = install(&r.opts(true), &mut out).unwrap_err().to_string();
    assert!(e.contains("/bin/bash does not exist"), "{e}");
    assert_eq!(r.snapshot(), before);
}

#[test]
fn paths_resolve_inside_the_root() {
    let r = TestRoot::new("resolve", false);
    // An absolute symlink must not escape to this machine's /usr.
    symlink("/usr/bin", r.dir.join("abs")).unwrap();
    assert_eq!(
        in_root(&r.dir, "/abs/sh").unwrap(),
        r.dir.join("usr/bin/sh")
    );
    assert_eq!(
        in_root(&r.dir, "/bin/sh").unwrap(),
        r.dir.join("usr/bin/sh")
    );
    assert_eq!(
        in_root(&r.dir, "/../../bin/x").unwrap(),
        r.dir.join("usr/bin/x")
    );
    symlink("loop", r.dir.join("loop")).unwrap();
    assert!(in_root(&r.dir, "/loop/x").is_err());
}

#[test]
fn dpkg_diversion_is_made_local_and_restored() {
    if !dpkg_available() {
        eprintln!("SKIP: dpkg-divert is not installed");
        return;
    }
    let r = TestRoot::new("dpkg", true);
    let before = r.snapshot();
    let diversions_before = diversion_set(&r);
    let out = r.install(true);
    assert!(
        out.contains("replaced the diversion /bin/sh -> /bin/sh.distrib by dash"),
        "{out}"
    );
    assert_eq!(r.dpkg(&["--listpackage", "/bin/sh"]), "LOCAL");
    assert_eq!(r.dpkg(&["--truename", "/bin/sh"]), "/bin/sh.real");
    assert_eq!(r.dpkg(&["--truename", "/bin/bash"]), "/bin/bash.real");
    let out = r.install(true);
    assert!(out.contains("nothing to do"), "{out}");
    r.uninstall();
    assert_eq!(r.dpkg(&["--listpackage", "/bin/sh"]), "dash");
    assert_eq!(r.dpkg(&["--truename", "/bin/sh"]), "/bin/sh.distrib");
    assert_eq!(r.dpkg(&["--listpackage", "/bin/bash"]), "");
    // dpkg rewrites its diversions file in its own order and keeps a
    // -old copy: compare the database by meaning, everything else by bytes.
    assert_eq!(diversion_set(&r), diversions_before);
    let strip = |mut m: BTreeMap<String, String>| {
        m.remove("var/lib/dpkg/diversions");
        m.remove("var/lib/dpkg/diversions-old");
        m
    };
    assert_eq!(strip(r.snapshot()), strip(before));
}

fn diversion_set(r: &TestRoot) -> std::collections::BTreeSet<Vec<String>> {
    let t = fs::read_to_string(r.dir.join("var/lib/dpkg/diversions")).unwrap();
    let lines: Vec<String> = t.lines().map(str::to_string).collect();
    lines
        .chunks(3)
        .map(<[std::string::String]>::to_vec)
        .collect()
}

#[test]
fn manifest_round_trips() {
    let m = Manifest {
        created_dirs: vec!["/usr/lib/agentsh".into()],
        created_conf: true,
        admin_shell: true,
        shells: vec!["sh".into(), "bash".into()],
        programs: vec!["/usr/bin/python3.11".into()],
        diversions: vec![("/bin/sh".into(), "/bin/sh.real".into())],
        prior_diversions: vec![("/bin/sh".into(), "dash".into(), "/bin/sh.distrib".into())],
    };
    assert_eq!(Manifest::parse(&m.render()).unwrap(), m);
    assert!(Manifest::parse("shell zsh\n").is_err());
    assert!(Manifest::parse("program python3\n").is_err());
}

/// [`TestRoot`] with Debian's python layout (`python3 -> python3.11`,
/// `python -> python3`) and a `perl`.
fn with_programs(tag: &str, dpkg: bool) -> TestRoot {
    let r = TestRoot::new(tag, dpkg);
    let bin = r.dir.join("usr/bin");
    for (name, bytes) in [
        ("python3.11", &b"\x7fELF fake python"[..]),
        ("perl", b"\x7fELF fake perl"),
    ] {
        fs::write(bin.join(name), bytes).unwrap();
        fs::set_permissions(bin.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
    symlink("python3.11", bin.join("python3")).unwrap();
    symlink("python3", bin.join("python")).unwrap();
    r
}

fn install_programs(r: &TestRoot, programs: &[&str]) -> Result<String, InstallError> {
    let mut out = Vec::new();
    let opts = InstallOptions {
        programs: programs.iter().map(|p| (*p).to_string()).collect(),
        ..r.opts(false)
    };
    install(&opts, &mut out).map(|()| String::from_utf8(out).unwrap())
}

#[test]
fn a_program_gets_the_shim_at_its_own_file_and_every_name_of_it_leads_there() {
    let r = with_programs("programs", false);
    let before = r.snapshot();
    // `sdk`: python3 and python are one file; node is absent, said.
    let out = install_programs(&r, &["sdk", "perl"]).unwrap();
    assert!(out.contains("node: not in this root, skipped"), "{out}");
    let bin = r.dir.join("usr/bin");
    for p in ["python3.11", "perl"] {
        assert!(
            contains(&fs::read(bin.join(p)).unwrap(), SHIM_MARKER),
            "{p}: {out}"
        );
    }
    assert_eq!(
        fs::read(bin.join("python3.11.real")).unwrap(),
        b"\x7fELF fake python"
    );
    assert_eq!(
        fs::read_link(bin.join("python3")).unwrap(),
        Path::new("python3.11")
    );
    let programs = r.dir.join("usr/lib/agentsh/programs");
    assert_eq!(
        fs::read_link(programs.join("python3.11")).unwrap(),
        Path::new("/usr/bin/python3.11.real")
    );
    let m = read_manifest(&r.dir).unwrap().unwrap();
    assert_eq!(m.programs, ["/usr/bin/python3.11", "/usr/bin/perl"]);
    let st = status(&r.dir).unwrap();
    assert!(st.installed_and_consistent, "{}", st.report);
    assert!(
        st.report.contains(
            "/usr/bin/python3.11: agentsh-shell-shim; real program /usr/bin/python3.11.real"
        ) && st
            .report
            .contains("/usr/lib/agentsh/programs/python3.11 ok"),
        "{}",
        st.report
    );
    let said = coverage(&r.dir).join("\n");
    assert!(
        said.contains("programs run without a shell: /usr/bin/python3.11, /usr/bin/perl")
            && said.contains("NOT supervised: any other program"),
        "{said}"
    );
    // Installing again, without naming them, keeps them; a newer shim
    // reaches them too.
    let out = install_programs(&r, &[]).unwrap();
    assert!(out.contains("nothing to do"), "{out}");
    write_shim(&r.shim, b"v2");
    let out = install_programs(&r, &[]).unwrap();
    assert!(
        out.contains("/usr/bin/perl: updated the shim binary"),
        "{out}"
    );
    assert_eq!(
        fs::read(bin.join("perl")).unwrap(),
        fs::read(&r.shim).unwrap()
    );
    // Uninstall: byte for byte.
    let out = r.uninstall();
    assert!(
        out.contains("/usr/bin/python3.11: original restored"),
        "{out}"
    );
    assert_eq!(r.snapshot(), before, "{out}");
}

#[test]
fn programs_the_shim_cannot_stand_in_for_are_refused_before_anything_changes() {
    let r = with_programs("badprograms", false);
    fs::create_dir_all(r.dir.join("usr/local/bin")).unwrap();
    fs::write(r.dir.join("usr/local/bin/perl"), b"other perl").unwrap();
    fs::set_permissions(
        r.dir.join("usr/local/bin/perl"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fs::write(r.dir.join("usr/bin/agentsh"), b"agentsh").unwrap();
    fs::write(r.dir.join("usr/bin/notes"), b"not executable").unwrap();
    let before = r.snapshot();
    for (asked, says) in [
        (&["ruby"][..], "ruby: no such program"),
        (&["sh"], "is a shell"),
        (&["/bin/bash"], "is a shell"),
        (&["agentsh"], "agentsh's own"),
        (
            &["/usr/local/bin/perl", "/usr/bin/perl"],
            "have one name, perl",
        ),
        (&["/usr/bin/notes"], "not an executable file"),
        (&["bin/perl"], "a name (python3) or an absolute path"),
    ] {
        let e = install_programs(&r, asked).unwrap_err().to_string();
        assert!(e.contains(says), "{asked:?}: {e}");
        assert_eq!(r.snapshot(), before, "{asked:?} changed the root");
    }
}

#[test]
fn a_program_diversion_is_local_and_removed_on_uninstall() {
    if !dpkg_available() {
        eprintln!("SKIP: dpkg-divert is not installed");
        return;
    }
    let r = with_programs("dpkgprograms", true);
    let diversions_before = diversion_set(&r);
    install_programs(&r, &["python3"]).unwrap();
    assert_eq!(r.dpkg(&["--listpackage", "/usr/bin/python3.11"]), "LOCAL");
    assert_eq!(
        r.dpkg(&["--truename", "/usr/bin/python3.11"]),
        "/usr/bin/python3.11.real"
    );
    r.uninstall();
    assert_eq!(r.dpkg(&["--listpackage", "/usr/bin/python3.11"]), "");
    assert_eq!(diversion_set(&r), diversions_before);
}
