//! [`RGroupLock`]: Redisson's group multi lock (`getMultiLock(String group,
//! Collection<Object> values)`, `RedissonFasterMultiLock`, 3.38+): many
//! values of one group locked all or nothing, in one hash, by one script.
//!
//! On the wire: the hash `group` holds, for each value's field id `h`
//! ([`crate::naming::value_field`] of the value's codec bytes), `h` → the
//! owner field, `h:<owner>:expire_time` → the wall-clock ms its hold ends and
//! `h:<owner>:lock_count` → its hold count. A value is held while its owner's
//! `expire_time` is ahead of the clock: values, not the key, expire (the
//! key's TTL only collects the whole hash). Releases publish `0` on
//! `redisson_lock__channel:{group}`. Scripts in `lua/group/`; the watchdog
//! renews with `lua/group/renew.lua` (Redisson's FastMultilockTask).
//!
//! To the engine, one value set of one group is one lock, named
//! `group[h1,h2,...]` (the field ids sorted): that name identifies its holds,
//! its scope and its errors, and [`LockKind::key`] maps it to the group.
//!
//! Longer than the other kinds' files: the group lock has a public API of
//! its own (values, not one name), documented method by method; about 40%
//! of the file is that rustdoc.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use fred::interfaces::HashesInterface;
use fred::types::Value;

use crate::acquire::sealed::{Sealed, Until, Within};
use crate::acquire::{Acquirable, Acquire, BoxFuture};
use crate::engine::hub::{Wake, UNLOCK_MESSAGE};
use crate::engine::kind::{Call, LockKind, Renewal};
use crate::engine::lease::LostSignal;
use crate::engine::raw::RawLock;
use crate::engine::script::{self, Latch, Script, ScriptCall};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::lock::{LockGuard, Unlocked};
use crate::naming;
use crate::owner::OwnerId;

/// Redisson's group multi lock (`getMultiLock(group, values)`): every value
/// of `values` in the group `group`, held together or not at all, by one
/// script on one hash. Two group locks of the same group exclude each other
/// on the values they share, whichever side (Java or Rust) holds them; a
/// Java `getMultiLock("students", List.of("001", "002"))` and a Rust
/// `client.group_lock("students", ["001", "002"])` are the same lock when
/// the JVM client's codec writes the values as the Rust side passes them.
///
/// **Values are what the Java codec writes for them** ([`GroupValue`]).
/// Redisson hashes the value's codec bytes into the field id
/// ([`naming::value_field`]), and the object uses the JVM client's
/// *default* codec (`Config.codec`), so the same string under two codecs is
/// two different values: say which one with [`GroupValue::kryo5`]
/// (Redisson's default `Kryo5Codec`), [`GroupValue::string`]
/// (`StringCodec`) or [`GroupValue::bytes`] (anything else).
///
/// Operations are those of [`crate::Lock`]: the guard is a [`LockGuard`]
/// (renewed by the watchdog without a lease), waiting is woken by the
/// group's unlock messages, and every acquisition is its own owner. Re-entry
/// is per value set: inside a guard's [`LockGuard::scope`], acquiring the
/// same values again re-enters (every value's hold count goes up); other
/// values of the group are another lock, which waits for the values this
/// guard holds. An explicit owner ([`RGroupLock::with_owner`]) cannot hold
/// two overlapping value sets of one group at once
/// ([`Error::InvalidArgument`]).
///
/// Clocks: a hold ends at a wall-clock time each client computes from its
/// own clock, as in Redisson, so the clients' clocks must roughly agree.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn demo(client: redisson_lock::RedissonClient) -> redisson_lock::Result<()> {
/// // The seats of one booking, against every other booking of the show.
/// use redisson_lock::GroupValue;
/// // A JVM fleet on Redisson's default codec locks the same seats with
/// // redisson.getMultiLock("show:1207:seats", List.of("A12", "A13", "A14")).
/// let seats = ["A12", "A13", "A14"].map(GroupValue::kryo5);
/// let seats = client.group_lock("show:1207:seats", seats)?;
/// if let Some(guard) = seats.try_lock_for(Duration::from_secs(2)).await? {
///     // ... all three seats are ours until unlocked ...
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RGroupLock {
    raw: RawLock,
}

