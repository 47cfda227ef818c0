//! The recording double of [`Host`] (tests only): each question gets the
//! next answer scripted for it, else the real answer (the tests ask about
//! their own process, which needs no privilege), and every question asked
//! is recorded in order, so a test can say both what the supervisor was
//! told and what it asked.
//!
//! Failure modes: a script that does not fit the question it is given to
//! is a bug in the test, and panics.

use super::host::{Host, RealHost};
use super::maps::Maps;
use super::resolve::{ExecTarget, KeptRoot, ResolveError, View};
use super::shebang::{ChainError, ChainLink};
use super::stat::StatFile;
use std::collections::VecDeque;
use std::fs::{File, Metadata};
use std::io;
use std::path::PathBuf;
use std::sync::Mutex;

/// A question of [`Host`], as the double records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Question {
    StatFile,
    View,
    Resolve,
    Interpreters,
    Maps,
    FdName,
    FdMeta,
    FdOpen,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// The real answer (a placeholder, to script a later call).
    Real,
    /// The question fails with this errno (`resolve`: as anything but a
    /// missing file; `interpreters`: an interpreter that cannot be resolved).
    Fails(i32),
    /// `resolve`: the path names nothing; the kernel answers this errno.
    Missing(i32),
    /// `resolve`: the real file, said to be a memfd or a deleted file.
    Anonymous,
    /// `interpreters`: nested deeper than the kernel follows.
    TooDeep,
    /// `interpreters`: one interpreter, which names no file.
    NoInterpreterFile,
    /// `stat_file`, `maps`: a file that opens but cannot be read (a
    /// directory).
    Unreadable,
}

/// The bookkeeping of a recording double: the answers scripted for each
/// question, in order, and every question asked, in order. Shared by the
/// doubles of `Host` (here) and of the supervisor's `TaskStops`.
#[derive(Debug)]
pub struct Script<Q, A> {
    scripts: Mutex<Vec<(Q, VecDeque<A>)>>,
    calls: Mutex<Vec<Q>>,
}

impl<Q, A> Default for Script<Q, A> {
    fn default() -> Self {
        Script {
            scripts: Mutex::new(Vec::new()),
            calls: Mutex::new(Vec::new()),
        }
    }
}

impl<Q: Copy + PartialEq, A> Script<Q, A> {
    /// The next call of `q` not yet scripted gets `answer`.
    pub fn push(&self, q: Q, answer: A) {
        let mut s = self
            .scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match s.iter_mut().find(|(k, _)| *k == q) {
            Some((_, queue)) => queue.push_back(answer),
            None => s.push((q, VecDeque::from([answer]))),
        }
    }

    /// Every question asked so far, in order.
    pub fn calls(&self) -> Vec<Q> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records a call of `q`; the answer scripted for it, if any is left.
    pub fn next(&self, q: Q) -> Option<A> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(q);
        let mut s = self
            .scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.iter_mut()
            .find(|(k, _)| *k == q)
            .and_then(|(_, queue)| queue.pop_front())
    }
}

/// The recording double (module doc).
#[derive(Debug, Default)]
pub struct RecordingHost {
    script: Script<Question, Scripted>,
}

impl RecordingHost {
    pub fn new() -> RecordingHost {
        RecordingHost::default()
    }

    /// The next call of `q` not yet scripted gets `answer`.
    pub fn script(&self, q: Question, answer: Scripted) -> &RecordingHost {
        self.script.push(q, answer);
        self
    }

    /// Every question asked so far, in order.
    pub fn calls(&self) -> Vec<Question> {
        self.script.calls()
    }

    /// Records a call of `q`; its scripted answer.
    fn next(&self, q: Question) -> Scripted {
        self.script.next(q).unwrap_or(Scripted::Real)
    }
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// A file that opens and fails every read (EISDIR).
fn unreadable_file() -> File {
    File::open("/").expect("the root directory opens")
}

fn unfit(q: Question, a: &Scripted) -> ! {
    panic!("{a:?} is no answer to {q:?}")
}

impl Host for RecordingHost {
    fn stat_file(&self, tid: u32) -> io::Result<StatFile> {
        match self.next(Question::StatFile) {
            Scripted::Real => RealHost.stat_file(tid),
            Scripted::Fails(e) => Err(errno(e)),
            Scripted::Unreadable => Ok(StatFile::from_file(unreadable_file(), tid)),
            a => unfit(Question::StatFile, &a),
        }
    }

    fn view(&self, root: &mut KeptRoot, pid: u32, tid: u32) -> io::Result<View> {
        match self.next(Question::View) {
            Scripted::Real => RealHost.view(root, pid, tid),
            Scripted::Fails(e) => Err(errno(e)),
            a => unfit(Question::View, &a),
        }
    }

    fn resolve(
        &self,
        view: &View,
        dirfd: i32,
        path: &[u8],
        empty_path: bool,
    ) -> Result<ExecTarget, ResolveError> {
        match self.next(Question::Resolve) {
            Scripted::Real => RealHost.resolve(view, dirfd, path, empty_path),
            Scripted::Fails(e) => Err(ResolveError::Other(errno(e))),
            Scripted::Missing(e) => Err(ResolveError::Missing(e)),
            Scripted::Anonymous => {
                let mut t = RealHost.resolve(view, dirfd, path, empty_path)?;
                t.anonymous = true;
                Ok(t)
            }
            a => unfit(Question::Resolve, &a),
        }
    }

    fn interpreters(
        &self,
        view: &View,
        target: &ExecTarget,
        script_name: &str,
        argv: &[String],
    ) -> Result<Vec<ChainLink>, ChainError> {
        match self.next(Question::Interpreters) {
            Scripted::Real => RealHost.interpreters(view, target, script_name, argv),
            Scripted::Fails(e) => Err(ChainError::Unresolvable("/interp".into(), errno(e))),
            Scripted::TooDeep => Err(ChainError::TooDeep),
            Scripted::NoInterpreterFile => Ok(vec![ChainLink {
                path: "/nonexistent/interpreter".into(),
                argv: argv.to_vec(),
                target: None,
            }]),
            a => unfit(Question::Interpreters, &a),
        }
    }

    fn maps(&self, pid: u32) -> io::Result<Maps> {
        match self.next(Question::Maps) {
            Scripted::Real => RealHost.maps(pid),
            Scripted::Fails(e) => Err(errno(e)),
            Scripted::Unreadable => Ok(Maps::over(unreadable_file())),
            a => unfit(Question::Maps, &a),
        }
    }

    fn fd_name(&self, tid: u32, fd: i32) -> io::Result<PathBuf> {
        match self.next(Question::FdName) {
            Scripted::Real => RealHost.fd_name(tid, fd),
            Scripted::Fails(e) => Err(errno(e)),
            a => unfit(Question::FdName, &a),
        }
    }

    fn fd_meta(&self, tid: u32, fd: i32) -> io::Result<Metadata> {
        match self.next(Question::FdMeta) {
            Scripted::Real => RealHost.fd_meta(tid, fd),
            Scripted::Fails(e) => Err(errno(e)),
            a => unfit(Question::FdMeta, &a),
        }
    }

    fn fd_open(&self, tid: u32, fd: i32) -> io::Result<File> {
        match self.next(Question::FdOpen) {
            Scripted::Real => RealHost.fd_open(tid, fd),
            Scripted::Fails(e) => Err(errno(e)),
            a => unfit(Question::FdOpen, &a),
        }
    }
}
