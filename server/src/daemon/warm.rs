//! Work done before the server answers so the first shell after `ready`
//! costs what later ones cost (issue 20): each session's wrap-init caches
//! (Landlock rulesets, daemon sockets to hide) and a tree thread's stack.
//!
//! Failure modes: none; what is not cached here is computed by the first
//! wrap-init that needs it, as it would have been.

/// Computes before the server answers what a wrap-init would otherwise
/// compute on its way (the Landlock ruleset of root and of each login user
/// in `/etc/passwd`, the daemon sockets to hide), so the first shell after
/// `ready` costs what later ones cost (issue 20). A result is kept only
/// once what it was read from has settled (see `policy::stamp`): the
/// directories the server just made have not, so a second try follows that
/// long after the first (about 0.1 s, while the identity index builds on its
/// own thread). What is still not kept then is computed by the first
/// wrap-init that needs it, as it would have been.
pub(super) fn caches(setup: &crate::session::Setup, run_dir: &std::path::Path) {
    const TRIES: usize = 2;
    let (landlock, daemon_sockets) = (&setup.landlock, &setup.daemon_sockets);
    let started = std::time::Instant::now();
    if !setup.policy.credential_files().hide.is_empty() {
        // Probed once; the first wrap-init need not wait for it.
        let _ = crate::api::credentials::user_namespace_mounts();
    }
    let uids = login_uids();
    let mut tries = 0;
    let all_kept = loop {
        tries += 1;
        for &uid in &uids {
            if !landlock.is_cached(uid) {
                landlock.compile(uid);
            }
        }
        if !daemon_sockets.is_cached() {
            daemon_sockets.hidden(setup.policy.daemon_sockets(), run_dir.to_str());
        }
        let kept = daemon_sockets.is_cached() && uids.iter().all(|&u| landlock.is_cached(u));
        if kept || tries == TRIES {
            break kept;
        }
        std::thread::sleep(crate::policy::landlock::SETTLE);
    };
    tracing::debug!(
        ?uids,
        tries,
        all_kept,
        ms = started.elapsed().as_millis() as u64,
        "wrap-init caches warmed"
    );
}

/// Starts and ends a thread as a tree's supervisor thread is started, so
/// the first tree's finds a stack ready (libc keeps those of ended threads).
pub(super) fn tree_thread() {
    let t = std::thread::Builder::new()
        .name("agentsh-tree".into())
        .spawn(|| std::hint::black_box([0u8; 64 * 1024])[0]);
    if let Ok(t) = t {
        let _ = t.join();
    }
}

/// Root, and each user of `/etc/passwd` with a uid from 1000 (how login
/// users are numbered) below `nobody`'s, as many as the ruleset cache keeps.
fn login_uids() -> Vec<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let mut uids = vec![0];
    for uid in passwd
        .lines()
        .filter_map(|l| l.split(':').nth(2)?.parse::<u32>().ok())
        .filter(|u| (1000..65534).contains(u))
    {
        if uids.len() < crate::policy::landlock::CACHED_UIDS && !uids.contains(&uid) {
            uids.push(uid);
        }
    }
    uids
}
