//! A process's memory mappings, as far as the exec checks care: which
//! mapping holds an address (`PROCMAP_QUERY`, an ioctl on
//! `/proc/<pid>/maps`, Linux 6.11; parsing `/proc/<pid>/maps` on older
//! kernels), and whether the process has a Linux AIO ring.
//!
//! Failure modes: an address in no mapping, or maps that cannot be read, is
//! an error (the caller refuses the exec).

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `PROCMAP_QUERY`: `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;
const VMA_SHARED: u64 = 0x08;

/// `struct procmap_query` (include/uapi/linux/fs.h, Linux 6.11).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// One mapping, as far as this check cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub shared: bool,
    /// The backing file's inode (0: anonymous memory).
    pub inode: u64,
    /// The backing file's path as the kernel names it (may end in " (deleted)").
    pub name: String,
}

/// Whether the process whose maps `m` reads has a Linux AIO ring (an
/// `io_setup` context: the kernel writes the results of its submissions
/// into the process's memory whenever they complete). Asked only while some
/// process on the machine has AIO events allocated (`/proc/sys/fs/aio-nr`
/// above 0, one small read); then the maps are read through for `[aio]`.
///
/// # Errors
/// The maps cannot be read (the caller refuses the exec).
pub fn aio_ring(m: &mut Maps) -> io::Result<bool> {
    if !aio_in_use() {
        return Ok(false);
    }
    use std::io::Read;
    let mut text = String::new();
    let mut f = m.file.try_clone()?;
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0))?;
    f.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .any(|l| l.contains("/[aio]") || l.ends_with("[aio]")))
}

/// Whether any process has Linux AIO events allocated (unreadable: yes).
/// The file is kept open and read again (one `pread`: it runs per exec).
fn aio_in_use() -> bool {
    use std::os::unix::fs::FileExt;
    static AIO_NR: std::sync::OnceLock<Option<File>> = std::sync::OnceLock::new();
    let Some(f) = AIO_NR.get_or_init(|| File::open("/proc/sys/fs/aio-nr").ok()) else {
        return true;
    };
    let mut buf = [0u8; 32];
    match f.read_at(&mut buf, 0) {
        Ok(n) => std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .is_none_or(|n| n > 0),
        Err(_) => true,
    }
}

/// Finds mappings of one process, remembering those found.
pub struct Maps {
    file: File,
    query: bool,
    seen: Vec<Vma>,
}

impl Maps {
    /// Opens `/proc/<pid>/maps`.
    ///
    /// # Errors
    /// The process is gone or its maps cannot be read.
    pub fn open(pid: u32) -> io::Result<Maps> {
        let _owner = super::access::as_owner(pid);
        Ok(Maps::over(File::open(format!("/proc/{pid}/maps"))?))
    }

    /// Queries through a `/proc/<pid>/maps` already open (it answers about
    /// the address space it was opened on).
    pub fn over(file: File) -> Maps {
        Maps {
            file,
            query: true,
            seen: Vec::new(),
        }
    }

    /// The mapping holding `addr`.
    ///
    /// # Errors
    /// No mapping holds it, or the maps cannot be read.
    pub fn find(&mut self, addr: u64) -> io::Result<Vma> {
        if let Some(v) = self.seen.iter().find(|v| v.start <= addr && addr < v.end) {
            return Ok(v.clone());
        }
        let v = if self.query {
            // The name is only needed for a file mapping (rare for exec strings).
            let first = self.ioctl(addr, false);
            let first = match first {
                Ok(v) if v.inode != 0 => self.ioctl(addr, true),
                other => other,
            };
            match first {
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTTY | libc::EINVAL)) => {
                    self.query = false;
                    self.parse(addr)?
                }
                other => other?,
            }
        } else {
            self.parse(addr)?
        };
        self.seen.push(v.clone());
        Ok(v)
    }

    fn ioctl(&self, addr: u64, with_name: bool) -> io::Result<Vma> {
        let mut name = [0u8; 4096];
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_addr: addr,
            ..ProcmapQuery::default()
        };
        if with_name {
            q.vma_name_size = name.len() as u32;
            q.vma_name_addr = name.as_mut_ptr() as u64;
        }
        // SAFETY: `q` is a correctly sized procmap_query; the kernel writes
        // at most `vma_name_size` bytes to `name`, which outlives the call.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), PROCMAP_QUERY, &mut q) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("address {addr:#x} is in no mapping"),
                ));
            }
            return Err(e);
        }
        let name = if with_name && q.vma_name_size > 0 {
            CStr::from_bytes_until_nul(&name)
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Vma {
            start: q.vma_start,
            end: q.vma_end,
            shared: q.vma_flags & VMA_SHARED != 0,
            inode: q.inode,
            name,
        })
    }

    fn parse(&self, addr: u64) -> io::Result<Vma> {
        use std::io::{Read, Seek};
        let mut f = &self.file;
        f.seek(io::SeekFrom::Start(0))?;
        let mut text = String::new();
        f.read_to_string(&mut text)?;
        text.lines()
            .filter_map(parse_maps_line)
            .find(|v| v.start <= addr && addr < v.end)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("address {addr:#x} is in no mapping"),
                )
            })
    }
}

/// One line of `/proc/<pid>/maps`:
/// `start-end perms offset dev inode   name`.
fn parse_maps_line(line: &str) -> Option<Vma> {
    let mut it = line.splitn(6, ' ');
    let (start, end) = it.next()?.split_once('-')?;
    let perms = it.next()?;
    let _offset = it.next()?;
    let _dev = it.next()?;
    let inode = it.next()?.parse().ok()?;
    let name = it.next().unwrap_or("").trim_start().to_string();
    Some(Vma {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        shared: perms.as_bytes().get(3) == Some(&b's'),
        inode,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let v = parse_maps_line(
            "7f00-7f10 r--s 00000000 00:01 1234                       /memfd:x (deleted)",
        )
        .unwrap();
        assert_eq!(
            (v.start, v.end, v.shared, v.inode),
            (0x7f00, 0x7f10, true, 1234)
        );
        assert_eq!(v.name, "/memfd:x (deleted)");
        let v = parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0          [stack]").unwrap();
        assert!(!v.shared && v.inode == 0 && v.name == "[stack]");
        let v = parse_maps_line("1000-2000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(v.name, "");
    }

    #[test]
    fn finds_our_own_stack_and_a_shared_mapping() {
        let me = std::process::id();
        let mut maps = Maps::open(me).unwrap();
        let x = 5u64;
        let v = maps.find(&x as *const u64 as u64).unwrap();
        assert!(!v.shared && v.inode == 0, "{v:?}");
        // SAFETY: an anonymous shared mapping of one page, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let v = maps.find(p as u64).unwrap();
        assert!(v.shared, "{v:?}");
        // The fallback parser agrees.
        let parsed = maps.parse(p as u64).unwrap();
        assert_eq!((parsed.start, parsed.shared), (v.start, v.shared));
        // SAFETY: unmapping the page mapped above.
        unsafe { libc::munmap(p, 4096) };
        assert!(maps.parse(8).is_err());
    }
}
