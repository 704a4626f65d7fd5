output "stream_name" {
  description = "Name of the Kinesis stream."
  value       = aws_kinesis_stream.stream.name
}

output "stream_arn" {
  description = "ARN of the Kinesis stream."
  value       = aws_kinesis_stream.stream.arn
}

output "dlq_url" {
  description = "URL of the DLQ."
  value       = aws_sqs_queue.dlq.url
}

output "function_name" {
  description = "Name of the consumer function."
  value       = module.function.function_name
}
