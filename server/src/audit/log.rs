//! The audit sinks: the JSONL file, journald and the per-session memory
//! window the API serves, behind one [`AuditLog`] every supervisor thread
//! shares.
//!
//! Failure modes: a write to the file that fails is counted and logged (to
//! the sink's own tracing target, never the command's output); the event
//! still reaches the other sinks, and [`AuditLog::healthy`] says so for
//! `audit.on_failure: refuse`.

use super::event::{Event, EventBody};
use super::time::rfc3339_now;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

/// The tracing target of the sinks' own failures: not the events' target
/// (`agentsh::audit`), which the server's stderr leaves out.
const SINK: &str = "agentsh::audit_sink";

/// The audit sinks. Shared by every supervisor thread.
pub struct AuditLog {
    next_id: AtomicU64,
    /// The last exec attempt number handed out ([`AuditLog::next_attempt`]).
    attempts: AtomicU64,
    /// The file, and the chain's link: the SHA-256 of the last line written
    /// to it (or, after a rotation, to the file before it), which the next
    /// line carries as `prev` (`chain`).
    file: Option<Mutex<(File, Option<String>)>>,
    /// Where `file` was opened, for [`AuditLog::reopen`].
    path: Option<PathBuf>,
    write_failures: AtomicU64,
    /// The last write to the file succeeded (true without a file).
    healthy: std::sync::atomic::AtomicBool,
    memory: Mutex<HashMap<String, VecDeque<Event>>>,
    memory_cap: usize,
    /// The latest event id, for the API's async long-polls.
    latest: tokio::sync::watch::Sender<u64>,
    /// Where events are also exported (`audit.otlp.endpoint`), once set.
    export: std::sync::OnceLock<crate::otlp::Exporter>,
    /// Events promised and not yet recorded ([`AuditLog::owe`]): readers
    /// wait for them.
    owed: AtomicU64,
}

/// An event promised before its call was answered, recorded right after
/// ([`AuditLog::owe`]); dropped once it is (or if it never can be).
pub struct Owed<'a>(&'a AuditLog);

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        self.0.owed.fetch_sub(1, Ordering::Release);
    }
}

/// How long a reader waits for promised events before it reads anyway
/// (logged): a writer is never held that long unless the server is stuck.
const OWED_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The first event id of a server writing `jsonl`: unique across restarts
/// (issue 24: every start began at 1, so a log held duplicates). The
/// microseconds since 1970 at start (an event per microsecond is far more
/// than a server writes, so a later start begins above every id of an
/// earlier one; below 2^53 until the year 2255, exact in JSON), or one more
/// than the last id in the file if that is higher (a clock set back).
fn first_id(jsonl: &Path) -> u64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64);
    now.max(last_id(jsonl).map_or(0, |id| id + 1)).max(1)
}

/// The id of the last whole line of `jsonl`, from its last 64 KiB.
fn last_id(jsonl: &Path) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(jsonl).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(64 << 10))).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines().rev().find_map(|l| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()?
            .get("id")?
            .as_u64()
    })
}

