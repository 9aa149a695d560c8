//! The engine every lock object runs on: one per client.

pub(crate) mod hold;
pub(crate) mod hub;
pub(crate) mod lease;
pub(crate) mod lifecycle;
pub(crate) mod reentry;
pub(crate) mod replica_sync;
pub(crate) mod script;
pub(crate) mod unlock_latch;
pub(crate) mod wait;
pub(crate) mod watchdog;
