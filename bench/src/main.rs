//! `agentsh-bench`: what agentsh costs, measured side by side in one run.
//!
//! Run through `bench/run.sh` (it builds the release binaries, compiles the
//! static `hop`, fetches the configure workload and calls `agentsh-bench run`).
//! Everything happens in private mount namespaces (this machine's `/bin/sh`
//! is never touched): one with the shim installed as `/bin/sh` and a server
//! on the embedded defaults (policy `agent-default`), one without (the real
//! shell). Each pair is timed interleaved (A B A B ...) by one timer process,
//! whole processes from fork to wait, warm-up rounds discarded.
//!
//! Pairs: the nested path (timed by a timer that itself runs inside a
//! supervised tree), the install path, a 1000-exec shell loop, a real
//! `./configure`, and 64 trees at once; plus the supervisor's own time per
//! exec from its trace log. Every pair checks that what it timed really ran
//! supervised (audit events, wrap-init counts) and fails the run otherwise:
//! a benchmark of a bypass would be worse than none.
//!
//! `agentsh-bench time --spec FILE` is the timer (an internal mode).

mod compare;

use agentsh_tests::ns::Namespace;
use agentsh_tests::server::{bin, server_base, TestServer};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The real shell as the shim execs it (a link to `/bin/sh.real`, so `comm` is `sh`).
const REAL_SH: &str = agentsh_proto::install::REAL_SH;
const LOOP_1000: &str = "i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done";
const SCALE_TREES: usize = 64;
const SCALE_EXECS: usize = 200;

/// One command the timer runs: `argv` in the mount namespace `ns` (a
/// `/proc/<pid>/ns/mnt` path; `None`: the timer's own), after `prep` (untimed).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    label: String,
    argv: Vec<String>,
    ns: Option<String>,
    prep: Option<Vec<String>>,
    /// The namespace `prep` runs in (`None`: the timer's own).
    prep_ns: Option<String>,
    /// Run under a bare seccomp user-notify filter on execve/execveat whose
    /// listener (a thread of the timer) answers CONTINUE at once: the cost of
    /// the kernel mechanism alone, with no policy, no /proc reads, no audit.
    #[serde(default)]
    bare_notify: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Spec {
    rounds: usize,
    warmup: usize,
    entries: Vec<Entry>,
}

impl Spec {
    /// How many times each entry runs (warm-up included).
    fn runs(&self) -> usize {
        self.rounds + self.warmup
    }
}

/// Samples in nanoseconds per label, in the order the spec listed them.
type Samples = BTreeMap<String, Vec<u64>>;

// ---------------------------------------------------------------- the timer

