//! The Lambda side of the EventBridge redrive: the [`InvokePort`] on the AWS SDK.
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use aws_sdk_lambda::Client;
use redrive::eventbridge::InvokePort;
use redrive::sqs::sdk_config_from_env;
use redrive::PortError;
use tokio::sync::OnceCell;

/// Asynchronous invokes through the SDK; the client is created on first use.
#[derive(Default)]
pub struct LambdaInvoker {
    client: OnceCell<Client>,
}

impl LambdaInvoker {
    pub fn lazy() -> Self {
        Self::default()
    }
}

impl InvokePort for LambdaInvoker {
    async fn invoke_async(&self, function_arn: &str, payload: &str) -> Result<(), PortError> {
        const OPERATION: &str = "Invoke";
        let client = self
            .client
            .get_or_init(|| async { Client::new(&sdk_config_from_env()) })
            .await;
        let output = client
            .invoke()
            .function_name(function_arn)
            .invocation_type(InvocationType::Event)
            .payload(Blob::new(payload.as_bytes()))
            .send()
            .await
            .map_err(|error| {
                PortError::new(OPERATION, aws_sdk_lambda::error::DisplayErrorContext(error))
            })?;
        match output.status_code {
            202 => Ok(()),
            status => Err(PortError::new(
                OPERATION,
                format!("Lambda answered {status} instead of 202 Accepted"),
            )),
        }
    }
}
