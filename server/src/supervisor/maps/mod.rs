//! The maps family: where a policy judges executable file mappings
//! (`exec_memory: deny`, `exec_sources: {writable: deny}`), the filter hands
//! every `mmap` of a file with `PROT_EXEC` (neither writable nor anonymous:
//! the filter refuses those itself under `exec_memory: deny`) here
//! (`agentsh_proto::mapabi`). The file behind the fd is judged, with the
//! caller's fd table held still until the kernel has looked the fd up
//! (`fdhold`):
//!
//! * `exec_sources: {writable: deny}`: nothing beneath a place the tree can
//!   write is mapped as code (a library the tree wrote, loaded by an
//!   installed program: `ctypes.CDLL`, `LD_PRELOAD`, `LD_AUDIT`, a gconv
//!   module). Landlock's execute right covers `execve` only.
//! * `exec_memory: deny`: no program image is mapped by hand (`elf`): a
//!   program runs only through exec, where it is judged. The kernel maps a
//!   program and its loader at exec without this call; the loader maps
//!   libraries, which are no programs.
//!
//! What it does not watch: library code. A library an installed program
//! loads runs in that program (python's ctypes with `libcurl` is curl's
//! function without curl's exec); its effects are judged where they land
//! (egress, Landlock). A file that is not ELF but lies outside the tree's
//! writable places is mapped as asked.
//!
//! Failure modes: see `handle`.

mod elf;
mod handle;
#[cfg(test)]
mod tests;

pub use handle::{handle, MapsState};

/// The mapping calls the filter sends here.
pub use agentsh_proto::mapabi::classify;