fn spawn_in(ns: Option<&std::fs::File>, argv: &[String]) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(f) = ns {
        let fd = f.as_raw_fd();
        // SAFETY: runs in the forked child before exec; setns only.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

fn run_checked(ns: Option<&std::fs::File>, argv: &[String], what: &str) -> Result<(), String> {
    let out = spawn_in(ns, argv)
        .output()
        .map_err(|e| format!("{what}: cannot run {argv:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {argv:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Times every entry `rounds` times, interleaved, the starting entry rotating
/// each round so no entry always runs first (or right after another).
fn time(spec: &Spec) -> Result<Samples, String> {
    let open = |ns: &Option<String>| -> Result<Option<std::fs::File>, String> {
        match ns {
            Some(p) => Ok(Some(
                std::fs::File::open(p).map_err(|err| format!("open {p}: {err}"))?,
            )),
            None => Ok(None),
        }
    };
    let mut files = Vec::new();
    let mut prep_files = Vec::new();
    for e in &spec.entries {
        files.push(open(&e.ns)?);
        prep_files.push(open(&e.prep_ns)?);
    }
    let mut samples: Samples = spec
        .entries
        .iter()
        .map(|e| (e.label.clone(), Vec::with_capacity(spec.rounds)))
        .collect();
    let n = spec.entries.len();
    for round in 0..spec.warmup + spec.rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let e = &spec.entries[i];
            let ns = files[i].as_ref();
            if let Some(prep) = &e.prep {
                run_checked(prep_files[i].as_ref(), prep, &format!("{} (prep)", e.label))?;
            }
            let mut cmd = spawn_in(ns, &e.argv);
            let responder = if e.bare_notify {
                Some(bare_notify(&mut cmd).map_err(|err| format!("{}: {err}", e.label))?)
            } else {
                None
            };
            let t0 = Instant::now();
            let out = cmd
                .output()
                .map_err(|err| format!("{}: cannot run {:?}: {err}", e.label, e.argv))?;
            let dt = t0.elapsed();
            if let Some(r) = responder {
                let answered = r
                    .join()
                    .map_err(|_| format!("{}: the responder panicked", e.label))?;
                if answered == 0 {
                    return Err(format!("{}: the bare responder answered nothing", e.label));
                }
            }
            if !out.status.success() {
                return Err(format!(
                    "{}: {:?} failed ({}): {}",
                    e.label,
                    e.argv,
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            if round >= spec.warmup {
                samples
                    .get_mut(&e.label)
                    .expect("label")
                    .push(dt.as_nanos() as u64);
            }
        }
    }
    Ok(samples)
}

/// Makes `cmd` load a bare user-notify filter on execve/execveat before it
/// execs and send the listener here; the returned thread answers every
/// notification with CONTINUE until the tree has exited, and returns how
/// many it answered.
fn bare_notify(cmd: &mut Command) -> Result<std::thread::JoinHandle<u64>, String> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut sv = [0; 2];
    // SAFETY: sv has room for the two fds socketpair writes.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    } != 0
    {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created and are owned here.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    let child_end = theirs.as_raw_fd();
    // SAFETY: runs in the forked child before exec: prctl, seccomp, sendmsg
    // and close only, on memory prepared here.
    unsafe {
        cmd.pre_exec(move || {
            const RET_ALLOW: u32 = 0x7fff_0000;
            const RET_USER_NOTIF: u32 = 0x7fc0_0000;
            const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
            let f = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
            let prog = [
                f(0x20, 0, 0, 4), // A = arch
                f(0x15, 0, 3, AUDIT_ARCH_X86_64),
                f(0x20, 0, 0, 0), // A = nr
                f(0x15, 2, 0, libc::SYS_execve as u32),
                f(0x15, 1, 0, libc::SYS_execveat as u32),
                f(0x06, 0, 0, RET_ALLOW),
                f(0x06, 0, 0, RET_USER_NOTIF),
            ];
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &fprog as *const libc::sock_fprog,
            ) as i32;
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut space = [0u8; 64];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = space.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd);
            let sent = libc::sendmsg(child_end, &msg, 0);
            libc::close(fd);
            if sent < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(std::thread::spawn(move || {
        let _keep = theirs; // the child's end, open until the child has it
        respond_all(ours)
    }))
}

/// Receives the listener over `sock`, then answers CONTINUE until POLLHUP.
fn respond_all(sock: std::os::fd::OwnedFd) -> u64 {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u8; 64];
    // SAFETY: msghdr is plain data; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = space.len();
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n <= 0 {
        return 0;
    }
    // SAFETY: the kernel filled msg; the first header, if any, is ours.
    let fd = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
            return 0;
        }
        OwnedFd::from_raw_fd(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()))
    };
    let _ = agentsh_proto::notif::set_sync_wakeup(fd.as_fd());
    let mut answered = 0;
    loop {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, -1) } < 0 || pfd.revents & libc::POLLIN == 0 {
            return answered;
        }
        if let Ok(n) = agentsh_proto::notif::recv(fd.as_fd()) {
            if agentsh_proto::notif::respond_continue(fd.as_fd(), n.id).is_ok() {
                answered += 1;
            }
        }
    }
}

fn timer_main(spec_path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(spec_path).map_err(|e| format!("{spec_path}: {e}"))?;
    let spec: Spec = serde_json::from_str(&text).map_err(|e| format!("{spec_path}: {e}"))?;
    let samples = time(&spec)?;
    println!(
        "{}",
        serde_json::to_string(&samples).map_err(|e| e.to_string())?
    );
    Ok(())
}

// ---------------------------------------------------------------- statistics

#[derive(Debug, Clone, Copy, Serialize)]
struct Stats {
    n: usize,
    median_us: f64,
    p10_us: f64,
    p90_us: f64,
}

fn stats(v: &[u64]) -> Stats {
    let mut s = v.to_vec();
    s.sort_unstable();
    let at = |q: f64| -> f64 {
        if s.is_empty() {
            return f64::NAN;
        }
        let i = ((s.len() - 1) as f64 * q).round() as usize;
        s[i] as f64 / 1000.0
    };
    Stats {
        n: s.len(),
        median_us: at(0.5),
        p10_us: at(0.1),
        p90_us: at(0.9),
    }
}

// ---------------------------------------------------------------- the run

struct Opts {
    quick: bool,
    hop: PathBuf,
    tarball: Option<PathBuf>,
    out: PathBuf,
}

struct Report {
    md: String,
    json: serde_json::Map<String, Value>,
}

impl Report {
    fn line(&mut self, s: &str) {
        println!("{s}");
        self.md.push_str(s);
        self.md.push('\n');
    }

