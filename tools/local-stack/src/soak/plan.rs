//! Each message's seeded fault plan.

/// What a message does when handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Ok,
    /// Times out on its first `n` attempts.
    Flaky(u32),
    /// Times out while the downstream is down (until the soak heals it).
    Down,
    Permanent,
    Panic,
    /// Runs past the deadline on its first attempt.
    Slow,
}

impl Plan {
    pub(super) fn draw(rng: &mut fastrand::Rng) -> Self {
        match rng.u32(0..1000) {
            0..=849 => Self::Ok,
            850..=929 => Self::Flaky(rng.u32(1..4)),
            930..=949 => Self::Down,
            950..=969 => Self::Permanent,
            970..=979 => Self::Panic,
            980..=984 => Self::Slow,
            _ => Self::Flaky(1),
        }
    }

    pub(super) fn encode(self) -> String {
        match self {
            Self::Ok => "ok".into(),
            Self::Flaky(n) => format!("flaky:{n}"),
            Self::Down => "down".into(),
            Self::Permanent => "permanent".into(),
            Self::Panic => "panic".into(),
            Self::Slow => "slow".into(),
        }
    }

    pub(super) fn decode(text: &str) -> Option<Self> {
        Some(match text {
            "ok" => Self::Ok,
            "down" => Self::Down,
            "permanent" => Self::Permanent,
            "panic" => Self::Panic,
            "slow" => Self::Slow,
            flaky => Self::Flaky(flaky.strip_prefix("flaky:")?.parse().ok()?),
        })
    }
}
