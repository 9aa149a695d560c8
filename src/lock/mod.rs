//! The public lock objects and the value types they share. [`Lock<K>`](handle::Lock)
//! is the handle every lock kind is (lock_api-style: the operations once,
//! the protocol in the kind); each kind's file (`rlock.rs`, `fair.rs`,
//! `read_write.rs`) holds its alias, its `LockKind` for the engine (scripts,
//! keys, channel) and what only it has. One guard, [`LockGuard`], for all.

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod group;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod multi;
pub(crate) mod non_reentrant;
pub(crate) mod read_write;
pub(crate) mod rlock;
pub(crate) mod spin;

pub use crate::engine::raw::{Holder, Ttl, Unlocked};
pub use guard::LockGuard;

#[cfg(test)]
mod tests {
    use super::handle::sealed::Sealed;

    /// Kinds are told apart by name in logs and metrics.
    #[test]
    fn every_kind_has_its_own_name() {
        let kinds = [
            super::rlock::Reentrant::describe().0,
            super::fair::Fair::describe().0,
            super::read_write::Read::describe().0,
            super::read_write::Write::describe().0,
            super::fenced::Fenced::describe().0,
            super::spin::Spin::describe().0,
            super::non_reentrant::NonReentrant::describe().0,
            super::non_reentrant::NonReentrantFair::describe().0,
            &super::group::GROUP,
        ];
        let names: std::collections::BTreeSet<&str> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), kinds.len());
    }
}
