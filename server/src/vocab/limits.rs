//! What a session's trees may use, as written (`limits:` in a policy and in
//! `sessions.<id>` of the config) and as applied (bytes, a CPU quota, a
//! duration).
//!
//! A session's own `limits:` overrides its policy's key by key (a session
//! that sets only `pids` keeps the policy's `memory`). Values are checked
//! when the policy or the config is read: a limit that cannot be parsed is
//! an error there, never a tree that runs without it.
//!
//! Failure modes: none at run time; parse errors name the key and the value.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `limits:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsDoc {
    /// Processes and threads a tree may have at once (`pids.max`): a fork
    /// over it fails with EAGAIN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Memory of the whole tree (`memory.max`; no swap): `512M`, `2G`,
    /// `65536` (bytes). Over it the kernel ends the tree, every process of
    /// it (`memory.oom.group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// CPU time per wall second (`cpu.max`): `0.5` (half of one CPU), `2`,
    /// or `50%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// How long a tree may live (`30m`, `10s`): then every process of it
    /// is killed (`cgroup.kill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
    /// `required` (default): where the limits cannot be applied, the
    /// tree's shell is refused; `best_effort`: it runs without them,
    /// logged and said in the wrap_init event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<LimitsCompat>,
}

/// What a tree gets where its limits cannot be applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitsCompat {
    #[default]
    Required,
    BestEffort,
}

/// The limits applied to each tree of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub pids: Option<u64>,
    /// Bytes.
    pub memory: Option<u64>,
    /// `cpu.max`: (quota, period) in microseconds.
    pub cpu: Option<(u64, u64)>,
    pub wall: Option<Duration>,
    pub compat: LimitsCompat,
}

/// A `limits:` value that cannot be applied: the key, the value, and what
/// would do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("limits.pids: 0 would leave a tree no process at all (at least 1)")]
    NoProcess,
    #[error("limits.memory: {0:?} is not a size (e.g. 512M, 2G, or bytes)")]
    Memory(String),
    #[error("limits.memory: below 1M no shell can start")]
    MemoryTooSmall,
    #[error("limits.cpu: {0:?} is not a CPU share (e.g. 0.5 for half a CPU, 2, or 50%)")]
    Cpu(String),
    #[error("limits.wall: {0:?} is not a duration (e.g. 30m, 10s)")]
    Wall(String),
}

/// The period `cpu.max` is written with (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

impl Limits {
    /// `doc` checked and converted.
    ///
    /// # Errors
    /// The key and value that cannot be used, and what would be.
    pub fn from_doc(doc: &LimitsDoc) -> Result<Limits, LimitsError> {
        if doc.pids == Some(0) {
            return Err(LimitsError::NoProcess);
        }
        let memory = doc
            .memory
            .as_deref()
            .map(|m| parse_bytes(m).ok_or_else(|| LimitsError::Memory(m.to_string())))
            .transpose()?;
        if memory.is_some_and(|m| m < 1 << 20) {
            return Err(LimitsError::MemoryTooSmall);
        }
        let cpu = doc
            .cpu
            .as_deref()
            .map(|c| parse_cpu(c).ok_or_else(|| LimitsError::Cpu(c.to_string())))
            .transpose()?;
        let wall = doc
            .wall
            .as_deref()
            .map(|w| {
                super::duration::parse_duration(w)
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| LimitsError::Wall(w.to_string()))
            })
            .transpose()?;
        Ok(Limits {
            pids: doc.pids,
            memory,
            cpu,
            wall,
            compat: doc.compat.unwrap_or_default(),
        })
    }

    /// Whether anything is limited.
    pub fn any(&self) -> bool {
        self.pids.is_some() || self.memory.is_some() || self.cpu.is_some() || self.wall.is_some()
    }

    /// The controllers these limits need (`wall` needs none: `cgroup.kill`).
    pub fn controllers(&self) -> Vec<&'static str> {
        let mut c = Vec::new();
        if self.pids.is_some() {
            c.push("pids");
        }
        if self.memory.is_some() {
            c.push("memory");
        }
        if self.cpu.is_some() {
            c.push("cpu");
        }
        c
    }

    /// `pids=64 memory=67108864 cpu=50000/100000 wall=30s`, for the log
    /// and the events.
    pub fn summary(&self) -> String {
        let mut s = Vec::new();
        if let Some(p) = self.pids {
            s.push(format!("pids={p}"));
        }
        if let Some(m) = self.memory {
            s.push(format!("memory={m}"));
        }
        if let Some((q, p)) = self.cpu {
            s.push(format!("cpu={q}/{p}"));
        }
        if let Some(w) = self.wall {
            s.push(format!("wall={}s", w.as_secs_f64()));
        }
        s.join(" ")
    }
}

