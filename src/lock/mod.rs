//! The public lock objects, one file each, with their guards.

pub(crate) mod guard;
pub(crate) mod rlock;
