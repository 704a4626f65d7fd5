output "queues" {
  description = "Per consumer: source queue and DLQ URLs, and the function name."
  value = { for key, consumer in module.consumer : key => {
    queue_url     = consumer.queue_url
    dlq_url       = consumer.dlq_url
    function_name = consumer.function_name
  } }
}

output "alarm_topic_arn" {
  description = "SNS topic the alarms notify."
  value       = module.alerts.topic_arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard of the stack."
  value       = module.alerts.dashboard_name
}
