//! Virtual List View windows (draft-ietf-ldapext-ldapv3-vlv-09) over a sorted list of `n`
//! entries, with slapd sssvlv's arithmetic (`send_list`), so that a client sees the same
//! window from both servers:
//! - byOffset: `offset == contentCount` names the last entry (also 0/0), 1 the first; a
//!   client's contentCount that differs from ours scales the offset (`n * offset / count`);
//!   an offset past the count (ours, or the client's when it gave one) is offsetRangeError;
//! - greaterThanOrEqual: the first entry whose keys are not below the assertion; none: the
//!   target is `n + 1` and the window ends at the last entry;
//! - then `before` entries before the target and `after` after it, as far as the list goes.

/// The window to send: rows `start..end`, and the target's 1-based position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: usize,
    pub end: usize,
    pub target: usize,
}

/// offsetRangeError: the offset lies past the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeError;

/// The window byOffset.
pub fn by_offset(
    n: usize,
    before: usize,
    after: usize,
    offset: usize,
    count: usize,
) -> Result<Window, RangeError> {
    let target = if offset == count {
        n
    } else if offset == 1 {
        1
    } else if count != 0 && count != n {
        if offset > count {
            return Err(RangeError);
        }
        // n * offset / count, without overflow for any n and offset below 2^31.
        usize::try_from((n as u128 * offset as u128) / count as u128).unwrap_or(n)
    } else {
        if offset > n {
            return Err(RangeError);
        }
        offset
    };
    Ok(around(n, before, after, target))
}

/// The window around the target at 1-based `target` (0 counts as the first entry).
fn around(n: usize, before: usize, after: usize, target: usize) -> Window {
    if n == 0 {
        return Window { start: 0, end: 0, target };
    }
    let at = target.saturating_sub(1).min(n - 1);
    let start = at - before.min(at);
    let end = at.saturating_add(after).saturating_add(1).min(n);
    Window { start, end, target }
}

/// The window greaterThanOrEqual, given `first`, the 0-based index of the first entry not
/// below the assertion (`n` when there is none).
pub fn by_value(n: usize, before: usize, after: usize, first: usize) -> Window {
    if first < n {
        return around(n, before, after, first + 1);
    }
    // Past the end: slapd stands on the last entry and counts it among the `before`.
    if n == 0 {
        return Window { start: 0, end: 0, target: 1 };
    }
    let last = n - 1;
    let start = last - before.saturating_sub(1).min(last);
    Window { start, end: n, target: n + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: usize, end: usize, target: usize) -> Result<Window, RangeError> {
        Ok(Window { start, end, target })
    }

    #[test]
    fn offsets_as_slapd_counts_them() {
        // The differential test's four entries: a b c d.
        assert_eq!(by_offset(4, 0, 1, 2, 0), w(1, 3, 2)); // vlv=0/1/2/0: b c
        assert_eq!(by_offset(4, 1, 1, 3, 4), w(1, 4, 3)); // vlv=1/1/3/4: b c d
        assert_eq!(by_offset(4, 1, 1, 4, 4), w(2, 4, 4)); // the last: c d
        assert_eq!(by_offset(4, 0, 0, 0, 0), w(3, 4, 4)); // 0/0 names the last
        assert_eq!(by_offset(4, 0, 0, 1, 10), w(0, 1, 1));
        assert_eq!(by_offset(4, 0, 0, 5, 10), w(1, 2, 2)); // 4 * 5 / 10
        assert_eq!(by_offset(4, 0, 0, 5, 4), Err(RangeError));
        assert_eq!(by_offset(4, 0, 0, 9, 0), Err(RangeError));
        assert_eq!(by_offset(4, 0, 0, 11, 10), Err(RangeError));
        assert_eq!(by_offset(4, 100, 100, 2, 4), w(0, 4, 2));
        assert_eq!(by_offset(0, 1, 1, 0, 0), w(0, 0, 0));
    }

    #[test]
    fn values_find_the_first_entry_not_below() {
        assert_eq!(by_value(4, 1, 1, 1), Window { start: 0, end: 3, target: 2 });
        assert_eq!(by_value(4, 0, 0, 0), Window { start: 0, end: 1, target: 1 });
        // Past the end: the last entry stands for the target.
        assert_eq!(by_value(4, 0, 0, 4), Window { start: 3, end: 4, target: 5 });
        assert_eq!(by_value(4, 2, 5, 4), Window { start: 2, end: 4, target: 5 });
        assert_eq!(by_value(0, 2, 2, 0), Window { start: 0, end: 0, target: 1 });
    }
}
