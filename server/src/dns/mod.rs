//! The DNS stub of `egress.dns: stub`: which names a tree may resolve, and
//! which names each tree resolved to which addresses (so `hosts` rules can
//! match a connect by the name the tree itself asked for).
//!
//! Failure modes: see [`stub`]; nothing here panics on a packet.

pub mod book;
pub mod packet;
pub mod stub;

pub use book::{Book, Querier, TreeNames};
pub use stub::Stub;
