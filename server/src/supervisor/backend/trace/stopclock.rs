//! How long the tracer takes over each seccomp stop, measured where it
//! runs: from the stop's handling begun (just after `waitpid` reported it
//! and the tracee was found in its tree) to the tracee resumed (or held).
//! The blocking `waitpid` itself is not in it (one syscall more a stop).
//!
//! Why: under gVisor each tracer syscall costs about as much as the rest of
//! the sandbox's work on a call, so the tracer's time is the cost a user
//! feels, and the figure issue targets are set in. Read with the CPU's
//! counter (`rdtsc`, `cntvct_el0`), not the clock: under gVisor's ptrace
//! platform a `clock_gettime` is a syscall, and would be a large part of
//! what it measures. Only where debug logging is on for this module
//! (`AGENTSH_LOG=info,agentsh::supervisor::backend::trace=debug`): else
//! nothing is read. Logged when the last tree ends (before it is said
//! finished) and every [`KEEP`] stops, as a median, p90 and mean.
//!
//! Failure modes: none that matter to a decision; without a counter
//! (another architecture) the clock is used.

use std::time::Instant;

/// Stops kept before a line is logged anyway.
const KEEP: usize = 100_000;

pub(super) struct StopClock {
    on: bool,
    /// Each stop's length, in counter ticks.
    took: Vec<u64>,
    /// When the counting started: (ticks, clock), to turn ticks into µs.
    start: (u64, Instant),
    /// What the stop being timed is ([`StopClock::label`]).
    kind: Kind,
    /// By kind: (stops, ticks), seccomp stops and the other events alike.
    by: [(u64, u64); KINDS.len()],
}

/// What a timed stop was, for the breakdown: a seccomp stop of an exec, of
/// a path call, of a network call, of anything else; an exec event (the
/// new image checked), a fork, vfork or clone event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    Exec,
    File,
    Net,
    Other,
    ExecEvent,
    ForkEvent,
}

/// Every [`Kind`], in the order the breakdown names them.
const KINDS: [(Kind, &str); 6] = [
    (Kind::Exec, "exec"),
    (Kind::File, "file"),
    (Kind::Net, "net"),
    (Kind::Other, "other"),
    (Kind::ExecEvent, "exec_event"),
    (Kind::ForkEvent, "fork_event"),
];

/// The kind of a seccomp stop of call `nr` on ABI `arch` (x86_64 numbers;
/// elsewhere only path calls are told apart).
pub(super) fn kind_of(arch: u32, nr: i32) -> Kind {
    if agentsh_proto::fileabi::classify(arch, nr).is_some() {
        return Kind::File;
    }
    if arch != agentsh_proto::execabi::AUDIT_ARCH_X86_64 {
        return Kind::Other;
    }
    match i64::from(nr) {
        libc::SYS_execve | libc::SYS_execveat => Kind::Exec,
        libc::SYS_connect
        | libc::SYS_sendto
        | libc::SYS_sendmsg
        | libc::SYS_sendmmsg
        | libc::SYS_bind => Kind::Net,
        _ => Kind::Other,
    }
}

impl Default for StopClock {
    fn default() -> Self {
        StopClock::new(tracing::enabled!(tracing::Level::DEBUG))
    }
}

/// One line's figures (µs).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Figures {
    pub(super) stops: usize,
    pub(super) median: u64,
    pub(super) p90: u64,
    pub(super) mean: u64,
}