/// One value of a group multi lock ([`RGroupLock`]), as the Java side's
/// codec writes it: the same Java `String` is another value under another
/// codec, so the codec is part of the value.
///
/// ```
/// use redisson_lock::GroupValue;
/// // Redisson's default codec (Kryo5Codec) frames a String ...
/// assert_eq!(GroupValue::kryo5("ab").encoded(), [0x03, 0x61, 0xe2]);
/// // ... StringCodec writes its UTF-8 bytes.
/// assert_eq!(GroupValue::string("ab").encoded(), b"ab");
/// // JsonJacksonCodec writes the JSON literal, quotes included.
/// assert_eq!(GroupValue::bytes(b"\"ab\"".to_vec()).encoded(), b"\"ab\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupValue(Vec<u8>);

impl GroupValue {
    /// A Java `String` under Redisson's default `Kryo5Codec`.
    pub fn kryo5(value: &str) -> Self {
        GroupValue(naming::kryo5_string(value))
    }

    /// A Java `String` under `StringCodec`: its UTF-8 bytes (also what
    /// `LongCodec` writes for a number's text, and `ByteArrayCodec` for
    /// those bytes).
    pub fn string(value: &str) -> Self {
        GroupValue(value.as_bytes().to_vec())
    }

    /// The bytes another codec writes for the value (`JsonJacksonCodec`: the
    /// JSON literal; a `Long` is `["java.lang.Long",42]` there).
    pub fn bytes(encoded: impl Into<Vec<u8>>) -> Self {
        GroupValue(encoded.into())
    }

    /// The codec bytes.
    pub fn encoded(&self) -> &[u8] {
        &self.0
    }

    /// Its field id in the group's hash ([`naming::value_field`]).
    pub fn field(&self) -> String {
        naming::value_field(&self.0)
    }
}

