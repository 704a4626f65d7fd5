//! The scenarios' calls and what they read of the answers.
use super::*;

pub(super) async fn send<L: Lab>(
    lab: &L,
    url: &str,
    bodies: &[&str],
    group: Option<&str>,
    delay_seconds: u32,
) -> Result<Vec<EntryFailure>, PortError> {
    let messages: Vec<OutgoingMessage<'_>> = bodies
        .iter()
        .map(|body| OutgoingMessage {
            body: Text::from(*body),
            attributes: Vec::new(),
            delay_seconds,
            group_id: group.map(Text::from),
            deduplication_id: group.map(|_| Text::from(format!("{:x}", fnv(body)))),
            trace_header: None,
        })
        .collect();
    let refused = lab.send_batch(url, &messages).await?;
    match refused.first() {
        None => Ok(refused),
        Some(entry) => Err(PortError::new(
            "SendMessageBatch",
            format!(
                "entry {} refused: {} {}",
                entry.index, entry.code, entry.message
            ),
        )),
    }
}

/// A FIFO deduplication id of the body: the bodies of one scenario differ.
pub(super) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) async fn receive<L: Lab>(
    lab: &L,
    url: &str,
    visibility_seconds: u64,
) -> Result<Vec<SqsRecord<'static>>, PortError> {
    lab.receive(
        url,
        10,
        Duration::from_secs(visibility_seconds),
        Duration::ZERO,
    )
    .await
}

/// The error text of a call or of its first refused entry, if either was refused.
pub(super) fn refused(outcome: Result<Vec<EntryFailure>, PortError>) -> Option<String> {
    match outcome {
        Err(error) => Some(error.to_string()),
        Ok(refused) => refused.first().map(|e| format!("{} {}", e.code, e.message)),
    }
}

pub(super) fn bodies(records: &[SqsRecord<'_>]) -> Vec<String> {
    records
        .iter()
        .map(|r| r.body.as_deref().unwrap_or_default().to_owned())
        .collect()
}

pub(super) fn handles(records: &[SqsRecord<'_>]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| r.receipt_handle.as_deref().map(str::to_owned))
        .collect()
}

pub(super) fn receive_counts(records: &[SqsRecord<'_>]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            r.attributes
                .approximate_receive_count
                .as_deref()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}
