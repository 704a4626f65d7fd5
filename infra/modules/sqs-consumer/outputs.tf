output "queue_url" {
  description = "URL of the source queue."
  value       = local.queue.url
}

output "queue_arn" {
  description = "ARN of the source queue."
  value       = local.queue.arn
}

output "dlq_url" {
  description = "URL of the DLQ."
  value       = local.dlq.url
}

output "dlq_arn" {
  description = "ARN of the DLQ."
  value       = local.dlq.arn
}

output "queue_name" {
  description = "Name of the source queue."
  value       = local.queue.name
}

output "dlq_message_retention_seconds" {
  description = "The DLQ's retention, for the reprocessor's alarm on what it leaves there."
  value       = var.dlq_message_retention_seconds
}

output "dlq_name" {
  description = "Name of the DLQ."
  value       = local.dlq.name
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

output "lane_url" {
  description = "URL of the retry lane where held FIFO groups wait (fifo_on_dead_letter = \"hold\"); null without one."
  value       = one(aws_sqs_queue.lane[*].url)
}

output "lane_arn" {
  description = "ARN of the retry lane; null without one."
  value       = one(aws_sqs_queue.lane[*].arn)
}

output "mappings" {
  description = "The function's event source mappings (its source and, with hold, its retry lane): each one's UUID, ARN, queue and maximum concurrency, for the intake controller."
  value = concat(
    [{
      uuid            = aws_lambda_event_source_mapping.consumer.uuid
      arn             = aws_lambda_event_source_mapping.consumer.arn
      queue_url       = local.queue.url
      queue_arn       = local.queue.arn
      max_concurrency = var.maximum_concurrency
    }],
    [for lane in aws_lambda_event_source_mapping.lane : {
      uuid            = lane.uuid
      arn             = lane.arn
      queue_url       = aws_sqs_queue.lane[0].url
      queue_arn       = aws_sqs_queue.lane[0].arn
      max_concurrency = var.maximum_concurrency
    }],
  )
}