    /// A table of `samples` and the ratios named in `ratios` (label A, label B, target text).
    fn pair(
        &mut self,
        title: &str,
        key: &str,
        spec: &Spec,
        samples: &Samples,
        ratios: &[(&str, &str, &str)],
    ) {
        self.line(&format!("\n### {title}\n"));
        self.line("| command | n | median | p10 | p90 |");
        self.line("|---|---:|---:|---:|---:|");
        let mut js = serde_json::Map::new();
        for label in spec.entries.iter().map(|e| e.label.as_str()) {
            let st = stats(&samples[label]);
            self.line(&format!(
                "| {label} | {} | {} | {} | {} |",
                st.n,
                fmt_us(st.median_us),
                fmt_us(st.p10_us),
                fmt_us(st.p90_us)
            ));
            js.insert(label.to_string(), json!(st));
        }
        self.line("");
        let mut rs = Vec::new();
        for (a, b, target) in ratios {
            let (sa, sb) = (stats(&samples[*a]), stats(&samples[*b]));
            let r = sa.median_us / sb.median_us;
            let d = sa.median_us - sb.median_us;
            self.line(&format!(
                "* {a} / {b}: **{r:.2}×** (median difference {}){}",
                fmt_us(d),
                if target.is_empty() {
                    String::new()
                } else {
                    format!("; target {target}")
                }
            ));
            rs.push(json!({"a": a, "b": b, "ratio": r, "diff_us": d, "target": target}));
        }
        js.insert("ratios".into(), Value::Array(rs));
        self.json.insert(key.into(), Value::Object(js));
    }
}

fn fmt_us(us: f64) -> String {
    if us.abs() >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(std::string::ToString::to_string).collect()
}

fn entry(label: &str, argv: Vec<String>, ns: Option<&str>) -> Entry {
    Entry {
        label: label.into(),
        argv,
        ns: ns.map(str::to_string),
        prep: None,
        prep_ns: None,
        bare_notify: false,
    }
}

