//! Where this process's cgroup v2 directory is and what it offers, read
//! from `/proc/self/cgroup` (`0::`) and the cgroup2 mount in
//! `/proc/self/mountinfo` (a container's namespaced `/sys/fs/cgroup` too),
//! changing nothing: the delegation starts from it, `agentsh detect` says
//! it.
//!
//! Failure modes: no `0::` line, no cgroup2 mount that shows the cgroup,
//! its controllers unreadable, or the controllers limits use kept on
//! cgroup v1 (named, with the boot option that moves them): a
//! [`CgroupError`] that says which.

use super::error::CgroupError;
use std::path::PathBuf;

/// The controllers agentsh's limits use.
pub const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];

/// Where this process's cgroup v2 directory is, and what it offers, without
/// changing anything (`agentsh detect` says this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub dir: PathBuf,
    /// `dir` is the root of this process's cgroup namespace and not the
    /// host's root cgroup: a container's own cgroup.
    pub container: bool,
    /// `cgroup.controllers` of `dir`.
    pub offered: Vec<String>,
}

/// Finds the server's cgroup v2 directory.
///
/// # Errors
/// No `0::` line, no cgroup2 mount that shows it, or its controllers
/// unreadable; the controllers this host keeps on cgroup v1 are named.
pub fn probe() -> Result<Probe, CgroupError> {
    let read = |file: &'static str| {
        std::fs::read_to_string(file).map_err(|source| CgroupError::Proc { file, source })
    };
    let own = read("/proc/self/cgroup")?;
    let mountinfo = read("/proc/self/mountinfo")?;
    let dir = v2_dir(&own, &mountinfo)?;
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).map_err(|source| {
        CgroupError::Read {
            dir: dir.clone(),
            file: "cgroup.controllers",
            source,
        }
    })?;
    let offered: Vec<String> = offered.split_whitespace().map(str::to_string).collect();
    let on_v1 = kept_on_v1(&own, &offered);
    if !on_v1.is_empty() {
        return Err(CgroupError::OnV1 {
            on_v1,
            dir,
            offered,
        });
    }
    let container =
        own.lines().any(|l| l.trim_end() == "0::/") && dir.join("cgroup.freeze").exists();
    Ok(Probe {
        dir,
        container,
        offered,
    })
}

/// The controllers limits use that `p` offers.
///
/// # Errors
/// None of them: its parent has not delegated them.
pub fn usable(p: &Probe) -> Result<Vec<&'static str>, CgroupError> {
    let offered: Vec<&'static str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| p.offered.iter().any(|o| o == c))
        .collect();
    if offered.is_empty() {
        return Err(CgroupError::NoControllers {
            dir: p.dir.clone(),
            controllers: &CONTROLLERS,
        });
    }
    Ok(offered)
}

/// The controllers limits use that the v2 directory does not `offer` and
/// a v1 hierarchy of `own` (a `/proc/<pid>/cgroup`) holds.
fn kept_on_v1(own: &str, offered: &[String]) -> Vec<&'static str> {
    CONTROLLERS
        .iter()
        .copied()
        .filter(|c| !offered.iter().any(|o| o == c) && on_v1(own, c))
        .collect()
}

/// The cgroup v2 directory of the process whose `/proc/<pid>/cgroup` is
/// `own` and whose mounts are `mountinfo`.
fn v2_dir(own: &str, mountinfo: &str) -> Result<PathBuf, CgroupError> {
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or(CgroupError::NoV2)?;
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS... - FSTYPE SOURCE SUPER
    let mut best: Option<(usize, PathBuf)> = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let f: Vec<&str> = left.split_whitespace().collect();
        let (Some(root), Some(point)) = (f.get(3), f.get(4)) else {
            continue;
        };
        let root = unescape(root);
        let under = if root == "/" {
            Some(rel.trim_start_matches('/'))
        } else {
            rel.strip_prefix(root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))
                .map(|r| r.trim_start_matches('/'))
        };
        if let Some(under) = under {
            let point = PathBuf::from(unescape(point));
            let dir = if under.is_empty() {
                point
            } else {
                point.join(under)
            };
            // The mount nearest the cgroup (the longest root) wins.
            if best.as_ref().is_none_or(|(l, _)| root.len() > *l) {
                best = Some((root.len(), dir));
            }
        }
    }
    best.map(|(_, d)| d)
        .ok_or_else(|| CgroupError::NoMount(rel.to_string()))
}

