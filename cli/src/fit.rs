//! Fitting text to a terminal column: a cut is always marked with `…`, so
//! that a shortened id never reads as another id.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Ends every cut text.
pub const MARK: char = '…';

/// Columns `text` takes in a terminal.
pub fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// `text` if it fits in `columns`, else its longest prefix that fits
/// followed by `…`.
pub fn fit(text: &str, columns: usize) -> String {
    if width(text) <= columns {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > columns {
            break;
        }
        out.push(c);
        used += w;
    }
    if columns > 0 {
        out.push(MARK);
    }
    out
}

/// `text` wrapped at spaces into lines of at most `columns`: the first
/// after `first`, the others after `rest` (a hanging indent). A word longer
/// than a line stays whole on a line of its own (its caller may cut it).
pub fn wrap(text: &str, first: &str, rest: &str, columns: usize) -> Vec<String> {
    let mut lines = vec![];
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        let needed = if empty { width(word) } else { 1 + width(word) };
        if !empty && width(&line) + needed > columns {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    lines.push(line);
    lines
}

/// The first of `candidates` (most complete first) that fits in `columns`;
/// else the last one cut with `…`.
pub fn first_fitting(candidates: impl IntoIterator<Item = String>, columns: usize) -> String {
    let mut last = String::new();
    for text in candidates {
        if width(&text) <= columns {
            return text;
        }
        last = text;
    }
    fit(&last, columns)
}

/// A column of a table: how wide its widest cell is, and how it yields when
/// the terminal is narrower than the table.
#[derive(Clone, Copy)]
pub enum Column {
    /// Always as wide as its widest cell (short values: kinds, counts, times).
    Fixed(usize),
    /// Served before the shared columns with what its cells `need` (down to
    /// what the shared ones need at least), and after them up to what they
    /// `want`.
    First { need: usize, want: usize },
    /// As wide as its widest cell if there is room; else the room left is
    /// shared evenly (a narrow column keeps what it needs, the rest go to the
    /// others).
    Shared(usize),
}

/// At least this much of a shared column stays visible while a `First`
/// column takes its room.
const SHARED_MIN: usize = 8;

/// The widths of `columns` in `total` terminal columns, `spacing` between
/// each two.
pub fn widths(columns: &[Column], total: usize, spacing: usize) -> Vec<usize> {
    let gaps = spacing * columns.len().saturating_sub(1);
    let mut left = total.saturating_sub(gaps);
    let mut out = vec![0; columns.len()];
    for (i, c) in columns.iter().enumerate() {
        if let Column::Fixed(want) = c {
            out[i] = (*want).min(left);
            left -= out[i];
        }
    }
    let shared: Vec<usize> = (0..columns.len())
        .filter(|i| matches!(columns[*i], Column::Shared(_)))
        .collect();
    let reserved: usize = shared
        .iter()
        .map(|i| match columns[*i] {
            Column::Shared(want) => want.min(SHARED_MIN),
            _ => 0,
        })
        .sum();
    for (i, c) in columns.iter().enumerate() {
        if let Column::First { need, .. } = c {
            out[i] = (*need).min(left.saturating_sub(reserved));
            left -= out[i];
        }
    }
    // Max-min fair: columns that want less than an even share get what
    // they want, and the others split what remains.
    let mut open = shared;
    while !open.is_empty() {
        let share = left / open.len();
        let want = |i: usize| match columns[i] {
            Column::Shared(want) => want,
            _ => 0,
        };
        let (small, big): (Vec<usize>, Vec<usize>) = open.iter().partition(|i| want(**i) <= share);
        if small.is_empty() {
            let mut extra = left - share * big.len();
            for i in big {
                out[i] = share + usize::from(extra > 0);
                extra = extra.saturating_sub(1);
            }
            left = 0;
            break;
        }
        for i in small {
            out[i] = want(i);
            left -= out[i];
        }
        open = big;
    }
    for (i, c) in columns.iter().enumerate() {
        if let Column::First { want, .. } = c {
            let more = want.saturating_sub(out[i]).min(left);
            out[i] += more;
            left -= more;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn wrapped_lines_fit_and_hang_under_their_label() {
        let lines = super::wrap(
            "a replica runs on its own policy once promoted",
            "  why: ",
            "       ",
            24,
        );
        assert_eq!(
            lines,
            [
                "  why: a replica runs on",
                "       its own policy",
                "       once promoted"
            ]
        );
        assert!(lines.iter().all(|l| super::width(l) <= 24));
        assert_eq!(super::wrap("short", "x: ", "   ", 80), ["x: short"]);
        // A word longer than the line is not split.
        assert_eq!(
            super::wrap("ACL SETUSER locker +publish", "fix: ", "     ", 12),
            ["fix: ACL", "     SETUSER", "     locker", "     +publish"]
        );
    }

    use super::*;

    #[test]
    fn a_cut_is_marked_and_fits() {
        assert_eq!(
            fit("0013f4f0:4611686018427387904", 40),
            "0013f4f0:4611686018427387904"
        );
        assert_eq!(
            fit("0013f4f0:4611686018427387904", 24),
            "0013f4f0:46116860184273…"
        );
        assert_eq!(width(&fit("0013f4f0:4611686018427387904", 24)), 24);
        assert_eq!(fit("abc", 1), "…");
        assert_eq!(fit("abc", 0), "");
        // Wide characters count double.
        assert_eq!(fit("日本語の名前", 7), "日本語…");
        assert_eq!(
            first_fitting(["a long one".to_string(), "short".to_string()], 6),
            "short"
        );
        assert_eq!(first_fitting(["a long one".to_string()], 6), "a lon…");
    }

    #[test]
    fn columns_fit_the_terminal_first_ones_first() {
        use Column::*;
        let holders = First { need: 37, want: 58 };
        // Room for everything.
        let cols = [Shared(10), Fixed(19), holders, Shared(31)];
        assert_eq!(widths(&cols, 130, 1), [10, 19, 58, 31]);
        // What the first column needs, then the shared ones, then the
        // first one again with what is left.
        assert_eq!(widths(&cols, 110, 1), [10, 19, 47, 31]);
        assert_eq!(widths(&cols, 90, 1), [10, 19, 37, 21]);
        let cols = [Shared(104), Fixed(19), holders, Shared(31)];
        assert_eq!(widths(&cols, 120, 1), [31, 19, 37, 30]);
        // Narrow: the shared columns keep a little.
        assert_eq!(widths(&cols, 60, 1), [8, 19, 22, 8]);
        // Narrower than the fixed columns: nothing overflows.
        let w = widths(&cols, 10, 1);
        assert!(w.iter().sum::<usize>() + 3 <= 10, "{w:?}");
    }
}
