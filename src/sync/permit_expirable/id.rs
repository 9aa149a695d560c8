//! Permit ids and leases as Redisson writes them: 16 random bytes, stored
//! raw in the lease set, shown as 32 lowercase hex digits.

use std::fmt;
use std::str::FromStr;

use fred::types::Value;

use crate::error::{Error, Result};

/// One leased permit's id: 16 random bytes, written as 32 lowercase hex
/// digits, as Redisson's `acquire()` returns it. Parse one a JVM service
/// handed over with [`str::parse`].
///
/// ```
/// let id: redisson_lock::PermitId = "00112233445566778899aabbccddeeff".parse().unwrap();
/// assert_eq!(id.to_string(), "00112233445566778899aabbccddeeff");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId(pub(super) [u8; 16]);

impl PermitId {
    pub(super) fn random() -> Self {
        PermitId(rand::random())
    }

    /// The id's bytes, as stored in the lease set.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    pub(super) fn to_value(self) -> Value {
        Value::Bytes(self.0.to_vec().into())
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidArgument(format!(
                "`{text}` is not a permit id (32 hexadecimal digits)"
            ))
        };
        if text.len() != 32 || !text.is_ascii() {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(PermitId(bytes))
    }
}

/// A leased permit as the lease set records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PermitLease {
    /// The permit's id.
    #[serde(serialize_with = "as_text")]
    pub id: PermitId,
    /// When its lease ends, in ms since the Unix epoch (the wall clock of
    /// the client that set it, as every expiry the crate reports); `None`
    /// for a permit that never expires.
    pub expires_at_ms: Option<i64>,
}

fn as_text<S: serde::Serializer>(id: &PermitId, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_read_and_write_as_redisson_hex() {
        let id = PermitId::random();
        assert_eq!(id.to_string().len(), 32);
        assert_eq!(id.to_string().parse::<PermitId>().unwrap(), id);
        for bad in [
            "",
            "zz112233445566778899aabbccddeeff",
            "0011",
            "é0112233445566778899aabbccddeef",
        ] {
            assert!(
                matches!(bad.parse::<PermitId>(), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }
}
