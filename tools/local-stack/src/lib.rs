//! redrive's local stack: the topology from the Terraform tfvars, provisioning on an SQS emulator
//! (moto server), and a poller that does what Lambda's SQS event source mapping does.
pub mod conformance;
pub mod kafka_poller;
pub mod kafka_soak;
pub mod mapping;
pub mod memory;
pub mod observe;
pub mod poller;
pub mod provision;
pub mod soak;
pub mod stream_poller;
pub mod stream_soak;
pub mod topology;

use aws_sdk_sqs::Client;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SQS call failed: {0}")]
    Sqs(String),
    #[error("{0}")]
    Emulator(String),
}

impl Error {
    pub fn sdk<E: std::error::Error + Send + Sync + 'static>(error: E) -> Self {
        Self::Sqs(aws_sdk_sqs::error::DisplayErrorContext(error).to_string())
    }
}

/// An SQS client for the endpoint in `AWS_ENDPOINT_URL` (the emulator) or AWS.
pub fn sqs_client() -> Client {
    Client::new(&redrive::sqs::sdk_config_from_env())
}

/// An SQS client for the local server at `endpoint` (LocalStack beside moto), with the dummy
/// credentials the local stack takes.
pub fn sqs_client_at(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .http_client(redrive::sqs::https_client())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "local",
        ))
        .build();
    Client::from_conf(config)
}
