//! The house's own checks can fail: `.ci/import-graph.py` run on a copy of
//! `server/src` with one bad import added must fail CI and name the import
//! (an arrow running back up, a circle, a room with no layer), and passes on
//! the copy as it is. No root needed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a directory of the copy");
    for e in std::fs::read_dir(from).expect("server/src's folder") {
        let e = e.expect("a directory entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("its type").is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("a file copied");
        }
    }
}

/// `server/src` copied, `edit` applied to it; the script's exit status and
/// output.
fn graph_of(edit: impl FnOnce(&Path)) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!(
        "agentsh-house-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_nanos()
    ));
    let src = dir.join("src");
    copy_tree(&repo().join("server/src"), &src);
    edit(&src);
    let out = Command::new("python3")
        .arg(repo().join(".ci/import-graph.py"))
        .arg("--root")
        .arg(&src)
        .output()
        .expect("python3 runs .ci/import-graph.py");
    let _ = std::fs::remove_dir_all(&dir);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn append(file: &Path, line: &str) {
    let mut text = std::fs::read_to_string(file).expect("a source file");
    // Above any inline test module (the script does not read those).
    let at = text.find("#[cfg(test)]").unwrap_or(text.len());
    text.insert_str(at, &format!("{line}\n"));
    std::fs::write(file, text).expect("the source file written");
}

#[test]
fn the_import_graph_passes_on_the_tree_as_it_is() {
    let (ok, out) = graph_of(|_| {});
    assert!(ok, "{out}");
    assert!(out.contains("no circle, no arrow up"), "{out}");
}

#[test]
fn an_import_running_back_up_fails_and_is_named() {
    // The pure policy reaching up into the daemon.
    let (ok, out) = graph_of(|src| {
        append(
            &src.join("policy/judge.rs"),
            "#[allow(unused_imports)]\nuse crate::daemon::serve as _up;",
        );
    });
    assert!(!ok, "an upward import passed:\n{out}");
    assert!(
        out.contains("policy::judge imports daemon"),
        "the upward import is not named:\n{out}"
    );
}

#[test]
fn an_import_within_one_layer_fails() {
    // Two peers of one layer (the rooms around the supervisor).
    let (ok, out) = graph_of(|src| {
        append(
            &src.join("replay.rs"),
            "#[allow(unused_imports)]\nuse crate::handoff as _peer;",
        );
    });
    assert!(!ok, "an import between peers passed:\n{out}");
    assert!(out.contains("replay imports handoff"), "{out}");
    assert!(out.contains("its own layer"), "{out}");
}

#[test]
fn a_circle_fails_and_is_drawn() {
    // hex (a foundation) importing vocab closes no circle, but vocab
    // importing hex and hex importing vocab does.
    let (ok, out) = graph_of(|src| {
        append(
            &src.join("vocab/rules.rs"),
            "#[allow(unused_imports)]\nuse crate::hex as _a;",
        );
        append(
            &src.join("hex.rs"),
            "#[allow(unused_imports)]\nuse crate::vocab::rules as _b;",
        );
    });
    assert!(!ok, "a circle passed:\n{out}");
    assert!(out.contains("import circle"), "{out}");
    assert!(out.contains("hex") && out.contains("vocab::rules"), "{out}");
}

#[test]
fn a_new_room_without_a_layer_fails() {
    let (ok, out) = graph_of(|src| {
        std::fs::write(src.join("newroom.rs"), "//! A room nobody placed.\n").expect("a new room");
        append(&src.join("lib.rs"), "pub mod newroom;");
    });
    assert!(!ok, "an unplaced room passed:\n{out}");
    assert!(out.contains("room newroom has no place in LAYERS"), "{out}");
}

/// `docs/architecture.md`'s table of layers is `LAYERS` in
/// `.ci/import-graph.py`: the same layers, in the same order, with the same
/// rooms.
#[test]
fn the_architecture_page_draws_the_layers_ci_checks() {
    let script =
        std::fs::read_to_string(repo().join(".ci/import-graph.py")).expect(".ci/import-graph.py");
    let start = script.find("LAYERS = [").expect("LAYERS in the script");
    let body = &script[start..start + script[start..].find("\n]\n").expect("LAYERS' end")];
    let mut checked: Vec<(String, Vec<String>)> = Vec::new();
    for line in body.lines().skip(1) {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("(\"") else {
            continue;
        };
        let (name, rooms) = rest.split_once("\", [").expect("(name, [rooms])");
        let rooms = rooms[..rooms.find(']').expect("]")]
            .split(',')
            .map(|r| r.trim().trim_matches('"').to_string())
            .filter(|r| !r.is_empty())
            .collect();
        checked.push((name.to_string(), rooms));
    }
    assert!(
        checked.len() >= 8,
        "layers read from the script: {checked:?}"
    );
    let doc =
        std::fs::read_to_string(repo().join("docs/architecture.md")).expect("docs/architecture.md");
    let house = &doc[doc.find("## The house").expect("## The house")..];
    let mut drawn: Vec<(String, Vec<String>)> = Vec::new();
    for line in house
        .lines()
        .skip_while(|l| !l.starts_with("| layer"))
        .skip(2)
    {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let rooms = cells[2]
            .split(',')
            .map(|r| r.trim().trim_matches('`').to_string())
            .collect();
        drawn.push((cells[1].to_string(), rooms));
    }
    assert_eq!(
        drawn, checked,
        "docs/architecture.md's layers differ from .ci/import-graph.py's LAYERS"
    );
}
