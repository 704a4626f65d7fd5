//! The AWS SDK adapters of redrive's ports: the SQS queue ([`sqs::SqsQueue`]) and, with the
//! feature `dynamodb`, the shared idempotency store (`dynamodb::DynamoDbStore`), and with the
//! feature `s3`, large message bodies (`s3::S3Payloads`). Every AWS call the consumers make goes
//! through these.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub mod dynamodb;
#[cfg(feature = "s3")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub mod s3;
pub mod sqs;

pub use sqs::SqsQueue;

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::operation::send_message::SendMessageError;
    use aws_smithy_runtime_api::client::result::SdkError;
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;
    use redrive_core::{ErrorClass, RecordError};

    #[test]
    fn sdk_timeouts_throttling_and_5xx_are_transient_and_request_errors_permanent() {
        let service = |status: u16, code: &str| {
            let error = SendMessageError::generic(ErrorMetadata::builder().code(code).build());
            let raw = Response::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
            SdkError::service_error(error, raw)
        };
        for (error, class) in [
            (service(400, "ThrottlingException"), ErrorClass::Transient),
            (service(503, "ServiceUnavailable"), ErrorClass::Transient),
            (service(429, "TooManyRequests"), ErrorClass::Transient),
            (service(400, "InvalidParameterValue"), ErrorClass::Permanent),
            (service(403, "AccessDenied"), ErrorClass::Permanent),
            (SdkError::timeout_error("slow"), ErrorClass::Transient),
            (SdkError::construction_failure("bad"), ErrorClass::Permanent),
        ] {
            assert_eq!(
                RecordError::from_sdk_error("orders_table", &error).class(),
                class,
                "{error:?}"
            );
        }
    }
}
