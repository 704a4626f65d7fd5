//! Large messages: bodies kept in S3 and carried as a pointer, in the format of the Amazon SQS
//! Extended Client (Java and Python; the SNS Extended Client writes the same with raw delivery).
//!
//! A pointer message has the `ExtendedPayloadSize` Number attribute (the body's bytes; the legacy
//! clients wrote `SQSLargePayloadSize`) and the body
//! `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"…","s3Key":"…"}]`
//! (legacy class `com.amazon.sqs.javamessaging.MessageS3Pointer`). The clients recognise a pointer
//! by the attribute, then read the body (awslabs/amazon-sqs-python-extended-client-lib,
//! `client.py`); redrive does the same.
//!
//! With [`Payloads`] set, the processor fetches every pointer's body before the handlers run
//! ([`crate::handler::Message::body`] is the real body) and offloads a copy whose body and
//! failure context would not fit in a message: the body goes to S3 once, under
//! `<prefix><origin message id>`, and every later copy, dead letter and redrive carries the same
//! pointer. An object redrive wrote is deleted when its message is done; the bucket's lifecycle
//! rule is the backstop. docs/large-messages.md.
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::error::RecordError;
use redrive_event::{MessageAttribute, SqsRecord, Text};

/// The attribute that marks a pointer message, with the real body's size in bytes.
pub const SIZE_ATTRIBUTE: &str = "ExtendedPayloadSize";
/// The name older Extended Clients gave it; read, never written.
pub const LEGACY_SIZE_ATTRIBUTE: &str = "SQSLargePayloadSize";
/// The pointer's class name, the first element of the body's array.
pub const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";
/// The class name older Extended Clients wrote; read, never written.
pub const LEGACY_POINTER_CLASS: &str = "com.amazon.sqs.javamessaging.MessageS3Pointer";
/// Where redrive's own objects go in the bucket unless configured otherwise.
pub const DEFAULT_PREFIX: &str = "redrive/";

/// Where a body is kept in S3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pointer<'a> {
    /// The bucket.
    #[serde(rename = "s3BucketName", borrow)]
    pub bucket: Cow<'a, str>,
    /// The object's key.
    #[serde(rename = "s3Key", borrow)]
    pub key: Cow<'a, str>,
}

impl<'a> Pointer<'a> {
    /// The pointer a record carries: `None` when it is an ordinary message (no size attribute),
    /// `Err` when it has the attribute but its body is not a pointer.
    pub fn of(record: &'a SqsRecord<'a>) -> Option<Result<Self, PayloadError>> {
        let attributes = &record.message_attributes;
        if !attributes.contains_key(SIZE_ATTRIBUTE)
            && !attributes.contains_key(LEGACY_SIZE_ATTRIBUTE)
        {
            return None;
        }
        Some(Self::parse(record.body.as_deref().unwrap_or_default()))
    }

    /// Reads a pointer body.
    pub fn parse(body: &'a str) -> Result<Self, PayloadError> {
        let (class, pointer): (Cow<'a, str>, Pointer<'a>) = serde_json::from_str(body)
            .map_err(|error| PayloadError::NotAPointer(error.to_string()))?;
        if class != POINTER_CLASS && class != LEGACY_POINTER_CLASS {
            return Err(PayloadError::NotAPointer(format!(
                "unknown pointer class {class:?}"
            )));
        }
        Ok(pointer)
    }

    /// The pointer with its strings copied.
    pub fn into_owned(self) -> Pointer<'static> {
        Pointer {
            bucket: Cow::Owned(self.bucket.into_owned()),
            key: Cow::Owned(self.key.into_owned()),
        }
    }

    /// The body that carries this pointer, as the current Extended Clients write it.
    pub fn to_body(&self) -> String {
        serde_json::to_string(&(POINTER_CLASS, self)).expect("a pointer serialises")
    }
}

impl fmt::Display for Pointer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// The `ExtendedPayloadSize` attribute for a body of `bytes` bytes.
pub fn size_attribute(bytes: usize) -> (Text<'static>, MessageAttribute<'static>) {
    (
        Text::from(SIZE_ATTRIBUTE),
        MessageAttribute {
            data_type: Text::from("Number"),
            string_value: Some(Text::from(bytes.to_string())),
            binary_value: None,
        },
    )
}

/// Whether `name` is the attribute that marks a pointer message (current or legacy name).
pub fn is_size_attribute(name: &str) -> bool {
    name == SIZE_ATTRIBUTE || name == LEGACY_SIZE_ATTRIBUTE
}

