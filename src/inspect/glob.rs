//! Redis's glob patterns (`KEYS`, `SCAN MATCH`), matched on the client: the
//! scan asks Redis for a superset of the keys and filters object names here.

/// Whether `text` matches the Redis glob `pattern`: `*`, `?`, `[abc]`,
/// `[^a]`, `[a-z]` and `\` escapes, as Redis's `stringmatchlen` reads them.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    match_bytes(pattern.as_bytes(), text.as_bytes())
}

fn match_bytes(mut p: &[u8], mut t: &[u8]) -> bool {
    // The last `*` seen and where the text stood then: on a mismatch, the
    // star swallows one more byte (linear, without recursion).
    let mut star: Option<(&[u8], &[u8])> = None;
    loop {
        if let Some((&c, rest)) = p.split_first() {
            if c == b'*' {
                let mut rest = rest;
                while rest.first() == Some(&b'*') {
                    rest = &rest[1..];
                }
                if rest.is_empty() {
                    return true;
                }
                star = Some((rest, t));
                p = rest;
                continue;
            }
            if let Some((&b, t_rest)) = t.split_first() {
                if let Some(p_rest) = one(p, b) {
                    p = p_rest;
                    t = t_rest;
                    continue;
                }
            }
        } else if t.is_empty() {
            return true;
        }
        match star {
            Some((p_after, t_at)) if !t_at.is_empty() => {
                let t_next = &t_at[1..];
                star = Some((p_after, t_next));
                p = p_after;
                t = t_next;
            }
            _ => return false,
        }
    }
}

/// Matches the single-byte element at the head of `p` (not `*`) against
/// `b`; the rest of the pattern on success.
fn one(p: &[u8], b: u8) -> Option<&[u8]> {
    match p[0] {
        b'?' => Some(&p[1..]),
        b'\\' if p.len() >= 2 => (p[1] == b).then_some(&p[2..]),
        b'[' => {
            let mut i = 1;
            let negate = p.get(1) == Some(&b'^');
            if negate {
                i += 1;
            }
            let mut hit = false;
            loop {
                match p.get(i) {
                    // An unclosed class ends at the pattern's end, as in Redis.
                    None => break,
                    Some(b']') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < p.len() => {
                        hit |= p[i + 1] == b;
                        i += 2;
                    }
                    Some(&lo) if p.get(i + 1) == Some(&b'-') && i + 2 < p.len() => {
                        let hi = p[i + 2];
                        let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                        hit |= (lo..=hi).contains(&b);
                        i += 3;
                    }
                    Some(&c) => {
                        hit |= c == b;
                        i += 1;
                    }
                }
            }
            (hit != negate).then_some(&p[i.min(p.len())..])
        }
        c => (c == b).then_some(&p[1..]),
    }
}

/// A `SCAN MATCH` pattern that every key of an object whose name matches
/// `pattern` also matches: the object's own key, and the keys Redisson
/// derives from its name, which all contain the name.
pub(crate) fn superset(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 2);
    if !pattern.starts_with('*') {
        out.push('*');
    }
    out.push_str(pattern);
    // A trailing `\*` is an escaped star, not a wildcard.
    let escaped_end = pattern.ends_with('*') && {
        let backslashes = pattern[..pattern.len() - 1]
            .bytes()
            .rev()
            .take_while(|&b| b == b'\\')
            .count();
        backslashes % 2 == 1
    };
    if !pattern.ends_with('*') || escaped_end {
        out.push('*');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_in_redis() {
        for (p, t, want) in [
            ("*", "", true),
            ("*", "anything", true),
            ("orders:*", "orders:42", true),
            ("orders:*", "order:42", false),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h[ae]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[^e]llo", "hallo", true),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("a\\*b", "a*b", true),
            ("a\\*b", "axb", false),
            ("*:42", "orders:42", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("**x", "yx", true),
            ("[abc", "b", true),
        ] {
            assert_eq!(matches(p, t), want, "{p} ~ {t}");
        }
    }

    #[test]
    fn the_superset_pattern_matches_every_derived_key() {
        use crate::naming;
        let field = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";
        for (pattern, name) in [("orders:*", "orders:42"), ("*", "x"), ("a{t}*", "a{t}b")] {
            assert!(matches(pattern, name));
            let wide = superset(pattern);
            for key in [
                name.to_string(),
                naming::fair_queue_name(name),
                naming::fair_timeout_name(name),
                naming::token_name(name),
                naming::latch_name(name, "00ff"),
                naming::request_latch_name(name, "00ff"),
                format!("{}:1", naming::read_timeout_prefix(name, field)),
                naming::permit_timeout_name(name),
            ] {
                assert!(matches(&wide, &key), "{wide} ~ {key}");
            }
        }
        assert_eq!(superset("*"), "*");
        assert_eq!(superset("a\\*"), "*a\\**");
    }
}
