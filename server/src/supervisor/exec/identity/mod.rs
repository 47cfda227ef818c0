//! Programs recognised by what they are: a byte-identical copy, hardlink or
//! rename of a program a command rule names is judged as that program.
//!
//! When the server starts, before it answers `/healthz` (see
//! [`prepare`]), every program a command rule names is located (a
//! bare name on the usual system `PATH` directories, an absolute path as is;
//! globs are not expanded), de-duplicated by canonical path (`/bin/curl` and
//! `/usr/bin/curl` on a usr-merged system are one file, hashed once), and
//! hashed (SHA-256) on up to four threads: the index maps each digest to the
//! programs with that content. Rules may also name content directly with a
//! `sha256:<hex>` entry in `commands` (no index needed: every executed file
//! is then hashed). No exec ever waits for the whole index.
//!
//! Programs that appear later (a package installed after start) are indexed
//! when they appear: the directories where named programs are looked for are
//! watched (inotify) for files created (symlinks, hard links), moved in or
//! closed after writing whose name a rule names, or which a named symlink
//! points to; such a file is queued and hashed on the watcher thread. So
//! that an exec never misses a program installed before it, an exec first
//! reads the events already queued (one non-blocking read) and hashes a
//! queued program itself only when its size is the executed file's (one
//! file, at most [`MAX_HASHED`]).
//!
//! Bounds: at most [`MAX_PROGRAMS`] programs are indexed (a program beyond
//! is logged and not indexed); a program larger than [`MAX_HASHED`] is
//! logged and not indexed (an executed file that large is not hashed
//! either); start-up hashes at most [`START_BYTES`], the rest is logged and
//! hashed on the watcher thread after the server is ready (until then an
//! exec hashes a queued program of its own size, as above); at most
//! [`MAX_WATCHES`] directories are watched (beyond: logged).
//!
//! At an exec, the file is looked up by its cheap key (device, inode, size,
//! mtime, ctime) in a bounded cache, and hashed only on a miss, and only
//! when its size is the size of an indexed program or the policy names
//! digests. A match adds the original's path and `sha256:<hex>` to what the
//! policy judges (`ExecFacts::copy_of`), the stricter verdict standing.
//!
//! What this does not catch: a program changed by one byte (a different
//! digest). That is bounded by Landlock, which decides where a tree may
//! execute files from and write them. Multi-call binaries (`busybox`,
//! `toybox`, or a file with more than 32 hard links, as busybox installs
//! itself) are not indexed: every applet has the same content, so a rule on
//! one applet would catch them all; the wrapper logic judges their applets.
//! Empty files are not indexed (every empty file would match).
//!
//! Failure modes: a file that cannot be read or hashed is not recognised (the
//! exec is judged by name, as before) and the reason is logged; a program the
//! policy names that does not exist here is simply not in the index (until
//! it appears in a watched directory); a directory that cannot be watched,
//! or an inotify queue that overflowed (everything named is then looked at
//! again), is logged with the reason.

mod error;
mod files;
mod index;
mod registry;

pub use error::IndexError;
pub use files::sha256_hex;
pub use index::{IdentityIndex, Recognised};
pub use registry::{index_for, prepare, Preparing, MAX_INDEXES};
