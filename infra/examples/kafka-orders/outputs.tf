output "lane_url" {
  description = "The retry lane (SQS FIFO) the orders that failed transiently wait in."
  value       = module.orders_kafka.lane_url
}

output "dlq_url" {
  description = "Where the orders refused for good, or out of tries, are."
  value       = module.orders_kafka.dlq_url
}