/// Whether `own` (a `/proc/<pid>/cgroup`) names a v1 hierarchy that holds
/// `controller`.
fn on_v1(own: &str, controller: &str) -> bool {
    own.lines().any(|l| {
        let mut f = l.splitn(3, ':');
        let (_, list) = (f.next(), f.next().unwrap_or(""));
        !list.is_empty() && list.split(',').any(|c| c == controller)
    })
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const V1_HYBRID: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/x\n1:cpu:/\n0::/\n";

    #[test]
    fn the_servers_cgroup_is_found_through_the_mount_that_shows_it() {
        let mi = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v2_dir("0::/system.slice/agentsh.service\n", mi).unwrap(),
            Path::new("/sys/fs/cgroup/system.slice/agentsh.service")
        );
        // A container's namespaced mount (root is the container's cgroup).
        let mi = "40 30 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n\
                  41 30 0:26 / /mnt/all\\040cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v2_dir("0::/docker/abc/sub\n", mi).unwrap(),
            Path::new("/sys/fs/cgroup/sub")
        );
        assert_eq!(
            v2_dir("0::/other\n", mi).unwrap(),
            Path::new("/mnt/all cg/other")
        );
    }

    #[test]
    fn a_cgroup_file_without_a_v2_line_or_mount_is_said_so() {
        let e = v2_dir("1:cpu:/\n", "").unwrap_err();
        assert!(matches!(e, CgroupError::NoV2), "{e:?}");
        assert_eq!(
            e.to_string(),
            "no cgroup v2 hierarchy (no `0::` line in /proc/self/cgroup)"
        );
        // A v1 mount only: no cgroup2 line shows the cgroup.
        let mi = "30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        let e = v2_dir("0::/x\n", mi).unwrap_err();
        assert!(
            matches!(&e, CgroupError::NoMount(rel) if rel == "/x"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "no cgroup2 mount shows this process's cgroup /x (is cgroup2 mounted?)"
        );
    }

    #[test]
    fn controllers_kept_on_v1_are_named() {
        assert!(on_v1(V1_HYBRID, "pids"));
        assert!(on_v1(V1_HYBRID, "memory"));
        assert!(!on_v1(V1_HYBRID, "io"));
        assert!(!on_v1("0::/\n", "pids"));
        assert_eq!(kept_on_v1(V1_HYBRID, &[]), ["pids", "memory", "cpu"]);
        assert_eq!(kept_on_v1(V1_HYBRID, &["memory".into()]), ["pids", "cpu"]);
        assert!(kept_on_v1("0::/\n", &[]).is_empty());
        let e = CgroupError::OnV1 {
            on_v1: kept_on_v1(V1_HYBRID, &["memory".into(), "cpu".into()]),
            dir: "/sys/fs/cgroup/unified".into(),
            offered: vec!["memory".into(), "cpu".into()],
        };
        assert_eq!(
            e.to_string(),
            "the pids controller is on cgroup v1 hierarchies on this host; the cgroup v2 \
             mount at /sys/fs/cgroup/unified offers only [memory cpu]: boot with \
             systemd.unified_cgroup_hierarchy=1 (or cgroup_no_v1=all) for limits"
        );
    }

    #[test]
    fn a_cgroup_offering_none_of_the_controllers_is_refused_with_why() {
        let p = Probe {
            dir: "/sys/fs/cgroup/x".into(),
            container: false,
            offered: vec!["io".into(), "cpuset".into()],
        };
        let e = usable(&p).unwrap_err();
        assert!(
            matches!(&e, CgroupError::NoControllers { dir, .. } if dir == &p.dir),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "/sys/fs/cgroup/x offers none of the controllers limits use (pids, memory, cpu): \
             its parent has not delegated them (systemd: Delegate=yes in the unit)"
        );
        let p = Probe {
            offered: vec!["cpu".into(), "pids".into()],
            ..p
        };
        assert_eq!(usable(&p).unwrap(), ["pids", "cpu"]);
    }
}
