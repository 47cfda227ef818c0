//! The shim and unixwrap run in every SDK-spawned shell before the seccomp
//! filter and Landlock exist: they must be static-pie (no dynamic loader, so
//! `LD_PRELOAD`/`LD_AUDIT` have nothing to load into them). The binaries the
//! tests run are the ones checked (bin() takes them from target/static/).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use agentsh_tests::server::{bin, STATIC_BINARIES};
use std::process::Command;

fn dynamic_section(path: &std::path::Path) -> String {
    let out = Command::new("readelf")
        .args(["-d", "-l", "-W"])
        .arg(path)
        .env("LC_ALL", "C")
        .output()
        .expect("readelf (binutils)");
    assert!(out.status.success(), "readelf {}: {out:?}", path.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn shim_and_unixwrap_are_static_pie_without_a_loader() {
    for name in STATIC_BINARIES {
        let text = dynamic_section(&bin(name));
        assert!(
            !text.contains("(NEEDED)"),
            "{name} needs shared libraries:\n{text}"
        );
        assert!(
            !text.contains("program interpreter"),
            "{name} asks for a dynamic loader:\n{text}"
        );
        // Position-independent (static-pie), so ASLR still applies.
        assert!(text.contains("DYN ("), "{name} is not PIE:\n{text}");
    }
    // The check itself sees a dynamic binary: the server links libseccomp.
    let server = dynamic_section(&bin("agentsh"));
    assert!(
        server.contains("(NEEDED)") && server.contains("libseccomp"),
        "{server}"
    );
}
