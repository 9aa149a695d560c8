//! Telling a key's Redisson kind from its contents.

use super::keys::{is_lock_field, is_owner_id};
use super::GroupMember;
use crate::lock::read_write::RwMode;
use crate::lock::Holder;

/// What a hash holds.
pub(crate) enum HashShape {
    /// A lock's fields `<client-id>:<owner-id>` → hold count.
    Lock(Vec<Holder>),
    /// A read-write lock: mode, writer, readers (with their fields).
    ReadWrite {
        mode: Option<RwMode>,
        writer: Option<Holder>,
        readers: Vec<(String, Holder)>,
    },
    /// A group multi lock.
    Group(Vec<GroupMember>),
    /// Anything else.
    Other,
}

/// Reads a hash's fields; `reader_id` is the reading client's id.
pub(crate) fn hash(fields: &[(String, String)], reader_id: &str) -> HashShape {
    if fields.is_empty() {
        return HashShape::Other;
    }
    let count_ok = |v: &str| v.trim().parse::<i64>().is_ok();
    if let Some((_, mode)) = fields.iter().find(|(f, _)| f == "mode") {
        let mode = match mode.as_str() {
            "read" => Some(RwMode::Read),
            "write" => Some(RwMode::Write),
            _ => return HashShape::Other,
        };
        let (mut writer, mut readers) = (None, vec![]);
        for (field, value) in fields.iter().filter(|(f, _)| f != "mode") {
            if !count_ok(value) {
                return HashShape::Other;
            }
            match field.strip_suffix(":write") {
                Some(owner) if is_lock_field(owner) => {
                    writer = Holder::from_field(owner, value, reader_id);
                }
                _ if is_lock_field(field) => {
                    if let Some(holder) = Holder::from_field(field, value, reader_id) {
                        readers.push((field.clone(), holder));
                    }
                }
                _ => return HashShape::Other,
            }
        }
        readers.sort_by(|a, b| a.0.cmp(&b.0));
        return HashShape::ReadWrite {
            mode,
            writer,
            readers,
        };
    }
    if fields.iter().all(|(f, v)| is_lock_field(f) && count_ok(v)) {
        let mut holders: Vec<Holder> = fields
            .iter()
            .filter_map(|(f, v)| Holder::from_field(f, v, reader_id))
            .collect();
        holders.sort_by(|a, b| (&a.client_id, &a.owner).cmp(&(&b.client_id, &b.owner)));
        return HashShape::Lock(holders);
    }
    group(fields, reader_id).map_or(HashShape::Other, HashShape::Group)
}

/// A group multi lock's hash: `<h>` → owner field, `<h>:<owner>:lock_count`
/// → count, `<h>:<owner>:expire_time` → wall-clock ms.
fn group(fields: &[(String, String)], reader_id: &str) -> Option<Vec<GroupMember>> {
    let value_of = |key: &str| fields.iter().find(|(f, _)| f == key).map(|(_, v)| v);
    let mut members = vec![];
    let mut accounted = 0;
    for (hash, owner) in fields.iter().filter(|(f, _)| !f.contains(':')) {
        if !is_lock_field(owner) {
            return None;
        }
        let count = value_of(&format!("{hash}:{owner}:lock_count"))?;
        let expires = value_of(&format!("{hash}:{owner}:expire_time"));
        accounted += 1 + usize::from(expires.is_some());
        members.push(GroupMember {
            hash: hash.clone(),
            holder: Holder::from_field(owner, count, reader_id)?,
            expires_at_ms: expires.and_then(|v| v.trim().parse().ok()),
        });
    }
    // Every field must belong to a member (counts of released members are
    // removed with them).
    (!members.is_empty() && accounted + members.len() == fields.len()).then(|| {
        members.sort_by(|a, b| a.hash.cmp(&b.hash));
        members
    })
}

/// A Redisson counter's text: a decimal Java `long`.
pub(crate) fn counter(text: &str) -> Option<i64> {
    let t = text.trim();
    is_owner_id(t).then(|| t.parse().ok()).flatten()
}

/// Which kind an integer string is, from what its keys and channels show.
pub(crate) enum Counted {
    Semaphore,
    Latch,
    Unknown,
}

/// A semaphore when the value is 0 or less (a latch's key is gone at 0), when
/// it has a TTL (a latch never has one) or when its semaphore channel has
/// subscribers; a latch when its latch channel has.
pub(crate) fn counted(value: i64, has_ttl: bool, semaphore_subs: u64, latch_subs: u64) -> Counted {
    if value <= 0 || has_ttl || semaphore_subs > 0 {
        Counted::Semaphore
    } else if latch_subs > 0 {
        Counted::Latch
    } else {
        Counted::Unknown
    }
}

/// A permit id as stored in a lease set: 16 raw bytes (Redisson 3.17+), or
/// text (Redisson 3.16).
pub(crate) fn permit_id(member: &fred::types::Value) -> String {
    match member.as_bytes() {
        Some(bytes) if bytes.len() == 16 => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        None => member.as_string().unwrap_or_default(),
    }
}

/// The score Redisson gives a lease that never ends.
pub(crate) const NEVER: i64 = 922_337_203_685_477;

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586";

    fn f(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn hashes_read_as_their_kind() {
        let lock = f(&[(&format!("{A}:1"), "2")]);
        assert!(
            matches!(hash(&lock, A), HashShape::Lock(h) if h[0].hold_count == 2 && h[0].this_client)
        );
        let rw = f(&[
            ("mode", "write"),
            (&format!("{A}:1:write"), "1"),
            (&format!("{A}:1"), "2"),
        ]);
        match hash(&rw, "other") {
            HashShape::ReadWrite {
                mode,
                writer,
                readers,
            } => {
                assert_eq!(mode, Some(RwMode::Write));
                assert_eq!(writer.unwrap().owner, "1");
                assert_eq!(readers.len(), 1);
                assert!(!readers[0].1.this_client);
            }
            _ => panic!("not a read-write lock"),
        }
        let group = f(&[
            ("h1", &format!("{A}:7")),
            (&format!("h1:{A}:7:lock_count"), "1"),
            (&format!("h1:{A}:7:expire_time"), "1700000000000"),
        ]);
        assert!(
            matches!(hash(&group, A), HashShape::Group(m) if m[0].expires_at_ms == Some(1_700_000_000_000))
        );
        for other in [
            f(&[("name", "bob")]),
            f(&[(&format!("{A}:1"), "x")]),
            f(&[("mode", "write"), ("x", "1")]),
            f(&[]),
        ] {
            assert!(matches!(hash(&other, A), HashShape::Other));
        }
    }

    #[test]
    fn counters_are_longs_and_tell_their_kind_where_they_can() {
        assert_eq!(counter("42"), Some(42));
        assert_eq!(counter("-3"), Some(-3));
        assert_eq!(counter("4.2"), None);
        assert_eq!(counter("hello"), None);
        assert!(matches!(counted(0, false, 0, 0), Counted::Semaphore));
        assert!(matches!(counted(3, true, 0, 0), Counted::Semaphore));
        assert!(matches!(counted(3, false, 0, 1), Counted::Latch));
        assert!(matches!(counted(3, false, 0, 0), Counted::Unknown));
    }
}
