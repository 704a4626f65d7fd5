//! The Lambda side of the EventBridge redrive: the [`InvokePort`] on the AWS SDK.
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use aws_sdk_lambda::Client;
use base64::Engine as _;
use redrive::eventbridge::{InvokePort, Reply};
use redrive::sqs::sdk_config_from_env;
use redrive::PortError;
use serde::Deserialize;
use tokio::sync::OnceCell;

/// Synchronous invokes through the SDK; the client is created on first use.
#[derive(Default)]
pub struct LambdaInvoker {
    client: OnceCell<Client>,
}

impl LambdaInvoker {
    pub fn lazy() -> Self {
        Self::default()
    }
}

/// The error payload of a function that failed (the runtime API's `Diagnostic`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FunctionError {
    error_type: Option<String>,
    error_message: Option<String>,
}

impl InvokePort for LambdaInvoker {
    async fn invoke(
        &self,
        function_arn: &str,
        payload: &str,
        client_context: &str,
        trace_header: Option<&str>,
    ) -> Result<Reply, PortError> {
        const OPERATION: &str = "Invoke";
        let client = self
            .client
            .get_or_init(|| async { Client::new(&sdk_config_from_env()) })
            .await;
        let output = client
            .invoke()
            .function_name(function_arn)
            .invocation_type(InvocationType::RequestResponse)
            .client_context(base64::engine::general_purpose::STANDARD.encode(client_context))
            .payload(Blob::new(payload.as_bytes()))
            .customize()
            // Set before the SDK's recursion-detection interceptor, which then leaves it: the
            // header is the event's trace, not the redrive invocation's.
            .mutate_request({
                let trace_header = trace_header.map(str::to_owned);
                move |request| {
                    if let Some(header) = &trace_header {
                        let _ = request
                            .headers_mut()
                            .try_insert("x-amzn-trace-id", header.clone());
                    }
                }
            })
            .send()
            .await
            .map_err(|error| {
                PortError::new(OPERATION, aws_sdk_lambda::error::DisplayErrorContext(error))
            })?;
        if output.function_error.is_none() {
            return Ok(Reply::Succeeded);
        }
        let error: FunctionError = output
            .payload
            .as_ref()
            .and_then(|payload| serde_json::from_slice(payload.as_ref()).ok())
            .unwrap_or_default();
        Ok(Reply::Failed {
            error_type: error.error_type,
            error_message: error.error_message,
        })
    }
}
