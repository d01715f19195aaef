//! Which kind a call asks for: the rules by which a request's options
//! combine ([`LockRequest`](crate::LockRequest)'s `shared`, `permits`,
//! `reentrant`, `fenced`, and the resources it names), said once, here.
//!
//! A call names at most one kind: a reader, a semaphore, a reentrant owner
//! or a fenced lock; else the mutex (on one resource or a set). Options
//! that would make two kinds at once are refused with
//! [`ConfigError::Combination`] before anything is sent, as are kinds on a
//! set that only take one resource (all but the mutex). The builder's
//! [`fenced`](crate::Builder::fenced) default applies to plain locks
//! alone: a reader, a semaphore or a reentrant owner is not fenced by it.
//! A new kind adds its option to the request and its rule here.

use std::sync::Arc;

use crate::error::ConfigError;
use crate::kinds::{Kind, fenced, mutex, reentrant, rwlock, semaphore};
use crate::proto::Keys;

/// A request's options, as its kind is chosen from them.
pub(crate) struct Spec<'a> {
    /// The lock's keys, one per resource.
    pub(crate) keys: &'a Keys,
    /// The lock's name (for a read: which name its task may read already).
    pub(crate) resource: &'a str,
    /// A reentrant lock's owner.
    pub(crate) owner: Option<&'a str>,
    /// Asked for on the call.
    pub(crate) fenced: bool,
    /// The builder's default, for plain locks.
    pub(crate) fenced_by_default: bool,
    /// Whether fencing tokens follow the wall clock.
    pub(crate) fence_time_floor: bool,
    /// A semaphore's number of permits.
    pub(crate) permits: Option<u32>,
    /// A reader of a read-write lock.
    pub(crate) shared: bool,
    /// The client's read locks (a task that reads the name already is a
    /// nested read).
    pub(crate) reads: &'a rwlock::Shares,
}

impl Spec<'_> {
    /// The kind asked for, or why the options do not combine.
    pub(crate) fn kind(&self) -> Result<Arc<dyn Kind>, ConfigError> {
        let keys = self.keys;
        let fenced = self.fenced || self.fenced_by_default;
        if self.shared {
            return match (keys.len(), self.owner.is_some(), self.fenced, self.permits) {
                (0, ..) => Err(ConfigError::NoResources),
                (_, true, _, _) => Err(ConfigError::Combination("shared and reentrant")),
                (_, _, true, _) => Err(ConfigError::Combination("shared and fenced")),
                (_, _, _, Some(_)) => Err(ConfigError::Combination("shared and permits")),
                (2.., ..) => Err(ConfigError::Combination("shared on a set")),
                // A task that reads the name already is in: its read goes
                // in past a waiting writer's intent (it would wait for its
                // own first read otherwise, which the writer waits for).
                _ => Ok(rwlock::kind(self.reads.held_here(self.resource))),
            };
        }
        if let Some(permits) = self.permits {
            return match (keys.len(), self.owner.is_some(), self.fenced) {
                (0, _, _) => Err(ConfigError::NoResources),
                (_, true, _) => Err(ConfigError::Combination("permits and reentrant")),
                (_, _, true) => Err(ConfigError::Combination("permits and fenced")),
                (2.., _, _) => Err(ConfigError::Combination("permits on a set")),
                _ if permits == 0 || permits > semaphore::MAX_PERMITS => {
                    Err(ConfigError::Permits { permits })
                }
                // (The builder's `fenced` default applies to plain locks.)
                _ => Ok(semaphore::kind(permits)),
            };
        }
        match (keys.len(), self.owner, fenced) {
            (0, _, _) => Err(ConfigError::NoResources),
            (_, Some(""), _) => Err(ConfigError::EmptyOwner),
            (_, Some(_), true) => Err(ConfigError::Combination("reentrant and fenced")),
            (2.., Some(_), _) => Err(ConfigError::Combination("reentrant on a set")),
            (2.., None, true) => Err(ConfigError::Combination("fenced on a set")),
            (_, None, true) => Ok(fenced::kind(&keys[0], self.fence_time_floor)),
            (_, Some(owner), false) => Ok(reentrant::kind(owner)),
            (_, None, false) => Ok(mutex::kind()),
        }
    }
}