/// `session` over `policy`, key by key.
pub fn merge(policy: Option<&LimitsDoc>, session: Option<&LimitsDoc>) -> LimitsDoc {
    let (p, s) = (
        policy.cloned().unwrap_or_default(),
        session.cloned().unwrap_or_default(),
    );
    LimitsDoc {
        pids: s.pids.or(p.pids),
        memory: s.memory.or(p.memory),
        cpu: s.cpu.or(p.cpu),
        wall: s.wall.or(p.wall),
        compat: s.compat.or(p.compat),
    }
}

/// `512M`, `2G`, `64k`, `1.5G` or plain bytes (binary units).
fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&t[..i], t[i..].trim_end_matches(['B', 'b', 'i'])),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return None,
    };
    let n: f64 = num.trim().parse().ok()?;
    if !n.is_finite() || n <= 0.0 {
        return None;
    }
    let bytes = n * (1u64 << shift) as f64;
    (bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// `0.5`, `2` (CPUs) or `50%` (of one CPU) as a `cpu.max` quota and period.
fn parse_cpu(text: &str) -> Option<(u64, u64)> {
    let t = text.trim();
    let cpus: f64 = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => t.parse().ok()?,
    };
    if !cpus.is_finite() || cpus <= 0.0 || cpus > 4096.0 {
        return None;
    }
    // The kernel's least quota is 1000 µs.
    let quota = ((cpus * CPU_PERIOD_US as f64).round() as u64).max(1000);
    Some((quota, CPU_PERIOD_US))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(yaml: &str) -> LimitsDoc {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn sizes_shares_and_durations_read_as_the_kernel_takes_them() {
        let l = Limits::from_doc(&doc("{pids: 64, memory: 64M, cpu: '50%', wall: 2s}")).unwrap();
        assert_eq!(l.pids, Some(64));
        assert_eq!(l.memory, Some(64 << 20));
        assert_eq!(l.cpu, Some((50_000, 100_000)));
        assert_eq!(l.wall, Some(Duration::from_secs(2)));
        assert_eq!(l.compat, LimitsCompat::Required);
        assert_eq!(l.controllers(), ["pids", "memory", "cpu"]);
        assert_eq!(parse_bytes("1.5G"), Some(3 << 29));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_cpu("2"), Some((200_000, 100_000)));
        assert_eq!(parse_cpu("0.001"), Some((1000, 100_000)));
    }

    #[test]
    fn a_limit_that_cannot_be_applied_is_an_error_that_names_it() {
        for (yaml, is, says) in [
            (
                "{memory: lots}",
                LimitsError::Memory("lots".into()),
                "limits.memory: \"lots\"",
            ),
            ("{memory: 10k}", LimitsError::MemoryTooSmall, "below 1M"),
            (
                "{cpu: fast}",
                LimitsError::Cpu("fast".into()),
                "limits.cpu: \"fast\"",
            ),
            ("{cpu: '-1'}", LimitsError::Cpu("-1".into()), "limits.cpu"),
            (
                "{wall: soon}",
                LimitsError::Wall("soon".into()),
                "limits.wall: \"soon\"",
            ),
            ("{wall: 0s}", LimitsError::Wall("0s".into()), "limits.wall"),
            ("{pids: 0}", LimitsError::NoProcess, "limits.pids: 0"),
        ] {
            let e = Limits::from_doc(&doc(yaml)).unwrap_err();
            assert_eq!(e, is, "{yaml}");
            assert!(e.to_string().contains(says), "{yaml}: {e}");
        }
        let e = serde_yaml_ng::from_str::<LimitsDoc>("{pid: 3}").unwrap_err();
        assert!(e.to_string().contains("unknown field `pid`"), "{e}");
    }

    #[test]
    fn a_sessions_limits_override_its_policys_key_by_key() {
        let m = merge(
            Some(&doc("{pids: 10, memory: 1G, compat: best_effort}")),
            Some(&doc("{pids: 64}")),
        );
        assert_eq!(m.pids, Some(64));
        assert_eq!(m.memory.as_deref(), Some("1G"));
        assert_eq!(m.compat, Some(LimitsCompat::BestEffort));
        assert!(!Limits::from_doc(&merge(None, None)).unwrap().any());
    }
}
