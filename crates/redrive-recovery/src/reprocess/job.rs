//! A bulk action on a failure group as a job: its selection is the exact set of message ids read
//! when it was made, so a dead letter that arrives while it runs is never taken (the bug of
//! ServiceControl #660, where a group retry also took later failures). Run again, a job resumes:
//! what it moved is gone from the DLQ, and the rest is still selected.
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{FailureGroup, Fingerprint, ReprocessCommand};
use crate::settings::MOST_MESSAGES;
use redrive_core::idempotency::fingerprint;

/// A bulk redrive of an exact selection of one DLQ's messages, as `dlq job new` writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Job {
    /// The DLQ's URL.
    pub queue_url: String,
    /// The failure group the selection was made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<Fingerprint>,
    /// The queue ARN every message goes to; each to the origin it names when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// The selection: SQS message ids.
    pub message_ids: Vec<String>,
    /// [`Job::selection_hash_of`] the selection: two jobs with one hash take the same messages,
    /// and the audit trail names a selection by it.
    pub selection_hash: String,
    /// When the selection was made (ms since the epoch).
    pub created_at_ms: u64,
}

impl Job {
    /// A job taking every message `group` was read with, to `destination` or home.
    pub fn of_group(
        queue_url: &str,
        group: &FailureGroup,
        destination: Option<String>,
        now_ms: u64,
    ) -> Self {
        Self {
            queue_url: queue_url.to_owned(),
            group: Some(group.fingerprint.clone()),
            destination,
            selection_hash: Self::selection_hash_of(&group.message_ids),
            message_ids: group.message_ids.clone(),
            created_at_ms: now_ms,
        }
    }

    /// A hash of a selection that does not depend on its order (FNV-1a over the sorted ids, 16
    /// hex digits): it names a selection, it is no digest against tampering.
    pub fn selection_hash_of(message_ids: &[String]) -> String {
        let sorted: BTreeSet<&str> = message_ids.iter().map(String::as_str).collect();
        let text = sorted.into_iter().collect::<Vec<_>>().join("\n");
        format!("{:016x}", fingerprint(&text))
    }

    /// Whether the selection is the one its hash names (a job file edited by hand is refused).
    pub fn is_intact(&self) -> bool {
        Self::selection_hash_of(&self.message_ids) == self.selection_hash
    }

    /// The reprocessor's command for this job. The operator chose the group because its cause
    /// is fixed: the policy's wait and its review of permanent errors do not hold it back
    /// (`force`); the redrive cap still does.
    pub fn command(&self, dry_run: bool, rate_per_second: Option<f64>) -> ReprocessCommand {
        ReprocessCommand {
            source: Some(self.queue_url.clone()),
            destination: self.destination.clone(),
            // The run ends once it has seen the whole selection; the rest of the DLQ is read
            // past (left untouched) on the way.
            max_messages: Some(MOST_MESSAGES),
            dry_run,
            rate_per_second,
            force: true,
            message_ids: self.message_ids.clone(),
            ..ReprocessCommand::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reprocess::failure_groups;
    use crate::reprocess::tests::{dead_letter, released, reprocessor, settings, DLQ, NOW, ORIGIN};
    use redrive_core::error::ErrorClass;

    fn bodies_sent(queue: &redrive_core::port::RecordingQueue) -> Vec<String> {
        let mut bodies: Vec<String> = queue
            .sent_to(ORIGIN)
            .iter()
            .map(|message| message.body.to_string())
            .collect();
        bodies.sort();
        bodies
    }

    fn body(id: &str) -> String {
        format!("{{\"id\":\"{id}\"}}")
    }

    /// Issue 55: a dead letter of the same group that arrives while the job runs is read past and
    /// made visible again, never sent (ServiceControl #660).
    #[tokio::test]
    async fn dead_letters_arriving_while_a_groups_job_runs_are_never_touched() {
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        let selected: Vec<String> = (0..15).map(|n| format!("before-{n:02}")).collect();
        let records: Vec<_> = selected
            .iter()
            .map(|id| dead_letter(id, Some(ErrorClass::Permanent), 0))
            .collect();
        let groups = failure_groups(&records);
        assert_eq!(groups.len(), 1);
        let job = Job::of_group(DLQ, &groups[0], None, NOW);
        assert!(job.is_intact());
        queue.stock(DLQ, records);

        let plan = job.command(false, None).plan(&settings()).unwrap();
        let mut arrived = false;
        let summary = reprocessor
            .run(&plan, None, |_| {
                if !arrived {
                    arrived = true;
                    let late = (0..3)
                        .map(|n| dead_letter(&format!("late-{n}"), Some(ErrorClass::Permanent), 0));
                    queue.stock(DLQ, late);
                }
            })
            .await
            .unwrap();

        assert!(arrived, "the late dead letters came while the job ran");
        let mut expected: Vec<String> = selected.iter().map(|id| body(id)).collect();
        expected.sort();
        assert_eq!(
            bodies_sent(queue),
            expected,
            "the selection went home, whole"
        );
        let mut deleted = queue.deleted_from(DLQ);
        deleted.sort();
        let mut handles: Vec<String> = selected.iter().map(|id| format!("rh-{id}")).collect();
        handles.sort();
        assert_eq!(deleted, handles, "only the selection left the DLQ");
        assert_eq!(released(queue), ["rh-late-0", "rh-late-1", "rh-late-2"]);
        assert_eq!(
            (
                summary.reprocessed,
                summary.filtered_out,
                summary.selection_not_found
            ),
            (15, 3, Some(0))
        );
    }

    /// An interrupted job resumes: run again, it takes what its selection still has in the DLQ
    /// and counts the rest as not found.
    #[tokio::test]
    async fn a_job_run_again_takes_only_what_its_selection_still_has_in_the_dlq() {
        let records: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|id| dead_letter(id, Some(ErrorClass::Transient), 0))
            .collect();
        let job = Job::of_group(DLQ, &failure_groups(&records)[0], None, NOW);
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        // "a" and "b" went home in the first run; "c" and a later arrival are left.
        queue.stock(
            DLQ,
            [
                records[2].clone(),
                dead_letter("later", Some(ErrorClass::Transient), 0),
            ],
        );
        let plan = job.command(false, None).plan(&settings()).unwrap();
        let summary = reprocessor.run(&plan, None, |_| {}).await.unwrap();
        assert_eq!(bodies_sent(queue), [body("c")]);
        assert_eq!(queue.deleted_from(DLQ), ["rh-c"]);
        assert_eq!(released(queue), ["rh-later"]);
        assert_eq!(summary.selection_not_found, Some(2));
    }

    #[test]
    fn a_selection_has_one_hash_in_any_order_and_an_edited_job_is_refused() {
        let ids = |ids: &[&str]| ids.iter().map(|id| (*id).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            Job::selection_hash_of(&ids(&["a", "b"])),
            Job::selection_hash_of(&ids(&["b", "a"]))
        );
        assert_ne!(
            Job::selection_hash_of(&ids(&["a", "b"])),
            Job::selection_hash_of(&ids(&["a", "b", "c"]))
        );
        let records = [dead_letter("a", Some(ErrorClass::Transient), 0)];
        let mut job = Job::of_group(DLQ, &failure_groups(&records)[0], None, NOW);
        let text = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<Job>(&text).unwrap(), job);
        job.message_ids.push("swept-in".into());
        assert!(!job.is_intact());
    }
}
