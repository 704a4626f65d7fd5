# Recovery for queues that already exist: the scheduled DLQ reprocessor, which sends transient
# failures home under the redrive policy, and the two alarms every DLQ gets. Nothing here touches
# the queues themselves or their consumers.

module "recovery" {
  source = "../../modules/recovery"

  name            = "billing"
  reprocessor_zip = startswith(var.reprocessor_zip, "/") ? var.reprocessor_zip : "${path.root}/${var.reprocessor_zip}"
  dlqs = { for key, queue in var.queues : key => {
    url        = queue.dlq_url
    arn        = queue.dlq_arn
    origin_arn = queue.source_arn
  } }
  schedule_expression = "rate(30 minutes)"
  policy = {
    max_reprocess          = 3
    eligible_after_seconds = 600
    discard_kinds          = ["malformed_body"]
    max_messages           = 1000
    rate_per_second        = 20
  }
  alarm_topic_arn = var.alarm_topic_arn
}

module "dlq_alarm" {
  source   = "../../modules/dlq-alarm"
  for_each = var.queues

  name            = "billing-${each.key}-dlq"
  queue_name      = each.value.dlq_name
  alarm_topic_arn = var.alarm_topic_arn
}

# Called "redrive" before 0.2: its resources keep their state under the new name.
moved {
  from = module.redrive
  to   = module.recovery
}
