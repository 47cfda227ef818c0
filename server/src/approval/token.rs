//! The approval token: a random secret in a root-only file under the state
//! directory, which an operator's TCP client presents (`api::peer`).
//!
//! Failure modes: no randomness or an unwritable state directory is an
//! error at start; the server does not run without a token.

use std::path::{Path, PathBuf};

/// Name of the token file under the state directory.
pub const TOKEN_FILE: &str = "approval.token";

pub(super) fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut b = vec![0u8; bytes];
    let mut got = 0;
    while got < bytes {
        // SAFETY: getrandom writes at most `bytes - got` bytes into the tail of b.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), bytes - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes a fresh random token to `<state_dir>/approval.token` (mode 0600,
/// owned by the server's uid) and returns it. A token from an earlier run is
/// replaced, so a leaked old token is worthless after a restart.
///
/// # Errors
/// The state directory or the file cannot be created, or no randomness.
pub fn create_token_file(state_dir: &Path) -> std::io::Result<(String, PathBuf)> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(state_dir)?;
    let token = random_hex(32)?;
    let path = state_dir.join(TOKEN_FILE);
    let tmp = state_dir.join(format!(".{TOKEN_FILE}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok((token, path))
}
