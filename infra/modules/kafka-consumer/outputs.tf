output "lane_url" {
  description = "URL of the retry lane (SQS FIFO)."
  value       = module.consumer.queue_url
}

output "dlq_url" {
  description = "URL of the DLQ: permanent failures, and records whose tries in the lane ran out."
  value       = module.consumer.dlq_url
}

output "discarded_url" {
  description = "URL of the queue of Lambda's on-failure records (batches its retries gave up on)."
  value       = aws_sqs_queue.discarded.url
}

output "function_name" {
  description = "Name of the consumer function."
  value       = module.consumer.function_name
}
