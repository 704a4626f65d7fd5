output "stream_name" {
  description = "Name of the Kinesis stream (null for a DynamoDB stream)."
  value       = one(aws_kinesis_stream.stream[*].name)
}

output "stream_arn" {
  description = "ARN of the stream read: the Kinesis stream, or the DynamoDB table's stream."
  value       = local.dynamodb ? var.dynamodb_stream_arn : aws_kinesis_stream.stream[0].arn
}

output "dlq_url" {
  description = "URL of the DLQ."
  value       = aws_sqs_queue.dlq.url
}

output "function_name" {
  description = "Name of the consumer function."
  value       = module.function.function_name
}
