//! Where a keyset page starts: after the row with this sort key and id.

/// A keyset pager's position: the rows after (`key`, `id`) in that order. Lists ordered
/// by a timestamp or a deadline (the drift dashboard, the approvals inbox) page with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCursor {
    /// The sort key (milliseconds since the epoch, or a deadline's).
    pub key: i64,
    /// The row's id, in case of equal keys.
    pub id: String,
}

impl KeyCursor {
    /// `<key>:<id>`, as a page link or a `next_cursor` carries it.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.key, self.id)
    }

    /// The cursor of [`KeyCursor::encode`]; `None` for anything else.
    pub fn decode(s: &str) -> Option<KeyCursor> {
        let (key, id) = s.split_once(':')?;
        Some(KeyCursor {
            key: key.parse().ok()?,
            id: id.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_and_nothing_else_reads_as_one() {
        let c = KeyCursor {
            key: -5,
            id: "run:with:colons".into(),
        };
        assert_eq!(KeyCursor::decode(&c.encode()), Some(c));
        for bad in ["", "zeta", ":x", "1.5:x", "99999999999999999999:x"] {
            assert_eq!(KeyCursor::decode(bad), None, "{bad:?}");
        }
    }
}