/// Why a body could not be read from, or written to, S3.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The message says it is a pointer, and its body is not one.
    #[error("the body is not an Extended Client pointer: {0}")]
    NotAPointer(String),
    /// No such object or bucket (deleted, expired by the lifecycle rule, never written).
    #[error("no object at {0}")]
    Missing(String),
    /// S3 refused the call for good (access denied, a wrong region, a malformed key).
    #[error("S3 refused: {0}")]
    Refused(String),
    /// S3 was slow, throttled or failing: worth trying again.
    #[error("S3 unavailable: {0}")]
    Unavailable(String),
    /// The object is not UTF-8 text, which an SQS body must be.
    #[error("the object at {0} is not UTF-8 text")]
    NotText(String),
}

impl From<PayloadError> for RecordError {
    /// Each reason has its own kind; only an unavailable S3 is transient.
    fn from(error: PayloadError) -> Self {
        let kind = match &error {
            PayloadError::NotAPointer(_) => "payload_pointer_malformed",
            PayloadError::Missing(_) => "payload_missing",
            PayloadError::Refused(_) => "payload_refused",
            PayloadError::NotText(_) => "payload_not_text",
            PayloadError::Unavailable(_) => {
                return RecordError::transient("payload_unavailable", error)
            }
        };
        RecordError::permanent(kind, error)
    }
}

/// The one port every S3 call goes through.
pub trait PayloadStore: Send + Sync {
    /// GetObject, as text.
    fn get<'a>(&'a self, pointer: &'a Pointer<'a>) -> BoxFuture<'a, Result<String, PayloadError>>;

    /// PutObject; a second put of the same key replaces the object.
    fn put<'a>(
        &'a self,
        pointer: &'a Pointer<'a>,
        body: &'a str,
    ) -> BoxFuture<'a, Result<(), PayloadError>>;

    /// DeleteObject; deleting an object that is not there succeeds (S3 API reference,
    /// DeleteObject: on a bucket without versioning it removes the null version, if there is one).
    fn delete<'a>(&'a self, pointer: &'a Pointer<'a>) -> BoxFuture<'a, Result<(), PayloadError>>;
}

/// Where redrive keeps the bodies it offloads, and the store it reads pointers through.
#[derive(Clone)]
pub struct Payloads {
    /// The S3 port.
    pub store: Arc<dyn PayloadStore>,
    /// The bucket offloaded bodies go to.
    pub bucket: String,
    /// Their keys' prefix ([`DEFAULT_PREFIX`] by default): objects under it are redrive's to delete.
    pub prefix: String,
}

impl fmt::Debug for Payloads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payloads")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Payloads {
    /// Bodies offloaded to `bucket` under [`DEFAULT_PREFIX`], through `store`.
    pub fn new(store: Arc<dyn PayloadStore>, bucket: impl Into<String>) -> Self {
        Self {
            store,
            bucket: bucket.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }

    /// Keys under `prefix` instead.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Where the body of the message first delivered as `origin_message_id` is offloaded: the
    /// same key for every copy of it, so that retries and redrives never write a second object.
    pub fn pointer_for(&self, origin_message_id: &str) -> Pointer<'static> {
        Pointer {
            bucket: Cow::Owned(self.bucket.clone()),
            key: Cow::Owned(format!("{}{origin_message_id}", self.prefix)),
        }
    }

    /// Whether redrive wrote the object (and so deletes it when its message is done). A
    /// producer's object is left alone: an SNS fan-out shares one object among all subscribers.
    pub fn owns(&self, pointer: &Pointer<'_>) -> bool {
        pointer.bucket == self.bucket.as_str() && pointer.key.starts_with(&self.prefix)
    }
}

#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use memory::MemoryPayloads;

#[cfg(any(test, feature = "test-util"))]
mod memory {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use futures_util::future::BoxFuture;

    use super::{PayloadError, PayloadStore, Pointer};
    use crate::sync::lock;

    /// A bucket in memory, for tests and the soak (as `MemoryLedger` is): counts its calls, and
    /// can be told to fail them.
    #[derive(Default)]
    pub struct MemoryPayloads {
        objects: Mutex<HashMap<(String, String), String>>,
        failing: Mutex<Option<PayloadError>>,
        /// GetObject calls made.
        pub gets: AtomicUsize,
        /// PutObject calls made.
        pub puts: AtomicUsize,
        /// DeleteObject calls made.
        pub deletes: AtomicUsize,
    }

