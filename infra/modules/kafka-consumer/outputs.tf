output "lane_url" {
  description = "URL of the retry lane (SQS FIFO)."
  value       = module.consumer.queue_url
}

output "lane_arn" {
  description = "ARN of the retry lane: the origin_arn of the DLQ in modules/recovery, where the reprocessor sends its dead letters (they name no origin queue)."
  value       = module.consumer.queue_arn
}

output "dlq_url" {
  description = "URL of the DLQ: permanent failures, and records whose tries in the lane ran out."
  value       = module.consumer.dlq_url
}

output "dlq_arn" {
  description = "ARN of the DLQ."
  value       = module.consumer.dlq_arn
}

output "discarded_url" {
  description = "URL of the queue of Lambda's on-failure records (batches its retries gave up on); null with unbounded retries (the default), which discard nothing."
  value       = one(aws_sqs_queue.discarded[*].url)
}

output "ledger_table_name" {
  description = "Name of the attempt ledger's table (REDRIVE_LEDGER_TABLE): which keys have records in the lane or the DLQ."
  value       = module.ledger.table_name
}

output "function_name" {
  description = "Name of the consumer function."
  value       = module.consumer.function_name
}
