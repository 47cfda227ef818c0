//! The dynamic loader's variables on an SDK spawn run no code before the
//! filter: an `LD_PRELOAD` library's constructor and an `LD_AUDIT` module's
//! `la_version` record, wherever the loader runs them, what the kernel says
//! of the process at that moment (`Seccomp_filters`, `NoNewPrivs`, and
//! whether the agentsh marker answers). Every record must show the agentsh
//! filter in place; and the user's shell must get the variables back (its
//! constructor runs there, filtered). The shim and unixwrap are static-pie
//! and the shim keeps the variables from unixwrap anyway
//! (`AGENTSH_LOADER_ENV`). Needs root.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::sandbox::{Sandbox, AGENT_DEFAULT};
use agentsh_tests::sdk::Spawn;
use agentsh_tests::server::require_root;

/// Appends "<tag> exe=... filters=N nnp=N marker=0|1" to /srv/ws/records.
const RECORDER: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static void record(const char *tag) {
    char exe[512] = {0}, status[8192] = {0}, line[1024];
    readlink("/proc/self/exe", exe, sizeof exe - 1);
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd >= 0) { read(fd, status, sizeof status - 1); close(fd); }
    const char *f = strstr(status, "Seccomp_filters:");
    const char *n = strstr(status, "NoNewPrivs:");
    int filters = -1, nnp = -1;
    if (f) sscanf(f, "Seccomp_filters: %d", &filters);
    if (n) sscanf(n, "NoNewPrivs: %d", &nnp);
    errno = 0;
    int marker = prctl(0x41475348, 0x4d41524bUL, 0, 0, 0) == -1 && errno == 3377;
    int len = snprintf(line, sizeof line, "%s exe=%s filters=%d nnp=%d marker=%d\n", tag, exe, filters, nnp, marker);
    int out = open("/srv/ws/records", O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (out >= 0) { write(out, line, len); close(out); }
}
"#;

#[test]
fn ld_preload_ld_audit_and_glibc_tunables_run_no_code_before_the_filter() {
    if !require_root("ld_preload_ld_audit_and_glibc_tunables_run_no_code_before_the_filter") {
        return;
    }
    let mut sb = Sandbox::new(AGENT_DEFAULT, None);
    let root = sb.host_path("/srv/ws");
    let ws = |p: &str| root.join(p);
    std::fs::write(
        ws("preload.c"),
        format!("{RECORDER}\n__attribute__((constructor)) static void ctor(void) {{ record(\"preload\"); }}\n"),
    )
    .unwrap();
    std::fs::write(
        ws("audit.c"),
        format!("{RECORDER}\nunsigned int la_version(unsigned int v) {{ record(\"audit\"); return v; }}\n"),
    )
    .unwrap();
    for lib in ["preload", "audit"] {
        // cc runs outside any tree (setup), inside the namespace.
        sb.setup(&[
            "/usr/bin/cc",
            "-shared",
            "-fPIC",
            "-o",
            &format!("/srv/ws/lib{lib}.so"),
            &format!("/srv/ws/{lib}.c"),
        ]);
    }
    // Control: the libraries do record, outside agentsh (no filter, no marker).
    let out = sb.ns.run(
        &["/usr/bin/true"],
        &[
            ("LD_PRELOAD", "/srv/ws/libpreload.so"),
            ("LD_AUDIT", "/srv/ws/libaudit.so"),
        ],
    );
    assert!(out.status.success());
    let control = std::fs::read_to_string(ws("records")).unwrap_or_default();
    assert!(
        control.contains("preload exe=/usr/bin/true")
            && control.contains("audit exe=/usr/bin/true")
            && control.contains("marker=0"),
        "control records: {control}"
    );
    std::fs::remove_file(ws("records")).unwrap();

    let spawn = Spawn::argv(&[
        "/bin/sh",
        "-c",
        "echo \"shell sees LD_PRELOAD=$LD_PRELOAD LD_AUDIT=$LD_AUDIT GLIBC_TUNABLES=$GLIBC_TUNABLES\"; /usr/bin/true",
    ])
    .env("LD_PRELOAD", "/srv/ws/libpreload.so")
    .env("LD_AUDIT", "/srv/ws/libaudit.so")
    .env("GLIBC_TUNABLES", "glibc.malloc.check=3");
    let f = sb.spawn(&spawn);
    assert_eq!(f.code, Some(0), "{f:?}");
    assert!(
        f.stdout.contains(
            "shell sees LD_PRELOAD=/srv/ws/libpreload.so LD_AUDIT=/srv/ws/libaudit.so GLIBC_TUNABLES=glibc.malloc.check=3"
        ),
        "the user's shell must get the caller's variables back: {f:?}"
    );
    let records = std::fs::read_to_string(ws("records")).unwrap_or_default();
    let lines: Vec<&str> = records.lines().collect();
    // The user's shell (the real sh, exec'd by unixwrap) ran both, filtered;
    // so did what it ran.
    for tag in ["preload", "audit"] {
        assert!(
            // The real shell (its /proc/self/exe: dash or bash behind /usr/lib/agentsh/shells/sh).
            lines.iter().any(|l| l.starts_with(tag)
                && (l.contains("dash ") || l.contains("bash ") || l.contains("/shells/"))),
            "{tag} did not run in the user's shell: {records}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(tag) && l.contains("exe=/usr/bin/true")),
            "{tag} did not run in the shell's child: {records}"
        );
    }
    let before: Vec<&&str> = lines
        .iter()
        .filter(|l| !l.contains("marker=1") || l.contains("filters=0"))
        .collect();
    assert!(
        before.is_empty(),
        "code ran before the agentsh filter: {before:?}\nall: {records}"
    );
    assert!(
        !records.contains("agentsh-unixwrap") && !records.contains("agentsh-shell-shim"),
        "a loader ran in agentsh's own binaries: {records}"
    );
}