impl RGroupLock {
    /// The group lock of `values` in `group`.
    pub(crate) fn new(
        engine: Arc<Engine>,
        group: &str,
        values: impl IntoIterator<Item = GroupValue>,
    ) -> Result<Self> {
        let mut fields: Vec<String> = values.into_iter().map(|v| v.field()).collect();
        if fields.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the group lock `{group}` needs at least one value"
            )));
        }
        fields.sort_unstable();
        fields.dedup();
        let name = format!("{group}[{}]", fields.join(","));
        Ok(RGroupLock {
            raw: RawLock::new(engine, &GROUP, &name),
        })
    }

    /// The group: the key of the hash that holds the values' holds.
    pub fn group(&self) -> &str {
        self.raw.key()
    }

    /// The values' field ids in the group's hash, sorted, each once.
    pub fn value_fields(&self) -> Vec<&str> {
        fields(&self.raw.name).collect()
    }

    /// The name guards, errors and logs give this lock: `group[h1,h2,...]`,
    /// the group and its values' field ids.
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// The channel on which the group's releases are published.
    pub fn channel(&self) -> String {
        naming::channel_name(self.group())
    }

    /// The same lock, acting for a fixed owner: Redisson's
    /// `lockAsync(threadId)` (see [`crate::Lock::with_owner`]).
    pub fn with_owner(&self, owner: OwnerId) -> Self {
        RGroupLock {
            raw: self.raw.with_owner(owner),
        }
    }

    /// The owner an acquisition would re-enter with right now (see
    /// [`crate::Lock::current_owner`]).
    pub fn current_owner(&self) -> Option<OwnerId> {
        self.raw.current_owner()
    }

    /// The owner field `owner` holds values with: `<client-id>:<owner-id>`.
    pub fn field_of(&self, owner: OwnerId) -> String {
        self.raw.field_of(owner)
    }

    /// Builds an acquisition: `group.acquire().wait(d).lease(l).await`.
    pub fn acquire(&self) -> Acquire<'_, Self> {
        Acquire::new(self)
    }

    /// Waits as long as it takes, then holds every value; the watchdog
    /// renews them until released.
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::lock`]; [`Error::InvalidArgument`] when an explicit
    /// owner already holds other values of the group that overlap these.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future never leaves a value held (an
    /// attempt in flight is settled in the background).
    ///
    /// ```no_run
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// let guard = seats.lock().await?; // every seat, or wait
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire().await
    }

    /// One attempt, no waiting: `None` when another owner holds any of the
    /// values (nothing is then taken).
    ///
    /// # Errors
    ///
    /// As [`RGroupLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RGroupLock::lock`].
    ///
    /// ```no_run
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// match seats.try_lock().await? {
    ///     Some(guard) => guard.unlock().await.map(drop)?,
    ///     None => println!("a seat is being booked by someone else"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire().no_wait().await
    }

    /// Waits up to `wait` for every value; `None` when one stayed taken.
    ///
    /// # Errors
    ///
    /// As [`RGroupLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RGroupLock::lock`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// if let Some(guard) = seats.try_lock_for(Duration::from_millis(500)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire().wait(wait).await
    }

    /// An explicit owner cannot hold overlapping value sets (see
    /// [`RGroupLock::refuse_overlap`]).
    fn admit(&self) -> Result<()> {
        match self.raw.fixed_owner() {
            Some(owner) => self.refuse_overlap(owner),
            None => Ok(()),
        }
    }

    /// An explicit owner holding another value set of this group that
    /// shares a value with this one: the per-value hold counts could not
    /// tell the two holds apart, so it is refused. (A scope only re-enters
    /// the same value set, and a fresh owner holds nothing.)
    fn refuse_overlap(&self, owner: OwnerId) -> Result<()> {
        let ours: Vec<&str> = fields(&self.raw.name).collect();
        let clash = self
            .raw
            .engine
            .holds
            .of_owner(&GROUP, owner)
            .into_iter()
            .find(|hold| {
                *hold.name != *self.raw.name
                    && GROUP.key(&hold.name) == self.group()
                    && hold.count() > 0
                    && fields(&hold.name).any(|f| ours.contains(&f))
            });
        match clash {
            Some(hold) => Err(Error::InvalidArgument(format!(
                "owner {owner} holds `{}`, which shares values with `{}`: release it first \
                 (one owner re-enters a group only with the same values)",
                hold.name, self.raw.name
            ))),
            None => Ok(()),
        }
    }

    /// Runs `work` under the lock (see [`crate::Lock::run`]).
    ///
    /// # Errors
    ///
    /// As [`RGroupLock::lock`]; [`Error::LockLost`] when the lock was lost
    /// before `work` finished or could not be released cleanly.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the values in the
    /// background.
    ///
    /// ```no_run
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// let booked = seats.run(|lost| async move { !lost.is_lost() }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(LostSignal) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        if let Some(owner) = self.raw.fixed_owner() {
            self.refuse_overlap(owner)?;
        }
        crate::lock::handle::run_until(&self.raw, None, work).await
    }

    /// Releases one hold of every value for the current owner
    /// ([`RGroupLock::current_owner`]) without a guard, like Redisson's
    /// `unlock()`. Prefer [`LockGuard::unlock`].
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the current owner does not hold every value
    /// (those it still holds are released all the same); otherwise as
    /// [`RGroupLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// The release of a hold this client tracks finishes in the background
    /// if the future is dropped.
    ///
    /// ```no_run
    /// use redisson_lock::{Error, OwnerId};
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// let clerk = seats.with_owner(OwnerId::new(7)?);
    /// match clerk.unlock().await {
    ///     Ok(_) => println!("released one hold of clerk 7 on every seat"),
    ///     Err(Error::NotHeld { .. }) => println!("clerk 7 does not hold these seats"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<Unlocked> {
        self.raw.unlock().await
    }

    /// Releases every value whoever holds it and wakes the group's waiters
    /// (Redisson's `forceUnlock`). Returns whether any value was held.
    /// Holders in this client of exactly these values are told at once;
    /// others at their next renewal.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] for a key of another type (left alone).
    ///
    /// # Cancel safety
    ///
    /// The script is sent once; dropping the future does not stop it.
    ///
    /// ```no_run
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// if seats.force_unlock().await? {
    ///     println!("the seats of a crashed booking were released");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.raw.force_unlock(None).await
    }

    /// Whether any of the values is held, by anyone (Redisson's
    /// `isLocked()`).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// if seats.is_locked().await? {
    ///     println!("one of these seats is being booked");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.raw.engine.ensure_open()?;
        let mut args: Vec<Value> = vec![now_ms().into()];
        args.extend(fields(&self.raw.name).map(Value::from));
        let call = || ScriptCall {
            script: &IS_LOCKED,
            keys: vec![self.group().to_string()],
            args: args.clone(),
        };
        let reply = self
            .raw
            .engine
            .run_unsynced(call)
            .await
            .map_err(|e| self.raw.wrong_type(e))?;
        Ok(script::as_i64(&reply) == Some(1))
    }

    /// Whether the current owner ([`RGroupLock::current_owner`]) holds every
    /// value: Redisson's `isHeldByCurrentThread`. `false` outside a scope
    /// without an explicit owner.
    ///
    /// # Errors
    ///
    /// As [`RGroupLock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// let guard = seats.lock().await?;
    /// assert!(guard.scope(seats.is_held()).await?);
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_held(&self) -> Result<bool> {
        match self.raw.current_owner() {
            Some(owner) => self.is_held_by(owner).await,
            None => self.raw.engine.ensure_open().map(|()| false),
        }
    }

    /// Whether `owner` of this client holds every value (Redisson's
    /// `isHeldByThread`, which skips the first value; this one does not).
    ///
    /// # Errors
    ///
    /// As [`RGroupLock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// A read: dropping the future changes nothing.
    ///
    /// ```no_run
    /// use redisson_lock::OwnerId;
    /// # async fn demo(seats: redisson_lock::RGroupLock) -> redisson_lock::Result<()> {
    /// if seats.is_held_by(OwnerId::new(7)?).await? {
    ///     println!("clerk 7 holds every seat");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by(&self, owner: OwnerId) -> Result<bool> {
        self.raw.engine.ensure_open()?;
        let field = self.field_of(owner);
        let values: Vec<&str> = fields(&self.raw.name).collect();
        let mut asked: Vec<String> = values.iter().map(|h| h.to_string()).collect();
        asked.extend(values.iter().map(|h| format!("{h}:{field}:expire_time")));
        let replies: Vec<Option<String>> = self
            .raw
            .query(self.raw.engine.redis.hmget(self.group(), asked))
            .await?;
        if replies.len() != 2 * values.len() {
            return Err(Error::redis(format!(
                "unexpected reply to HMGET of {} fields: {} values",
                2 * values.len(),
                replies.len()
            )));
        }
        let (owners, ends) = replies.split_at(values.len());
        let now = now_ms();
        Ok(owners.iter().all(|o| o.as_deref() == Some(&*field))
            && ends.iter().all(|e| held_until(e.as_deref(), now)))
    }
}

