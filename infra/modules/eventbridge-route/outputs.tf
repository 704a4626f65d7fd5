output "bus_name" {
  description = "Name of the event bus."
  value       = aws_cloudwatch_event_bus.bus.name
}

output "rule_arn" {
  description = "ARN of the rule."
  value       = aws_cloudwatch_event_rule.route.arn
}

output "target_dlq_arn" {
  description = "ARN of the targets' dead-letter queue."
  value       = aws_sqs_queue.target_dlq.arn
}

output "target_dlq_url" {
  description = "URL of the targets' dead-letter queue."
  value       = aws_sqs_queue.target_dlq.url
}

output "consumer_failures_dlq_arn" {
  description = "ARN of the event consumer's on-failure destination queue."
  value       = aws_sqs_queue.consumer_failures_dlq.arn
}

output "consumer_function_arn" {
  description = "ARN of the event consumer."
  value       = module.consumer.function_arn
}

output "consumer_function_name" {
  description = "Name of the event consumer."
  value       = module.consumer.function_name
}

output "target_queue_arn" {
  description = "ARN of the SQS target queue."
  value       = aws_sqs_queue.target.arn
}
