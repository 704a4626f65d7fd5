output "queue_url" {
  description = "URL of the source queue."
  value       = aws_sqs_queue.source.url
}

output "queue_arn" {
  description = "ARN of the source queue."
  value       = aws_sqs_queue.source.arn
}

output "dlq_url" {
  description = "URL of the DLQ."
  value       = aws_sqs_queue.dlq.url
}

output "dlq_arn" {
  description = "ARN of the DLQ."
  value       = aws_sqs_queue.dlq.arn
}

output "queue_name" {
  description = "Name of the source queue."
  value       = aws_sqs_queue.source.name
}

output "dlq_name" {
  description = "Name of the DLQ."
  value       = aws_sqs_queue.dlq.name
}

output "function_name" {
  description = "Name of the consumer function."
  value       = module.function.function_name
}

output "function_arn" {
  description = "ARN of the consumer function."
  value       = module.function.function_arn
}

output "role_name" {
  description = "Name of the function's role (attach more policies to it)."
  value       = module.function.role_name
}

output "role_arn" {
  description = "ARN of the function's role."
  value       = module.function.role_arn
}
