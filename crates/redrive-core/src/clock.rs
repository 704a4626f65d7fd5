//! Wall-clock time, behind a trait so tests can hold it still; an invocation's time sliced for the
//! phases of a batch; and the cut-off checked before each record.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// The time, from the system or from a test.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch (the unit of Lambda's deadline and SQS timestamps).
    fn now_ms(&self) -> u64;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock(std::sync::atomic::AtomicU64);

#[cfg(any(test, feature = "test-util"))]
impl ManualClock {
    /// A clock that stands at `ms` (ms since the epoch) until moved.
    pub fn at(ms: u64) -> Self {
        Self(ms.into())
    }
    /// Moves the clock on by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Time kept after carrying the fates out to answer Lambda: the partial batch response is
/// serialised and posted to the runtime API.
const ANSWER_RESERVE: Duration = Duration::from_millis(200);

/// An invocation's time, sliced for the phases of a batch from the Lambda deadline back. Records
/// are handled until the deadline margin; reading the attempt ledger takes a quarter of that time
/// at most; fates are carried out until the answer reserve (200 ms, a quarter of the margin at the
/// most) before the deadline; what a handler left running gets half of the carry-out's time. Each
/// phase asks a budget made when it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    deadline_ms: u64,
    margin: Duration,
    now_ms: u64,
}

impl Budget {
    /// The slices of the time from `now_ms` to `deadline_ms` (ms since the epoch), with `margin`
    /// kept for carrying fates out and answering.
    pub(crate) fn new(deadline_ms: u64, margin: Duration, now_ms: u64) -> Self {
        Self {
            deadline_ms,
            margin,
            now_ms,
        }
    }

    /// Time for handling records: up to the deadline margin.
    pub(crate) fn handling(self) -> Duration {
        self.left_before(self.margin)
    }

    /// The moment after which no record starts.
    pub(crate) fn cutoff(self) -> Cutoff {
        Cutoff::after(self.handling())
    }

    /// Time for reading the attempt ledger before the records run.
    pub(crate) fn ledger_read(self) -> Duration {
        self.handling() / 4
    }

    /// When carrying fates out must be over. `None` for a deadline too far off to wait for.
    pub(crate) fn carry_deadline(self) -> Option<Instant> {
        Instant::now().checked_add(self.left_before(ANSWER_RESERVE.min(self.margin / 4)))
    }

    /// Time for what a handler left running past the records' cut-off (`RecordHandler::flush`).
    /// `None` for a deadline too far off to wait for.
    pub(crate) fn pending_writes(self) -> Option<Duration> {
        self.carry_deadline()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()) / 2)
    }

    fn left_before(self, reserve: Duration) -> Duration {
        let reserve = u64::try_from(reserve.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(
            self.deadline_ms
                .saturating_sub(reserve)
                .saturating_sub(self.now_ms),
        )
    }
}

/// `work`, cut off at `deadline` (`None`: a deadline too far off to wait for): its output, or
/// `None` when it was cut off.
pub(crate) async fn by_deadline<F: std::future::Future>(
    deadline: Option<Instant>,
    work: F,
) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, work).await.ok(),
        None => Some(work.await),
    }
}

/// The moment after which no record is started, checked before every record of a batch.
///
/// It is kept on the coarse monotonic clock where there is one (Linux): the time of the last
/// timer tick, read from memory. `Instant` reads the CPU's counter with an instruction that first
/// waits for every instruction before it; before each record of a large batch of quick records,
/// that cost ~8% of the batch. The coarse clock trails by up to a tick, so the cut-off is a tick
/// early: nothing starts after the moment asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cutoff(Duration);

impl Cutoff {
    /// `budget` from now.
    pub(crate) fn after(budget: Duration) -> Self {
        Self((coarse::now() + budget).saturating_sub(coarse::tick()))
    }

    // Asked before each record: kept inline in the record loop, a call a record cheaper.
    #[inline]
    pub(crate) fn passed(self) -> bool {
        coarse::now() >= self.0
    }

    /// Time left before the cut-off.
    pub(crate) fn left(self) -> Duration {
        self.0.saturating_sub(coarse::now())
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod coarse {
    use rustix::time::{clock_getres, clock_gettime, ClockId, Timespec};
    use std::time::Duration;

    pub(super) fn now() -> Duration {
        duration(clock_gettime(ClockId::MonotonicCoarse))
    }

    /// How far the coarse clock may trail: its resolution, one tick.
    pub(super) fn tick() -> Duration {
        duration(clock_getres(ClockId::MonotonicCoarse))
    }

    fn duration(time: Timespec) -> Duration {
        let seconds = u64::try_from(time.tv_sec).unwrap_or_default();
        let nanos = u32::try_from(time.tv_nsec).unwrap_or_default();
        Duration::new(seconds, nanos)
    }
}

/// Elsewhere (a developer's machine), the precise clock.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod coarse {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    pub(super) fn now() -> Duration {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed()
    }

    pub(super) fn tick() -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_cutoff_has_passed_by_the_moment_asked_for_and_not_long_before() {
        assert!(Cutoff::after(Duration::ZERO).passed());

        let cutoff = Cutoff::after(Duration::from_secs(1));
        assert!(!cutoff.passed());
        assert!(
            cutoff.left() > Duration::from_millis(900),
            "a tick early, not more"
        );

        let budget = Duration::from_millis(30);
        let cutoff = Cutoff::after(budget);
        let moment = Instant::now() + budget; // no earlier than the moment the cut-off stands for
        std::thread::sleep(moment.saturating_duration_since(Instant::now()));
        // The kernel moves the coarse clock on at its timer tick, which a loaded machine may
        // serve a little late: passed by the moment, give or take that lateness, never a budget.
        let late = Instant::now() + budget;
        while !cutoff.passed() && Instant::now() < late {
            std::thread::yield_now();
        }
        assert!(cutoff.passed(), "the coarse clock's lag is taken off");
        assert_eq!(cutoff.left(), Duration::ZERO);
    }
}
