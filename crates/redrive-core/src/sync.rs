//! Locking the process-wide state the engine keeps between batches.
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking its data as it is when a panic poisoned it: every mutex here guards data
/// that a panicking holder leaves consistent (a cache, a generator, a breaker's state).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
