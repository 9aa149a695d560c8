//! On Sentinel, every connection of the client reaches the primary the
//! sentinels name: fred resolves the connection's address through
//! [`FollowPrimary`], which answers with the primary of the view, so a
//! reconnection (forced when the sentinels name another primary, or after a
//! lost connection) lands on the primary of that moment. fred's own Sentinel
//! mode is not used: it asks one sentinel at a time, in a fixed order, and a
//! hung one stops every connection.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use fred::bytes_utils::Str;
use fred::error::{Error as FredError, ErrorKind};
use fred::types::Resolve;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::topology::sentinel::{Address, SentinelView};

/// Resolves a connection's address to the sentinels' primary, and
/// remembers which one it gave, so the client can tell a connection that
/// still reaches an old primary.
pub(crate) struct FollowPrimary {
    view: watch::Receiver<SentinelView>,
    reached: Mutex<Option<Address>>,
}

impl FollowPrimary {
    pub(crate) fn new(view: watch::Receiver<SentinelView>) -> Self {
        FollowPrimary {
            view,
            reached: Mutex::new(None),
        }
    }

    /// The primary this connection was last pointed at.
    pub(crate) fn reached(&self) -> Option<Address> {
        self.reached.lock().clone()
    }

    async fn primary_addresses(&self) -> Result<Vec<SocketAddr>, FredError> {
        let primary = self.view.borrow().primary.clone();
        let Some(primary) = primary else {
            return Err(FredError::new(
                ErrorKind::IO,
                "the sentinels name no primary yet",
            ));
        };
        let found: Vec<SocketAddr> = tokio::net::lookup_host((primary.host.as_str(), primary.port))
            .await
            .map_err(|e| {
                FredError::new(
                    ErrorKind::IO,
                    format!("cannot resolve the primary the sentinels name, {primary}: {e}"),
                )
            })?
            .collect();
        *self.reached.lock() = Some(primary);
        Ok(found)
    }
}

impl Resolve for FollowPrimary {
    fn resolve<'life0, 'async_trait>(
        &'life0 self,
        _host: Str,
        _port: u16,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<SocketAddr>, FredError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.primary_addresses())
    }
}