impl std::fmt::Debug for RGroupLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RGroupLock")
            .field("group", &self.group())
            .field("values", &self.value_fields())
            .field("owner", &self.raw.fixed_owner())
            .finish()
    }
}

impl Sealed for RGroupLock {}
impl crate::acquire::sealed::Leasable for RGroupLock {}

impl Acquirable for RGroupLock {
    type Guard = LockGuard;

    fn acquire_until(&self, terms: Until) -> BoxFuture<'_, Result<LockGuard>> {
        Box::pin(async move {
            self.admit()?;
            let (held, _) = self.raw.acquire_forever(terms.lease).await?;
            Ok(LockGuard::new(held))
        })
    }

    fn acquire_within(&self, terms: Within) -> BoxFuture<'_, Result<Option<LockGuard>>> {
        Box::pin(async move {
            self.admit()?;
            let granted = self.raw.acquire(terms.lease, terms.patience()).await?;
            Ok(granted.map(|(held, _)| LockGuard::new(held)))
        })
    }
}

/// The values' field ids in a group lock's name, `group[h1,h2,...]`.
fn fields(name: &str) -> impl Iterator<Item = &str> {
    let list = name
        .rfind('[')
        .map_or("", |open| &name[open + 1..name.len() - 1]);
    list.split(',').filter(|f| !f.is_empty())
}

use crate::engine::now_ms;

/// Whether an `expire_time` value is still ahead of (or at) `now`.
fn held_until(ends: Option<&str>, now: i64) -> bool {
    ends.and_then(|e| e.trim().parse::<i64>().ok())
        .is_some_and(|ends| ends >= now)
}

/// The group lock as the engine sees it.
pub(super) struct GroupKind;

pub(super) static GROUP: GroupKind = GroupKind;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/group/acquire.lua")));
static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/group/unlock.lua")));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/group/force_unlock.lua")));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/group/renew.lua")));
static IS_LOCKED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/group/is_locked.lua")));