impl AuditLog {
    /// Opens (creating) the JSONL file in append mode.
    ///
    /// # Errors
    /// The file or its directory cannot be created or opened.
    pub fn open(jsonl: &Path, memory_cap: usize) -> std::io::Result<AuditLog> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // Created for the operator's group only: a tree (any uid) must not
        // read what other commands ran (an existing directory or file keeps
        // its mode: the package sets it).
        if let Some(dir) = jsonl.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(jsonl)?;
        let mut log = AuditLog::with_file(Some(file), memory_cap);
        // The chain goes on from the last whole line already there.
        if let Some(f) = &log.file {
            f.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .1 = super::chain::last_link(jsonl);
        }
        log.next_id.store(first_id(jsonl), Ordering::Relaxed);
        log.path = Some(jsonl.to_path_buf());
        Ok(log)
    }

    /// Opens the log's path afresh (SIGHUP, after a rotation renamed the
    /// file): later events go to the new file, none is lost between (the
    /// swap is under the writers' lock).
    ///
    /// # Errors
    /// The file cannot be created or opened (the old one stays in use).
    pub fn reopen(&self) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let (Some(file), Some(path)) = (&self.file, &self.path) else {
            return Ok(());
        };
        let fresh = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(path)?;
        // The chain goes on across the rotation: the new file's first line
        // carries the old file's last.
        file.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0 = fresh;
        Ok(())
    }

    /// A log whose file takes no write (opened read-only): every event is
    /// kept in memory, none reaches the file, and it is unhealthy from its
    /// first event (the `audit.on_failure: refuse` tests).
    #[cfg(test)]
    pub fn unwritable_for_tests(memory_cap: usize) -> AuditLog {
        let file = File::open("/dev/null").expect("/dev/null opens");
        AuditLog::with_file(Some(file), memory_cap)
    }

    /// Memory-only log (tests, `policy check`): ids from 1.
    pub fn in_memory(memory_cap: usize) -> AuditLog {
        AuditLog::with_file(None, memory_cap)
    }

    fn with_file(file: Option<File>, memory_cap: usize) -> AuditLog {
        AuditLog {
            next_id: AtomicU64::new(1),
            attempts: AtomicU64::new(0),
            file: file.map(|f| Mutex::new((f, None))),
            path: None,
            write_failures: AtomicU64::new(0),
            healthy: std::sync::atomic::AtomicBool::new(true),
            memory: Mutex::new(HashMap::new()),
            memory_cap: memory_cap.max(1),
            latest: tokio::sync::watch::Sender::new(0),
            export: std::sync::OnceLock::new(),
            owed: AtomicU64::new(0),
        }
    }

    /// Promises an event that is recorded after its call was answered (an
    /// allowed exec under `audit.on_failure: continue`): until the returned
    /// [`Owed`] is dropped, [`AuditLog::events`] waits, so a reader that saw
    /// the call's effects (the command ended) also sees its event. The file
    /// is not gated: its readers call [`AuditLog::settled`] first (the API
    /// does).
    pub fn owe(&self) -> Owed<'_> {
        self.owed.fetch_add(1, Ordering::AcqRel);
        Owed(self)
    }

    /// Waits until no promised event is outstanding (at most [`OWED_WAIT`],
    /// then says so in the log). Busy servers promise and record within
    /// microseconds, so a reader finds a moment with none.
    pub fn settled(&self) {
        let start = std::time::Instant::now();
        while self.owed.load(Ordering::Acquire) > 0 {
            if start.elapsed() > OWED_WAIT {
                tracing::warn!(
                    target: SINK,
                    "events read while {} promised ones were still unwritten after {:?}",
                    self.owed.load(Ordering::Relaxed),
                    OWED_WAIT
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// A new exec attempt number (see [`ExecEvent::attempt`]).
    pub fn next_attempt(&self) -> u64 {
        self.attempts.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records one event in every sink; returns it with its id.
    pub fn record(&self, session_id: &str, body: EventBody) -> Event {
        self.record_checked(session_id, body).0
    }

    /// An event of the server's rehearsal shell (`daemon::rehearsal`): made
    /// and serialized as any other, written nowhere, no id used up (id 0).
    fn rehearsed(&self, body: EventBody) -> Event {
        let event = Event {
            id: 0,
            timestamp: rfc3339_now(),
            session_id: agentsh_proto::shimconf::REHEARSAL_SESSION.to_string(),
            body,
        };
        let line = serde_json::to_string(&event).unwrap_or_default();
        tracing::debug!(target: SINK, event = %line, "rehearsal shell's event (not audited)");
        event
    }

    /// Whether the last write to the JSONL file succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Events the JSONL file could not take since start (each also said on
    /// the server's stderr).
    pub fn write_failures(&self) -> u64 {
        self.write_failures.load(Ordering::Relaxed)
    }

    /// [`AuditLog::record`], saying whether the event reached the JSONL file
    /// (always true without one). A write that fails leaves no partial line:
    /// the file is cut back to where the line began.
    pub fn record_checked(&self, session_id: &str, body: EventBody) -> (Event, bool) {
        if session_id == agentsh_proto::shimconf::REHEARSAL_SESSION {
            return (self.rehearsed(body), true);
        }
        let event = Event {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            timestamp: rfc3339_now(),
            session_id: session_id.to_string(),
            body,
        };
        let line = match serde_json::to_string(&event) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(target: SINK, "audit event {} cannot be serialized: {e}", event.id);
                return (event, false);
            }
        };
        let mut written = true;
        let mut line = line;
        if let Some(file) = &self.file {
            let healthy = &self.healthy;
            let mut guard = file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (f, link) = &mut *guard;
            // Chained: the line names the one before it (under the lock, so
            // the file's order is the chain's).
            line = super::chain::linked(&line, link.as_deref());
            // No length asked for per event: the file is appended to under
            // this lock only, so what a failed write left is the bytes it
            // wrote, cut back from the end (the length is read then). The
            // newline is the line's only while it is written.
            line.push('\n');
            let appended = append_whole(f, line.as_bytes());
            line.pop();
            if let Err((e, wrote)) = appended {
                written = false;
                let n = self.write_failures.fetch_add(1, Ordering::Relaxed) + 1;
                // Never a partial line: cut back to where this one began.
                let cut = cut_back(f, wrote).err().unwrap_or_default();
                // Not under the events' target, which stderr leaves out.
                tracing::error!(
                    target: SINK,
                    failures = n,
                    "audit JSONL write failed: {e}: event {} is not in the file{cut}",
                    event.id
                );
            } else {
                *link = Some(super::chain::digest(&line));
            }
            healthy.store(written, Ordering::Relaxed);
        }
        tracing::info!(target: "agentsh::audit", event = %line, "audit");
        if let Some(x) = self.export.get() {
            x.export(&event.session_id, event.id, &line);
        }
        {
            let mut mem = self
                .memory
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let q = mem.entry(event.session_id.clone()).or_default();
            if q.len() >= self.memory_cap {
                q.pop_front();
            }
            q.push_back(event.clone());
        }
        self.latest.send_replace(event.id);
        (event, written)
    }

    /// Exports every event from now on through `exporter` too (set once).
    pub fn export_to(&self, exporter: crate::otlp::Exporter) {
        if self.export.set(exporter).is_err() {
            tracing::error!(target: SINK, "the audit exporter was set twice: the first stays");
        }
    }

    /// The export's endpoint and its failed requests, if there is one.
    pub fn export_status(&self) -> Option<(String, u64)> {
        self.export
            .get()
            .map(|x| (x.endpoint().to_string(), x.failed_requests()))
    }

    /// Sends what the export has queued (at a stop).
    pub fn flush_export(&self) {
        if let Some(x) = self.export.get() {
            x.flush();
        }
    }

    /// Events of a session with an id above `after`, oldest first (promised
    /// ones included: [`AuditLog::settled`]).
    pub fn events(&self, session_id: &str, after: u64) -> Vec<Event> {
        self.settled();
        self.events_as_kept(session_id, after)
    }

    /// [`AuditLog::events`] without waiting for promised ones (what the
    /// memory window holds this instant).
    pub fn events_as_kept(&self, session_id: &str, after: u64) -> Vec<Event> {
        let mem = self
            .memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        mem.get(session_id)
            .map(|q| q.iter().filter(|e| e.id > after).cloned().collect())
            .unwrap_or_default()
    }

    /// Like [`AuditLog::events`], but waits up to `wait` for at least one
    /// (a parked future: a long-poll holds no thread).
    pub async fn wait_events(
        &self,
        session_id: &str,
        after: u64,
        wait: std::time::Duration,
    ) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.latest.subscribe();
        loop {
            let found = self.events(session_id, after);
            if !found.is_empty() {
                return found;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.events(session_id, after),
            }
        }
    }
}

/// Writes all of `buf` at the end of `f` (opened for appending). On an
/// error, how many bytes of `buf` were written before it.
fn append_whole(f: &mut std::fs::File, buf: &[u8]) -> Result<(), (std::io::Error, u64)> {
    use std::io::Write;
    let mut done = 0;
    while done < buf.len() {
        match f.write(&buf[done..]) {
            Ok(0) => {
                let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                return Err((e, done as u64));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err((e, done as u64)),
        }
    }
    Ok(())
}

/// Removes the last `wrote` bytes of `f` (a line cut short).
///
/// # Errors
/// What to add to the log line: the length could not be read or set.
fn cut_back(f: &std::fs::File, wrote: u64) -> Result<(), String> {
    if wrote == 0 {
        return Ok(());
    }
    let len = f
        .metadata()
        .map_err(|m| format!("; its length was unknown: {m}"))?
        .len();
    f.set_len(len.saturating_sub(wrote))
        .map_err(|c| format!("; cutting it back failed: {c}"))
}
