//! One attempt, however many PATH entries: a refused exec remembered for the
//! retries of the same lookup.
//!
//! A shell looking a command up on `PATH` tries every entry in turn and goes
//! on after `EACCES`: on a merged-`/usr` system `/usr/bin/id` and `/bin/id`
//! are the same file, so one command meant two refusals, two audit events
//! and, under `decision: approve`, two approval requests and twice the wait.
//! Here a refusal is remembered for [`WINDOW`] after it was answered, keyed
//! by the process (pid and start time), the file that would have run
//! (device, inode) and the argv; an exec with the same key inside the window
//! is answered the same without asking again, and its audit event carries the
//! first one's `attempt` with `retry: true`.
//!
//! Only refusals are remembered: reusing one can never let anything run that
//! was not judged (an approval, by contrast, is for one exec). A policy
//! reload inside the window is not waited for.
//!
//! Failure modes: none; a key without a file identity is not remembered.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long after its answer a refusal is reused for the same lookup. A PATH
/// search retries within microseconds; this leaves room for a loaded machine.
pub const WINDOW: Duration = Duration::from_secs(2);

/// The most refusals remembered (the oldest is forgotten first).
const CAPACITY: usize = 64;

/// What makes two execs one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub pid: u32,
    /// The process's start time (`/proc/<pid>/stat` field 22): a recycled pid
    /// is another process.
    pub starttime: u64,
    /// The file that would run (device, inode).
    pub dev: u64,
    pub ino: u64,
    pub argv: Vec<String>,
}

impl Lookup {
    /// The key of an exec of `subject` by the process started at `starttime`,
    /// if the file's identity is known.
    pub fn of(subject: &crate::audit::ExecSubject, starttime: u64) -> Option<Lookup> {
        let file = subject.file.as_ref()?;
        Some(Lookup {
            pid: subject.pid,
            starttime,
            dev: file.dev,
            ino: file.ino,
            argv: subject.argv.clone(),
        })
    }
}

/// Refusals of the last [`WINDOW`], each with its attempt number and what a
/// retry repeats (`T`).
#[derive(Debug)]
pub struct Refusals<T> {
    entries: VecDeque<(Lookup, u64, T, Instant)>,
}

impl<T> Default for Refusals<T> {
    fn default() -> Self {
        Refusals {
            entries: VecDeque::new(),
        }
    }
}

impl<T: Clone> Refusals<T> {
    /// The attempt and answer of a refusal of `key` answered less than
    /// [`WINDOW`] before `now`.
    pub fn find(&mut self, key: &Lookup, now: Instant) -> Option<(u64, T)> {
        self.entries
            .retain(|(_, _, _, at)| now.saturating_duration_since(*at) < WINDOW);
        self.entries
            .iter()
            .find(|(k, ..)| k == key)
            .map(|(_, attempt, what, _)| (*attempt, what.clone()))
    }

    /// Remembers that `key` was refused at `now` as `attempt`.
    pub fn remember(&mut self, key: Lookup, attempt: u64, what: T, now: Instant) {
        self.entries.retain(|(k, ..)| *k != key);
        if self.entries.len() == CAPACITY {
            self.entries.pop_front();
        }
        self.entries.push_back((key, attempt, what, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pid: u32, ino: u64, argv: &[&str]) -> Lookup {
        Lookup {
            pid,
            starttime: 7,
            dev: 1,
            ino,
            argv: argv.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn the_same_lookup_inside_the_window_is_one_attempt() {
        let mut r = Refusals::default();
        let t0 = Instant::now();
        r.remember(key(10, 5, &["id"]), 3, "deny", t0);
        assert_eq!(
            r.find(&key(10, 5, &["id"]), t0 + Duration::from_millis(5)),
            Some((3, "deny"))
        );
        assert_eq!(r.find(&key(10, 5, &["id"]), t0 + WINDOW), None);
    }

    #[test]
    fn another_process_file_or_argv_is_another_attempt() {
        let mut r = Refusals::default();
        let t0 = Instant::now();
        r.remember(key(10, 5, &["id"]), 3, (), t0);
        assert_eq!(r.find(&key(11, 5, &["id"]), t0), None);
        assert_eq!(r.find(&key(10, 6, &["id"]), t0), None);
        assert_eq!(r.find(&key(10, 5, &["id", "-u"]), t0), None);
        let mut other_start = key(10, 5, &["id"]);
        other_start.starttime = 8;
        assert_eq!(r.find(&other_start, t0), None);
    }

    #[test]
    fn the_oldest_refusal_is_forgotten_first() {
        let mut r = Refusals::default();
        let t0 = Instant::now();
        for i in 0..=CAPACITY as u32 {
            r.remember(key(i, 1, &[]), u64::from(i), (), t0);
        }
        assert_eq!(r.find(&key(0, 1, &[]), t0), None);
        assert_eq!(r.find(&key(1, 1, &[]), t0), Some((1, ())));
        assert_eq!(r.entries.len(), CAPACITY);
    }
}
