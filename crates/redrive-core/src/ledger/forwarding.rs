//! A ledger that passes its calls on: the forwarding of the ten calls written once, for
//! decorators (faults, delays, counts, an operator acting between two calls) that change a few.
use futures_util::future::BoxFuture;

use super::lane::{KeyPlace, Position};
use super::store::{AttemptLedger, Hold, LedgerEntry, Release};
use crate::error::PortError;

/// One call of the [`AttemptLedger`], as a [`ForwardingLedger`] sees it: which call, and the
/// message or key id it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LedgerCall<'a> {
    /// [`AttemptLedger::entries`]: the message ids read.
    Entries(&'a [&'a str]),
    /// [`AttemptLedger::record_untried`].
    RecordUntried(&'a str),
    /// [`AttemptLedger::record_head_wait`].
    RecordHeadWait(&'a str),
    /// [`AttemptLedger::hold`].
    Hold(&'a str),
    /// [`AttemptLedger::release_hold`].
    ReleaseHold(&'a str),
    /// [`AttemptLedger::held`].
    Held,
    /// [`AttemptLedger::clear_hold`].
    ClearHold(&'a str),
    /// [`AttemptLedger::record_in_lane`].
    RecordInLane(&'a str),
    /// [`AttemptLedger::record_key_left`]: the key id.
    RecordKeyLeft(&'a str),
    /// [`AttemptLedger::record_key_done`]: the key id.
    RecordKeyDone(&'a str),
}

impl LedgerCall<'_> {
    /// Whether the call reads the ledger (`entries`, `held`) rather than writes it.
    pub fn is_read(&self) -> bool {
        matches!(self, Self::Entries(_) | Self::Held)
    }
}

/// A ledger that passes every call on to an inner ledger and changes only what it overrides: a
/// decorator implements this instead of forwarding each call by hand, as
/// [`ForwardingPort`](crate::port::ForwardingPort) does for a queue.
pub trait ForwardingLedger: Send + Sync {
    /// The ledger calls are passed on to.
    type Inner: AttemptLedger + ?Sized;

    /// The inner ledger.
    fn inner(&self) -> &Self::Inner;

    /// Every call: `ask` asks the inner ledger (nothing is asked until it is called). Passed on
    /// unless overridden: a fault answers without asking, a delay waits first, a count counts.
    fn around<'a, T: Send + 'a>(
        &'a self,
        call: LedgerCall<'a>,
        ask: impl FnOnce() -> BoxFuture<'a, Result<T, PortError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, PortError>> {
        let _ = call;
        ask()
    }

    /// [`AttemptLedger::entries`], through [`ForwardingLedger::around`] unless overridden: a
    /// decorator that changes what a read answers (a partial answer) overrides this.
    fn read_entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>> {
        self.around(LedgerCall::Entries(message_ids), move || {
            self.inner().entries(message_ids)
        })
    }
}

impl<F: ForwardingLedger> AttemptLedger for F {
    fn entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>> {
        self.read_entries(message_ids)
    }

    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.around(LedgerCall::RecordUntried(message_id), move || {
            self.inner().record_untried(message_id, receive_count)
        })
    }

    fn record_head_wait<'a>(
        &'a self,
        message_id: &'a str,
        since_ms: u64,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.around(LedgerCall::RecordHeadWait(message_id), move || {
            self.inner().record_head_wait(message_id, since_ms)
        })
    }

    fn hold<'a>(
        &'a self,
        message_id: &'a str,
        hold: &'a Hold,
        untried: bool,
    ) -> BoxFuture<'a, Result<bool, PortError>> {
        self.around(LedgerCall::Hold(message_id), move || {
            self.inner().hold(message_id, hold, untried)
        })
    }

    fn release_hold<'a>(
        &'a self,
        message_id: &'a str,
        release: Release,
    ) -> BoxFuture<'a, Result<Option<Hold>, PortError>> {
        self.around(LedgerCall::ReleaseHold(message_id), move || {
            self.inner().release_hold(message_id, release)
        })
    }

    fn held(&self) -> BoxFuture<'_, Result<Vec<(String, Hold)>, PortError>> {
        self.around(LedgerCall::Held, move || self.inner().held())
    }

    fn clear_hold<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        self.around(LedgerCall::ClearHold(message_id), move || {
            self.inner().clear_hold(message_id)
        })
    }

    fn record_in_lane<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        self.around(LedgerCall::RecordInLane(message_id), move || {
            self.inner().record_in_lane(message_id)
        })
    }

    fn record_key_left<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
        place: KeyPlace,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.around(LedgerCall::RecordKeyLeft(key_id), move || {
            self.inner().record_key_left(key_id, position, place)
        })
    }

    fn record_key_done<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.around(LedgerCall::RecordKeyDone(key_id), move || {
            self.inner().record_key_done(key_id, position)
        })
    }
}