    impl MemoryPayloads {
        /// Stores `body` at `bucket`/`key`, as a producer would.
        pub fn insert(&self, bucket: &str, key: &str, body: &str) {
            lock(&self.objects).insert((bucket.to_owned(), key.to_owned()), body.to_owned());
        }

        /// The object at `bucket`/`key`, if any.
        pub fn object(&self, bucket: &str, key: &str) -> Option<String> {
            lock(&self.objects)
                .get(&(bucket.to_owned(), key.to_owned()))
                .cloned()
        }

        /// How many objects there are.
        pub fn len(&self) -> usize {
            lock(&self.objects).len()
        }

        /// Whether there is none.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Every call fails with `error` from now on (`None`: calls succeed again).
        pub fn fail_with(&self, error: Option<PayloadError>) {
            *lock(&self.failing) = error;
        }

        fn failing(&self) -> Result<(), PayloadError> {
            lock(&self.failing).clone().map_or(Ok(()), Err)
        }

        fn address(pointer: &Pointer<'_>) -> (String, String) {
            (pointer.bucket.to_string(), pointer.key.to_string())
        }
    }

    impl PayloadStore for MemoryPayloads {
        fn get<'a>(
            &'a self,
            pointer: &'a Pointer<'a>,
        ) -> BoxFuture<'a, Result<String, PayloadError>> {
            Box::pin(async move {
                self.gets.fetch_add(1, Ordering::Relaxed);
                self.failing()?;
                lock(&self.objects)
                    .get(&Self::address(pointer))
                    .cloned()
                    .ok_or_else(|| PayloadError::Missing(pointer.to_string()))
            })
        }

        fn put<'a>(
            &'a self,
            pointer: &'a Pointer<'a>,
            body: &'a str,
        ) -> BoxFuture<'a, Result<(), PayloadError>> {
            Box::pin(async move {
                self.puts.fetch_add(1, Ordering::Relaxed);
                self.failing()?;
                lock(&self.objects).insert(Self::address(pointer), body.to_owned());
                Ok(())
            })
        }

        fn delete<'a>(
            &'a self,
            pointer: &'a Pointer<'a>,
        ) -> BoxFuture<'a, Result<(), PayloadError>> {
            Box::pin(async move {
                self.deletes.fetch_add(1, Ordering::Relaxed);
                self.failing()?;
                lock(&self.objects).remove(&Self::address(pointer));
                Ok(())
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_reads_in_both_classes_and_is_written_in_the_current_one() {
        let current = r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k/1"}]"#;
        let legacy = r#"["com.amazon.sqs.javamessaging.MessageS3Pointer",{"s3BucketName":"b","s3Key":"k/1"}]"#;
        for body in [current, legacy] {
            let pointer = Pointer::parse(body).unwrap();
            assert_eq!((&*pointer.bucket, &*pointer.key), ("b", "k/1"));
            assert_eq!(pointer.to_body(), current);
        }
    }

    #[test]
    fn what_is_not_a_pointer_is_refused_with_a_permanent_kind_of_its_own() {
        for body in [
            "hello",
            r#"["other.Class",{"s3BucketName":"b","s3Key":"k"}]"#,
            r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3Key":"k"}]"#,
        ] {
            let error = RecordError::from(Pointer::parse(body).unwrap_err());
            assert_eq!(error.kind(), "payload_pointer_malformed", "{body}");
            assert_eq!(error.class(), crate::ErrorClass::Permanent);
        }
        let unavailable = RecordError::from(PayloadError::Unavailable("503".into()));
        assert_eq!(unavailable.class(), crate::ErrorClass::Transient);
    }

    #[test]
    fn only_objects_under_the_prefix_of_the_bucket_are_redrives_own() {
        let payloads = Payloads::new(Arc::new(MemoryPayloads::default()), "b");
        let own = payloads.pointer_for("m-1");
        assert_eq!(own.key, "redrive/m-1");
        assert!(payloads.owns(&own));
        let producers = Pointer {
            bucket: "b".into(),
            key: "5b1f…".into(),
        };
        assert!(!payloads.owns(&producers));
        let elsewhere = Pointer {
            bucket: "other".into(),
            key: "redrive/m-1".into(),
        };
        assert!(!payloads.owns(&elsewhere));
    }
}
