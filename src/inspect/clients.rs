//! Who the holders and waiters of an object are: each client id's entry in
//! the client registry (see `engine::registry`), one read per client.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::join_all;

use super::{ObjectState, ObjectSummary};
use crate::engine::registry::{self, ClientIdentity};
use crate::engine::Engine;
use crate::error::Result;

/// Each client's identity, `None` where it did not register; a client whose
/// entry cannot be read (an ACL without the registry's keys) is left out:
/// unknown, and never an error.
pub(super) async fn identities(
    engine: &Engine,
    ids: BTreeSet<String>,
) -> Result<BTreeMap<String, Option<ClientIdentity>>> {
    let found = join_all(
        ids.iter()
            .map(|id| registry::identity_if_readable(engine, id)),
    )
    .await;
    Ok(ids
        .into_iter()
        .zip(found)
        .filter_map(|(id, identity)| Some((id, identity?)))
        .collect())
}

/// The clients an object's state names: holders, a writer, readers, a fair
/// lock's waiters, a group's members.
pub(super) fn of_state(state: &ObjectState) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    match state {
        ObjectState::Lock(lock) => ids.extend(lock.holders.iter().map(|h| h.client_id.clone())),
        ObjectState::FencedLock(lock) => {
            ids.extend(lock.holders.iter().map(|h| h.client_id.clone()))
        }
        ObjectState::FairLock(fair) => {
            ids.extend(fair.holders.iter().map(|h| h.client_id.clone()));
            ids.extend(fair.queue.iter().map(|w| w.client_id.clone()));
        }
        ObjectState::ReadWriteLock(rw) => {
            ids.extend(rw.writer.iter().map(|h| h.client_id.clone()));
            ids.extend(rw.readers.iter().map(|r| r.holder.client_id.clone()));
        }
        ObjectState::MultiLockGroup(group) => {
            ids.extend(group.members.iter().map(|m| m.holder.client_id.clone()))
        }
        _ => {}
    }
    ids
}

/// The clients a summary names: holders and a writer.
pub(super) fn of_summary(summary: &ObjectSummary) -> BTreeSet<String> {
    summary
        .holders
        .iter()
        .chain(&summary.writer)
        .map(|h| h.client_id.clone())
        .collect()
}