/// The CPU's counter: no syscall.
#[cfg(target_arch = "x86_64")]
pub(super) fn ticks() -> u64 {
    // SAFETY: rdtsc reads a counter; it has no other effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(target_arch = "aarch64")]
pub(super) fn ticks() -> u64 {
    let v: u64;
    // SAFETY: reads the virtual counter, readable at EL0 under Linux.
    unsafe { core::arch::asm!("mrs {}, cntvct_el0", out(reg) v) };
    v
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) fn ticks() -> u64 {
    use std::sync::OnceLock;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

impl StopClock {
    pub(super) fn new(on: bool) -> StopClock {
        StopClock {
            on,
            took: Vec::new(),
            start: if on {
                (ticks(), Instant::now())
            } else {
                (0, Instant::now())
            },
            kind: Kind::Other,
            by: [(0, 0); KINDS.len()],
        }
    }

    /// The seccomp stop being timed is of this kind (the tracer knows once
    /// it read the registers).
    pub(super) fn label(&mut self, kind: Kind) {
        self.kind = kind;
    }

    /// [`StopClock::label`]s the stop by its call, `(arch, nr)`, and
    /// gives them back.
    pub(super) fn labelled(&mut self, call: (u32, i32)) -> (u32, i32) {
        self.label(kind_of(call.0, call.1));
        call
    }

    /// Adds `ticks` to `kind`'s part of the breakdown.
    fn count(&mut self, kind: Kind, ticks: u64) {
        if let Some(i) = KINDS.iter().position(|(k, _)| *k == kind) {
            self.by[i].0 += 1;
            self.by[i].1 += ticks;
        }
    }

    /// A stop that is not a seccomp stop (an exec or fork event), started
    /// at `from`: in the breakdown only.
    pub(super) fn add_event(&mut self, from: Option<u64>, kind: Kind) {
        if let Some(from) = from {
            self.count(kind, ticks().saturating_sub(from));
        }
    }

    /// The breakdown as text (`kind=stops/mean µs`), ticks turned into µs
    /// at `per_us` ticks a µs.
    pub(super) fn breakdown(&self, per_us: f64) -> String {
        let parts: Vec<String> = KINDS
            .iter()
            .zip(self.by)
            .filter(|(_, (n, _))| *n > 0)
            .map(|((_, name), (n, t))| {
                format!(
                    "{name}={n}/{}",
                    (t as f64 / n as f64 / per_us.max(1e-9)) as u64
                )
            })
            .collect();
        parts.join(" ")
    }

    /// The counter now, where the clock is on.
    pub(super) fn now(&self) -> Option<u64> {
        self.on.then(ticks)
    }

    /// One stop that started at `from` (from [`Self::now`]).
    pub(super) fn add(&mut self, from: Option<u64>) {
        if let Some(from) = from {
            let t = ticks().saturating_sub(from);
            self.took.push(t);
            self.count(self.kind, t);
            self.kind = Kind::Other;
            if self.took.len() >= KEEP {
                self.report(true);
            }
        }
    }

    /// The figures so far (`None`: no stop), ticks turned into µs at
    /// `per_us` ticks a µs.
    pub(super) fn figures(&self, per_us: f64) -> Option<Figures> {
        if self.took.is_empty() || per_us <= 0.0 {
            return None;
        }
        let mut us: Vec<u64> = self
            .took
            .iter()
            .map(|t| (*t as f64 / per_us) as u64)
            .collect();
        us.sort_unstable();
        let at = |pct: usize| us[((us.len() * pct).div_ceil(100)).clamp(1, us.len()) - 1];
        Some(Figures {
            stops: us.len(),
            median: at(50),
            p90: at(90),
            mean: us.iter().sum::<u64>() / us.len() as u64,
        })
    }

    /// Logs and forgets the figures (`now`: the last tree ended).
    pub(super) fn report(&mut self, now: bool) {
        if !self.on || !now {
            return;
        }
        let secs = self.start.1.elapsed().as_secs_f64();
        let per_us = (ticks().saturating_sub(self.start.0)) as f64 / (secs * 1e6);
        if let Some(f) = self.figures(per_us) {
            tracing::debug!(
                stops = f.stops,
                median_us = f.median,
                p90_us = f.p90,
                mean_us = f.mean,
                "tracer: time a seccomp stop took, waitpid's return to resumed"
            );
            tracing::debug!(
                by_kind = %self.breakdown(per_us),
                "tracer: time a stop took by kind (stops/mean µs)"
            );
        }
        *self = StopClock::new(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_it_reads_nothing_and_on_it_gives_percentiles_of_what_it_read() {
        let mut off = StopClock::new(false);
        assert_eq!(off.now(), None);
        off.add(off.now());
        assert!(off.took.is_empty());

        let mut c = StopClock::new(true);
        assert_eq!(c.figures(1.0), None);
        c.took = vec![42, 42, 42, 42, 42, 42, 42, 42, 42, 400];
        let f = c.figures(1.0).unwrap();
        assert_eq!((f.stops, f.median, f.p90), (10, 42, 42));
        assert_eq!(f.mean, (9 * 42 + 400) / 10);
        c.took.push(401);
        assert_eq!(
            c.figures(2.0).unwrap().p90,
            200,
            "2 ticks a µs; 2 of 11 beyond"
        );
        let from = c.now().expect("on");
        c.add(Some(from));
        assert_eq!(c.took.len(), 12, "a stop measured with the counter");
        c.report(true);
        assert_eq!(c.figures(1.0), None, "a report forgets");
    }

    #[test]
    fn the_breakdown_counts_each_kind_and_its_mean() {
        let mut c = StopClock::new(true);
        c.count(Kind::Exec, 300);
        c.count(Kind::Exec, 100);
        c.count(Kind::File, 50);
        assert_eq!(c.breakdown(1.0), "exec=2/200 file=1/50");
        assert_eq!(c.breakdown(2.0), "exec=2/100 file=1/25", "2 ticks a µs");
        c.label(Kind::Net);
        c.add(c.now());
        c.add_event(c.now(), Kind::ForkEvent);
        assert!(c.breakdown(1.0).contains("net=1/"), "{}", c.breakdown(1.0));
        assert!(c.breakdown(1.0).contains("fork_event=1/"));
        assert_eq!(c.took.len(), 1, "an event is not a seccomp stop");
        assert_eq!(
            kind_of(agentsh_proto::execabi::AUDIT_ARCH_X86_64, 59),
            Kind::Exec
        );
        assert_eq!(
            kind_of(agentsh_proto::execabi::AUDIT_ARCH_X86_64, 257),
            Kind::File
        );
        assert_eq!(
            kind_of(agentsh_proto::execabi::AUDIT_ARCH_X86_64, 42),
            Kind::Net
        );
        assert_eq!(
            kind_of(agentsh_proto::execabi::AUDIT_ARCH_X86_64, 0),
            Kind::Other
        );
    }
}
