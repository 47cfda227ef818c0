//! The ptrace requests of the tracer thread, and a tracee's registers at a
//! seccomp stop (x86_64: `PTRACE_GETREGS`/`SETREGS`; the filter's arch tells
//! compat tasks apart by their code segment).
//!
//! Only x86_64 is implemented: elsewhere [`Regs::get`] fails, so a seccomp
//! stop kills its tracee (fail closed), and `agentsh detect` reports the
//! backend as unavailable.
//!
//! Failure modes: every request returns the kernel's errno (ESRCH: the
//! tracee is gone or not stopped).

use std::io;

use crate::supervisor::ptrace::request;
pub use crate::supervisor::ptrace::{interrupt, seize};

/// Resumes a stopped tracee into its syscall, to stop again when it
/// returns (`PTRACE_SYSCALL`: the syscall-exit stop, `SIGTRAP | 0x80`).
///
/// # Errors
/// ESRCH: not stopped, or gone.
pub fn syscall(tid: u32) -> io::Result<()> {
    request(libc::PTRACE_SYSCALL, tid, 0, 0)
}

/// Resumes a stopped tracee, delivering `signal` (0: none).
///
/// # Errors
/// ESRCH: not stopped, or gone.
pub fn cont(tid: u32, signal: i32) -> io::Result<()> {
    request(libc::PTRACE_CONT, tid, 0, signal as usize)
}

/// `PTRACE_GET_SYSCALL_INFO` of a stopped tracee: its first 88 bytes;
/// `None` where the kernel has no such request (gVisor: EIO), which is
/// then never asked again (a request is a sandbox syscall there, the
/// dearest thing).
fn syscall_info(tid: u32) -> Option<[u8; 88]> {
    use std::sync::atomic::{AtomicBool, Ordering};
    const PTRACE_GET_SYSCALL_INFO: libc::c_uint = 0x420e;
    static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return None;
    }
    let mut info = [0u8; 88];
    // SAFETY: the kernel writes at most `info.len()` bytes into our buffer.
    let n = unsafe {
        libc::ptrace(
            PTRACE_GET_SYSCALL_INFO,
            tid as libc::pid_t,
            info.len(),
            info.as_mut_ptr(),
        )
    };
    if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EIO) {
        UNSUPPORTED.store(true, Ordering::Relaxed);
    }
    (n >= 8).then_some(info)
}

/// Whether a tracee's syscall stop (`SIGTRAP | 0x80`) is the call's entry
/// rather than its exit: `PTRACE_GET_SYSCALL_INFO` where the kernel has it;
/// else (gVisor) the return register, which holds `-ENOSYS` at entry (a
/// call that returned ENOSYS looks the same: the caller then waits one
/// stop longer, never less).
pub fn at_syscall_entry(tid: u32) -> bool {
    const OP_ENTRY: u8 = 1;
    if let Some(info) = syscall_info(tid) {
        return info[0] == OP_ENTRY;
    }
    Regs::get(tid).is_ok_and(|r| r.returns_enosys())
}

/// The `AUDIT_ARCH_*` the kernel says the call a stopped tracee is in was
/// made in (`PTRACE_GET_SYSCALL_INFO`: a 64-bit task's `int 0x80` is
/// i386's); `None` where the kernel cannot say (gVisor).
pub fn kernel_arch(tid: u32) -> Option<u32> {
    syscall_info(tid).map(|i| u32::from_ne_bytes([i[4], i[5], i[6], i[7]]))
}

/// Leaves a tracee in its group-stop but reports when the stop ends.
///
/// # Errors
/// ESRCH: not in a group-stop, or gone.
pub fn listen(tid: u32) -> io::Result<()> {
    request(libc::PTRACE_LISTEN, tid, 0, 0)
}

/// `PTRACE_GETEVENTMSG`: the filter's data at a seccomp stop, the new task
/// at a fork event, the former thread id at an exec event.
///
/// # Errors
/// ESRCH: not stopped, or gone.
pub fn event_msg(tid: u32) -> io::Result<u64> {
    let mut msg: libc::c_ulong = 0;
    request(
        libc::PTRACE_GETEVENTMSG,
        tid,
        0,
        (&mut msg as *mut libc::c_ulong) as usize,
    )?;
    #[allow(clippy::useless_conversion)] // c_ulong is u32 on 32-bit targets
    Ok(u64::from(msg))
}

