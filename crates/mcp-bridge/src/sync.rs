//! The bridge's one locking rule, at the bottom of the crate so that every module can use it
//! without depending on another.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data of a poisoned lock (every critical section leaves it whole).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
