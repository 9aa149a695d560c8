//! Scoped re-entry: the holds a flow of work is inside of.
//!
//! A [`crate::LockGuard::scope`] runs a future with a task-local record of
//! (client, lock name, owner). An acquisition of the same lock through the
//! same client inside that future re-enters with that owner (the hold count
//! goes up, as a nested `lock()` in one Java thread does); anywhere else an
//! acquisition gets an owner of its own. Task-locals follow the future they
//! wrap, not the task, so two futures joined in one task see only their own
//! scopes, and a task spawned inside a scope starts outside it.
//!
//! The blocking API's futures also carry their thread's owner: outside any
//! scope of the lock, an acquisition made from a thread re-enters that
//! thread's hold, as Java's `RLock` does (the thread is the owner).

use std::future::Future;
use std::sync::Arc;

use crate::owner::OwnerId;

/// One enclosing hold.
#[derive(Clone)]
struct Entered {
    client_id: Arc<str>,
    name: Arc<str>,
    owner: OwnerId,
}

/// What the current future runs inside of.
#[derive(Clone, Default)]
struct Scopes {
    /// The holds, innermost last.
    entered: Vec<Entered>,
    /// The thread a blocking call was made from: its owner, for every lock
    /// no scope names.
    thread: Option<OwnerId>,
}

tokio::task_local! {
    static ENTERED: Arc<Scopes>;
}

/// The owner to re-enter with, if the current future runs inside a scope of
/// lock `name` of client `client_id`, or for a thread (a blocking call).
pub(crate) fn owner_in_scope(client_id: &str, name: &str) -> Option<OwnerId> {
    ENTERED
        .try_with(|scopes| {
            scopes
                .entered
                .iter()
                .rev()
                .find(|e| &*e.client_id == client_id && &*e.name == name)
                .map(|e| e.owner)
                .or(scopes.thread)
        })
        .ok()
        .flatten()
}

/// Runs `work` inside a scope of (`client_id`, `name`, `owner`), nested in
/// whatever scopes the caller is already inside of.
pub(crate) fn enter<F: Future>(
    client_id: Arc<str>,
    name: Arc<str>,
    owner: OwnerId,
    work: F,
) -> impl Future<Output = F::Output> {
    let mut scopes: Scopes = ENTERED
        .try_with(|scopes| Scopes::clone(scopes))
        .unwrap_or_default();
    scopes.entered.push(Entered {
        client_id,
        name,
        owner,
    });
    ENTERED.scope(Arc::new(scopes), work)
}

#[cfg(feature = "blocking")]
std::thread_local! {
    /// The holds the current thread runs inside of, for the blocking API
    /// (whose scopes are closures run on the caller's thread), innermost last.
    static THREAD_ENTERED: std::cell::RefCell<Vec<Entered>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs the closure `work` inside a scope of (`client_id`, `name`, `owner`)
/// on this thread: futures made by [`with_thread_scopes`] while it runs
/// re-enter that hold. The scope ends when `work` returns or unwinds.
#[cfg(feature = "blocking")]
pub(crate) fn enter_thread<R>(
    client_id: Arc<str>,
    name: Arc<str>,
    owner: OwnerId,
    work: impl FnOnce() -> R,
) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            THREAD_ENTERED.with(|entered| entered.borrow_mut().pop());
        }
    }
    THREAD_ENTERED.with(|entered| {
        entered.borrow_mut().push(Entered {
            client_id,
            name,
            owner,
        })
    });
    let _leave = Leave;
    work()
}

#[cfg(feature = "blocking")]
std::thread_local! {
    /// This thread's owner id, made on its first blocking call: Java's
    /// thread id, for the blocking API.
    static THREAD_OWNER: OwnerId = OwnerId::unique();
}

/// This thread's owner in the blocking API.
#[cfg(feature = "blocking")]
pub(crate) fn thread_owner() -> OwnerId {
    THREAD_OWNER.with(|owner| *owner)
}

/// `work` inside the scopes this thread is in ([`enter_thread`]), and as
/// this thread's owner elsewhere, taken now.
#[cfg(feature = "blocking")]
pub(crate) fn with_thread_scopes<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let scopes = Scopes {
        entered: THREAD_ENTERED.with(|entered| entered.borrow().clone()),
        thread: Some(thread_owner()),
    };
    ENTERED.scope(Arc::new(scopes), work)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn scopes_nest_and_stay_with_their_future() {
        let owner = OwnerId::new(5).unwrap();
        assert_eq!(owner_in_scope("c", "a"), None);
        enter("c".into(), "a".into(), owner, async {
            assert_eq!(owner_in_scope("c", "a"), Some(owner));
            assert_eq!(owner_in_scope("other-client", "a"), None);
            let inner = OwnerId::new(6).unwrap();
            enter("c".into(), "b".into(), inner, async {
                assert_eq!(owner_in_scope("c", "a"), Some(owner));
                assert_eq!(owner_in_scope("c", "b"), Some(inner));
            })
            .await;
            assert_eq!(owner_in_scope("c", "b"), None);
            // A spawned task starts outside every scope.
            let spawned = tokio::spawn(async { owner_in_scope("c", "a") });
            assert_eq!(spawned.await.unwrap(), None);
        })
        .await;
        // A sibling future joined with a scoped one sees no scope.
        let scoped = enter("c".into(), "a".into(), owner, async {
            tokio::task::yield_now().await;
            owner_in_scope("c", "a")
        });
        let sibling = async {
            tokio::task::yield_now().await;
            owner_in_scope("c", "a")
        };
        assert_eq!(tokio::join!(scoped, sibling), (Some(owner), None));
    }
}