/// A tracee's registers at a syscall stop.
#[derive(Clone, Copy)]
pub struct Regs {
    #[cfg(target_arch = "x86_64")]
    r: libc::user_regs_struct,
}

#[cfg(target_arch = "x86_64")]
impl Regs {
    /// The code segment of a 32-bit (i386) task on x86_64.
    const CS_COMPAT: u64 = 0x23;

    /// # Errors
    /// ESRCH: not stopped, or gone.
    pub fn get(tid: u32) -> io::Result<Regs> {
        // SAFETY: user_regs_struct is plain data; the kernel fills it.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        request(
            libc::PTRACE_GETREGS,
            tid,
            0,
            (&mut r as *mut libc::user_regs_struct) as usize,
        )?;
        Ok(Regs { r })
    }

    /// The `AUDIT_ARCH_*` and number of the syscall (x32's carry their bit).
    pub fn arch_nr(&self) -> (u32, i32) {
        let arch = if self.r.cs == Self::CS_COMPAT {
            agentsh_proto::execabi::AUDIT_ARCH_I386
        } else {
            agentsh_proto::execabi::AUDIT_ARCH_X86_64
        };
        (arch, self.r.orig_rax as i32)
    }

    /// The return register holds `-ENOSYS` (what a syscall-entry stop shows).
    pub fn returns_enosys(&self) -> bool {
        self.r.rax == (-i64::from(libc::ENOSYS)) as u64
    }

    /// What the call returned, at its syscall-exit stop (`-errno` on
    /// failure; a 32-bit caller's, sign-extended).
    pub fn returned(&self) -> i64 {
        if self.r.cs == Self::CS_COMPAT {
            i64::from(self.r.rax as u32 as i32)
        } else {
            self.r.rax as i64
        }
    }

    /// The six syscall arguments in the ABI's registers.
    pub fn args(&self) -> [u64; 6] {
        let r = &self.r;
        if r.cs == Self::CS_COMPAT {
            let low = |v: u64| v & 0xffff_ffff;
            [
                low(r.rbx),
                low(r.rcx),
                low(r.rdx),
                low(r.rsi),
                low(r.rdi),
                low(r.rbp),
            ]
        } else {
            [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9]
        }
    }

    /// Whether the call is of the native ABI (not a 32-bit task's, not
    /// x32's): its arguments are 64-bit registers.
    pub fn native(&self) -> bool {
        const X32_BIT: u64 = 0x4000_0000;
        self.r.cs != Self::CS_COMPAT && self.r.orig_rax & X32_BIT == 0
    }

    /// Sets native argument `i` (0–5).
    pub fn set_arg(&mut self, i: usize, v: u64) {
        let r = &mut self.r;
        match i {
            0 => r.rdi = v,
            1 => r.rsi = v,
            2 => r.rdx = v,
            3 => r.r10 = v,
            4 => r.r8 = v,
            _ => r.r9 = v,
        }
    }

    /// The call this stop is in becomes native syscall `nr` with `args`.
    pub fn make_call(&mut self, nr: u64, args: [u64; 6]) {
        self.r.orig_rax = nr;
        for (i, a) in args.into_iter().enumerate() {
            self.set_arg(i, a);
        }
    }

    /// At a syscall-exit stop, with these registers (those of the call's
    /// seccomp stop): the call the stop was in runs again from its start
    /// once resumed (its instruction comes again with its number and
    /// arguments; both syscall instructions are two bytes).
    pub fn again_from_exit(&mut self) {
        self.r.rax = self.r.orig_rax;
        self.r.orig_rax = u64::MAX;
        self.r.rip = self.r.rip.wrapping_sub(2);
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl Regs {
    /// # Errors
    /// Always: only x86_64 is implemented.
    pub fn get(_tid: u32) -> io::Result<Regs> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the ptrace backend is implemented for x86_64 only",
        ))
    }

    pub fn arch_nr(&self) -> (u32, i32) {
        (0, -1)
    }

    pub fn returns_enosys(&self) -> bool {
        false
    }

    pub fn returned(&self) -> i64 {
        0
    }

    pub fn args(&self) -> [u64; 6] {
        [0; 6]
    }

    pub fn native(&self) -> bool {
        false
    }

    pub fn set_arg(&mut self, _i: usize, _v: u64) {}

    pub fn make_call(&mut self, _nr: u64, _args: [u64; 6]) {}

    pub fn again_from_exit(&mut self) {}
}