impl LockKind for GroupKind {
    fn name(&self) -> &'static str {
        "group"
    }

    fn key<'a>(&self, lock: &'a str) -> &'a str {
        lock.rfind('[').map_or(lock, |open| &lock[..open])
    }

    fn count_place(&self) -> crate::engine::kind::CountPlace {
        crate::engine::kind::CountPlace::GroupValues
    }

    /// The first value's owner, end and count: the count, while that
    /// owner is `field` and the hold has not ended.
    fn count_fields(&self, lock: &str, field: &str) -> Vec<String> {
        let first = fields(lock).next().unwrap_or_default();
        vec![
            first.to_string(),
            format!("{first}:{field}:expire_time"),
            format!("{first}:{field}:lock_count"),
        ]
    }

    fn hold_count(&self, field: &str, values: &[Option<String>]) -> i64 {
        match values {
            [Some(owner), ends, Some(count)]
                if owner == field && held_until(ends.as_deref(), now_ms()) =>
            {
                count.trim().parse().unwrap_or(0)
            }
            _ => 0,
        }
    }

    fn channel(&self, lock: &str, _field: &str) -> Option<String> {
        Some(naming::channel_name(self.key(lock)))
    }

    fn wake(&self) -> Wake {
        // Waiters of one group want different values: a release may free
        // what any of them waits for.
        Wake::All
    }

    fn acquire(&self, call: &Call) -> ScriptCall {
        let mut args: Vec<Value> = vec![call.lease_ms.into(), now_ms().into(), call.field.into()];
        args.extend(fields(call.lock).map(Value::from));
        ScriptCall {
            script: &ACQUIRE,
            keys: vec![self.key(call.lock).to_string()],
            args,
        }
    }

    fn unlock(&self, call: &Call, latch: &Latch) -> ScriptCall {
        let group = self.key(call.lock);
        let mut args: Vec<Value> = vec![
            call.field.into(),
            UNLOCK_MESSAGE.into(),
            call.lease_ms.into(),
            call.engine.publish_arg(),
            latch.ttl_ms.into(),
            now_ms().into(),
        ];
        args.extend(fields(call.lock).map(Value::from));
        ScriptCall {
            script: &UNLOCK,
            keys: vec![
                group.to_string(),
                naming::channel_name(group),
                latch.key.clone(),
            ],
            args,
        }
    }

    /// Whoever holds any value: a group has no one holder to check, and
    /// [`RGroupLock`] offers no precondition (`only_while` is never given).
    fn force_unlock(&self, engine: &Engine, lock: &str, _only_while: Option<&str>) -> ScriptCall {
        let group = self.key(lock);
        let mut args: Vec<Value> = vec![UNLOCK_MESSAGE.into(), engine.publish_arg()];
        args.extend(fields(lock).map(Value::from));
        ScriptCall {
            script: &FORCE_UNLOCK,
            keys: vec![group.to_string(), naming::channel_name(group)],
            args,
        }
    }

    fn renewal(&self) -> &'static Renewal {
        &GROUP_RENEWAL
    }
}

/// Redisson's FastMultilockTask, batched: for each hold, every value still
/// its owner's ends no sooner than now + lease.
static GROUP_RENEWAL: Renewal = Renewal {
    name: "group",
    script: || &RENEW,
    with_now: true,
    per_lock: false,
    keys: |lock| vec![GROUP.key(lock).to_string()],
    hold_args: |lock, field| {
        let values: Vec<&str> = fields(lock).collect();
        let mut args: Vec<Value> = vec![field.into(), (values.len() as i64).into()];
        args.extend(values.into_iter().map(Value::from));
        args
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_lock_name_lists_its_values_once_sorted() {
        let name = "g:{x}[Q5CdP+xmkHdTGWYr64Lw6A,qwvAS12pR0CgRitaypEjUw]";
        assert_eq!(GROUP.key(name), "g:{x}");
        assert_eq!(
            fields(name).collect::<Vec<_>>(),
            ["Q5CdP+xmkHdTGWYr64Lw6A", "qwvAS12pR0CgRitaypEjUw"]
        );
        // A group name may hold a `[` of its own: the last one opens the list.
        assert_eq!(GROUP.key("a[b][t6rZwibGo2uy1OSmNVe8pg]"), "a[b]");
        let counted = |owner: &str, ends: i64, count: &str| {
            GROUP.hold_count(
                "me:1",
                &[
                    Some(owner.into()),
                    Some(ends.to_string()),
                    Some(count.into()),
                ],
            )
        };
        let later = now_ms() + 60_000;
        assert_eq!(counted("me:1", later, "2"), 2);
        assert_eq!(counted("other:1", later, "2"), 0);
        assert_eq!(counted("me:1", now_ms() - 60_000, "2"), 0);
    }
}
