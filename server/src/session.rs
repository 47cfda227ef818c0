//! Sessions: a name under which trees are supervised and events are kept.
//!
//! Sessions are created on first use (wrap-init or `POST /api/v1/sessions`).
//! A session id is a short token of letters, digits, `-`, `_`, `.`: it appears
//! in socket file names and URLs, so anything else is refused.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub struct Session {
    pub id: String,
    pub created: String,
    /// wrap-init calls made for this session (live trees: `trees::Trees::count`).
    pub wrap_inits: AtomicU64,
}

#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

/// Is `id` acceptable as a session id?
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && id != "."
        && id != ".."
}

impl Sessions {
    /// The session `id`, created if new. `None` if the id is not acceptable.
    pub fn get_or_create(&self, id: &str) -> Option<Arc<Session>> {
        if !valid_id(id) {
            return None;
        }
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(
            map.entry(id.to_string())
                .or_insert_with(|| {
                    Arc::new(Session {
                        id: id.to_string(),
                        created: crate::audit::rfc3339_now(),
                        wrap_inits: AtomicU64::new(0),
                    })
                })
                .clone(),
        )
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(id).cloned()
    }

    pub fn list(&self) -> Vec<Arc<Session>> {
        let map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut v: Vec<_> = map.values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(valid_id("default"));
        assert!(valid_id("ci-1.run_2"));
        for bad in ["", ".", "..", "a/b", "a b", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn created_once() {
        let s = Sessions::default();
        let a = s.get_or_create("x").unwrap();
        let b = s.get_or_create("x").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(s.get_or_create("../x").is_none());
        assert_eq!(s.list().len(), 1);
    }
}