/// Makes the syscall the tracee is stopped in fail with `errno` without
/// running it (the syscall number becomes -1, the return value `-errno`).
///
/// # Errors
/// The registers cannot be read or written (the tracee is gone).
#[cfg(target_arch = "x86_64")]
pub fn skip_syscall(tid: u32, errno: i32) -> io::Result<()> {
    skip_with(tid, -i64::from(errno))
}

/// Makes the syscall the tracee is stopped in return `val` without running
/// it (`val < 0`: `-errno`; a call performed on its behalf).
///
/// # Errors
/// The registers cannot be read or written (the tracee is gone).
#[cfg(target_arch = "x86_64")]
pub fn skip_with(tid: u32, val: i64) -> io::Result<()> {
    let mut regs = Regs::get(tid)?;
    regs.r.orig_rax = u64::MAX;
    regs.r.rax = val as u64;
    request(
        libc::PTRACE_SETREGS,
        tid,
        0,
        (&regs.r as *const libc::user_regs_struct) as usize,
    )
}

/// Sets the return value of the syscall the tracee is stopped at the exit
/// of (`val < 0`: `-errno`).
///
/// # Errors
/// The registers cannot be read or written (the tracee is gone).
#[cfg(target_arch = "x86_64")]
pub fn set_returned(tid: u32, val: i64) -> io::Result<()> {
    let mut regs = Regs::get(tid)?;
    regs.r.rax = val as u64;
    set(tid, &regs)
}

/// Makes the syscall the tracee is stopped in (at its seccomp stop) run
/// again from its start once resumed: it is skipped now, and the
/// instruction that made it comes again with the same number and
/// arguments, as the kernel restarts a call a signal interrupted (both
/// syscall instructions, `syscall` and `int 0x80`, are two bytes).
///
/// # Errors
/// The registers cannot be read or written (the tracee is gone).
#[cfg(target_arch = "x86_64")]
pub fn restart(tid: u32) -> io::Result<()> {
    let mut regs = Regs::get(tid)?;
    regs.r.rax = regs.r.orig_rax;
    regs.r.orig_rax = u64::MAX;
    regs.r.rip = regs.r.rip.wrapping_sub(2);
    set(tid, &regs)
}

/// Writes `regs` into the stopped tracee `tid`.
///
/// # Errors
/// ESRCH: not stopped, or gone.
#[cfg(target_arch = "x86_64")]
pub fn set(tid: u32, regs: &Regs) -> io::Result<()> {
    request(
        libc::PTRACE_SETREGS,
        tid,
        0,
        (&regs.r as *const libc::user_regs_struct) as usize,
    )
}

/// # Errors
/// Always: only x86_64 is implemented.
#[cfg(not(target_arch = "x86_64"))]
pub fn set_returned(_tid: u32, _val: i64) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the ptrace backend is implemented for x86_64 only",
    ))
}

/// # Errors
/// Always: only x86_64 is implemented.
#[cfg(not(target_arch = "x86_64"))]
pub fn restart(_tid: u32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the ptrace backend is implemented for x86_64 only",
    ))
}

/// # Errors
/// Always: only x86_64 is implemented.
#[cfg(not(target_arch = "x86_64"))]
pub fn skip_with(_tid: u32, _val: i64) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the ptrace backend is implemented for x86_64 only",
    ))
}

/// # Errors
/// Always: only x86_64 is implemented.
#[cfg(not(target_arch = "x86_64"))]
pub fn skip_syscall(_tid: u32, _errno: i32) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the ptrace backend is implemented for x86_64 only",
    ))
}

/// # Errors
/// Always: only x86_64 is implemented.
#[cfg(not(target_arch = "x86_64"))]
pub fn set(_tid: u32, _regs: &Regs) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the ptrace backend is implemented for x86_64 only",
    ))
}
