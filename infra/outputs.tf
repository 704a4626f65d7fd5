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

output "events" {
  description = "The EventBridge route: bus, rule and the queues the redrive reads."
  value = {
    bus_name       = module.events.bus_name
    rule_arn       = module.events.rule_arn
    target_dlq_url = module.events.target_dlq_url
    consumer       = module.events.consumer_function_name
  }
}

output "stream" {
  description = "The Kinesis consumer: stream, DLQ and function."
  value = {
    stream_name   = module.stream.stream_name
    dlq_url       = module.stream.dlq_url
    function_name = module.stream.function_name
  }
}

output "redrive" {
  description = "The recovery functions and their queues."
  value = {
    reprocessors      = module.recovery.reprocessor_function_names
    eventbridge       = module.recovery.event_redrive_function_name
    archive_queue_url = module.recovery.archive_queue_url
    parked_queue_url  = module.recovery.parked_queue_url
    console_audit     = module.recovery.console_audit_archive_arn
  }
}
