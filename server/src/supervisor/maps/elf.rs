//! Is a file a program image? Read from its ELF header, program headers and
//! dynamic section: `ET_EXEC`, or `ET_DYN` marked `DF_1_PIE` (a
//! position-independent program, static or dynamic). A shared library,
//! the dynamic loader, and anything that is not ELF are not programs.
//! (`libc.so.6` has a `PT_INTERP` and runs, printing its version; it is a
//! library all the same, and every dynamic program maps it.)
//!
//! Failure modes: a file that says it is ELF but whose headers lie outside
//! it or out of bounds is [`Kind::Malformed`]; the caller refuses it.

use std::os::unix::fs::FileExt;

/// What a file is, for an executable mapping of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A program image: run only through exec.
    Program,
    /// A library, the loader, or not ELF.
    Other,
    /// ELF whose headers cannot be read.
    Malformed,
}

const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
const DF_1_PIE: u64 = 0x0800_0000;
/// Bounds on what is read: program headers, and the dynamic section.
const MAX_PHNUM: usize = 512;
const MAX_DYNAMIC: usize = 64 * 1024;

/// Reads `f`'s headers (positioned reads: the tree's file offset is not
/// touched when `f` is a descriptor of its open file).
pub fn kind(f: &std::fs::File) -> Kind {
    let mut h = [0u8; 64];
    let n = read_at(f, &mut h, 0);
    if n < 4 || h[..4] != *b"\x7fELF" {
        return Kind::Other;
    }
    // Says it is ELF, too short to say which kind: not decided, refused.
    if n < 20 {
        return Kind::Malformed;
    }
    let Some(e) = Endian::of(&h) else {
        return Kind::Malformed;
    };
    match e.u16(&h[16..18]) {
        ET_EXEC => Kind::Program,
        ET_DYN if n == 64 || (!e.wide && n >= 52) => dyn_kind(f, &h, &e).unwrap_or(Kind::Malformed),
        ET_DYN => Kind::Malformed,
        _ => Kind::Other,
    }
}

/// An `ET_DYN` file: a program when its dynamic section says `DF_1_PIE`.
fn dyn_kind(f: &std::fs::File, h: &[u8; 64], e: &Endian) -> Option<Kind> {
    let (phoff, phentsize, phnum) = if e.wide {
        (e.u64(&h[32..40]), e.u16(&h[54..56]), e.u16(&h[56..58]))
    } else {
        (
            u64::from(e.u32(&h[28..32])),
            e.u16(&h[42..44]),
            e.u16(&h[44..46]),
        )
    };
    let (phentsize, phnum) = (usize::from(phentsize), usize::from(phnum));
    let min = if e.wide { 56 } else { 32 };
    if phentsize < min || phnum > MAX_PHNUM {
        return None;
    }
    let mut ph = vec![0u8; phentsize * phnum];
    if read_at(f, &mut ph, phoff) != ph.len() {
        return None;
    }
    for p in ph.chunks(phentsize) {
        if e.u32(&p[0..4]) != PT_DYNAMIC {
            continue;
        }
        let (off, size) = if e.wide {
            (e.u64(&p[8..16]), e.u64(&p[32..40]))
        } else {
            (u64::from(e.u32(&p[4..8])), u64::from(e.u32(&p[16..20])))
        };
        let size = usize::try_from(size).ok()?.min(MAX_DYNAMIC);
        let mut d = vec![0u8; size];
        let got = read_at(f, &mut d, off);
        let step = if e.wide { 16 } else { 8 };
        for entry in d[..got].chunks_exact(step) {
            let (tag, val) = if e.wide {
                (e.u64(&entry[0..8]), e.u64(&entry[8..16]))
            } else {
                (
                    u64::from(e.u32(&entry[0..4])),
                    u64::from(e.u32(&entry[4..8])),
                )
            };
            if tag == DT_NULL {
                break;
            }
            if tag == DT_FLAGS_1 {
                return Some(if val & DF_1_PIE != 0 {
                    Kind::Program
                } else {
                    Kind::Other
                });
            }
        }
        return Some(Kind::Other);
    }
    Some(Kind::Other)
}

/// Reads as much of `buf` as the file has at `off`.
fn read_at(f: &std::fs::File, buf: &mut [u8], off: u64) -> usize {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    done
}

/// The file's class and byte order.
struct Endian {
    wide: bool,
    little: bool,
}

impl Endian {
    fn of(h: &[u8; 64]) -> Option<Endian> {
        let wide = match h[4] {
            1 => false,
            2 => true,
            _ => return None,
        };
        let little = match h[5] {
            1 => true,
            2 => false,
            _ => return None,
        };
        Some(Endian { wide, little })
    }

    fn u16(&self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.little {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }

    fn u64(&self, b: &[u8]) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        if self.little {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(path: &str) -> Kind {
        kind(&std::fs::File::open(path).unwrap())
    }

    fn loaded(name: &str) -> String {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains(name))
            .unwrap()
            .to_string()
    }

    #[test]
    fn programs_are_programs_and_libraries_are_not() {
        let exe = std::fs::canonicalize("/bin/true").unwrap();
        assert_eq!(of(exe.to_str().unwrap()), Kind::Program);
        assert_eq!(
            of(&std::env::current_exe().unwrap().to_string_lossy()),
            Kind::Program
        );
        assert_eq!(of(&loaded("libc.so")), Kind::Other);
        assert_eq!(of(&loaded("/ld-")), Kind::Other);
        assert_eq!(of("/etc/hostname"), Kind::Other);
    }

    #[test]
    fn a_header_that_lies_is_malformed() {
        let exe = std::fs::canonicalize("/bin/true").unwrap();
        let mut bytes = std::fs::read(exe).unwrap();
        // e_phnum beyond the bound.
        bytes[56] = 0xff;
        bytes[57] = 0xff;
        let dir = std::env::temp_dir().join(format!("agentsh-elf-{}", std::process::id()));
        std::fs::write(&dir, &bytes).unwrap();
        let k = kind(&std::fs::File::open(&dir).unwrap());
        let _ = std::fs::remove_file(&dir);
        assert_eq!(k, Kind::Malformed);
    }
}