/// Runs the timer as a child of this process (unsupervised), or, with
/// `supervised`, as `/bin/sh -c 'exec timer ...'` in the shim namespace, so
/// the timer and everything it starts run in a supervised tree.
fn run_timer(
    ws: &Path,
    spec: &Spec,
    name: &str,
    supervised: Option<&Namespace>,
) -> Result<Samples, String> {
    let spec_path = ws.join(format!("{name}.json"));
    std::fs::write(
        &spec_path,
        serde_json::to_vec(spec).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", spec_path.display()))?;
    let timer = ws.join("bin/agentsh-bench");
    let out = match supervised {
        None => Command::new(&timer)
            .arg("time")
            .arg("--spec")
            .arg(&spec_path)
            .stdin(Stdio::null())
            .output(),
        Some(ns) => ns
            .command("/bin/sh")
            .arg("-c")
            .arg(format!(
                "exec {} time --spec {}",
                timer.display(),
                spec_path.display()
            ))
            .stdin(Stdio::null())
            .output(),
    }
    .map_err(|e| format!("timer {name}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "timer {name} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "timer {name}: unreadable output ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// What the audit trail gained while a spec ran.
struct Audited {
    execs: usize,
    wrap_inits: usize,
}

/// `(execve, wrap_init)` events in the audit trail so far.
fn audit_counts(path: &Path) -> (usize, usize) {
    let events = audit_lines(path);
    let count = |ty: &str| events.iter().filter(|e| e["type"] == ty).count();
    (count("execve"), count("wrap_init"))
}

/// [`run_timer`], and what the audit trail at `audit` gained meanwhile.
fn timed(
    ws: &Path,
    spec: &Spec,
    name: &str,
    supervised: Option<&Namespace>,
    audit: &Path,
) -> Result<(Samples, Audited), String> {
    let (execs0, inits0) = audit_counts(audit);
    let samples = run_timer(ws, spec, name, supervised)?;
    let (execs1, inits1) = audit_counts(audit);
    Ok((
        samples,
        Audited {
            execs: execs1 - execs0,
            wrap_inits: inits1 - inits0,
        },
    ))
}

/// utime + stime of `pid` in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem_gib = status_meminfo("MemTotal:") as f64 / 1024.0 / 1024.0;
    json!({"cpu": cpu, "kernel": kernel, "cores": cores, "mem_gib": (mem_gib * 10.0).round() / 10.0})
}

fn status_meminfo(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn copy_exec(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", to.display()))
}

fn start_server(ns: &Namespace, ws: &Path, log_filter: &str) -> TestServer {
    start_server_with(ns, ws, log_filter, "")
}

/// [`start_server`] with more config (e.g. `execve: {backend: ptrace}`).
fn start_server_with(ns: &Namespace, ws: &Path, log_filter: &str, extra: &str) -> TestServer {
    let filter = log_filter.to_string();
    TestServer::start_on_default_policy(
        &server_base(),
        &format!("workspace: {}\n{extra}", ws.display()),
        move |program| {
            let mut c = ns.command(program);
            c.env("AGENTSH_LOG", filter);
            c
        },
    )
}

fn run(o: &Opts) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (mount namespaces, seccomp listeners): sudo ./bench/run.sh".into());
    }
    let (nested_rounds, install_rounds, loop_rounds, conf_rounds) = if o.quick {
        (60, 40, 4, 1)
    } else {
        (400, 200, 15, 5)
    };
    let started = Instant::now();
    // The agent's workspace: under /srv, one of the roots the default policy
    // runs programs from (the timer itself runs in a supervised tree).
    let ws = PathBuf::from(format!("/srv/agentsh-bench/ws-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("bin")).map_err(|e| format!("{}: {e}", ws.display()))?;
    let cleanup = WsGuard(ws.clone());
    copy_exec(
        &std::env::current_exe().map_err(|e| e.to_string())?,
        &ws.join("bin/agentsh-bench"),
    )?;
    copy_exec(&o.hop, &ws.join("bin/hop"))?;
    let hop = ws.join("bin/hop").display().to_string();

    let shim_ns = Namespace::new();
    let plain_ns = Namespace::new();
    let shim_mnt = format!("/proc/{}/ns/mnt", ns_pid(&shim_ns));
    let plain_mnt = format!("/proc/{}/ns/mnt", ns_pid(&plain_ns));
    let srv = start_server(&shim_ns, &ws, "info");
    shim_ns.install_shim(false);
    shim_ns.configure(&srv.url, "on");
    let audit = srv.dir.path().join("audit.jsonl");

    let mut rep = Report {
        md: String::new(),
        json: serde_json::Map::new(),
    };
    let m = machine();
    rep.line(&format!(
        "Machine: {} ({} cores, {} GiB), Linux {}; {} run.",
        m["cpu"].as_str().unwrap_or("?"),
        m["cores"],
        m["mem_gib"],
        m["kernel"].as_str().unwrap_or("?"),
        if o.quick { "a quick" } else { "a full" }
    ));
    rep.json.insert("machine".into(), m);
    let shim_link = match Command::new("readelf")
        .arg("-l")
        .arg(bin("agentsh-shell-shim"))
        .output()
    {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains("INTERP") => "dynamic",
        Ok(o) if o.status.success() => "static-pie",
        _ => "unknown",
    };
    rep.line(&format!(
        "The shim is {shim_link} (packaging/build-release.sh builds it static-pie)."
    ));
    rep.json.insert("shim_link".into(), json!(shim_link));

    // 1. The nested path, timed from inside a supervised tree.
    let spec = Spec {
        rounds: nested_rounds,
        warmup: nested_rounds / 10 + 5,
        entries: vec![
            entry("shim sh -c true", s(&["/bin/sh", "-c", "true"]), None),
            entry(
                "hop → real sh -c true",
                s(&[&hop, REAL_SH, "-c", "true"]),
                None,
            ),
            entry("real sh -c true", s(&[REAL_SH, "-c", "true"]), None),
        ],
    };
    let (nested, got) = timed(&ws, &spec, "nested", Some(&shim_ns), &audit)?;
    let runs = spec.runs();
    // Every run of each entry is at least one audited exec; the shim runs
    // add no wrap-init (one: the timer's own tree).
    let (new_execs, new_inits) = (got.execs, got.wrap_inits);
    if new_execs < 3 * runs || new_inits != 1 {
        return Err(format!(
            "nested: expected ≥ {} audited execs and 1 wrap-init, saw {new_execs} and {new_inits}: the timer did not run supervised",
            3 * runs
        ));
    }
    rep.pair(
        "1. Nested path: `sh -c true` inside an already supervised tree",
        "nested",
        &spec,
        &nested,
        &[
            ("shim sh -c true", "hop → real sh -c true", "≤ 1.10×"),
            ("shim sh -c true", "real sh -c true", ""),
            ("hop → real sh -c true", "real sh -c true", ""),
        ],
    );
    rep.line(&format!(
        "\n(audited in that run: {new_execs} execs, {new_inits} wrap-init — the timer's own tree; the nested shims called no server.)"
    ));

    // 2. The install path, and the bare hop unsupervised.
    let spec = Spec {
        rounds: install_rounds,
        warmup: install_rounds / 10 + 5,
        entries: vec![
            entry(
                "shim sh -c true (install)",
                s(&["/bin/sh", "-c", "true"]),
                Some(&shim_mnt),
            ),
            entry(
                "real sh -c true",
                s(&["/bin/sh", "-c", "true"]),
                Some(&plain_mnt),
            ),
            entry(
                "hop → real sh -c true",
                s(&[&hop, "/bin/sh", "-c", "true"]),
                Some(&plain_mnt),
            ),
        ],
    };
    let (install, got) = timed(&ws, &spec, "install", None, &audit)?;
    let new_inits = got.wrap_inits;
    let runs = spec.runs();
    if new_inits != runs {
        return Err(format!(
            "install: expected {runs} wrap-inits, saw {new_inits}: the shim did not install supervision each time"
        ));
    }
    rep.pair(
        "2. Install path: the first shell of a tree (wrap-init, unixwrap, filter, Landlock, relay)",
        "install",
        &spec,
        &install,
        &[
            (
                "shim sh -c true (install)",
                "real sh -c true",
                "≤ real + 1.5 ms",
            ),
            ("hop → real sh -c true", "real sh -c true", ""),
        ],
    );
    rep.line(&format!(
        "\n({new_inits} wrap-inits audited, one per shim run.)"
    ));

    // 3. A loop of 1000 /bin/true, supervised and not.
    let spec = Spec {
        rounds: loop_rounds,
        warmup: 1,
        entries: vec![
            entry(
                "loop supervised",
                s(&["/bin/sh", "-c", LOOP_1000]),
                Some(&shim_mnt),
            ),
            entry(
                "loop unsupervised",
                s(&["/bin/sh", "-c", LOOP_1000]),
                Some(&plain_mnt),
            ),
            Entry {
                bare_notify: true,
                ..entry(
                    "loop, bare user-notify",
                    s(&["/bin/sh", "-c", LOOP_1000]),
                    Some(&plain_mnt),
                )
            },
        ],
    };
    let (looped, got) = timed(&ws, &spec, "loop", None, &audit)?;
    let runs = spec.runs();
    let new_execs = got.execs;
    if new_execs < 1000 * runs {
        return Err(format!(
            "loop: expected ≥ {} audited execs, saw {new_execs}",
            1000 * runs
        ));
    }
    rep.pair(
        "3. A shell loop of 1000 `/bin/true` (the supervised one includes its tree's install)",
        "loop",
        &spec,
        &looped,
        &[
            ("loop supervised", "loop unsupervised", "≤ 1.10×"),
            ("loop, bare user-notify", "loop unsupervised", ""),
            ("loop supervised", "loop, bare user-notify", ""),
        ],
    );
    rep.line(
        "\n(`bare user-notify`: the same loop under a seccomp filter whose listener, a thread of the timer, answers every exec with CONTINUE at once: the kernel mechanism alone, the floor any user-notify supervisor pays.)",
    );
    let per_exec = |l: &str| stats(&looped[l]).median_us / 1000.0;
    rep.line(&format!(
        "\nPer exec of the loop: {} supervised, {} under the bare user-notify filter, {} unsupervised: agentsh adds {}, of which the kernel mechanism is {}.",
        fmt_us(per_exec("loop supervised")),
        fmt_us(per_exec("loop, bare user-notify")),
        fmt_us(per_exec("loop unsupervised")),
        fmt_us(per_exec("loop supervised") - per_exec("loop unsupervised")),
        fmt_us(per_exec("loop, bare user-notify") - per_exec("loop unsupervised"))
    ));

    // 4. ./configure of a real autoconf package.
    if let Some(tarball) = &o.tarball {
        let cf = ws.join("cf");
        let prep = s(&[
            "/bin/sh",
            "-c",
            &format!(
                "rm -rf {d} && mkdir -p {d} && tar -xzf {t} -C {d} --strip-components=1",
                d = cf.display(),
                t = tarball.display()
            ),
        ]);
        let configure = format!("cd {} && ./configure >/dev/null", cf.display());
        let mut a = entry(
            "configure under the shim",
            s(&["/bin/sh", "-c", &configure]),
            Some(&shim_mnt),
        );
        a.prep = Some(prep.clone());
        let mut b = entry(
            "configure, real shell",
            s(&["/bin/sh", "-c", &configure]),
            Some(&plain_mnt),
        );
        // Prep in the plain namespace: untimed and unsupervised for both.
        b.prep = Some(prep);
        a.prep_ns = Some(plain_mnt.clone());
        b.prep_ns = Some(plain_mnt.clone());
        let spec = Spec {
            rounds: conf_rounds,
            warmup: 1,
            entries: vec![a, b],
        };
        let (conf, got) = timed(&ws, &spec, "configure", None, &audit)?;
        let runs = spec.runs();
        let new_execs = got.execs;
        rep.pair(
            &format!(
                "4. `./configure` of {} (fork/exec heavy)",
                tarball
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            "configure",
            &spec,
            &conf,
            &[(
                "configure under the shim",
                "configure, real shell",
                "≤ 1.15×",
            )],
        );
        rep.line(&format!(
            "\n({} execs audited per supervised configure.)",
            new_execs / runs.max(1)
        ));
        if new_execs < 100 * runs {
            return Err(format!(
                "configure: only {new_execs} audited execs in {runs} supervised runs"
            ));
        }
    } else {
        rep.line("\n### 4. configure: skipped (no --configure-tarball)");
    }

    // 5. 64 trees at once.
    scale(&mut rep, &shim_ns, &plain_ns, &srv, &audit)?;

    // 6. The ptrace backend beside notify.
    ptrace_backend(
        &mut rep,
        o,
        &ws,
        &Mounts {
            notify: &shim_mnt,
            plain: &plain_mnt,
        },
        (install_rounds, loop_rounds, conf_rounds),
    )?;

    // The supervisor's own time per exec, from its trace log (a second
    // server, so the trace lines cost the pairs above nothing).
    drop(srv);
    let srv = start_server(&shim_ns, &ws, "info,agentsh::supervisor=trace");
    shim_ns.configure(&srv.url, "on");
    let spec = Spec {
        rounds: if o.quick { 2 } else { 5 },
        warmup: 0,
        entries: vec![entry(
            "loop supervised (traced)",
            s(&["/bin/sh", "-c", LOOP_1000]),
            Some(&shim_mnt),
        )],
    };
    run_timer(&ws, &spec, "traced", None)?;
    let mut us: Vec<u64> = srv
        .log()
        .lines()
        .filter(|l| l.contains("exec answered"))
        .filter_map(|l| {
            let v = l.split("us=").nth(1)?;
            v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .collect();
    us.sort_unstable();
    if us.len() < 1000 {
        return Err(format!(
            "supervisor timing: only {} `exec answered` trace lines",
            us.len()
        ));
    }
    let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
    rep.line("\n### Supervisor time per exec (gather facts, policy, audit write, answer)\n");
    rep.line(&format!(
        "* {} execs: p50 **{} µs**, p90 {} µs, p99 {} µs; target p50 ≤ 25 µs",
        us.len(),
        q(0.5),
        q(0.9),
        q(0.99)
    ));
    rep.json.insert(
        "supervisor".into(),
        json!({"n": us.len(), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99)}),
    );
    spawner_times(
        &mut rep,
        &shim_ns,
        &srv,
        &ws,
        q(0.5),
        if o.quick { 300 } else { 1000 },
    )?;
    drop(srv);
    rep.line(&format!(
        "\n(whole run: {:.0} s)",
        started.elapsed().as_secs_f64()
    ));

    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    std::fs::write(o.out.join("results.md"), &rep.md).map_err(|e| e.to_string())?;
    std::fs::write(
        o.out.join("results.json"),
        serde_json::to_vec_pretty(&Value::Object(rep.json)).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    println!("\nwritten: {}/results.{{md,json}}", o.out.display());
    drop(cleanup);
    Ok(())
}

/// The mount namespaces the timer runs entries in.
struct Mounts<'a> {
    /// The shim installed, its server on the notify backend.
    notify: &'a str,
    /// No shim.
    plain: &'a str,
}

/// Step 6: the same shells under the ptrace backend (what gVisor/Modal
/// gets), side by side with notify and with no supervision: the install path, the
/// loop of 1000 execs and, with the tarball, `./configure`.
fn ptrace_backend(
    rep: &mut Report,
    o: &Opts,
    ws: &Path,
    m: &Mounts<'_>,
    (install_rounds, loop_rounds, conf_rounds): (usize, usize, usize),
) -> Result<(), String> {
    let ns = Namespace::new();
    let mnt = format!("/proc/{}/ns/mnt", ns_pid(&ns));
    let srv = start_server_with(&ns, ws, "info", "execve:\n  backend: ptrace\n");
    ns.install_shim(false);
    ns.configure(&srv.url, "on");
    let audit = srv.dir.path().join("audit.jsonl");
    let sh = |mnt: &str, label: &str, script: &str| {
        entry(label, s(&["/bin/sh", "-c", script]), Some(mnt))
    };
    let spec = Spec {
        rounds: install_rounds,
        warmup: install_rounds / 10 + 5,
        entries: vec![
            sh(&mnt, "install, ptrace", "true"),
            sh(m.notify, "install, notify", "true"),
            sh(m.plain, "real sh -c true", "true"),
        ],
    };
    let (install, got) = timed(ws, &spec, "ptrace-install", None, &audit)?;
    if got.wrap_inits != spec.runs() {
        return Err(format!(
            "ptrace install: expected {} wrap-inits on the ptrace server, saw {}",
            spec.runs(),
            got.wrap_inits
        ));
    }
    rep.pair(
        "6. The ptrace backend (gVisor, Modal) beside notify: the install path",
        "ptrace_install",
        &spec,
        &install,
        &[
            ("install, ptrace", "install, notify", ""),
            ("install, ptrace", "real sh -c true", ""),
        ],
    );
    let spec = Spec {
        rounds: loop_rounds,
        warmup: 1,
        entries: vec![
            sh(&mnt, "loop, ptrace", LOOP_1000),
            sh(m.notify, "loop, notify", LOOP_1000),
            sh(m.plain, "loop unsupervised", LOOP_1000),
        ],
    };
    let (looped, got) = timed(ws, &spec, "ptrace-loop", None, &audit)?;
    if got.execs < 1000 * spec.runs() {
        return Err(format!(
            "ptrace loop: expected ≥ {} audited execs, saw {}",
            1000 * spec.runs(),
            got.execs
        ));
    }
    rep.pair(
        "6b. The ptrace backend: a loop of 1000 `/bin/true`",
        "ptrace_loop",
        &spec,
        &looped,
        &[
            ("loop, ptrace", "loop, notify", ""),
            ("loop, ptrace", "loop unsupervised", ""),
        ],
    );
    let per_exec = |l: &str| stats(&looped[l]).median_us / 1000.0;
    rep.line(&format!(
        "\nPer exec of the loop: {} under ptrace, {} under notify, {} unsupervised.",
        fmt_us(per_exec("loop, ptrace")),
        fmt_us(per_exec("loop, notify")),
        fmt_us(per_exec("loop unsupervised")),
    ));
    let Some(tarball) = &o.tarball else {
        return Ok(());
    };
    let cf = ws.join("cf-ptrace");
    let prep = s(&[
        "/bin/sh",
        "-c",
        &format!(
            "rm -rf {d} && mkdir -p {d} && tar -xzf {t} -C {d} --strip-components=1",
            d = cf.display(),
            t = tarball.display()
        ),
    ]);
    let configure = format!("cd {} && ./configure >/dev/null", cf.display());
    let entries: Vec<Entry> = [
        (mnt.as_str(), "configure, ptrace"),
        (m.notify, "configure, notify"),
        (m.plain, "configure, real shell"),
    ]
    .into_iter()
    .map(|(ns, label)| {
        let mut e = sh(ns, label, &configure);
        e.prep = Some(prep.clone());
        e.prep_ns = Some(m.plain.to_string());
        e
    })
    .collect();
    let spec = Spec {
        rounds: conf_rounds,
        warmup: 1,
        entries,
    };
    let (conf, _) = timed(ws, &spec, "ptrace-configure", None, &audit)?;
    rep.pair(
        "6c. The ptrace backend: `./configure`",
        "ptrace_configure",
        &spec,
        &conf,
        &[
            ("configure, ptrace", "configure, notify", ""),
            ("configure, ptrace", "configure, real shell", ""),
        ],
    );
    Ok(())
}

/// The supervisor's own time per exec for callers whose memory is shared:
/// an exec from a multi-threaded process, and vfork'd children of a
/// process with a second thread (how Go, Java, Node and Python spawn). The
/// supervisor stops the other tasks before it reads the exec (see
/// `server/src/supervisor/sharing.rs`); `common_p50` is the figure above.
fn spawner_times(
    rep: &mut Report,
    ns: &Namespace,
    srv: &TestServer,
    ws: &Path,
    common_p50: u64,
    n: usize,
) -> Result<(), String> {
    let spawner = ws.join("bin/spawner");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("spawner.c");
    let out = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&spawner)
        .arg(&src)
        .output()
        .map_err(|e| format!("cc spawner.c: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc spawner.c: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    rep.line(
        "\n### Supervisor time per exec when the caller's memory is shared (tasks stopped first)\n",
    );
    for mode in ["threaded", "vfork"] {
        let before = srv.log().lines().count();
        let run = ns
            .command("/bin/sh")
            .arg("-c")
            .arg(format!("exec {} {mode} {n} /bin/true", spawner.display()))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("spawner {mode}: {e}"))?;
        if !run.status.success() {
            return Err(format!(
                "spawner {mode} failed: {}",
                String::from_utf8_lossy(&run.stderr).trim()
            ));
        }
        let mut us: Vec<u64> = srv
            .log()
            .lines()
            .skip(before)
            .filter(|l| l.contains("exec answered"))
            .filter_map(|l| {
                let v = l.split("us=").nth(1)?;
                v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
            })
            .collect();
        us.sort_unstable();
        if us.len() < n {
            return Err(format!(
                "spawner {mode}: only {} `exec answered` trace lines for {n} spawns",
                us.len()
            ));
        }
        let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
        rep.line(&format!(
            "* {mode} caller, {} execs: p50 **{} µs** ({:+} µs against the common case), p90 {} µs, p99 {} µs; target: within 25 µs of the common case",
            us.len(),
            q(0.5),
            q(0.5) as i64 - common_p50 as i64,
            q(0.9),
            q(0.99)
        ));
        rep.json.insert(
            format!("supervisor_{mode}"),
            json!({"n": us.len(), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99)}),
        );
    }
    Ok(())
}

/// Starts `SCALE_TREES` shells running `script` at once in `ns`; their pids
/// once all have exited, and the wall time.
fn run_trees(ns: &Namespace, script: &str) -> Result<(Vec<u32>, Duration), String> {
    let t0 = Instant::now();
    let mut children = Vec::new();
    for _ in 0..SCALE_TREES {
        let c = ns
            .command("/bin/sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("scale: spawn: {e}"))?;
        children.push(c);
    }
    let mut pids = Vec::new();
    for c in children {
        let pid = c.id();
        let out = c
            .wait_with_output()
            .map_err(|e| format!("scale: wait: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scale: tree {pid} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        pids.push(pid);
    }
    Ok((pids, t0.elapsed()))
}

fn scale(
    rep: &mut Report,
    ns: &Namespace,
    plain: &Namespace,
    srv: &TestServer,
    audit: &Path,
) -> Result<(), String> {
    let script = format!("i=0; while [ $i -lt {SCALE_EXECS} ]; do /bin/true; i=$((i+1)); done");
    // The same load without agentsh first, for the ratio.
    let (_, plain_wall) = run_trees(plain, &script)?;
    let before = audit_lines(audit).len();
    let cpu0 = cpu_seconds(srv.pid());
    let (pids, wall) = run_trees(ns, &script)?;
    let cpu = cpu_seconds(srv.pid()) - cpu0;
    // The audit is written before each answer, so it is complete now; give
    // the file system a moment anyway before counting.
    std::thread::sleep(Duration::from_millis(200));
    let events = audit_lines(audit);
    let new = &events[before.min(events.len())..];
    let mut per_tree: BTreeMap<u32, usize> = pids.iter().map(|p| (*p, 0)).collect();
    let mut ids = std::collections::HashSet::new();
    let mut dup = 0;
    for e in new.iter().filter(|e| e["type"] == "execve") {
        if !ids.insert(e["id"].to_string()) {
            dup += 1;
        }
        let parent = e["parent_pid"].as_u64().unwrap_or(0) as u32;
        let is_true = e["filename"].as_str().is_some_and(|f| f.ends_with("/true"));
        if is_true {
            if let Some(n) = per_tree.get_mut(&parent) {
                *n += 1;
            }
        }
    }
    let wrong: Vec<_> = per_tree
        .iter()
        .filter(|(_, n)| **n != SCALE_EXECS)
        .collect();
    let execs = SCALE_TREES * SCALE_EXECS;
    rep.line(&format!(
        "\n### 5. Scale: {SCALE_TREES} supervised trees at once, {SCALE_EXECS} execs of `/bin/true` each\n"
    ));
    rep.line(&format!(
        "* {execs} execs in {:.2} s: **{:.0} execs/s**; server CPU {:.2} s ({:.0} µs per exec); server peak RSS {} MiB",
        wall.as_secs_f64(),
        execs as f64 / wall.as_secs_f64(),
        cpu,
        cpu * 1e6 / execs as f64,
        status_kib(srv.pid(), "VmHWM:") / 1024
    ));
    rep.line(&format!(
        "* the same {execs} execs without agentsh: {:.2} s, {:.0} execs/s: supervised / unsupervised wall time **{:.2}×**",
        plain_wall.as_secs_f64(),
        execs as f64 / plain_wall.as_secs_f64(),
        wall.as_secs_f64() / plain_wall.as_secs_f64()
    ));
    rep.line(&format!(
        "* audited exactly once: {} of {SCALE_TREES} trees have exactly {SCALE_EXECS} `/bin/true` events; duplicate event ids: {dup}",
        SCALE_TREES - wrong.len()
    ));
    rep.json.insert(
        "scale".into(),
        json!({
            "trees": SCALE_TREES, "execs_per_tree": SCALE_EXECS,
            "wall_s": wall.as_secs_f64(), "execs_per_s": execs as f64 / wall.as_secs_f64(),
            "unsupervised_wall_s": plain_wall.as_secs_f64(),
            "server_cpu_s": cpu, "server_vmhwm_kib": status_kib(srv.pid(), "VmHWM:"),
            "trees_audited_exactly": SCALE_TREES - wrong.len(), "duplicate_ids": dup,
        }),
    );
    if !wrong.is_empty() || dup != 0 {
        return Err(format!(
            "scale: audit is not exactly once per exec: {wrong:?} (tree pid, events), {dup} duplicate ids"
        ));
    }
    Ok(())
}

/// `agentsh-bench compare`: a workspace under /srv (as `run` has), the
/// comparison, the table printed and written to `--out`.
fn run_compare(o: &compare::CompareOpts) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (mount namespaces, seccomp listeners)".into());
    }
    let ws = PathBuf::from(format!("/srv/agentsh-bench/ws-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("bin")).map_err(|e| format!("{}: {e}", ws.display()))?;
    let cleanup = WsGuard(ws.clone());
    let md = compare::run(o, &ws)?;
    println!("{md}");
    if let Some(out) = &o.out {
        std::fs::write(out, &md).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    drop(cleanup);
    Ok(())
}

fn ns_pid(ns: &Namespace) -> String {
    // Namespace::path gives /proc/<holder>/root<p>; take the holder's pid from it.
    let p = ns.path("/");
    p.to_string_lossy()
        .trim_start_matches("/proc/")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

struct WsGuard(PathBuf);

impl Drop for WsGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // /srv/agentsh-bench itself, unless another run is using it.
        if let Some(parent) = self.0.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

const USAGE: &str =
    "usage: agentsh-bench run --hop PATH [--configure-tarball PATH] [--out DIR] [--quick]
       (normally through: sudo ./bench/run.sh [--quick])
       agentsh-bench compare --server LABEL=PATH [--server LABEL=PATH ...] [--rounds R] [--n N] [--only W,..] [--out FILE]
                                        (the supervisor's time per exec of several server builds,
                                         side by side: see bench/src/compare.rs)
       agentsh-bench time --spec FILE   (internal: the timer)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("time") if args.len() == 3 && args[1] == "--spec" => timer_main(&args[2]),
        Some("run") => parse_run(&args[1..]).and_then(|o| run(&o)),
        Some("compare") => compare::parse(&args[1..]).and_then(|o| run_compare(&o)),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentsh-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_run(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        quick: false,
        hop: PathBuf::new(),
        tarball: None,
        out: PathBuf::from("target/bench"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--quick" => o.quick = true,
            "--hop" => o.hop = PathBuf::from(val("--hop")?),
            "--configure-tarball" => o.tarball = Some(PathBuf::from(val("--configure-tarball")?)),
            "--out" => o.out = PathBuf::from(val("--out")?),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.hop.as_os_str().is_empty() {
        return Err(format!("--hop is required\n{USAGE}"));
    }
    Ok(o)
}
