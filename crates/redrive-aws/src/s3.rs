//! The S3 port of large messages ([`redrive_core::payload`]) on the AWS SDK: GetObject, PutObject
//! and DeleteObject, and nothing else.
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::http::Response;
use futures_util::future::BoxFuture;
use tokio::sync::OnceCell;

use redrive_core::payload::{PayloadError, PayloadStore, Pointer};
use redrive_core::{ErrorClass, RecordError};

/// Large message bodies in S3, through a client built from the environment on its first call
/// (as [`crate::sqs::SqsQueue::lazy`]).
#[derive(Default)]
pub struct S3Payloads {
    client: OnceCell<Client>,
}

impl S3Payloads {
    /// A store whose client is made on its first call.
    pub fn lazy() -> Self {
        Self::default()
    }

    /// A store through `client`.
    pub fn with_client(client: Client) -> Self {
        Self {
            client: OnceCell::new_with(Some(client)),
        }
    }

    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async { client(&crate::sqs::sdk_config_from_env()) })
            .await
    }
}

/// An S3 client on `shared`; with `AWS_ENDPOINT_URL` set (moto, LocalStack), buckets are addressed
/// by path.
pub fn client(shared: &aws_types::SdkConfig) -> Client {
    let config = aws_sdk_s3::config::Builder::from(shared)
        .force_path_style(std::env::var_os("AWS_ENDPOINT_URL").is_some())
        .build();
    Client::from_conf(config)
}

impl PayloadStore for S3Payloads {
    fn get<'a>(&'a self, pointer: &'a Pointer<'a>) -> BoxFuture<'a, Result<String, PayloadError>> {
        Box::pin(async move {
            let object = self
                .client()
                .await
                .get_object()
                .bucket(&*pointer.bucket)
                .key(&*pointer.key)
                .send()
                .await
                .map_err(|error| payload_error(pointer, &error))?;
            let bytes = object
                .body
                .collect()
                .await
                .map_err(|error| PayloadError::Unavailable(format!("{pointer}: {error}")))?;
            String::from_utf8(bytes.to_vec())
                .map_err(|_| PayloadError::NotText(pointer.to_string()))
        })
    }

    fn put<'a>(
        &'a self,
        pointer: &'a Pointer<'a>,
        body: &'a str,
    ) -> BoxFuture<'a, Result<(), PayloadError>> {
        Box::pin(async move {
            self.client()
                .await
                .put_object()
                .bucket(&*pointer.bucket)
                .key(&*pointer.key)
                .body(ByteStream::from(body.as_bytes().to_vec()))
                .send()
                .await
                .map(|_| ())
                .map_err(|error| payload_error(pointer, &error))
        })
    }

    fn delete<'a>(&'a self, pointer: &'a Pointer<'a>) -> BoxFuture<'a, Result<(), PayloadError>> {
        Box::pin(async move {
            self.client()
                .await
                .delete_object()
                .bucket(&*pointer.bucket)
                .key(&*pointer.key)
                .send()
                .await
                .map(|_| ())
                .map_err(|error| payload_error(pointer, &error))
        })
    }
}

/// No such key or bucket is `Missing`; timeouts, throttling and 5xx are `Unavailable`; any other
/// refusal (access denied, a wrong region) is `Refused`.
fn payload_error<E>(pointer: &Pointer<'_>, error: &SdkError<E, Response>) -> PayloadError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let missing = match error {
        SdkError::ServiceError(context) => {
            context.raw().status().as_u16() == 404
                || matches!(context.err().code(), Some("NoSuchKey" | "NoSuchBucket"))
        }
        _ => false,
    };
    let classified = RecordError::from_sdk_error("s3", error);
    match (missing, classified.class()) {
        (true, _) => PayloadError::Missing(pointer.to_string()),
        (false, ErrorClass::Transient) => {
            PayloadError::Unavailable(format!("{pointer}: {}", classified.message()))
        }
        (false, _) => PayloadError::Refused(format!("{pointer}: {}", classified.message())),
    }
}
